// One authenticated connection (§8.2): Hello → Welcome on the control stream (kept open: closing
// it ends the session), Refresh on it, and pipelined requests on a request stream whose answers
// are matched by request id, in any order (§2).

import { Code, ProtoError } from "./codes.js";
import { FrameReader, FrameTooLargeError, encodeFrame, isResponseType, type ReadItem } from "./framing.js";
import { FrameType, PROTO_VERSION, REVISION_DIGEST, limitsWithDefaults, makeFrame, type Frame, type PartialOf, type Report, type Request, type Response, type Welcome, type WireLimits } from "./frames.js";
import type { CloseInfo, Connection, Stream } from "./transport/types.js";
import { StreamError } from "./transport/types.js";
import type { Clock, TimerHandle } from "./clock.js";

/** Something to log: what the SDK noticed but handled (a skipped frame, a closed stream). */
export type Logger = (level: "debug" | "info" | "warn" | "error", msg: string, data?: Record<string, unknown>) => void;

/**
 * How long a stream's failure waits for the connection's close: the server's close carries the
 * error and its retry-after (§2), and over WebTransport the streams may fail a moment before it
 * arrives (the kit's `retry_after` scenario saw 10-50 ms in Chromium and Firefox).
 */
export const CLOSE_GRACE_MS = 250;

/** The error of a session that ended: the server's (frame or close), or why it was lost. */
export function closeError(info: CloseInfo): Error {
  if (info.how === "error") return new ProtoError(info.code, info.reason, info.retryAfterMs);
  return new Error(`syncd: connection ${info.how === "local" ? "closed" : info.how}${info.reason ? `: ${info.reason}` : ""}`);
}

/**
 * Reads frames from a stream as they arrive and hands each to `onFrame`; logs skipped frames
 * (§3: the stream goes on). Resolves when the stream ends (FIN) or cannot continue; rejects with
 * the stream's error (a reset, a lost connection), or with a ProtoError for a frame version other
 * than 1 (§3: the connection cannot be trusted) or a frame beyond the limit.
 */
export async function readFrames(stream: Stream, reader: FrameReader, onFrame: (f: Frame) => void | Promise<void>, log: Logger, what: string): Promise<void> {
  const handle = async (items: ReadItem[]): Promise<void> => {
    for (const it of items) {
      switch (it.kind) {
        case "frame":
          await onFrame(it.frame);
          break;
        case "unknown_type":
          log("debug", `${what}: skipped a frame of unknown type ${it.frameType}`); // a newer server's (§9)
          break;
        case "malformed":
          log("warn", `${what}: skipped a malformed frame`, { detail: it.detail });
          break;
        case "bad_version":
          throw new ProtoError(Code.UnsupportedVersion, `${what}: frame version ${it.version}`);
        case "too_large":
          throw new ProtoError(Code.FrameTooLarge, `${what}: frame of ${it.length} bytes, limit ${it.limit}`);
        case "truncated":
          log("warn", `${what}: the stream ended inside a frame (${it.have} bytes discarded)`);
          break;
      }
    }
  };
  for (;;) {
    const chunk = await stream.read();
    if (chunk === null) {
      const end = reader.end();
      if (end) await handle([end]);
      return;
    }
    await handle(reader.push(chunk));
  }
}

interface Waiter {
  resolve: (f: Response) => void;
  reject: (e: Error) => void;
  timer: unknown;
}

/** A request stream: pipelined requests, answers matched by id. */
class RequestStream {
  readonly waiters = new Map<number, Waiter>();
  dead: Error | null = null;

  constructor(readonly stream: Stream) {}

  failAll(err: Error): void {
    this.dead ??= err;
    for (const w of this.waiters.values()) w.reject(err);
    this.waiters.clear();
  }
}

/** The options a session needs from the client. */
export interface SessionOptions {
  device: string;
  clientVersion: string;
  requestTimeoutMs: number;
  /** How long a liveness probe (a HeadCheck) may go unanswered before the connection is declared dead. */
  probeTimeoutMs?: number;
  /** Hello.proto_version: the revision this client speaks (default {@link PROTO_VERSION}; lower for a store without sources). */
  protoVersion?: number;
  clock: Clock;
  log: Logger;
}

