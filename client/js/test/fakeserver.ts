// A scripted syncd node for the client tests: an in-memory Connection (streams with FIN, reset,
// stop and a close with code and reason, as §2 describes them), and a server side that speaks
// frames through the SDK's own codec.

import { FrameReader, encodeFrame } from "../src/framing.js";
import { FrameType, PROTO_VERSION, makeFrame, type Frame, type PartialFrame, type WireLimits } from "../src/frames.js";
import { closeInfoFromClose, StreamError, type CloseInfo, type Connection, type Stream } from "../src/transport/types.js";
import type { Clock } from "../src/clock.js";

/** One direction of a stream. */
export class Pipe {
  chunks: Uint8Array[] = [];
  end: StreamError | null | undefined = undefined; // null: FIN
  stopped: StreamError | null = null; // the reader asked the writer to stop
  waiter: (() => void) | null = null;
  wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
}

/** One side of an in-memory stream. */
export class MemStream implements Stream {
  constructor(readonly inbound: Pipe, readonly outbound: Pipe) {}
  write(bytes: Uint8Array): Promise<void> {
    if (this.outbound.stopped) return Promise.reject(this.outbound.stopped);
    if (this.outbound.end !== undefined) return Promise.reject(new StreamError("closed", 0, "write after end"));
    this.outbound.chunks.push(bytes.slice());
    this.outbound.wake();
    return Promise.resolve();
  }
  end(): Promise<void> {
    if (this.outbound.end === undefined) {
      this.outbound.end = null;
      this.outbound.wake();
    }
    return Promise.resolve();
  }
  reset(code: number): void {
    if (this.outbound.end !== undefined) return;
    this.outbound.chunks = [];
    this.outbound.end = new StreamError("reset", code);
    this.outbound.wake();
  }
  stop(code: number): void {
    this.inbound.stopped = new StreamError("stop", code);
    if (this.inbound.end === undefined) this.inbound.end = new StreamError("closed", 0, "stopped");
    this.inbound.chunks = [];
    this.inbound.wake();
  }
  async read(): Promise<Uint8Array | null> {
    for (;;) {
      const c = this.inbound.chunks.shift();
      if (c) return c;
      if (this.inbound.end === null) return null;
      if (this.inbound.end) throw this.inbound.end;
      await new Promise<void>((r) => (this.inbound.waiter = r));
    }
  }
  /** Whether the peer's side ended (FIN or reset) and everything was read. */
  get peerEnded(): boolean {
    return this.inbound.end !== undefined && this.inbound.chunks.length === 0;
  }
}

/** A stream on the server side, with frame helpers. */
export class ServerStream {
  readonly reader = new FrameReader();
  readonly frames: Frame[] = [];
  private wait: (() => void) | null = null;
  ended = false;
  constructor(readonly s: MemStream) {
    void this.pump();
  }
  private async pump(): Promise<void> {
    try {
      for (;;) {
        const c = await this.s.read();
        if (c === null) break;
        for (const it of this.reader.push(c)) if (it.kind === "frame") this.frames.push(it.frame);
        this.wait?.();
      }
    } catch {
      // reset or stopped
    }
    this.ended = true;
    this.wait?.();
  }
  /** Waits for the n-th frame (0-based) from the client. */
  async frame(n: number, timeoutMs = 3000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length <= n) {
      if (this.ended) throw new Error(`stream ended with ${this.frames.length} frames, wanted ${n + 1}`);
      if (Date.now() > deadline) throw new Error(`no frame ${n} within ${timeoutMs} ms`);
      await new Promise<void>((r) => {
        this.wait = r;
        setTimeout(r, 20);
      });
    }
    return this.frames[n]!;
  }
  send(f: PartialFrame): void {
    void this.s.write(encodeFrame(f)).catch(() => undefined);
  }
}

/** The server's side of one connection. */
export class ServerConn {
  readonly streams: ServerStream[] = [];
  onStream: ((s: ServerStream, index: number) => void) | null = null;
  closeInfo: CloseInfo | null = null;
  resolveClosed!: (c: CloseInfo) => void;
  /** The code and reason phrase as sent (the WebSocket bridge puts them in the close frame). */
  rawClose: { code: number; reason: string } | null = null;
  /** Ends the connection as lost: no code, no reason (a WebTransport close a browser reports so). */
  lose(): void {
    if (this.closeInfo) return;
    this.closeInfo = { how: "lost", code: 0, reason: "connection lost", retryAfterMs: 0 };
    this.resolveClosed(this.closeInfo);
  }
  /** Closes the connection with a code and §2 reason phrase (code 0: normal). */
  close(code: number, reason = ""): void {
    if (this.closeInfo) return;
    this.rawClose = { code, reason };
    this.closeInfo = closeInfoFromClose(code, reason);
    this.resolveClosed(this.closeInfo);
  }
}

