// The WebSocket fallback of §2.4: the protocol's streams multiplexed over one WebSocket, each
// binary message one record `stream_id (uint32 BE) kind (uint8) payload`:
//
//   0 DATA   1–65,536 bytes of the stream        (STREAM)
//   1 FIN    empty                               (FIN)
//   2 RESET  code (uint32 BE)                    (RESET_STREAM)
//   3 STOP   code (uint32 BE)                    (STOP_SENDING; answered by RESET, same code)
//   4 CREDIT n ≥ 1 (uint32 BE)                   (flow control: n more DATA bytes accepted)
//
// Per stream and direction a sender may send 262,144 bytes plus every CREDIT received; this side
// grants CREDIT as the application reads, once what was read reaches half the window, as the
// server does. Stream ids are chosen here, increasing from 1. The server closes the WebSocket with
// status 4000 + code (1000 for code 0) and §2's reason phrase.

import { Code } from "../codes.js";
import { closeInfoFromClose, StreamError, type CloseInfo, type Connection, type Stream } from "./types.js";

/** Record kinds of §2.4. */
export const RecordKind = { Data: 0, Fin: 1, Reset: 2, Stop: 3, Credit: 4 } as const;

/** The initial window, per stream and direction. */
export const INITIAL_WINDOW = 262_144;
/** The largest DATA payload. */
export const MAX_DATA = 65_536;
/** Stream id, kind. */
const RECORD_HEADER = 5;

/**
 * What the mux needs of a WebSocket: the browser's `WebSocket` has it, and tests pass an
 * in-memory one. Messages arrive as ArrayBuffer (binaryType "arraybuffer") or string (a text
 * message, which breaks the protocol).
 */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: Event) => unknown) | null;
  onmessage: ((ev: MessageEvent) => unknown) | null;
  onclose: ((ev: CloseEvent) => unknown) | null;
  onerror: ((ev: Event) => unknown) | null;
}

/** The readyState of an open WebSocket. */
const OPEN = 1;

function record(id: number, kind: number, payload?: Uint8Array | number): Uint8Array {
  const n = payload === undefined ? 0 : typeof payload === "number" ? 4 : payload.length;
  const b = new Uint8Array(RECORD_HEADER + n);
  const v = new DataView(b.buffer);
  v.setUint32(0, id);
  b[4] = kind;
  if (typeof payload === "number") v.setUint32(5, payload);
  else if (payload) b.set(payload, RECORD_HEADER);
  return b;
}

class Deferred<T> {
  resolve!: (v: T) => void;
  reject!: (e: unknown) => void;
  readonly promise = new Promise<T>((res, rej) => {
    this.resolve = res;
    this.reject = rej;
  });
}

/** One stream of the mux. */
class MuxStream implements Stream {
  /**
   * The stream id, 0 until this side's first record: ids are taken when a stream first sends,
   * not when it is created, because the server opens a stream on its first record and ignores
   * a record of an id below one it has seen (§2.4). Two streams created together whose first
   * writes happen in the other order (the request stream and the sync stream at connect) would
   * otherwise lose the lower one's frames.
   */
  id = 0;
  // Sending.
  private credit = INITIAL_WINDOW;
  private creditWaiter: Deferred<void> | null = null;
  private writing: Promise<void> = Promise.resolve();
  /** Why writes fail from now on: our FIN/RESET, the peer's STOP, or the connection's end. */
  private sendError: StreamError | null = null;
  sendEnded = false;

  // Receiving.
  private queue: Uint8Array[] = [];
  private reader: Deferred<Uint8Array | null> | null = null;
  /** The peer's FIN (null) or RESET / the connection's end (a StreamError), once it came. */
  private recvEnd: StreamError | null | undefined = undefined;
  recvEnded = false;
  private received = 0; // DATA bytes received in all
  private allowed = INITIAL_WINDOW; // DATA bytes the peer may send in all
  private readSinceGrant = 0;
  private stopped = false; // we sent STOP: what still comes is discarded

  constructor(private readonly mux: WebSocketConnection) {}

  private send(kind: number, payload?: Uint8Array | number): void {
    if (this.id === 0) this.mux.assignId(this);
    this.mux.sendRecord(record(this.id, kind, payload));
  }

