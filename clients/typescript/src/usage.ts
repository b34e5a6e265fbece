// A provider's response usage as RecordUsage fields: OpenAI Chat Completions
// (prompt_tokens, prompt_tokens_details.cached_tokens), OpenAI Responses
// (input_tokens, input_tokens_details.cached_tokens) and Anthropic Messages
// (input_tokens without the cache, plus cache_read_input_tokens and
// cache_creation_input_tokens). input_tokens sent counts every input token.
import { create } from "@bufbuild/protobuf";
import * as pb from "./gen/ctxd/v1/context_pb.js";

/** A provider's ``usage`` object as its API returns it (snake_case JSON). */
export type ProviderUsage = Record<string, unknown>;

/** ``usage``: the provider's response usage for the call a turn answers, recorded first. */
export interface WithUsage {
  usage?: ProviderUsage;
}

/** Counts for ``recordUsage``. */
export interface UsageCounts {
  inputTokens: number | bigint;
  outputTokens?: number | bigint;
  model?: string;
  /** Of inputTokens, those read from the provider's prompt cache. */
  cachedInputTokens?: number | bigint;
  /** Of inputTokens, those written to the provider's prompt cache. */
  cacheWriteTokens?: number | bigint;
}

function n(v: unknown): number | undefined {
  return typeof v === "number" || typeof v === "bigint" ? Number(v) : undefined;
}

/** The counts in a provider's usage (OpenAI or Anthropic shape). */
export function usageCounts(usage: ProviderUsage, model?: string): UsageCounts {
  const read = n(usage.cache_read_input_tokens);
  const written = n(usage.cache_creation_input_tokens);
  if (read !== undefined || written !== undefined) {
    return {
      inputTokens: (n(usage.input_tokens) ?? 0) + (read ?? 0) + (written ?? 0),
      outputTokens: n(usage.output_tokens) ?? 0,
      model,
      cachedInputTokens: read ?? 0,
      cacheWriteTokens: written ?? 0,
    };
  }
  const chat = n(usage.prompt_tokens) !== undefined;
  const details = (chat ? usage.prompt_tokens_details : usage.input_tokens_details) as ProviderUsage | undefined;
  return {
    inputTokens: n(chat ? usage.prompt_tokens : usage.input_tokens) ?? 0,
    outputTokens: n(chat ? usage.completion_tokens : usage.output_tokens) ?? 0,
    model,
    cachedInputTokens: details ? n(details.cached_tokens) : undefined,
  };
}

const big = (v: number | bigint | undefined) => (v === undefined ? undefined : BigInt(v));

export function usageRequest(contextId: string, usage: UsageCounts): pb.RecordUsageRequest {
  return create(pb.RecordUsageRequestSchema, {
    contextId,
    inputTokens: big(usage.inputTokens),
    outputTokens: big(usage.outputTokens),
    model: usage.model,
    cachedInputTokens: big(usage.cachedInputTokens),
    cacheWriteTokens: big(usage.cacheWriteTokens),
  });
}
