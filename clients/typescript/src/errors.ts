// Errors per gRPC status, with the google.rpc details ctxd sends (BadRequest,
// QuotaFailure, ErrorInfo) decoded, so callers branch on the field or cap.
import { Code, ConnectError } from "@connectrpc/connect";
import { BinaryReader } from "@bufbuild/protobuf/wire";

export { Code };

export interface FieldViolation {
  field: string;
  description: string;
}

export interface QuotaViolation {
  subject: string;
  description: string;
}

export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/** Any error from ctxd (``code`` is the gRPC status) or from this client (``code`` undefined). */
export class CtxdError extends Error {
  readonly code: Code | undefined;
  readonly fieldViolations: FieldViolation[];
  readonly quotaViolations: QuotaViolation[];
  readonly errorInfo: ErrorInfo | undefined;

  constructor(
    message: string,
    code?: Code,
    details: { fieldViolations?: FieldViolation[]; quotaViolations?: QuotaViolation[]; errorInfo?: ErrorInfo } = {},
  ) {
    super(code === undefined ? message : `${Code[code]}: ${message}`);
    this.name = "CtxdError";
    this.code = code;
    this.fieldViolations = details.fieldViolations ?? [];
    this.quotaViolations = details.quotaViolations ?? [];
    this.errorInfo = details.errorInfo;
  }

  /** ErrorInfo.reason, or "" when the sidecar sent none. */
  get reason(): string {
    return this.errorInfo?.reason ?? "";
  }
}

// Reads a message of string fields: calls onField(number, reader) for each.
function readFields(bytes: Uint8Array, onField: (no: number, r: BinaryReader) => boolean): void {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wireType] = r.tag();
    if (!onField(no, r)) r.skip(wireType);
  }
}

function pair(bytes: Uint8Array): [string, string] {
  const out: [string, string] = ["", ""];
  readFields(bytes, (no, r) => {
    if (no !== 1 && no !== 2) return false;
    out[no - 1] = r.string();
    return true;
  });
  return out;
}

function decodeRepeatedPairs(bytes: Uint8Array): [string, string][] {
  const out: [string, string][] = [];
  readFields(bytes, (no, r) => {
    if (no !== 1) return false;
    out.push(pair(r.bytes()));
    return true;
  });
  return out;
}

function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  readFields(bytes, (no, r) => {
    if (no === 1) info.reason = r.string();
    else if (no === 2) info.domain = r.string();
    else if (no === 3) {
      const [k, v] = pair(r.bytes());
      info.metadata[k] = v;
    } else return false;
    return true;
  });
  return info;
}

/** The CtxdError for a failed call (any other error is returned wrapped as it is). */
export function toCtxdError(err: unknown): CtxdError {
  if (err instanceof CtxdError) return err;
  const ce = ConnectError.from(err);
  const fieldViolations: FieldViolation[] = [];
  const quotaViolations: QuotaViolation[] = [];
  let errorInfo: ErrorInfo | undefined;
  for (const d of ce.details) {
    if (!("value" in d) || !(d.value instanceof Uint8Array)) continue;
    const type = "type" in d ? String(d.type) : "";
    if (type === "google.rpc.BadRequest") {
      for (const [field, description] of decodeRepeatedPairs(d.value)) fieldViolations.push({ field, description });
    } else if (type === "google.rpc.QuotaFailure") {
      for (const [subject, description] of decodeRepeatedPairs(d.value)) quotaViolations.push({ subject, description });
    } else if (type === "google.rpc.ErrorInfo") {
      errorInfo = decodeErrorInfo(d.value);
    }
  }
  return new CtxdError(ce.rawMessage, ce.code, { fieldViolations, quotaViolations, errorInfo });
}
