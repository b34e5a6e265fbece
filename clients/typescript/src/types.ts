// The public shapes of the client's options, inputs and results.
import type * as pb from "./gen/ctxd/v1/context_pb.js";

export interface TlsOptions {
  /** PEM of the CA that signed the sidecar's certificate. */
  ca?: string | Buffer;
  /** PEM client certificate and key, for mTLS. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** Name to check the sidecar's certificate against, when not the host. */
  serverName?: string;
}

export interface RetryOptions {
  attempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
}

export interface ClientOptions {
  /** host:port; defaults to $CTXD_ADDRESS, then 127.0.0.1:50051. */
  address?: string;
  /** Bearer token; defaults to the contents of ``tokenFile``, then $CTXD_TOKEN. */
  token?: string;
  /** File holding the bearer token, re-read when it changes; defaults to $CTXD_TOKEN_FILE. */
  tokenFile?: string;
  tls?: TlsOptions;
  /** Deadline per call in milliseconds (default 10000). */
  timeoutMs?: number;
  retry?: RetryOptions;
  /** Calls on the wire at once (default 256); more wait their turn, in order. */
  maxInFlight?: number;
}

export interface Call {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ToolCallInput {
  id: string;
  name: string;
  arguments_json?: string;
  argumentsJson?: string;
}

/** A message in ctxd's own shape (the proto's JSON; snake_case or camelCase names). */
export type MessageInput =
  | { user: { text: string; principal?: string } }
  | { system: { text: string } }
  | { assistant: { text?: string; tool_calls?: ToolCallInput[]; toolCalls?: ToolCallInput[] } }
  | {
      tool: {
        call_id?: string;
        callId?: string;
        name?: string;
        json?: string;
        text?: string;
        is_error?: boolean;
        isError?: boolean;
      };
    }
  | { note: { text: string } }
  | pb.Message;

export type SliceChange = "none" | "append" | "replace";

/**
 * The whole slice, and the version it reflects. ``incarnation`` names the conversation's
 * incarnation (one deleted and created again starts its versions over): pass it back as
 * ``sinceIncarnation`` with ``sinceVersion``.
 */
export interface Slice {
  version: bigint;
  incarnation: string;
  messages: pb.Message[];
}

/** An incremental read: append ``messages`` to what you hold, or replace it. */
export interface SliceDelta extends Slice {
  change: SliceChange;
}

/** A whole turn in one call: what AppendTurn answered, and what changed in the slice since the version held. */
export interface Turn {
  appended: pb.AppendTurnResponse;
  next: SliceDelta;
}

/**
 * What an incremental read holds: a version and its incarnation (``Slice.incarnation``,
 * ``AppendTurnResponse.incarnation``). Without ``sinceIncarnation`` the version alone decides, and
 * a conversation deleted and created again may read as "append" against the old transcript.
 */
export interface Since {
  sinceVersion: number | bigint;
  sinceIncarnation?: string;
}

/**
 * For a runtime that sends ``renderPrompt``'s prompt as its system prompt: that prompt's tail
 * carries the summary and plan, so the slice leaves its summary and plan blocks out
 * (GetContextRequest.without_summary_blocks) and each request holds them exactly once.
 */
export interface WithoutSummary {
  withoutSummaryBlocks?: boolean;
}

/** A read as of an earlier version (0 or absent: the latest); see ``versions()`` for those kept. */
export interface AtVersion {
  atVersion?: number | bigint;
}

/** What ``appendTurn`` (and ``turn``) take besides the messages. */
export interface TurnOptions {
  idempotencyKey?: string;
  expectedVersion?: number | bigint;
  principal?: string;
  model?: string;
  modelWindow?: number | bigint;
  task?: string;
}
