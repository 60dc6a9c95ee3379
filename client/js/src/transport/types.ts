// The one transport interface the client uses: a connection of client-opened bidirectional
// streams with QUIC's notions (FIN, RESET_STREAM, STOP_SENDING, a close carrying a code and a
// reason), whichever of WebTransport (§2.3) or the WebSocket mux (§2.4) carries it.

import { errorFromClose } from "../codes.js";

/** Which transport carries a connection. */
export type TransportKind = "webtransport" | "websocket";

/** How a connection ended, with the §7 error it stands for when the server said one (§2). */
export interface CloseInfo {
  /**
   * `error`: the server closed it with an application error code (`code`, `reason`,
   * `retryAfterMs` parsed from the reason phrase, §2). `normal`: closed with code 0 (by the
   * server, or 1000 on a WebSocket). `lost`: the path died, or the transport failed without a
   * code. `local`: this side closed it.
   */
  how: "error" | "normal" | "lost" | "local";
  /** The §7 code; 0 unless `how` is `error` (or `local` with a code). */
  code: number;
  /** The human part of the reason phrase (after any `retry_after_ms=N; ` prefix). */
  reason: string;
  /** The reason phrase's retry-after, in ms; 0 = none. */
  retryAfterMs: number;
}

/** A CloseInfo for an application close with code and reason phrase (§2 grammar). */
export function closeInfoFromClose(code: number, reason: string): CloseInfo {
  if (code === 0) {
    return { how: "normal", code: 0, reason, retryAfterMs: 0 };
  }
  const e = errorFromClose(code, reason);
  return { how: "error", code: e.code, reason: e.serverMessage, retryAfterMs: e.retryAfterMs };
}

/**
 * Why a stream operation failed: the peer reset its side (`reset`, a read), asked us to stop
 * sending (`stop`, a write; the code is the peer's), or the stream or connection is gone
 * (`closed`).
 */
export class StreamError extends Error {
  constructor(
    readonly kind: "reset" | "stop" | "closed",
    /** The application error code (§7) of the reset or stop; 0 for `closed`. */
    readonly code: number,
    message?: string,
  ) {
    super(message ?? `stream ${kind}${code ? ` with code ${code}` : ""}`);
    this.name = "StreamError";
  }
}

/** One bidirectional stream, opened by the client. */
export interface Stream {
  /**
   * Writes bytes, in order. Resolves once the transport has taken them (WebSocket: within the
   * peer's credit; WebTransport: the stream's writer accepted them), which is the backpressure.
   * Rejects with {@link StreamError} when the peer stopped the stream or the connection is gone.
   */
  write(bytes: Uint8Array): Promise<void>;
  /** Ends the sending side normally (FIN). */
  end(): Promise<void>;
  /** Abandons the sending side with a code (RESET_STREAM). */
  reset(code: number): void;
  /** Asks the peer to stop sending, with a code (STOP_SENDING); reads end. */
  stop(code: number): void;
  /** The next bytes the peer sent, as they arrive; `null` after its FIN. Rejects with {@link StreamError} on a reset or a lost connection. */
  read(): Promise<Uint8Array | null>;
}

/** A connection: WebTransport session or WebSocket. */
export interface Connection {
  /** Which transport it is. */
  readonly kind: TransportKind;
  /** Opens a new bidirectional stream (the first one is the control stream). */
  openStream(): Promise<Stream>;
  /** Resolves once, when the connection ends, however it ends; never rejects. */
  readonly closed: Promise<CloseInfo>;
  /** Closes the connection (code 0 = normal). */
  close(code?: number, reason?: string): void;
}