  write(bytes: Uint8Array): Promise<void> {
    // Writes are chained so that bytes go out in order even when a write waits for credit.
    const p = this.writing.then(() => this.writeNow(bytes));
    this.writing = p.catch(() => undefined);
    return p;
  }

  private async writeNow(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.length) {
      if (this.sendError) throw this.sendError;
      if (this.credit === 0) {
        this.creditWaiter = new Deferred<void>();
        await this.creditWaiter.promise;
        continue;
      }
      const n = Math.min(bytes.length - off, MAX_DATA, this.credit);
      this.credit -= n;
      this.send(RecordKind.Data, bytes.subarray(off, off + n));
      off += n;
    }
    if (this.sendError) throw this.sendError;
  }

  end(): Promise<void> {
    const p = this.writing.then(() => {
      if (this.sendError) throw this.sendError;
      this.send(RecordKind.Fin);
      this.endSending(new StreamError("closed", 0, "stream ended (FIN sent)"));
    });
    this.writing = p.catch(() => undefined);
    return p;
  }

  reset(code: number): void {
    if (this.sendEnded) return;
    // A stream that never sent a record does not exist on the server: nothing to tell it.
    if (this.id !== 0) this.send(RecordKind.Reset, code >>> 0);
    this.endSending(new StreamError("closed", 0, "stream reset by this side"));
  }

  stop(code: number): void {
    if (this.recvEnded || this.stopped) return;
    if (this.id !== 0) {
      this.stopped = true; // until the peer's answer (RESET or FIN) arrives
      this.send(RecordKind.Stop, code >>> 0);
    }
    this.queue = [];
    this.finishRecv(new StreamError("closed", 0, "reading stopped by this side"));
  }

  read(): Promise<Uint8Array | null> {
    const chunk = this.queue.shift();
    if (chunk) {
      this.consumed(chunk.length);
      return Promise.resolve(chunk);
    }
    if (this.recvEnd !== undefined) {
      return this.recvEnd === null ? Promise.resolve(null) : Promise.reject(this.recvEnd);
    }
    if (this.reader) {
      return Promise.reject(new Error("syncd: concurrent reads of one stream"));
    }
    this.reader = new Deferred<Uint8Array | null>();
    return this.reader.promise;
  }

  /** The application took n bytes: grant them back once half a window is read (§2.4). */
  private consumed(n: number): void {
    this.readSinceGrant += n;
    if (this.readSinceGrant >= INITIAL_WINDOW / 2 && !this.recvEnded && !this.stopped) {
      this.allowed += this.readSinceGrant;
      this.send(RecordKind.Credit, this.readSinceGrant);
      this.readSinceGrant = 0;
    }
  }

  private endSending(err: StreamError): void {
    this.sendEnded = true;
    this.sendError ??= err;
    this.creditWaiter?.resolve();
    this.creditWaiter = null;
    this.mux.maybeForget(this);
  }

  private finishRecv(end: StreamError | null): void {
    this.recvEnded = true;
    if (this.recvEnd === undefined) this.recvEnd = end;
    if (this.reader) {
      const r = this.reader;
      this.reader = null;
      if (this.recvEnd === null) r.resolve(null);
      else r.reject(this.recvEnd);
    }
    this.mux.maybeForget(this);
  }

  /** A record from the peer; returns a protocol violation, if it is one. */
  onRecord(kind: number, payload: Uint8Array, view: DataView): string | null {
    switch (kind) {
      case RecordKind.Data: {
        if (this.recvEnded && !this.stopped) return `DATA after the end of stream ${this.id}`;
        this.received += payload.length;
        if (this.received > this.allowed) return `DATA beyond credit on stream ${this.id}`;
        if (this.stopped) return null; // we asked it to stop; bytes in flight are discarded
        const copy = payload.slice(); // the message buffer is not ours to keep
        if (this.reader) {
          const r = this.reader;
          this.reader = null;
          this.consumed(copy.length);
          r.resolve(copy);
        } else {
          this.queue.push(copy);
        }
        return null;
      }
      case RecordKind.Fin:
        if (this.recvEnded && !this.stopped) return `FIN after the end of stream ${this.id}`;
        if (this.stopped) {
          this.stopped = false; // the peer's side is over: nothing more will come
          this.mux.maybeForget(this);
          return null;
        }
        this.finishRecv(null);
        return null;
      case RecordKind.Reset: {
        if (this.recvEnded && !this.stopped) return `RESET after the end of stream ${this.id}`;
        const code = view.getUint32(0);
        if (this.stopped) {
          this.stopped = false;
          this.mux.maybeForget(this);
          return null;
        }
        this.queue = []; // bytes not yet read are discarded (RESET_STREAM)
        this.finishRecv(new StreamError("reset", code));
        return null;
      }
      case RecordKind.Stop: {
        const code = view.getUint32(0);
        // The peer reads no more: answer RESET with its code, and fail our writes with it.
        if (!this.sendEnded) {
          this.send(RecordKind.Reset, code);
          this.sendError = new StreamError("stop", code);
          this.endSending(this.sendError);
        }
        return null;
      }
      case RecordKind.Credit: {
        this.credit += view.getUint32(0);
        this.creditWaiter?.resolve();
        this.creditWaiter = null;
        return null;
      }
    }
    return `unknown record kind ${kind}`;
  }

  /** The connection is gone: everything pending fails. */
  connectionEnded(err: StreamError): void {
    this.sendError ??= err;
    this.sendEnded = true;
    this.creditWaiter?.resolve();
    this.creditWaiter = null;
    this.queue = [];
    this.recvEnd = this.recvEnd === undefined ? err : this.recvEnd;
    this.recvEnded = true;
    if (this.reader) {
      const r = this.reader;
      this.reader = null;
      r.reject(err);
    }
  }

  /** Both sides are over and no STOP is waiting for the peer's answer. */
  get done(): boolean {
    return this.sendEnded && this.recvEnded && !this.stopped;
  }
}

