// The sync stream (§8.4): SyncStart from the stored (vector) cursor; each Batch checked (epoch,
// contiguity), stored with its cursor in one store call, and only then acknowledged (CursorAck:
// the storage ack); a gap is refetched by restarting from the stored cursor, never skipped. A
// range the digest check (check.ts, §8.7) found wrong is refetched too: the runner rewinds the
// store between two streams, then replays from there.

import { Code, ProtoError } from "./codes.js";
import { FrameReader, encodeFrame } from "./framing.js";
import { FrameType, Limits, type Entry, type Frame, type SubCursor } from "./frames.js";
import { NotContiguousError, type Store } from "./store.js";
import { readFrames, type Logger, type Session } from "./session.js";
import type { Clock, TimerHandle } from "./clock.js";
import type { Stream } from "./transport/types.js";

/** What the sync stream tells the client. */
export interface SyncHooks {
  entries(entries: readonly Entry[], fresh: ReadonlySet<Entry>, sub: number): void;
  synced(epoch: bigint, head: number): void;
  stale(epoch: bigint, head: number, unheardMs: number): void;
  /** A batch did not continue the stored cursor (epoch, at − 1): it started at `got` (0: no entries), nothing of it was stored. */
  gap(sub: number, epoch: bigint, at: number, got: number): void;
  /** The first Heartbeat of sub-log `sub` on a new stream: it has caught up (§8.7: check what is stored now). */
  firstHeartbeat(sub: number): void;
  rebase(sub: number, epoch: bigint, head: number): void;
  /** Before a rebase moves the cursor: load conversation state and recent history (§8.4 TooOld). */
  loadForRebase(session: Session): Promise<void>;
  epoch(sub: number, epoch: bigint): void;
  superseded(): void;
}

/** Settings of the sync stream. */
export interface SyncOptions {
  /** SyncStart.ceiling: a rebase instead of a replay longer than this (0 = always replay). */
  ceiling: number;
  /** How long Stale may last before moving to another node (only with several endpoints); ≤ 0: never. */
  staleFailoverMs: number;
  /** Whether there is another node to move to. */
  canMove: boolean;
}

/** How a sync run on one connection ended. */
export interface SyncEnd {
  /** Why: the error that should end the connection (a ProtoError carries the server's retry-after), or null when syncing stopped on purpose (superseded, closing). */
  error: Error | null;
  /** Whether any stream stored a batch or heard a heartbeat (§8.6: progress). */
  progressed: boolean;
  /** The node cannot serve the device (stale too long): reconnect elsewhere. */
  moveOn: boolean;
}

/** Ends one sync stream on purpose: restart from the stored cursor. */
class Restart extends Error {
  constructor(readonly why: string) {
    super(why);
  }
}

/** A refetch asked of the runner (§8.7): done between two streams. */
interface PendingRewind {
  sub: number;
  epoch: bigint;
  from: number;
  resolve: (rewound: boolean) => void;
  reject: (e: unknown) => void;
}
/** Ends syncing on this connection. */
class Stop extends Error {
  constructor(readonly end: SyncEnd) {
    super("sync stopped");
  }
}

/**
 * Runs the sync streams of one session, one at a time, until the session ends or a stream fails
 * in a way a restart does not fix. The cursors array is the client's mirror of the store's
 * vector cursor: updated here after each commit.
 */
export class SyncRunner {
  private stream: Stream | null = null;
  private abortWhy: Restart | Stop | null = null;
  private progressed = false;
  private stopped = false;
  /** Whether run() is in progress: a rewind then waits for the stream to end. */
  private running = false;
  private rewinds: PendingRewind[] = [];
  /** The next SyncStart replays (ceiling 0): a refetch must not be answered by a rebase. */
  private replayNext = false;

  constructor(
    private readonly session: Session,
    private readonly store: Store,
    private readonly cursors: SubCursor[],
    private readonly clock: Clock,
    private readonly opts: SyncOptions,
    private readonly hooks: SyncHooks,
    private readonly log: Logger,
  ) {}

  /** Runs until the end; never rejects. */
  async run(): Promise<SyncEnd> {
    this.running = true;
    try {
      return await this.loop();
    } finally {
      this.running = false;
      // A rewind asked while the last stream ended: no stream runs any more, do it now.
      await this.applyRewinds();
    }
  }

