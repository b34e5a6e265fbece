// Provider message shapes passed through as JSON, and JSON of what the client returns (versions
// are bigints, which JSON.stringify cannot write).
import { toJson, type DescMessage } from "@bufbuild/protobuf";
import { CtxdError } from "./errors.js";
import * as pb from "./gen/ctxd/v1/context_pb.js";
import type { Slice, SliceChange } from "./types.js";

/** A provider's own message shape, passed through as JSON. */
export type ProviderFormat = "openai" | "anthropic" | "openai_responses";

/** The slice in a provider's shape; ``system`` is its separate system prompt (anthropic). */
export interface ProviderSlice {
  version: bigint;
  incarnation: string;
  messages: unknown[];
  system: unknown;
  change?: SliceChange;
}

/** A turn in a provider's own shape: its messages as JSON (or as values, serialised here). */
export interface ProviderTurnInput {
  format: ProviderFormat;
  /** The provider's message list as JSON text, passed through byte for byte. */
  messagesJson?: string;
  /** The same as values, when you do not hold the JSON text. */
  messages?: unknown[];
  /** Anthropic's ``system`` argument (a string or text blocks), sent when it is new. */
  system?: unknown;
}

/** A turn given in a provider's shape: what AppendTurn answered, and the slice's change in that shape. */
export interface ProviderTurn {
  appended: pb.AppendTurnResponse;
  next: ProviderSlice & { change: SliceChange };
}

// JSON.stringify cannot write a bigint: what the client returns carries a toJSON giving versions
// as decimal strings and messages as protobuf JSON (int64 fields as strings too).
export function jsonable<T extends object>(obj: T, toJSON: () => unknown): T {
  Object.defineProperty(obj, "toJSON", { value: toJSON, enumerable: false });
  return obj;
}

export function sliceOut<T extends Slice & { change?: SliceChange }>(out: T): T {
  return jsonable(out, () => ({
    ...out,
    version: out.version.toString(),
    messages: out.messages.map((m) => toJson(pb.MessageSchema, m)),
  }));
}

export function providerOut<T extends ProviderSlice>(out: T): T {
  return jsonable(out, () => ({ ...out, version: out.version.toString() }));
}

export function turnOut<T extends { appended: pb.AppendTurnResponse; next: object }>(out: T): T {
  return jsonable(out, () => ({ appended: toJson(pb.AppendTurnResponseSchema, out.appended), next: out.next }));
}

// Provider formats are newer than some sidecars' API: look the fields up by name.
export function providerFormat(format: ProviderFormat, schema: DescMessage, field: string): number {
  const e = pb.file_ctxd_v1_context.enums.find((x) => x.name === "MessageFormat");
  const value = e?.values.find((v) => v.name === `MESSAGE_FORMAT_${format.toUpperCase()}`);
  if (!value || !schema.fields.some((f) => f.name === field)) {
    throw new CtxdError("this sidecar's API has no provider formats");
  }
  return value.number;
}

export function setField(msg: object, schema: DescMessage, name: string, value: unknown): void {
  const field = schema.fields.find((f) => f.name === name);
  if (field) (msg as Record<string, unknown>)[field.localName] = value;
}

export function getField(msg: object, schema: DescMessage, name: string): string {
  const field = schema.fields.find((f) => f.name === name);
  return field ? String((msg as Record<string, unknown>)[field.localName] ?? "") : "";
}

type Provided = { role?: unknown; content?: unknown };

export function blocks(content: unknown): unknown[] {
  return typeof content === "string" ? [{ type: "text", text: content }] : (content as unknown[]);
}

// Anthropic pages: a user message continuing a user message is merged into it.
export function joinPage(format: ProviderFormat, held: unknown[], page: unknown[]): void {
  const last = held[held.length - 1] as Provided | undefined;
  const first = page[0] as Provided | undefined;
  if (format === "anthropic" && last?.role === "user" && first?.role === "user") {
    held[held.length - 1] = { ...last, content: [...blocks(last.content), ...blocks(first.content)] };
    page = page.slice(1);
  }
  held.push(...page);
}

// The pages of a read in a provider's format, joined: its messages and (Anthropic) system blocks.
export function providerPages(format: ProviderFormat, pages: pb.GetContextResponse[]): { messages: unknown[]; system: unknown } {
  const messages: unknown[] = [];
  let system: unknown = undefined;
  for (const page of pages) {
    const got = JSON.parse(getField(page, pb.GetContextResponseSchema, "messages_json") || "[]") as unknown[];
    joinPage(format, messages, got);
    const sys = getField(page, pb.GetContextResponseSchema, "system_json");
    if (sys) system = [...((system as unknown[] | undefined) ?? []), ...blocks(JSON.parse(sys))];
  }
  return { messages, system };
}