/** A §2.4 connection over one WebSocket. */
export class WebSocketConnection implements Connection {
  readonly kind = "websocket" as const;
  readonly closed: Promise<CloseInfo>;
  private resolveClosed!: (c: CloseInfo) => void;
  private streams = new Map<number, MuxStream>();
  /** Streams created that have not sent yet (no id). */
  private unopened = new Set<MuxStream>();
  private nextId = 1;
  private ended: CloseInfo | null = null;

  /** Wraps an open WebSocket (see {@link dialWebSocket}). */
  constructor(private readonly ws: WebSocketLike) {
    this.closed = new Promise((res) => (this.resolveClosed = res));
    ws.binaryType = "arraybuffer";
    ws.onmessage = (ev) => {
      this.onMessage(ev.data);
    };
    ws.onclose = (ev) => {
      this.onClose(ev.code, ev.reason);
    };
    ws.onerror = () => {
      // The close event follows with the details (browsers say nothing in the error event).
    };
  }

  openStream(): Promise<Stream> {
    if (this.ended) {
      return Promise.reject(new StreamError("closed", 0, "connection closed"));
    }
    // The id is taken at the stream's first record (see MuxStream.id).
    const s = new MuxStream(this);
    this.unopened.add(s);
    return Promise.resolve(s);
  }

  /** Gives a stream its id at its first record: ids increase from 1 in the order streams first send (§2.4). */
  assignId(s: MuxStream): void {
    s.id = this.nextId++;
    this.unopened.delete(s);
    this.streams.set(s.id, s);
  }

  close(code = 0, reason = ""): void {
    if (this.ended) return;
    // A client may only send 1000 or 3000–4999; 4000 + code mirrors the server's statuses.
    this.finish({ how: "local", code, reason, retryAfterMs: 0 }, code === 0 ? 1000 : 4000 + code, reason);
  }

  /** Sends a record (used by the streams). */
  sendRecord(b: Uint8Array): void {
    if (this.ended || this.ws.readyState !== OPEN) return;
    this.ws.send(b);
  }

  /** Drops a stream whose both sides are over; later records for its id are ignored (§2.4). */
  maybeForget(s: MuxStream): void {
    if (!s.done) return;
    if (s.id === 0) this.unopened.delete(s);
    else this.streams.delete(s.id);
  }

  private violation(what: string): void {
    // The peer broke §2.4: as the server does with a client, close the connection as malformed.
    this.finish({ how: "local", code: Code.Malformed, reason: what, retryAfterMs: 0 }, 4000 + Code.Malformed, what.slice(0, 123));
  }

