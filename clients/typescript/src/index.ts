// A thin typed client for the ctxd sidecar over gRPC: the client, its types, errors, the
// provider shapes and the OpenAI Agents SDK session.
import * as pb from "./gen/ctxd/v1/context_pb.js";
import * as mpb from "./gen/ctxd/v1/memory_pb.js";

export { CtxdClient } from "./client.js";
export * from "./errors.js";
export { CtxdSession, type CtxdSessionOptions, type Summarise } from "./integrations/openaiAgents.js";
export { VERSION } from "./version.js";
export type { ProviderFormat, ProviderSlice, ProviderTurn, ProviderTurnInput } from "./shapes.js";
export { usageCounts, type ProviderUsage, type UsageCounts, type WithUsage } from "./usage.js";
export type * from "./types.js";
export { pb, mpb };
