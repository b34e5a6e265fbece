// What a connection needs beyond the transport: the bearer token (re-read from its file when the
// file changes, so a rotated secret needs no restart), and a failure of the connection explained:
// the address and what is wrong there, for failures no retry can fix.
import { statSync, readFileSync } from "node:fs";
import { connect as tlsConnect } from "node:tls";
import { Code, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { CtxdError } from "./errors.js";
import type { ClientOptions } from "./types.js";

/** Milliseconds the TLS probe of a port may take. */
const PROBE_TIMEOUT_MS = 500;

/** The token to send: given, else the file ($CTXD_TOKEN_FILE) re-read when it changes, else $CTXD_TOKEN. */
export class TokenSource {
  private readonly file: string | undefined;
  private readonly fixed: string | undefined;
  private seen = "";
  private current: string | undefined;

  constructor(token?: string, tokenFile?: string) {
    if (token !== undefined) {
      this.fixed = token;
    } else {
      this.file = tokenFile ?? (process.env.CTXD_TOKEN_FILE || undefined);
      this.fixed = this.file === undefined ? process.env.CTXD_TOKEN || undefined : undefined;
    }
    if (this.file !== undefined) this.token(); // an unreadable file fails here, naming it
  }

  token(): string | undefined {
    if (this.file === undefined) return this.fixed;
    try {
      // Kubernetes swaps a Secret's files through a symlink: inode and mtime change.
      const st = statSync(this.file);
      const seen = `${st.ino}:${st.mtimeMs}:${st.size}`;
      if (seen !== this.seen) {
        this.current = readFileSync(this.file, "utf8").trim() || undefined;
        this.seen = seen;
      }
      return this.current;
    } catch (err) {
      throw new CtxdError(`cannot read the token file ${this.file}: ${(err as Error).message}`);
    }
  }
}

function speaksTls(address: string): Promise<boolean> {
  const at = address.lastIndexOf(":");
  const host = address.slice(0, at).replace(/^\[|\]$/g, "");
  const port = Number(address.slice(at + 1));
  return new Promise((resolve) => {
    const socket = tlsConnect({ host, port, rejectUnauthorized: false, ALPNProtocols: ["h2"] });
    const done = (result: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done(false), PROBE_TIMEOUT_MS);
    socket.once("secureConnect", () => done(true));
    socket.once("error", () => done(false));
  });
}

function explained(e: CtxdError, address: string, cause: string): CtxdError {
  const raw = e.message.replace(/^[A-Za-z]+: /, "");
  const out = new CtxdError(`${address}: ${cause} (${raw})`, e.code, e);
  return Object.assign(out, { address, hint: cause });
}

/**
 * ``e`` with the address and the cause named when the connection, not the request, failed:
 * a TLS port dialled in plaintext or the reverse, no gRPC server there, not a ctxd sidecar, or a
 * missing token. None of these is retried (only UNAVAILABLE is).
 */
export async function explain(
  e: CtxdError,
  address: string,
  tls: boolean,
  signal: AbortSignal | undefined,
): Promise<CtxdError> {
  const text = e.message.toLowerCase();
  if (e.code === Code.Internal && /ssl routines|wrong version number|handshake/.test(text)) {
    const cause = /wrong version number/.test(text)
      ? "the server there does not speak TLS; connect without tls"
      : "the TLS handshake failed (certificate, CA or server name)";
    return explained(e, address, cause);
  }
  if (e.code === Code.Internal && /protocol error|http\/1|parse error/.test(text)) {
    return explained(e, address, "the server there does not speak gRPC (a metrics or HTTP port?)");
  }
  if (e.code === Code.Canceled && !signal?.aborted && !tls && !address.startsWith("unix:")) {
    if (await speaksTls(address)) {
      return explained(e, address, "the server there speaks TLS; connect with { tls: { ca } }");
    }
  }
  if (e.code === Code.Unimplemented) {
    return explained(e, address, "the server there is not a ctxd sidecar of this API");
  }
  if (e.code === Code.Unauthenticated) {
    return explained(e, address, "the sidecar wants a bearer token: set CTXD_TOKEN_FILE or CTXD_TOKEN (or token)");
  }
  return e;
}

/** The gRPC transport to ``address``: TLS when ``options.tls`` is given, the bearer token on every call. */
export function ctxdTransport(address: string, options: ClientOptions): Transport {
  const tokens = new TokenSource(options.token, options.tokenFile);
  const interceptors: Interceptor[] = [
    (next) => (req) => {
      const token = tokens.token();
      if (token) req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    },
  ];
  const tls = options.tls;
  return createGrpcTransport({
    baseUrl: `${tls ? "https" : "http"}://${address}`,
    interceptors,
    nodeOptions: tls ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.serverName } : {},
  });
}