/** The default of {@link SessionOptions.probeTimeoutMs}. */
export const DEFAULT_PROBE_TIMEOUT_MS = 5000;
/** A request unanswered this long, with nothing else heard since it went out, gets the connection probed. */
const SUSPECT_AFTER_MS = 3000;

/**
 * A stream whose reads count as hearing from the server. A node killed outright (SIGKILL, a
 * power cut, a NAT that forgot us) sends no close: over WebTransport the browser notices only at
 * QUIC's idle timeout (30 s here, and Firefox waits longer), so the session keeps its own
 * account of when the server last said anything, on any stream.
 */
class HeardStream implements Stream {
  constructor(private readonly s: Stream, private readonly heard: () => void) {}
  write(bytes: Uint8Array): Promise<void> {
    return this.s.write(bytes);
  }
  end(): Promise<void> {
    return this.s.end();
  }
  reset(code: number): void {
    this.s.reset(code);
  }
  stop(code: number): void {
    this.s.stop(code);
  }
  async read(): Promise<Uint8Array | null> {
    const c = await this.s.read();
    this.heard();
    return c;
  }
}

/** One connection after Welcome. */
export class Session {
  /** The connection's limits, the protocol defaults filled in. */
  readonly limits: WireLimits;
  /** Resolves when the connection ends (never rejects). */
  readonly ended: Promise<CloseInfo>;
  private nextId = 1; // per connection: ids are never reused while in flight (§2)
  private req: RequestStream | null = null;
  private opening: Promise<RequestStream> | null = null;
  private refreshWaiter: { resolve: (f: Frame) => void; reject: (e: Error) => void } | null = null;
  /** The Error the server wrote on the control stream before closing the connection, if any. */
  serverError: ProtoError | null = null;
  private endedInfo: CloseInfo | null = null;
  private lastHeard: number;
  private probing: Promise<boolean> | null = null;
  private watchdog: TimerHandle | null = null;

  private constructor(
    readonly conn: Connection,
    readonly welcome: Welcome,
    private control: Stream,
    private readonly controlReader: FrameReader,
    private readonly opts: SessionOptions,
  ) {
    this.limits = limitsWithDefaults(welcome.limits);
    this.lastHeard = opts.clock.now();
    this.control = new HeardStream(control, this.markHeard);
    this.ended = conn.closed.then((info) => {
      this.endedInfo = info;
      opts.log("debug", "connection closed", { how: info.how, code: info.code, reason: info.reason, retryAfterMs: info.retryAfterMs });
      if (this.watchdog !== null) opts.clock.clearTimeout(this.watchdog);
      this.watchdog = null;
      const err = closeError(info);
      this.req?.failAll(err);
      this.refreshWaiter?.reject(err);
      return info;
    });
    void this.readControl();
  }

