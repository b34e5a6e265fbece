// A context's history: its kept versions (ListVersions, every page) and forks (ForkContext, retried
// under one idempotency key). The reads at a version are ``atVersion`` on slice, get and providerSlice.
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { CallOptions, Client } from "@connectrpc/connect";
import * as pb from "./gen/ctxd/v1/context_pb.js";
import { big } from "./requests.js";
import type { Call } from "./types.js";

export abstract class HistoryVerbs {
  abstract readonly contexts: Client<typeof pb.ContextService>;
  protected abstract unary<T>(fn: (o: CallOptions) => Promise<T>, call: Call | undefined, retry: boolean): Promise<T>;

  /** The versions still readable with ``atVersion``, newest first: what each change was, when, its size. */
  async versions(contextId: string, options: { pageSize?: number } & Call = {}): Promise<pb.VersionInfo[]> {
    const req = create(pb.ListVersionsRequestSchema, { contextId, pageSize: options.pageSize });
    const out: pb.VersionInfo[] = [];
    for (;;) {
      const page = await this.unary((o) => this.contexts.listVersions(req, o), options, true);
      out.push(...page.versions);
      if (!page.nextPageToken) return out;
      req.pageToken = page.nextPageToken;
    }
  }

  /**
   * A new conversation ``contextId`` holding ``sourceId`` as of ``atVersion`` (0 or absent: the
   * latest), independent afterwards. Retried safely: one idempotency key for every attempt.
   */
  async fork(
    sourceId: string,
    contextId: string,
    options: { atVersion?: number | bigint; idempotencyKey?: string } & Call = {},
  ): Promise<pb.ContextInfo> {
    const req = create(pb.ForkContextRequestSchema, {
      sourceId,
      contextId,
      atVersion: big(options.atVersion),
      idempotencyKey: options.idempotencyKey ?? randomUUID(),
    });
    const resp = await this.unary((o) => this.contexts.forkContext(req, o), options, true);
    return resp.info ?? create(pb.ContextInfoSchema);
  }
}
