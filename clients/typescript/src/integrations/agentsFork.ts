// A session forked at an item: ForkContext at the newest kept version whose items are a prefix of
// the ones wanted (versions read newest first, so a cut near the end reads few), then the rest of
// them (a cut inside one addItems batch has no version of its own) appended as one turn.
import { randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { Code, CtxdError } from "../errors.js";
import type { CtxdClient } from "../client.js";

const FORMAT = "openai_responses" as const;

async function prefixVersion(client: CtxdClient, source: string, want: unknown[]): Promise<[bigint, number]> {
  for (const v of await client.versions(source)) {
    const then = (await client.providerSlice(source, FORMAT, { atVersion: v.version })).messages;
    if (then.length <= want.length && isDeepStrictEqual(then, want.slice(0, then.length))) return [v.version, then.length];
  }
  return [0n, 0];
}

/** ``target`` holds ``source``'s stored items up to ``atItem`` (``Array.slice``'s rule; undefined: all). */
export async function forkAtItem(
  client: CtxdClient,
  source: string,
  target: string,
  atItem: number | undefined,
  model?: string,
): Promise<void> {
  if (atItem === undefined) {
    await client.fork(source, target);
    return;
  }
  const want = (await client.providerSlice(source, FORMAT)).messages.slice(0, atItem);
  const [version, held] = await prefixVersion(client, source, want);
  if (version) await client.fork(source, target, { atVersion: version });
  else if (!(await client.createContext(target, { model })).created)
    throw new CtxdError(`context ${target} already exists: fork to a new session id`, Code.AlreadyExists);
  if (want.length > held) {
    await client.appendProviderTurn(target, FORMAT, want.slice(held), { idempotencyKey: randomUUID(), model });
  }
}
