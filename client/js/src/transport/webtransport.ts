// WebTransport (§2.3): the session's bidirectional streams are the protocol's streams; stream
// resets and STOP_SENDING carry §7 codes as WebTransport application error codes (all below 256);
// the server ends a session with CLOSE_WEBTRANSPORT_SESSION carrying the code and §2's reason.

import { closeInfoFromClose, StreamError, type CloseInfo, type Connection, type Stream } from "./types.js";

/** The stream error code of a WebTransportError, or null (a session error, another error). */
function streamCode(e: unknown): number | null {
  if (typeof WebTransportError !== "undefined" && e instanceof WebTransportError) {
    return e.streamErrorCode;
  }
  // Outside the browser (tests, polyfills): anything with a numeric streamErrorCode.
  if (typeof e === "object" && e !== null && "streamErrorCode" in e) {
    const c = e.streamErrorCode;
    return typeof c === "number" ? c : null;
  }
  return null;
}

/** The constructor of WebTransportError as browsers ship it (the spec's two-argument form, or one dictionary). */
type WTErrorCtor = new (...args: unknown[]) => { streamErrorCode: number | null };

/**
 * How this browser builds a WebTransportError with a stream code, found once: Chromium 148 and
 * Firefox 140 take one dictionary (`{message, streamErrorCode}`) and throw on the spec's
 * `(message, {source, streamErrorCode})` form; a browser that follows the spec may do the
 * reverse. Both are tried, and kept only if the code comes out as given.
 */
let found: { ctor: unknown; make: (code: number) => unknown } | null = null;

function findCodeError(Ctor: WTErrorCtor | undefined): (code: number) => unknown {
  const plain = (code: number): unknown => ({ streamErrorCode: code });
  if (Ctor === undefined) return plain;
  const forms: ((code: number) => { streamErrorCode: number | null })[] = [
    (code) => new Ctor({ message: "", streamErrorCode: code }),
    (code) => new Ctor("", { source: "stream", streamErrorCode: code }),
  ];
  for (const form of forms) {
    try {
      if (form(7).streamErrorCode === 7) return form;
    } catch {
      // This browser wants the other form.
    }
  }
  // No form carries the code: abort/cancel with a plain reason (the browser sends code 0).
  return plain;
}

/**
 * A reason to abort a writer or cancel a reader with, carrying a stream code (§2.3: every code is
 * below 256). Never throws: a reset or stop must happen whatever the browser's constructor wants.
 */
export function codeError(code: number): unknown {
  const ctor = typeof WebTransportError === "undefined" ? undefined : (WebTransportError as unknown as WTErrorCtor);
  const f = found !== null && found.ctor === ctor ? found : (found = { ctor, make: findCodeError(ctor) });
  try {
    return f.make(code & 0xff);
  } catch {
    return { streamErrorCode: code & 0xff };
  }
}

class WTStream implements Stream {
  private readonly writer: WritableStreamDefaultWriter<Uint8Array>;
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;

  constructor(s: WebTransportBidirectionalStream) {
    this.writer = (s.writable as WritableStream<Uint8Array>).getWriter();
    this.reader = s.readable.getReader() as ReadableStreamDefaultReader<Uint8Array>;
  }

  async write(bytes: Uint8Array): Promise<void> {
    try {
      await this.writer.write(bytes);
    } catch (e) {
      // A write fails when the peer sent STOP_SENDING (its code) or the session is gone.
      const code = streamCode(e);
      throw code === null ? new StreamError("closed", 0, String(e)) : new StreamError("stop", code);
    }
  }

  async end(): Promise<void> {
    try {
      await this.writer.close();
    } catch (e) {
      const code = streamCode(e);
      throw code === null ? new StreamError("closed", 0, String(e)) : new StreamError("stop", code);
    }
  }

  reset(code: number): void {
    // Never throws: callers reset streams on their way out (cleanup after a lost session).
    try {
      this.writer.abort(codeError(code)).catch(() => undefined);
    } catch {
      // The writer is already errored or released.
    }
  }