  private async loop(): Promise<SyncEnd> {
    let idle = 0; // restarts in a row without progress
    while (!this.stopped && !this.session.isEnded) {
      const before = this.progressed;
      this.progressed = false;
      const r = await this.once();
      const p = this.hasProgressed;
      this.progressed = before || p;
      if (r instanceof Stop) return { ...r.end, progressed: this.progressed };
      this.log("debug", "sync stream restarts", { why: r.why });
      idle = p ? 0 : idle + 1;
      if (idle >= 2) {
        // A gap that comes back, an epoch that does not settle: end the connection, so the
        // reconnect backoff applies instead of a restart loop (§8.4 step 3, §8.6).
        return { error: new Error(`syncd: the sync stream restarted twice in a row without progress (${r.why})`), progressed: this.progressed, moveOn: false };
      }
    }
    return { error: null, progressed: this.progressed, moveOn: false };
  }

  /**
   * Refetches sub-log `sub` from `from` (§8.7, a digest mismatch): ends the current stream, then
   * — with no stream writing to the store — rewinds the store (Store.rewind: cursor back to
   * (epoch, from − 1), the entries from `from` on dropped) and the cursor mirror, and starts the
   * next stream from there with ceiling 0 (a replay, not a rebase). Resolves whether the store
   * rewound (false: it moved since the check, e.g. an epoch change). Rejects with the store's
   * error. Without a running stream (the session ended) the store is rewound at once, and the
   * next session's stream starts from there.
   */
  rewind(sub: number, epoch: bigint, from: number): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.rewinds.push({ sub, epoch, from, resolve, reject });
      if (!this.running) void this.applyRewinds();
      else this.abort(new Restart(`refetching sub-log ${sub} from ${from} (a digest mismatch)`));
    });
  }

  /** Does the rewinds asked for; called only while no stream stores anything. */
  private async applyRewinds(): Promise<void> {
    for (let r = this.rewinds.shift(); r; r = this.rewinds.shift()) {
      try {
        const ok = (await this.store.rewind?.(r.sub, r.epoch, r.from)) ?? false;
        if (ok) {
          while (this.cursors.length <= r.sub) this.cursors.push({ epoch: 0n, pos: 0 });
          this.cursors[r.sub] = { epoch: r.epoch, pos: r.from - 1 };
          this.replayNext = true;
        }
        r.resolve(ok);
      } catch (e) {
        r.reject(e);
      }
    }
  }

  /** Stops syncing (the client closes or the connection ends). */
  stop(): void {
    this.stopped = true;
    this.abort(new Stop({ error: null, progressed: this.progressed, moveOn: false }));
  }

  /** Restarts the stream from the stored cursor (a head check found it stalled, §8.5). */
  restart(why: string): void {
    this.abort(new Restart(why));
  }

  /** Whether a sync stream is open now (the server heartbeats on it). */
  get syncing(): boolean {
    return this.stream !== null;
  }

  /** Whether this runner made progress so far. */
  get hasProgressed(): boolean {
    return this.progressed;
  }

  /** Why the stream was aborted from outside its frame loop (a timer, the client), if it was. */
  private aborted(): Restart | Stop | null {
    return this.abortWhy;
  }

  private abort(why: Restart | Stop): void {
    if (!this.stream) return;
    this.abortWhy ??= why;
    this.stream.stop(0);
    this.stream.reset(0);
  }

  private async once(): Promise<Restart | Stop> {
    await this.applyRewinds();
    const cur = this.cursors;
    const first = cur[0] ?? { epoch: 0n, pos: 0 };
    const ceiling = this.replayNext ? 0 : this.opts.ceiling;
    let stream: Stream;
    try {
      stream = await this.session.openStream();
      // Revision 3: the vector cursor is sent for every user, split or not (§6 Sub-logs).
      await stream.write(encodeFrame({ type: FrameType.SyncStart, epoch: first.epoch, pos: first.pos, ceiling, subs: cur.map((c) => ({ ...c })) }, this.session.limits.maxFrame));
    } catch (e) {
      return new Stop({ error: e instanceof Error ? e : new Error(String(e)), progressed: false, moveOn: false });
    }
    this.replayNext = false;
    this.stream = stream;
    this.abortWhy = null;
    // A rewind asked while this stream was opening: its SyncStart went out from the old cursor.
    if (this.rewinds.length > 0) this.abort(new Restart("a refetch was asked while the stream opened"));
    const hbMs = this.session.limits.heartbeatMs;
    const caught = new Set<number>();
    let synced = false;
    let ownCaught: { epoch: bigint; head: number } | null = null;
    const t: { stale: TimerHandle | null; silence: TimerHandle | null } = { stale: null, silence: null };
    let staleEpisode = false;
    const behind = new Map<number, { pos: number; since: number }>(); // head > pos seen at a heartbeat
    const heard = new Set<number>(); // sub-logs that had their first Heartbeat on this stream

    const armSilence = (): void => {
      if (t.silence !== null) this.clock.clearTimeout(t.silence);
      // No frame at all for 3 heartbeat intervals: the stream is dead (§8.4).
      t.silence = this.clock.setTimeout(() => {
        this.abort(new Restart(`no frame for ${3 * hbMs} ms`));
      }, 3 * hbMs);
    };
    const endStale = (): void => {
      staleEpisode = false;
      if (t.stale !== null) this.clock.clearTimeout(t.stale);
      t.stale = null;
    };
    const caughtUp = (sub: number, epoch: bigint, head: number): void => {
      caught.add(sub);
      if (sub === 0) ownCaught = { epoch, head };
      for (let i = 0; i < this.cursors.length; i++) if (!caught.has(i)) return;
      if (!synced && ownCaught) {
        synced = true;
        this.hooks.synced(ownCaught.epoch, ownCaught.head);
      }
    };
    const fellBehind = (sub: number): void => {
      caught.delete(sub);
      synced = false;
    };
    const subOf = (sub: number): SubCursor => {
      if (sub >= Limits.maxSubLogs) throw new ProtoError(Code.Malformed, `a frame of sub-log ${sub} (at most ${Limits.maxSubLogs})`);
      // A sub-log the device has no cursor for starts at (0, 0) (§6 Sub-logs).
      while (this.cursors.length <= sub) this.cursors.push({ epoch: 0n, pos: 0 });
      return this.cursors[sub] as SubCursor;
    };
    /** The epoch check of Heartbeat and Stale: another epoch than a stored non-zero one → restart (EpochChanged follows). */
    const epochMoved = (c: SubCursor, epoch: bigint): boolean => c.epoch !== 0n && epoch !== 0n && epoch !== c.epoch;

    const onFrame = async (f: Frame): Promise<void> => {
      armSilence();
      switch (f.type) {
        case FrameType.Batch: {
          const c = subOf(f.sub);
          const firstSeq = f.entries[0]?.seq;
          // §8.4 steps 1–3: same epoch (or adopt one on a fresh cursor), contiguous from pos + 1.
          const epochOk = c.epoch === 0n && c.pos === 0 ? f.epoch !== 0n : f.epoch === c.epoch;
          if (!epochOk || firstSeq !== c.pos + 1 || f.entries.some((e, i) => e.seq !== c.pos + 1 + i)) {
            this.hooks.gap(f.sub, c.epoch, c.pos + 1, firstSeq ?? 0);
            throw new Restart(`batch of ${f.entries.length} entries at ${firstSeq ?? "-"} (epoch ${f.epoch}) does not continue (${c.epoch}, ${c.pos})`);
          }
          let fresh: Entry[];
          try {
            fresh = await this.store.applyBatch(f.sub, f.epoch, f.entries);
          } catch (e) {
            if (e instanceof NotContiguousError) {
              this.hooks.gap(f.sub, c.epoch, c.pos + 1, firstSeq);
              throw new Restart(e.message);
            }
            throw e;
          }
          const last = (f.entries[f.entries.length - 1] as Entry).seq;
          this.cursors[f.sub] = { epoch: f.epoch, pos: last };
          this.progressed = true;
          behind.delete(f.sub);
          this.hooks.entries(f.entries, new Set(fresh), f.sub);
          if (last >= f.head && !staleEpisode) caughtUp(f.sub, f.epoch, last); // a stale node's head proves nothing
          else fellBehind(f.sub);
          // The storage ack, only now that the store has committed (§8.4 step 5).
          await stream.write(encodeFrame({ type: FrameType.CursorAck, epoch: f.epoch, pos: last, sub: f.sub }, this.session.limits.maxFrame));
          return;
        }
        case FrameType.Heartbeat: {
          const c = subOf(f.sub);
          this.progressed = true;
          endStale();
          if (epochMoved(c, f.epoch)) throw new Restart(`heartbeat of epoch ${f.epoch}, stored ${c.epoch}`);
          if (!heard.has(f.sub)) {
            heard.add(f.sub);
            this.hooks.firstHeartbeat(f.sub);
          }
          if (f.head <= c.pos) {
            behind.delete(f.sub);
            if (f.epoch === c.epoch || c.pos === 0) caughtUp(f.sub, f.epoch, c.pos);
            return; // a head below pos under the same epoch is a replica behind: ignored
          }
          // Entries are pending: if pos has not moved for two heartbeat intervals, the stream is stalled.
          const b = behind.get(f.sub);
          if (!b || b.pos !== c.pos) behind.set(f.sub, { pos: c.pos, since: this.clock.now() });
          else if (this.clock.now() - b.since >= 2 * hbMs) throw new Restart(`stalled at ${c.pos} while the head is ${f.head}`);
          return;
        }
        case FrameType.Stale: {
          const c = subOf(f.sub);
          if (epochMoved(c, f.epoch)) throw new Restart(`stale frame of epoch ${f.epoch}, stored ${c.epoch}`);
          if (!staleEpisode) {
            staleEpisode = true;
            synced = false; // say so again once a Heartbeat proves the head
            caught.clear();
            this.hooks.stale(f.epoch, f.head, f.unheardMs);
            if (this.opts.canMove && this.opts.staleFailoverMs > 0) {
              t.stale = this.clock.setTimeout(() => {
                this.abort(new Stop({ error: new Error(`syncd: the node has been stale for ${this.opts.staleFailoverMs} ms`), progressed: this.progressed, moveOn: true }));
              }, this.opts.staleFailoverMs);
            }
          }
          return;
        }
        case FrameType.TooOld:
        case FrameType.Rebase: {
          const c = subOf(f.sub);
          // Never back within an epoch; a jump to another epoch drops the sub-log's positions.
          const to: SubCursor = { epoch: f.epoch, pos: f.epoch === c.epoch ? Math.max(f.head, c.pos) : f.head };
          // H = head is remembered above; the conversations are brought up to date first, so
          // that a crash in between leaves the old cursor (and a rebase to do again), never a
          // cursor past entries whose conversations were not loaded.
          await this.hooks.loadForRebase(this.session);
          await this.store.setCursor(f.sub, to, f.epoch !== c.epoch);
          this.cursors[f.sub] = to;
          this.progressed = true;
          this.hooks.rebase(f.sub, f.epoch, f.head);
          throw new Restart(f.type === FrameType.TooOld ? "too old" : "rebase");
        }
        case FrameType.EpochChanged: {
          subOf(f.sub);
          // The log was re-created: positions of the old epoch mean nothing. Keep the messages
          // (msg_ids stay unique) and start the new epoch at first − 1 (§8.4).
          const to: SubCursor = { epoch: f.epoch, pos: Math.max(f.first - 1, 0) };
          await this.store.setCursor(f.sub, to, true);
          this.cursors[f.sub] = to;
          this.hooks.epoch(f.sub, f.epoch);
          throw new Restart("epoch changed");
        }
        case FrameType.Error: {
          if (f.code === Code.Superseded) {
            // Another stream of this device took over: do not fight (§7).
            this.hooks.superseded();
            throw new Stop({ error: null, progressed: this.progressed, moveOn: false });
          }
          throw new Stop({ error: new ProtoError(f.code, f.message, f.retryAfterMs), progressed: this.progressed, moveOn: false });
        }
        default:
          this.log("debug", "sync stream: ignored a frame", { type: f.type });
      }
    };

    armSilence();
    let outcome: Restart | Stop;
    try {
      await readFrames(stream, new FrameReader(this.session.limits.maxFrame), onFrame, this.log, "sync stream");
      outcome = this.aborted() ?? new Restart("the server ended the sync stream");
    } catch (e) {
      const why = this.aborted();
      if (why) outcome = why;
      else if (e instanceof Restart || e instanceof Stop) outcome = e;
      else outcome = new Stop({ error: e instanceof Error ? e : new Error(String(e)), progressed: this.progressed, moveOn: false });
    } finally {
      if (t.silence !== null) this.clock.clearTimeout(t.silence);
      endStale();
      this.stream = null;
    }
    // Close this stream before the next one starts (a restart reopens from the stored cursor).
    stream.stop(0);
    stream.end().catch(() => undefined);
    return outcome;
  }
}
