// The client: the same verbs as the Python client (appendTurn, turn: append and read in one call,
// slice with sinceVersion, memory verbs, watch), paging followed, AppendTurn retried on UNAVAILABLE
// under one idempotency key.
import { Limiter } from "./limit.js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, createClient, type CallOptions, type Client } from "@connectrpc/connect";
import * as pb from "./gen/ctxd/v1/context_pb.js";
import * as mpb from "./gen/ctxd/v1/memory_pb.js";
import { ctxdTransport, explain } from "./connect.js";
import {
  type ProviderFormat,
  type ProviderSlice,
  type ProviderTurn,
  type ProviderTurnInput,
  providerFormat,
  providerOut,
  providerPages,
  setField,
  sliceOut,
  turnOut,
} from "./shapes.js";
import { CtxdError, toCtxdError } from "./errors.js";
import { HistoryVerbs } from "./history.js";
import { usageCounts, usageRequest, type ProviderUsage, type UsageCounts, type WithUsage } from "./usage.js";
import {
  big,
  CHANGES,
  DEFAULT_RETRY,
  PAGE_RESTARTS,
  providerRequest,
  searchRequest,
  type SearchOptions,
  sleep,
  sliceRead,
  turnRequest,
  versionOf,
} from "./requests.js";
import type {
  AtVersion,
  Call,
  ClientOptions,
  MessageInput,
  RetryOptions,
  Since,
  Slice,
  SliceDelta,
  Turn,
  TurnOptions,
  WithoutSummary,
} from "./types.js";

export class CtxdClient extends HistoryVerbs {
  readonly address: string;
  readonly contexts: Client<typeof pb.ContextService>;
  readonly memory: Client<typeof mpb.MemoryService>;
  private readonly timeoutMs: number;
  private readonly retryPolicy: RetryOptions;
  private readonly tls: boolean;
  private readonly inFlight: Limiter;

  constructor(options: ClientOptions = {}) {
    super();
    this.address = options.address ?? process.env.CTXD_ADDRESS ?? "127.0.0.1:50051";
    this.tls = options.tls !== undefined;
    const transport = ctxdTransport(this.address, options);
    this.contexts = createClient(pb.ContextService, transport);
    this.memory = createClient(mpb.MemoryService, transport);
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retryPolicy = options.retry ?? DEFAULT_RETRY;
    this.inFlight = new Limiter(options.maxInFlight ?? 256);
  }

  private opts(call: Call = {}): CallOptions {
    return { timeoutMs: call.timeoutMs ?? this.timeoutMs, signal: call.signal };
  }