/** The client's side of an in-memory connection. */
export class MemConnection implements Connection {
  readonly kind = "websocket" as const;
  readonly closed: Promise<CloseInfo>;
  private readonly all: MemStream[] = [];
  constructor(readonly server: ServerConn) {
    this.closed = new Promise<CloseInfo>((r) => (server.resolveClosed = r)).then((info) => {
      for (const s of this.all) {
        const err = new StreamError("closed", 0, "connection closed");
        if (s.inbound.end === undefined) s.inbound.end = err;
        s.inbound.wake();
        s.outbound.stopped ??= err;
        if (s.outbound.end === undefined) s.outbound.end = err;
        s.outbound.wake();
      }
      return info;
    });
  }
  openStream(): Promise<Stream> {
    if (this.server.closeInfo) return Promise.reject(new StreamError("closed", 0, "connection closed"));
    const c2s = new Pipe();
    const s2c = new Pipe();
    const client = new MemStream(s2c, c2s);
    const server = new ServerStream(new MemStream(c2s, s2c));
    this.all.push(client, server.s);
    this.server.streams.push(server);
    this.server.onStream?.(server, this.server.streams.length - 1);
    return Promise.resolve(client);
  }
  close(code = 0, reason = ""): void {
    if (this.server.closeInfo) return;
    this.server.closeInfo = { how: "local", code, reason, retryAfterMs: 0 };
    this.server.resolveClosed(this.server.closeInfo);
  }
}

/** Welcome limits for tests (heartbeat short, so silence tests are quick). */
export function testLimits(over: Partial<WireLimits> = {}): WireLimits {
  return { maxFrame: 0, maxBody: 0, maxBatch: 0, sendRatePerS: 0, heartbeatMs: 0, maxStreams: 0, sendBurst: 0, queryRatePerS: 0, queryBurst: 0, requestIdleMs: 0, ...over };
}

/** What a fake node does with each new connection. */
export interface NodeScript {
  /** Refuse the Hello (Error + close with its code and reason). */
  refuse?: { code: number; reason: string; retryAfterMs?: number } | undefined;
  limits?: WireLimits;
  tokenExpires?: bigint;
  /** Welcome.proto_version: the revision the connection runs (default: the SDK's own, PROTO_VERSION). */
  protoVersion?: number;
  /** Answers requests (Ack, results, Error), at once or later; undefined: no answer. */
  answer?: (f: Frame, conn: ServerConn) => PartialFrame | undefined | Promise<PartialFrame | undefined>;
  /** Called with the sync stream and its SyncStart. */
  sync?: (s: ServerStream, start: Frame, conn: ServerConn) => void;
}

/** A fake node: a dial function for the Connector, and what it saw. */
export class FakeNode {
  readonly conns: ServerConn[] = [];
  readonly hellos: Frame[] = [];
  readonly requests: Frame[] = [];
  constructor(public script: NodeScript = {}) {}

  /** Connector.dialWebSocket stand-in: an in-memory connection. */
  dial = (): Promise<Connection> => {
    const sc = this.accept();
    return Promise.resolve(new MemConnection(sc));
  };

  /** A new server side of a connection, served by the script. */
  accept(): ServerConn {
    const sc = new ServerConn();
    this.conns.push(sc);
    sc.onStream = (s, i) => {
      void this.serve(sc, s, i);
    };
    return sc;
  }

  private async serve(sc: ServerConn, s: ServerStream, index: number): Promise<void> {
    const first = await s.frame(0).catch(() => null);
    if (!first) return;
    if (index === 0) {
      this.hellos.push(first);
      const r = this.script.refuse;
      if (r) {
        s.send(makeFrame(FrameType.Error, { code: r.code, message: r.reason, retryAfterMs: r.retryAfterMs ?? 0 }));
        sc.close(r.code, (r.retryAfterMs ? `retry_after_ms=${r.retryAfterMs}; ` : "") + r.reason);
        return;
      }
      s.send(makeFrame(FrameType.Welcome, { user: "alice", device: "phone", protoVersion: this.script.protoVersion ?? PROTO_VERSION, limits: this.script.limits ?? testLimits(), tokenExpires: this.script.tokenExpires ?? 0n, session: "s-1" }));
      return;
    }
    if (first.type === FrameType.SyncStart) {
      this.script.sync?.(s, first, sc);
      return;
    }
    for (let i = 0; ; i++) {
      const f = await s.frame(i, 60_000).catch(() => null);
      if (!f) return;
      this.requests.push(f);
      const a = await this.script.answer?.(f, sc);
      if (a) s.send(a);
    }
  }
}

/** A clock with real timers and a fixed jitter (0: every wait is its base). */
export function testClock(random = 0): Clock {
  return {
    now: () => Date.now(),
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => {
      clearTimeout(h as ReturnType<typeof setTimeout>);
    },
    random: () => random,
  };
}

/** Waits until cond holds (polling), or fails after timeoutMs. */
export async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