  /**
   * Says Hello on a new connection and waits for Welcome (§8.2). Rejects with the server's
   * ProtoError (frame, or the connection close standing for it, §2) or a transport error; the
   * connection is closed then.
   */
  static async hello(conn: Connection, token: string, opts: SessionOptions): Promise<Session> {
    const closed = conn.closed.then((info) => {
      throw closeError(info);
    });
    closed.catch(() => undefined);
    let timer: TimerHandle | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = opts.clock.setTimeout(() => {
        reject(new ProtoError(Code.Timeout, `no Welcome within ${opts.requestTimeoutMs} ms`));
      }, opts.requestTimeoutMs);
    });
    timeout.catch(() => undefined);
    const attempt = async (): Promise<Session> => {
      const control = await conn.openStream();
      const hello = makeFrame(FrameType.Hello, { token, device: opts.device, clientVersion: opts.clientVersion, protoVersion: opts.protoVersion ?? PROTO_VERSION });
      await control.write(encodeFrame(hello));
      const reader = new FrameReader();
      // The first frame answers: Welcome or Error. Before Welcome nothing else may come.
      for (;;) {
        const chunk = await control.read();
        if (chunk === null) throw new Error("syncd: the control stream ended before Welcome");
        for (const it of reader.push(chunk)) {
          if (it.kind !== "frame") throw new ProtoError(Code.Malformed, `answer to Hello: ${it.kind}`);
          if (it.frame.type === FrameType.Welcome) {
            reader.setMaxFrame(limitsWithDefaults(it.frame.limits).maxFrame);
            return new Session(conn, it.frame, control, reader, opts);
          }
          if (it.frame.type === FrameType.Error) {
            throw new ProtoError(it.frame.code, it.frame.message, it.frame.retryAfterMs);
          }
          throw new ProtoError(Code.UnexpectedFrame, `answer to Hello: ${it.frame.type}`);
        }
      }
    };
    try {
      return await Promise.race([attempt(), closed, timeout]);
    } catch (e) {
      // A refusal arrives as an Error frame and as the close; prefer the close's (it carries the
      // retry-after even when the frame was lost), which may come a moment after a stream error.
      if (e instanceof StreamError) {
        const info = await Promise.race([conn.closed, new Promise<null>((r) => opts.clock.setTimeout(() => { r(null); }, CLOSE_GRACE_MS))]);
        if (info && info.how === "error") throw closeError(info);
      }
      conn.close();
      throw e;
    } finally {
      if (timer !== undefined) opts.clock.clearTimeout(timer);
    }
  }

  /** Whether the connection has ended. */
  get isEnded(): boolean {
    return this.endedInfo !== null;
  }

  private readonly markHeard = (): void => {
    this.lastHeard = this.opts.clock.now();
  };

  /** When the server last sent anything on any stream (ms, the session's clock). */
  get heardAt(): number {
    return this.lastHeard;
  }

  /**
   * Checks that the server still answers: a HeadCheck that must be answered (anything, even an
   * Error) within the probe timeout, or the connection is closed as dead (§8.5: "no answer →
   * the connection is half-dead: reconnect"). Concurrent checks share one probe. Resolves
   * whether it is alive.
   */
  checkAlive(why: string): Promise<boolean> {
    if (this.endedInfo) return Promise.resolve(false);
    this.probing ??= (async () => {
      const since = this.opts.clock.now();
      let alive: boolean;
      try {
        await this.request((id) => ({ type: FrameType.HeadCheck, id }), this.opts.probeTimeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS);
        alive = true;
      } catch {
        // Heard on another stream meanwhile (a Batch, a Heartbeat): alive, only this probe was lost.
        alive = this.lastHeard > since;
      }
      if (!alive && !this.endedInfo) {
        this.opts.log("info", "the connection is dead: no answer to a liveness probe", { why });
        this.conn.close(0, "no answer: presumed dead");
      }
      this.probing = null;
      return alive;
    })();
    return this.probing;
  }

  /**
   * Expects the server's heartbeats (heartbeat_ms on the sync stream, while one is open): when
   * nothing at all was heard for a heartbeat interval and a margin, the connection is probed, and
   * closed if the probe goes unanswered. Time is read from the clock at each check, so a timer a
   * background tab throttled judges the real silence, not its own lateness; `expecting` says
   * whether heartbeats are due now (a sync stream is open).
   */
  watchHeartbeats(expecting: () => boolean): void {
    const hb = this.limits.heartbeatMs;
    if (hb <= 0) return;
    const deadline = hb + Math.max(hb / 2, 1000);
    const tick = (): void => {
      this.watchdog = null;
      if (this.endedInfo) return;
      if (expecting() && this.opts.clock.now() - this.lastHeard > deadline) {
        void this.checkAlive(`nothing heard for ${this.opts.clock.now() - this.lastHeard} ms (heartbeat_ms ${hb})`);
      }
      this.watchdog = this.opts.clock.setTimeout(tick, Math.max(hb / 4, 250));
    };
    tick();
  }

  private async readControl(): Promise<void> {
    try {
      await readFrames(this.control, this.controlReader, (f) => {
        if (f.type === FrameType.Error && f.code === Code.InvalidArgument) {
          // The refusal of a Report (§6: a code no Refresh is answered with): not a Refresh's answer.
          this.opts.log("warn", "the server refused a report", { message: f.message });
          return;
        }
        if (f.type === FrameType.Refreshed || f.type === FrameType.Error) {
          const w = this.refreshWaiter;
          this.refreshWaiter = null;
          if (w) w.resolve(f);
          // An Error nobody asked for comes before a close, which carries it again (§2) — but
          // a WebTransport close may reach the page as a lost connection, without its code and
          // reason: the frame is then all the page learns of the server's error.
          else if (f.type === FrameType.Error) this.serverError = new ProtoError(f.code, f.message, f.retryAfterMs);
        }
      }, this.opts.log, "control stream");
    } catch (e) {
      this.opts.log("debug", "control stream ended", { err: String(e) });
      // A stream that fails usually means the server closed the connection, and over
      // WebTransport its streams may fail before the session's close arrives: wait for the close
      // (its code and the retry-after in its reason, §2) before ending the session here, which
      // would replace it with a local close and redial too soon.
      await this.closedWithin(CLOSE_GRACE_MS);
    }
    // The control stream's end is the session's end (§2).
    this.conn.close();
  }

  /**
   * Presents a new token on the control stream (§6 Refresh) and resolves with its expiry (Unix
   * ns). One at a time: the answers carry no id.
   */
  async refresh(token: string): Promise<bigint> {
    if (this.refreshWaiter) throw new Error("syncd: a Refresh is already in flight");
    const answer = new Promise<Frame>((resolve, reject) => {
      this.refreshWaiter = { resolve, reject };
    });
    const timer = this.opts.clock.setTimeout(() => {
      const w = this.refreshWaiter;
      this.refreshWaiter = null;
      w?.reject(new ProtoError(Code.Timeout, "no answer to Refresh"));
    }, this.opts.requestTimeoutMs);
    try {
      await this.control.write(encodeFrame({ type: FrameType.Refresh, token }, this.limits.maxFrame));
      const f = await answer;
      if (f.type === FrameType.Refreshed) return f.tokenExpires;
      if (f.type === FrameType.Error) throw new ProtoError(f.code, f.message, f.retryAfterMs);
      throw new Error("syncd: unexpected answer to Refresh");
    } finally {
      this.opts.clock.clearTimeout(timer);
      this.refreshWaiter = null;
    }
  }

  /** The revision of syncd/1 this connection runs (Welcome.proto_version: the lower of ours and the server's, §9). */
  get revision(): number {
    return this.welcome.protoVersion;
  }

  /**
   * Sends a Report on the control stream (§6, revision 4): fire and forget, never answered (an
   * invalid one gets an Error the control stream's reader ignores, and the session goes on).
   * Resolves whether it was written: false on a connection of an earlier revision (the server
   * would answer unknown_frame) or when the write failed (the connection is going; a report is
   * worth no retry).
   */
  async report(r: Omit<Report, "type">): Promise<boolean> {
    if (this.revision < REVISION_DIGEST || this.endedInfo) return false;
    try {
      await this.control.write(encodeFrame({ ...r, type: FrameType.Report }, this.limits.maxFrame));
      return true;
    } catch (e) {
      this.opts.log("debug", "a report could not be sent", { err: String(e) });
      return false;
    }
  }

  /** Opens a new stream for the caller (the sync stream); what it reads counts as hearing from the server. */
  async openStream(): Promise<Stream> {
    return new HeardStream(await this.conn.openStream(), this.markHeard);
  }

  private requestStream(): Promise<RequestStream> {
    if (this.req && !this.req.dead) return Promise.resolve(this.req);
    this.opening ??= (async () => {
      try {
        const s = new RequestStream(new HeardStream(await this.conn.openStream(), this.markHeard));
        this.req = s;
        void this.readAnswers(s);
        return s;
      } finally {
        this.opening = null;
      }
    })();
    return this.opening;
  }

  private async readAnswers(rs: RequestStream): Promise<void> {
    const reader = new FrameReader(this.limits.maxFrame);
    let why: Error = new Error("syncd: the request stream ended");
    try {
      await readFrames(rs.stream, reader, (f) => {
        if (!isResponseType(f.type)) return;
        const id = (f as Response).id;
        const w = rs.waiters.get(id);
        if (!w) return; // an Error with id 0 (a bad frame) or an answer after its timeout
        rs.waiters.delete(id);
        w.resolve(f as Response);
      }, this.opts.log, "request stream");
    } catch (e) {
      why = e instanceof Error ? e : new Error(String(e));
      if (e instanceof ProtoError && (e.code === Code.UnsupportedVersion || e.code === Code.FrameTooLarge)) {
        this.conn.close(e.code, e.serverMessage);
      }
    }
    // The server closes an idle request stream (FIN) and resets one it gave up on: the requests
    // in flight get no answer (the outbox resends them); the next request opens a new stream.
    rs.failAll(why);
    // End both directions, so the stream stops counting against max_streams (§2: a stream is
    // open until both sides ended).
    rs.stream.stop(0);
    rs.stream.reset(0);
    if (this.req === rs) this.req = null;
  }

  /**
   * Sends one request with a fresh id and resolves with its answer (an Ack, a result, or an
   * Error frame). Rejects when the frame would exceed max_frame (a ProtoError too_large: not
   * sent, §3), when no answer came within the request timeout (ProtoError timeout), or when the
   * stream or the connection ended first. A request that goes unanswered while nothing else was
   * heard from the server either gets the connection probed ({@link checkAlive}).
   */
  async request(build: (id: number) => PartialOf<Request>, timeoutMs = this.opts.requestTimeoutMs): Promise<Response> {
    if (this.endedInfo) throw closeError(this.endedInfo);
    const id = this.nextId++;
    let bytes: Uint8Array;
    try {
      bytes = encodeFrame(build(id), this.limits.maxFrame);
    } catch (e) {
      if (e instanceof FrameTooLargeError) throw new ProtoError(Code.TooLarge, `not sent: ${e.message} (max_frame)`);
      throw e;
    }
    const rs = await this.requestStream();
    const sentAt = this.opts.clock.now();
    const answer = new Promise<Response>((resolve, reject) => {
      // No answer for a while and nothing else heard since the request went out: the connection
      // may be dead (a killed node sends no close). Probe it now rather than wait for the
      // request's timeout, or the transport's idle timeout.
      const suspectAfter = Math.min(timeoutMs, SUSPECT_AFTER_MS);
      const check = (): void => {
        if (this.lastHeard <= sentAt && !this.probing) void this.checkAlive(`no answer to a request for ${suspectAfter} ms`);
      };
      const suspect = this.opts.clock.setTimeout(check, suspectAfter);
      const timer = this.opts.clock.setTimeout(() => {
        this.opts.clock.clearTimeout(suspect);
        if (suspectAfter >= timeoutMs) check(); // both due now: this timer may have come first
        rs.waiters.delete(id);
        reject(new ProtoError(Code.Timeout, `no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      rs.waiters.set(id, {
        resolve: (f) => {
          this.opts.clock.clearTimeout(timer);
          this.opts.clock.clearTimeout(suspect);
          resolve(f);
        },
        reject: (e) => {
          this.opts.clock.clearTimeout(timer);
          this.opts.clock.clearTimeout(suspect);
          reject(e);
        },
        timer,
      });
    });
    try {
      await rs.stream.write(bytes);
    } catch (e) {
      rs.waiters.get(id)?.reject(e instanceof Error ? e : new Error(String(e)));
      rs.waiters.delete(id);
    }
    return answer;
  }

  /** Resolves when the connection is closed, or after ms. */
  closedWithin(ms: number): Promise<unknown> {
    return Promise.race([this.conn.closed, new Promise<void>((r) => this.opts.clock.setTimeout(() => { r(); }, ms))]);
  }

  /** Ends the session: closes the connection (the server treats it as the end of the session). */
  close(): void {
    this.conn.close(0, "bye");
  }
}
