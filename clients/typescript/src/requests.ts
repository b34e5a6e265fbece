// Request building and response reading shared by the client's verbs.
import { randomUUID } from "node:crypto";
import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { CtxdError } from "./errors.js";
import * as pb from "./gen/ctxd/v1/context_pb.js";
import * as mpb from "./gen/ctxd/v1/memory_pb.js";
import { providerFormat, type ProviderTurnInput, setField } from "./shapes.js";
import type { AtVersion, MessageInput, RetryOptions, Since, SliceChange, TurnOptions, WithoutSummary } from "./types.js";

export function versionOf(page: pb.GetContextResponse): { version: bigint; incarnation: string } {
  return { version: page.info?.version ?? 0n, incarnation: page.info?.incarnation ?? "" };
}

export const CHANGES: Record<number, SliceChange> = {
  [pb.SliceChange.NONE]: "none",
  [pb.SliceChange.APPEND]: "append",
  [pb.SliceChange.REPLACE]: "replace",
};

export const DEFAULT_RETRY: RetryOptions = { attempts: 8, initialBackoffMs: 100, maxBackoffMs: 4000 };
export const PAGE_RESTARTS = 3;

function toMessage(m: MessageInput): pb.Message {
  if ("$typeName" in m) return m;
  return fromJson(pb.MessageSchema, m as unknown as JsonObject);
}

export function big(v: number | bigint | undefined): bigint | undefined {
  return v === undefined ? undefined : BigInt(v);
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A slice read's GetContextRequest fields: the version held (for a delta), the page size, the summary choice. */
export function sliceRead(
  contextId: string,
  options: Partial<Since> & { pageSize?: number } & WithoutSummary & AtVersion,
): Record<string, unknown> {
  const init: Record<string, unknown> = {
    contextId,
    view: pb.ContextView.SLICE,
    pageSize: options.pageSize,
    sinceVersion: big(options.sinceVersion),
    sinceIncarnation: options.sinceIncarnation,
    atVersion: big(options.atVersion),
  };
  withoutSummary(init, options);
  return init;
}

// Sets GetContextRequest.without_summary_blocks, refusing when this API has no such field.
function withoutSummary(init: Record<string, unknown>, options: WithoutSummary): void {
  if (!options.withoutSummaryBlocks) return;
  const field = pb.GetContextRequestSchema.fields.find((f) => f.name === "without_summary_blocks");
  if (!field) throw new CtxdError("this sidecar's API cannot leave the summary blocks out");
  init[field.localName] = true;
}

export function turnRequest(contextId: string, messages: MessageInput[], options: TurnOptions): pb.AppendTurnRequest {
  return create(pb.AppendTurnRequestSchema, {
    contextId,
    messages: messages.map(toMessage),
    idempotencyKey: options.idempotencyKey ?? randomUUID(),
    expectedVersion: big(options.expectedVersion),
    principal: options.principal,
    model: options.model,
    modelWindow: big(options.modelWindow),
    task: options.task,
  });
}

// An AppendTurnRequest carrying a provider's messages as JSON.
export function providerRequest(
  contextId: string,
  input: ProviderTurnInput,
  options: { idempotencyKey?: string; expectedVersion?: number | bigint; model?: string },
): pb.AppendTurnRequest {
  const value = providerFormat(input.format, pb.AppendTurnRequestSchema, "messages_json");
  if (input.system !== undefined && input.format !== "anthropic") {
    throw new CtxdError('system is the Anthropic system argument: use it with format "anthropic"');
  }
  if ((input.messagesJson === undefined) === (input.messages === undefined)) {
    throw new CtxdError("give exactly one of messagesJson and messages");
  }
  const req = create(pb.AppendTurnRequestSchema, {
    contextId,
    idempotencyKey: options.idempotencyKey ?? randomUUID(),
    expectedVersion: big(options.expectedVersion),
    model: options.model,
  });
  const json = input.messagesJson ?? JSON.stringify(input.messages);
  setField(req, pb.AppendTurnRequestSchema, "messages_json", json);
  setField(req, pb.AppendTurnRequestSchema, "format", value);
  if (input.system !== undefined) {
    setField(req, pb.AppendTurnRequestSchema, "system_json", JSON.stringify(input.system));
  }
  return req;
}

/** What a memory search narrows or pages by. */
export interface SearchOptions {
  filter?: Record<string, unknown>;
  limit?: number;
  offset?: number;
  includeValues?: boolean;
  fields?: string[];
}

export function searchRequest(prefix: string, query: string | number[], options: SearchOptions): mpb.SearchRequest {
  return create(mpb.SearchRequestSchema, {
    prefix,
    queryText: typeof query === "string" ? query : "",
    queryVector: typeof query === "string" ? [] : query,
    filterJson: options.filter ? JSON.stringify(options.filter) : "",
    limit: options.limit,
    offset: options.offset,
    includeValues: options.includeValues,
    fields: options.fields ?? [],
  });
}