  private onMessage(data: unknown): void {
    if (this.ended) return;
    if (!(data instanceof ArrayBuffer)) {
      this.violation("a text message");
      return;
    }
    const b = new Uint8Array(data);
    if (b.length < RECORD_HEADER) {
      this.violation(`a record of ${b.length} bytes`);
      return;
    }
    const v = new DataView(data);
    const id = v.getUint32(0);
    const kind = b[4] as number;
    const payload = b.subarray(RECORD_HEADER);
    if (id === 0) { this.violation("stream id 0"); return; }
    if (kind > RecordKind.Credit) { this.violation(`unknown record kind ${kind}`); return; }
    const sizeOk =
      kind === RecordKind.Data ? payload.length >= 1 && payload.length <= MAX_DATA : kind === RecordKind.Fin ? payload.length === 0 : payload.length === 4;
    if (!sizeOk) { this.violation(`a payload of ${payload.length} bytes for record kind ${kind}`); return; }
    const pv = new DataView(data, RECORD_HEADER);
    if (kind === RecordKind.Credit && pv.getUint32(0) === 0) { this.violation("CREDIT of 0"); return; }
    const s = this.streams.get(id);
    if (!s) {
      if (id >= this.nextId) this.violation(`a record for stream ${id}, which this side never opened (the server opens none)`);
      // else: a record for a stream no longer open crossed its end: ignored (§2.4).
      return;
    }
    const err = s.onRecord(kind, payload, pv);
    if (err) this.violation(err);
  }

  private onClose(status: number, reason: string): void {
    if (this.ended) return;
    let info: CloseInfo;
    if (status >= 4000 && status <= 4999) {
      info = closeInfoFromClose(status - 4000, reason); // §2.4: 4000 + code
    } else if (status === 1000) {
      info = { how: "normal", code: 0, reason, retryAfterMs: 0 };
    } else {
      info = { how: "lost", code: 0, reason: reason || `WebSocket closed with status ${status}`, retryAfterMs: 0 };
    }
    this.finish(info);
  }

  private finish(info: CloseInfo, status?: number, reason?: string): void {
    this.ended = info;
    const err = new StreamError("closed", 0, `connection closed (${info.how}${info.code ? `, code ${info.code}` : ""})`);
    for (const s of [...this.streams.values(), ...this.unopened]) s.connectionEnded(err);
    this.streams.clear();
    this.unopened.clear();
    if (status !== undefined) {
      try {
        this.ws.close(status, reason);
      } catch {
        // Already closing.
      }
    }
    this.resolveClosed(info);
  }
}

/** Options of {@link dialWebSocket}. */
export interface WebSocketDialOptions {
  /** Abandons the attempt. */
  signal?: AbortSignal;
  /** Makes the socket (default: the global WebSocket). */
  createWebSocket?: (url: string) => WebSocketLike;
}

/** Opens a WebSocket to url (`wss://host:port/syncd/1`) and wraps it once it is open. */
export function dialWebSocket(url: string, opts: WebSocketDialOptions = {}): Promise<WebSocketConnection> {
  return new Promise((resolve, reject) => {
    let ws: WebSocketLike;
    try {
      ws = opts.createWebSocket ? opts.createWebSocket(url) : (new WebSocket(url) as WebSocketLike);
    } catch (e) {
      reject(e instanceof Error ? e : new Error(String(e)));
      return;
    }
    ws.binaryType = "arraybuffer";
    const abort = (): void => {
      ws.close(1000, "abandoned");
      reject(new Error("WebSocket dial abandoned"));
    };
    if (opts.signal?.aborted) {
      abort();
      return;
    }
    opts.signal?.addEventListener("abort", abort, { once: true });
    ws.onopen = () => {
      opts.signal?.removeEventListener("abort", abort);
      resolve(new WebSocketConnection(ws));
    };
    ws.onclose = (ev) => {
      opts.signal?.removeEventListener("abort", abort);
      // Refused before it opened: a 403 (origin), a certificate the browser does not trust, a
      // closed port — browsers say nothing more (status 1006).
      reject(new Error(`WebSocket ${url} closed before it opened (status ${ev.code}${ev.reason ? `: ${ev.reason}` : ""})`));
    };
    ws.onerror = () => undefined;
  });
}