  // One unary call; retried on UNAVAILABLE when it is safe to repeat. A failure no retry can fix
  // (TLS mismatch, no gRPC server, not ctxd, no token) is thrown at once with the address and cause.
  protected async unary<T>(fn: (o: CallOptions) => Promise<T>, call: Call | undefined, retry: boolean): Promise<T> {
    const attempts = retry ? this.retryPolicy.attempts : 1;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this.inFlight.run(() => fn(this.opts(call)));
      } catch (err) {
        const e = await explain(toCtxdError(err), this.address, this.tls, call?.signal);
        if (e.code !== Code.Unavailable || attempt >= attempts - 1) throw e;
      }
      const base = Math.min(this.retryPolicy.maxBackoffMs, this.retryPolicy.initialBackoffMs * 2 ** attempt);
      await sleep(base * (0.5 + Math.random() / 2));
    }
  }

  /** Appends one turn; retried on UNAVAILABLE under one idempotency key (generated when not given). */
  appendTurn(
    contextId: string,
    messages: MessageInput[],
    options: TurnOptions & Call = {},
  ): Promise<pb.AppendTurnResponse> {
    const req = turnRequest(contextId, messages, options);
    return this.unary((o) => this.contexts.appendTurn(req, o), options, true);
  }

  /**
   * A runtime's whole turn in one round trip: appends the turn (as ``appendTurn``) and reads what
   * changed in the slice since ``sinceVersion`` (AppendTurnRequest.read). With "append", push
   * ``next.messages`` (your turn as stored, ids included) onto what you hold; with "replace", hold
   * them instead. Later pages of a replaced slice come from GetContext. Send ``sinceIncarnation``
   * (``incarnation`` of what you hold) so a conversation deleted and created again is "replace".
   */
  async turn(
    contextId: string,
    messages: MessageInput[],
    options: Since & { pageSize?: number } & WithoutSummary & WithUsage & TurnOptions & Call,
  ): Promise<Turn>;
  /**
   * The same with the turn in a provider's shape (``{ format: "openai", messagesJson }``): what an
   * OpenAI- or Anthropic-shaped runtime sent and got, in one call; ``next`` comes in that shape too.
   */
  async turn(
    contextId: string,
    input: ProviderTurnInput,
    options: Since & { pageSize?: number; cacheBreakpoint?: boolean } & WithoutSummary & WithUsage & TurnOptions & Call,
  ): Promise<ProviderTurn>;
  async turn(
    contextId: string,
    messages: MessageInput[] | ProviderTurnInput,
    options: Since & { pageSize?: number; cacheBreakpoint?: boolean } & WithoutSummary & WithUsage & TurnOptions & Call,
  ): Promise<Turn | ProviderTurn> {
    if (options.usage) await this.turnUsage(contextId, options.usage, options);
    const read = sliceRead(contextId, options);
    const provider = Array.isArray(messages) ? undefined : messages;
    let req: pb.AppendTurnRequest;
    if (provider) {
      req = providerRequest(contextId, provider, options);
      setField(read, pb.GetContextRequestSchema, "format", providerFormat(provider.format, pb.GetContextRequestSchema, "format"));
      if (options.cacheBreakpoint) setField(read, pb.GetContextRequestSchema, "cache_breakpoint", true);
    } else {
      req = turnRequest(contextId, messages as MessageInput[], options);
    }
    const init = read as MessageInitShape<typeof pb.GetContextRequestSchema>;
    req.read = create(pb.GetContextRequestSchema, init);
    const appended = await this.unary((o) => this.contexts.appendTurn(req, o), options, true);
    // Later pages continue the turn's read; a sidecar without it (an older API) is read here whole.
    const pages = await this.pages(init, options, appended.read);
    const change = CHANGES[pages[0].change] ?? "replace";
    if (provider) {
      const next = providerOut({ ...versionOf(pages[0]), ...providerPages(provider.format, pages), change });
      return turnOut({ appended, next });
    }
    const next = sliceOut({ ...versionOf(pages[0]), messages: pages.flatMap((p) => p.slice), change });
    return turnOut({ appended, next });
  }

  /** Appends a turn given in a provider's format (JSON passed through), when the sidecar has them. */
  async appendProviderTurn(
    contextId: string,
    format: ProviderFormat,
    messages: unknown[],
    options: {
      idempotencyKey?: string;
      expectedVersion?: number | bigint;
      model?: string;
      /** Anthropic's ``system`` argument (a string or text blocks), sent when it is new. */
      system?: unknown;
    } & Call = {},
  ): Promise<pb.AppendTurnResponse> {
    const req = providerRequest(contextId, { format, messages, system: options.system }, options);
    return this.unary((o) => this.contexts.appendTurn(req, o), options, true);
  }

  /** The slice in a provider's format (all pages), when the sidecar has them. */
  async providerSlice(
    contextId: string,
    format: ProviderFormat,
    options: Partial<Since> & { pageSize?: number; cacheBreakpoint?: boolean; lastN?: number } & WithoutSummary &
      AtVersion &
      Call = {},
  ): Promise<ProviderSlice> {
    const value = providerFormat(format, pb.GetContextResponseSchema, "messages_json");
    const init = sliceRead(contextId, options);
    init.lastN = options.lastN;
    const field = pb.GetContextRequestSchema.fields.find((f) => f.name === "format");
    if (field) init[field.localName] = value;
    const breakpoint = pb.GetContextRequestSchema.fields.find((f) => f.name === "cache_breakpoint");
    if (breakpoint && options.cacheBreakpoint) init[breakpoint.localName] = true;
    const pages = await this.pages(init as MessageInitShape<typeof pb.GetContextRequestSchema>, options);
    const out: ProviderSlice = { ...versionOf(pages[0]), ...providerPages(format, pages) };
    if (options.sinceVersion !== undefined) out.change = CHANGES[pages[0].change] ?? "replace";
    return providerOut(out);
  }

  // Every page of one GetContext read (continuing from ``first`` when the first page came some
  // other way, e.g. with a turn); starts again from the first page when a compaction made a page
  // token stale. ``sinceVersion`` and ``sinceIncarnation`` go with the first page only.
  private async pages(
    init: MessageInitShape<typeof pb.GetContextRequestSchema>,
    call?: Call,
    first?: pb.GetContextResponse,
  ) {
    for (let attempt = 0; ; attempt += 1) {
      const pages: pb.GetContextResponse[] = first ? [first] : [];
      const req = create(pb.GetContextRequestSchema, init);
      try {
        if (pages.length === 0) pages.push(await this.unary((o) => this.contexts.getContext(req, o), call, true));
        while (pages[pages.length - 1].nextPageToken) {
          req.pageToken = pages[pages.length - 1].nextPageToken;
          req.sinceVersion = undefined; // later pages continue the token
          req.sinceIncarnation = "";
          pages.push(await this.unary((o) => this.contexts.getContext(req, o), call, true));
        }
        return pages;
      } catch (err) {
        const e = toCtxdError(err);
        if (e.code !== Code.Aborted || pages.length === 0 || attempt >= PAGE_RESTARTS) throw e;
        first = undefined;
      }
    }
  }

  /** What changed since ``sinceVersion`` (of ``sinceIncarnation``): append or replace what you hold. */
  async slice(contextId: string, options: Since & { pageSize?: number } & WithoutSummary & Call): Promise<SliceDelta>;
  /** The slice to send to a model (all pages). */
  async slice(contextId: string, options?: { pageSize?: number } & WithoutSummary & AtVersion & Call): Promise<Slice>;
  async slice(
    contextId: string,
    options: Partial<Since> & { pageSize?: number } & WithoutSummary & AtVersion & Call = {},
  ): Promise<Slice | SliceDelta> {
    const init = sliceRead(contextId, options);
    const pages = await this.pages(init as MessageInitShape<typeof pb.GetContextRequestSchema>, options);
    const out: Slice = { ...versionOf(pages[0]), messages: pages.flatMap((p) => p.slice) };
    if (options.sinceVersion === undefined) return sliceOut(out);
    return sliceOut({ ...out, change: CHANGES[pages[0].change] ?? "replace" });
  }

  /** The whole record, every message (the last ``lastN`` when given; as of ``atVersion`` when given). */
  async get(contextId: string, options: { pageSize?: number; lastN?: number } & AtVersion & Call = {}): Promise<pb.Context> {
    const { pageSize, lastN } = options;
    const pages = await this.pages(
      { contextId, view: pb.ContextView.FULL, pageSize, lastN, atVersion: big(options.atVersion) },
      options,
    );
    const whole = pages[0].context ?? create(pb.ContextSchema);
    for (const page of pages.slice(1)) whole.messages.push(...(page.context?.messages ?? []));
    return whole;
  }

  async info(contextId: string, call?: Call): Promise<pb.ContextInfo> {
    const req = create(pb.GetContextRequestSchema, { contextId, view: pb.ContextView.INFO });
    const resp = await this.unary((o) => this.contexts.getContext(req, o), call, true);
    return resp.info ?? create(pb.ContextInfoSchema);
  }

  async listContexts(
    options: { kind?: pb.ContextKind; includeArchived?: boolean; pageSize?: number; idPrefix?: string } & Call = {},
  ): Promise<pb.ContextInfo[]> {
    const req = create(pb.ListContextsRequestSchema, options);
    const out: pb.ContextInfo[] = [];
    for (;;) {
      const page = await this.unary((o) => this.contexts.listContexts(req, o), options, true);
      out.push(...page.contexts);
      if (!page.nextPageToken) return out;
      req.pageToken = page.nextPageToken;
    }
  }

  /**
   * Removes the last ``count`` live messages (or every one after ``afterMessageId``) in one
   * change and returns them; with a ``format``, ``removedJson`` holds them in that shape. Not
   * retried: pass ``expectedVersion`` to make a retry safe.
   */
  async truncate(
    contextId: string,
    options: {
      count?: number;
      afterMessageId?: string;
      expectedVersion?: number | bigint;
      format?: ProviderFormat;
    } & Call = {},
  ): Promise<{ version: bigint; incarnation: string; removed: pb.Message[]; removedJson: unknown[] }> {
    const req = create(pb.TruncateContextRequestSchema, {
      contextId,
      count: options.count,
      afterMessageId: options.afterMessageId,
      expectedVersion: big(options.expectedVersion),
    });
    if (options.format) req.format = providerFormat(options.format, pb.TruncateContextRequestSchema, "format");
    const resp = await this.unary((o) => this.contexts.truncateContext(req, o), options, false);
    const removedJson = resp.removedJson ? (JSON.parse(resp.removedJson) as unknown[]) : [];
    return { version: resp.version, incarnation: resp.incarnation, removed: resp.removed, removedJson };
  }

  /** Makes an empty conversation exist; ``created`` is false when it already did. */
  async createContext(
    contextId: string,
    options: { principal?: string; model?: string; modelWindow?: number | bigint; task?: string } & Call = {},
  ): Promise<pb.CreateContextResponse> {
    const req = create(pb.CreateContextRequestSchema, {
      contextId,
      principal: options.principal,
      model: options.model,
      modelWindow: big(options.modelWindow),
      task: options.task,
    });
    return this.unary((o) => this.contexts.createContext(req, o), options, true);
  }

  async delete(contextId: string, options: { expectedVersion?: number | bigint } & Call = {}): Promise<boolean> {
    const req = create(pb.DeleteContextRequestSchema, { contextId, expectedVersion: big(options.expectedVersion) });
    return (await this.unary((o) => this.contexts.deleteContext(req, o), options, false)).deleted;
  }

  compact(
    contextId: string,
    options: { keepLast?: number; targetTokens?: number | bigint; instructions?: string; summariser?: string } & Call = {},
  ): Promise<pb.CompactResponse> {
    const req = create(pb.CompactRequestSchema, { ...options, contextId, targetTokens: big(options.targetTokens) });
    return this.unary((o) => this.contexts.compact(req, o), options, false);
  }

  planCompaction(
    contextId: string,
    options: { keepLast?: number; targetTokens?: number | bigint } & Call = {},
  ): Promise<pb.PlanCompactionResponse> {
    const req = create(pb.PlanCompactionRequestSchema, {
      contextId,
      keepLast: options.keepLast,
      targetTokens: big(options.targetTokens),
    });
    return this.unary((o) => this.contexts.planCompaction(req, o), options, true);
  }

  /** ``answer``: the summariser's JSON (an object is serialised) or plain text. */
  applyCompaction(contextId: string, planRef: string, answer: string | object, call?: Call) {
    const text = typeof answer === "string" ? answer : JSON.stringify(answer);
    const req = create(pb.ApplyCompactionRequestSchema, { contextId, planRef, answer: text });
    return this.unary((o) => this.contexts.applyCompaction(req, o), call, false);
  }

  /** The messages one compaction folded (all pages) and its record. */
  async expandCompaction(
    contextId: string,
    compactionId: string,
    options: { pageSize?: number } & Call = {},
  ): Promise<pb.ExpandCompactionResponse> {
    const req = create(pb.ExpandCompactionRequestSchema, { contextId, compactionId, pageSize: options.pageSize });
    let whole: pb.ExpandCompactionResponse | undefined;
    for (;;) {
      const page = await this.unary((o) => this.contexts.expandCompaction(req, o), options, true);
      if (whole === undefined) whole = page;
      else whole.messages.push(...page.messages);
      if (!page.nextPageToken) return whole;
      req.pageToken = page.nextPageToken;
    }
  }

  /** One plan operation, e.g. ``{ op: { case: "create", value: { goal, items } } }``. */
  updatePlan(
    contextId: string,
    op: MessageInitShape<typeof pb.UpdatePlanRequestSchema>["op"],
    options: { expectedVersion?: number | bigint } & Call = {},
  ): Promise<pb.UpdatePlanResponse> {
    const req = create(pb.UpdatePlanRequestSchema, { contextId, op, expectedVersion: big(options.expectedVersion) });
    return this.unary((o) => this.contexts.updatePlan(req, o), options, false);
  }

  reportRun(
    contextId: string,
    binding: { kind: pb.BindingKind; id: string },
    outcome: pb.RunOutcome,
    options: { reason?: string } & Call = {},
  ): Promise<pb.ReportRunResponse> {
    const req = create(pb.ReportRunRequestSchema, { contextId, binding, outcome, reason: options.reason });
    return this.unary((o) => this.contexts.reportRun(req, o), options, false);
  }

  async setPreflight(
    contextId: string,
    verdict: string | object,
    options: { expectedVersion?: number | bigint } & Call = {},
  ): Promise<bigint> {
    const verdictJson = typeof verdict === "string" ? verdict : JSON.stringify(verdict);
    const req = create(pb.SetPreflightRequestSchema, {
      contextId,
      verdictJson,
      expectedVersion: big(options.expectedVersion),
    });
    return (await this.unary((o) => this.contexts.setPreflight(req, o), options, false)).version;
  }

  async listSkills(call?: Call): Promise<pb.SkillInfo[]> {
    return (await this.unary((o) => this.contexts.listSkills({}, o), call, true)).skills;
  }

  loadSkill(contextId: string, name: string, call?: Call): Promise<pb.LoadSkillResponse> {
    return this.unary((o) => this.contexts.loadSkill({ contextId, name }, o), call, false);
  }

  unloadSkill(contextId: string, name: string, call?: Call): Promise<pb.UnloadSkillResponse> {
    return this.unary((o) => this.contexts.unloadSkill({ contextId, name }, o), call, false);
  }

  renderPrompt(contextId: string, options: { agent?: string } & Call = {}): Promise<pb.RenderPromptResponse> {
    return this.unary((o) => this.contexts.renderPrompt({ contextId, agent: options.agent }, o), options, false);
  }

  /** The provider's usage of a call: counts, or its ``usage`` object via ``usageCounts``. */
  recordUsage(contextId: string, usage: UsageCounts, call?: Call): Promise<pb.RecordUsageResponse> {
    return this.unary((o) => this.contexts.recordUsage(usageRequest(contextId, usage), o), call, false);
  }

  // A turn's usage, before its append; a context the turn creates has nothing to measure yet.
  private async turnUsage(contextId: string, usage: ProviderUsage, options: TurnOptions & Call): Promise<void> {
    const counts = usageCounts(usage, options.model);
    if (Number(counts.inputTokens) <= 0) return;
    try {
      await this.recordUsage(contextId, counts, options);
    } catch (e) {
      if (!(e instanceof CtxdError && e.code === Code.NotFound)) throw e;
    }
  }

  /** Events for a context until ``signal`` aborts (no deadline unless ``timeoutMs``). */
  async *watch(contextId: string, call: Call = {}): AsyncGenerator<pb.WatchContextResponse> {
    try {
      for await (const event of this.contexts.watchContext({ contextId }, { signal: call.signal, timeoutMs: call.timeoutMs })) {
        yield event;
      }
    } catch (err) {
      const e = toCtxdError(err);
      if (e.code === Code.Canceled && call.signal?.aborted) return;
      throw e;
    }
  }

  // -- memory ---------------------------------------------------------------------
  /** The live record (NotFound when there is none); ``JSON.parse(r.valueJson)``. */
  async memoryGet(key: string, call?: Call): Promise<mpb.MemoryRecord> {
    const resp = await this.unary((o) => this.memory.get({ key }, o), call, true);
    if (!resp.record) throw new CtxdError("reply without a record");
    return resp.record;
  }

  /** Stores ``value`` as JSON, or ``valueJson`` byte for byte; with ``vectors``
   * (field -> embedding) or ``embedFields`` (paths the sidecar's embedder
   * embeds) for ``memorySearch``. */
  async memorySet(
    key: string,
    value: unknown,
    options: {
      valueJson?: string;
      ttlSeconds?: number | bigint;
      expectedVersion?: string;
      createOnly?: boolean;
      by?: string;
      vectors?: Record<string, number[]>;
      embedFields?: string[];
    } & Call = {},
  ): Promise<mpb.MemoryRecord> {
    const req = create(mpb.SetRequestSchema, {
      key,
      valueJson: options.valueJson ?? JSON.stringify(value),
      ttlSeconds: big(options.ttlSeconds),
      expectedVersion: options.expectedVersion,
      createOnly: options.createOnly,
      by: options.by,
      vectors: Object.entries(options.vectors ?? {}).map(([field, values]) => ({ field, values })),
      embedFields: options.embedFields ?? [],
    });
    const resp = await this.unary((o) => this.memory.set(req, o), options, false);
    if (!resp.record) throw new CtxdError("reply without a record");
    return resp.record;
  }

  async memoryDelete(key: string, options: { expectedVersion?: string } & Call = {}): Promise<boolean> {
    const req = create(mpb.DeleteRequestSchema, { key, expectedVersion: options.expectedVersion });
    return (await this.unary((o) => this.memory.delete(req, o), options, false)).deleted;
  }

  /** Records under ``prefix`` most similar to ``query`` (a text the sidecar
   * embeds, or a vector), best first, each hit with its score. */
  async memorySearch(prefix: string, query: string | number[], options: SearchOptions & Call = {}): Promise<mpb.SearchHit[]> {
    const req = searchRequest(prefix, query, options);
    return (await this.unary((o) => this.memory.search(req, o), options, true)).hits;
  }

  /** Every live record under ``prefix`` (all pages), in key order. */
  async memoryList(
    prefix = "",
    options: { includeValues?: boolean; limit?: number } & Call = {},
  ): Promise<mpb.MemoryRecord[]> {
    const req = create(mpb.ListRequestSchema, { prefix, includeValues: options.includeValues, limit: options.limit });
    const out: mpb.MemoryRecord[] = [];
    for (;;) {
      const page = await this.unary((o) => this.memory.list(req, o), options, true);
      out.push(...page.records);
      if (!page.nextPageToken) return out;
      req.pageToken = page.nextPageToken;
    }
  }
}