  stop(code: number): void {
    try {
      this.reader.cancel(codeError(code)).catch(() => undefined);
    } catch {
      // The reader is already errored or released.
    }
  }

  async read(): Promise<Uint8Array | null> {
    try {
      const r = await this.reader.read();
      return r.done ? null : r.value;
    } catch (e) {
      const code = streamCode(e);
      throw code === null ? new StreamError("closed", 0, String(e)) : new StreamError("reset", code);
    }
  }
}

/** A §2.3 connection over one WebTransport session. */
export class WebTransportConnection implements Connection {
  readonly kind = "webtransport" as const;
  readonly closed: Promise<CloseInfo>;
  private local: CloseInfo | null = null;

  /** Wraps a session whose `ready` has resolved (see {@link dialWebTransport}). */
  constructor(private readonly wt: WebTransport) {
    // A handler on `closed` from the start: Firefox reports an unhandled rejection otherwise.
    this.closed = wt.closed.then(
      (info) => this.local ?? closeInfoFromClose(info.closeCode ?? 0, info.reason ?? ""),
      (e: unknown) => this.local ?? { how: "lost" as const, code: 0, reason: String(e), retryAfterMs: 0 },
    );
  }

  async openStream(): Promise<Stream> {
    try {
      return new WTStream(await this.wt.createBidirectionalStream());
    } catch (e) {
      throw new StreamError("closed", 0, `cannot open a stream: ${String(e)}`);
    }
  }

  close(code = 0, reason = ""): void {
    this.local ??= { how: "local", code, reason, retryAfterMs: 0 };
    try {
      this.wt.close({ closeCode: code, reason });
    } catch {
      // Already closed.
    }
  }
}

/** Options of {@link dialWebTransport}. */
export interface WebTransportDialOptions {
  /** SHA-256 hashes of certificates to pin (§2.3: the node's browser certificates), as 32 bytes or 64 hex digits. */
  certificateHashes?: readonly (Uint8Array | string)[];
  /** Abandons the attempt. */
  signal?: AbortSignal;
}

/** Whether this environment has WebTransport at all. */
export function webTransportAvailable(): boolean {
  return typeof WebTransport !== "undefined";
}

/** The 32 bytes of a SHA-256 hash given as bytes or as hex (lower or upper case, colons allowed, as §2 allows for fingerprints). */
export function hashBytes(h: Uint8Array | string): Uint8Array<ArrayBuffer> {
  if (typeof h !== "string") {
    if (h.length !== 32) throw new RangeError(`a SHA-256 hash has 32 bytes, not ${h.length}`);
    return Uint8Array.from(h);
  }
  const hex = h.replace(/:/g, "").toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new RangeError(`not a SHA-256 hash in hex: ${h}`);
  return Uint8Array.from(hex.match(/../g) ?? [], (x) => parseInt(x, 16));
}

/** Opens a WebTransport session to url (`https://host:port/syncd/1`) and wraps it once ready. */
export async function dialWebTransport(url: string, opts: WebTransportDialOptions = {}): Promise<WebTransportConnection> {
  const hashes = (opts.certificateHashes ?? []).map((h) => ({ algorithm: "sha-256", value: hashBytes(h) }));
  const wt = new WebTransport(url, hashes.length > 0 ? { serverCertificateHashes: hashes } : {});
  // Handled at once: a failed `ready` also rejects `closed` (an unhandled rejection in Firefox).
  wt.closed.catch(() => undefined);
  const abort = (): void => {
    wt.close();
  };
  opts.signal?.addEventListener("abort", abort, { once: true });
  try {
    await wt.ready;
  } catch (e) {
    // Browsers report every refusal alike (a refused origin, a wrong certificate, a closed port:
    // source "session"), so there is nothing more to say than the message.
    throw new Error(`WebTransport ${url}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  } finally {
    opts.signal?.removeEventListener("abort", abort);
  }
  if (opts.signal?.aborted) {
    wt.close();
    throw new Error("WebTransport dial abandoned");
  }
  return new WebTransportConnection(wt);
}
