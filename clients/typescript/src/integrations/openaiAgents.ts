// A session for the OpenAI Agents JS SDK (@openai/agents) kept by ctxd: the SDK's `Session`
// interface (getSessionId, getItems, addItems, popItem, clearSession) and `runCompaction`, typed
// structurally so this package does not depend on the SDK. Items are the SDK's own (camelCase
// `callId`, `providerData`, `function_call_result`) or Responses API input items, stored in ctxd's
// Responses format (agentsItems.ts converts tool calls and results both ways, so ctxd reads them
// as tool calls): each comes back deep-equal to what was added. See
// docs/integrations/openai-agents.md (the Python CtxdSession follows the same design).
import { randomUUID } from "node:crypto";
import { Code, CtxdError } from "../errors.js";
import type { CtxdClient } from "../client.js";
import { forkAtItem } from "./agentsFork.js";
import { fromResponsesItem, toResponsesItem } from "./agentsItems.js";

const FORMAT = "openai_responses" as const;

/** `summarise(systemPrompt, excerpt, answerSchemaJson)`: the agent's own model writes the summary. */
export type Summarise = (systemPrompt: string, excerpt: string, answerSchemaJson: string) => Promise<string>;

export interface CtxdSessionOptions {
  /** The model name or window compaction is measured against. */
  model?: string;
  /** Items a compaction keeps verbatim (0: the sidecar's setting). */
  keepLast?: number;
  /** A sidecar summariser plugin, or ``summarise`` for the agent's own model. */
  summariser?: string;
  summarise?: Summarise;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export class CtxdSession<Item = any> {
  private due = false;

  /** ``sessionId`` is the context id (1-128 of [A-Za-z0-9._:-], starting with a letter or digit). */
  constructor(
    readonly sessionId: string,
    readonly client: CtxdClient,
    readonly options: CtxdSessionOptions = {},
  ) {}

  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  /** The latest ``limit`` items in order (all without one): a tail read. */
  async getItems(limit?: number): Promise<Item[]> {
    if (limit !== undefined && limit <= 0) return [];
    try {
      const slice = await this.client.providerSlice(this.sessionId, FORMAT, { lastN: limit });
      const items = slice.messages.map(fromResponsesItem) as Item[];
      return limit === undefined ? items : items.slice(-limit);
    } catch (err) {
      if (err instanceof CtxdError && err.code === Code.NotFound) return [];
      throw err;
    }
  }

  /** One atomic, replay-safe turn. */
  async addItems(items: Item[]): Promise<void> {
    if (items.length === 0) return;
    const reply = await this.client.appendProviderTurn(this.sessionId, FORMAT, items.map(toResponsesItem), {
      idempotencyKey: randomUUID(),
      model: this.options.model,
    });
    this.due = this.due || reply.compactionDue;
  }

  /** Removes and returns the last item, atomically (undefined when there is none). */
  async popItem(): Promise<Item | undefined> {
    try {
      const out = await this.client.truncate(this.sessionId, { count: 1, format: FORMAT });
      const last = out.removedJson[out.removedJson.length - 1];
      return last === undefined ? undefined : (fromResponsesItem(last) as Item);
    } catch (err) {
      if (err instanceof CtxdError && err.code === Code.NotFound) return undefined;
      throw err;
    }
  }

  /**
   * A new session ``newSessionId`` holding this one's items up to ``atItem`` (``items.slice(0, atItem)``:
   * undefined keeps every item, a negative index counts from the end), independent afterwards; it
   * shares this session's stored history (ForkContext) and has its client and options. A session id
   * already used: ALREADY_EXISTS.
   */
  async fork(newSessionId: string, options: { atItem?: number } = {}): Promise<CtxdSession<Item>> {
    await forkAtItem(this.client, this.sessionId, newSessionId, options.atItem, this.options.model);
    return new CtxdSession<Item>(newSessionId, this.client, this.options);
  }

  async clearSession(): Promise<void> {
    this.due = false;
    await this.client.delete(this.sessionId);
  }

  /**
   * Compacts when the last turn passed ctxd's threshold, or with ``{ force: true }``: then
   * ``getItems()`` returns the summary as one system item followed by the kept items.
   */
  async runCompaction(args?: { force?: boolean }): Promise<null> {
    if (!args?.force && !this.due) return null;
    this.due = false;
    const { keepLast, summariser, summarise } = this.options;
    try {
      if (!summarise) {
        await this.client.compact(this.sessionId, { keepLast, summariser });
        return null;
      }
      const plan = await this.client.planCompaction(this.sessionId, { keepLast });
      if (plan.nothingToDo) return null;
      const answer = await summarise(plan.systemPrompt, plan.excerpt, plan.answerSchemaJson);
      await this.client.applyCompaction(this.sessionId, plan.planRef, answer);
    } catch (err) {
      if (!(err instanceof CtxdError && err.code === Code.NotFound)) throw err;
    }
    return null;
  }
}
