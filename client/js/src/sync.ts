// The sync stream (§8.4): SyncStart from the stored (vector) cursor; each Batch checked (epoch,
// contiguity), stored with its cursor in one store call, and only then acknowledged (CursorAck:
// the storage ack); a gap is refetched by restarting from the stored cursor, never skipped. A
// range the digest check (check.ts, §8.7) found wrong is refetched too: the runner rewinds the
// store between two streams, then replays from there.
//
// Sources (revision 6, §6 "Sources: large groups"): the same stream serves each large group the
// user follows, a conversation log with a cursor of its own (epoch, conv_seq), named in the
// frames' `source`. Everything above holds for each source on its own — checks, storing with
// its cursor (Store.applySource), CursorAck{source}, gaps, heartbeats, Stale — except that a
// source's cursor is created by its first Batch (at its `after`), dropped by SourceEnd, and a
// TooOld or Rebase of a source rebases that source alone (its ConvState and recent History, then
// the cursor to (epoch, head)); an EpochChanged of a source resyncs it from the new log's first
// retained position. Sources are not in the digest checks, which are about the user's log.
//
// An EpochChanged with `continues` (revision 8, §8.4), of a sub-log or a source: the log was
// restored from a backup holding every position up to the stored cursor, so that position names
// the same entries in the new epoch. The cursor moves to (new epoch, its position) and the
// stream restarts from there: nothing is replayed and the app hears nothing (no `epoch` event).

import { Code, ProtoError } from "./codes.js";
import { FrameReader, encodeFrame } from "./framing.js";
import { FrameType, Limits, type Entry, type Frame, type SourceCursor, type SubCursor } from "./frames.js";
import { hasSources, NotContiguousError, type SourceMethods, type Store } from "./store.js";
import { readFrames, type Logger, type Session } from "./session.js";
import { validId } from "./ids.js";
import type { Clock, TimerHandle } from "./clock.js";
import type { Stream } from "./transport/types.js";

/** What the sync stream tells the client. `source` is the large group a frame was of ("" for the user log and its sub-logs, `sub`). */
export interface SyncHooks {
  entries(entries: readonly Entry[], fresh: ReadonlySet<Entry>, sub: number, source: string): void;
  synced(epoch: bigint, head: number): void;
  stale(epoch: bigint, head: number, unheardMs: number, source: string): void;
  /** A batch did not continue the stored cursor (epoch, at − 1): it started at `got` (0: no entries), nothing of it was stored. */
  gap(sub: number, epoch: bigint, at: number, got: number, source: string): void;
  /** The first Heartbeat of sub-log `sub` on a new stream: it has caught up (§8.7: check what is stored now). */
  firstHeartbeat(sub: number): void;
  rebase(sub: number, epoch: bigint, head: number, source: string): void;
  /** Before a rebase moves the cursor: load conversation state and recent history (§8.4 TooOld). */
  loadForRebase(session: Session): Promise<void>;
  /**
   * Before a rebase of source `conv` alone (its TooOld or Rebase) moves its cursor: load the
   * conversation's state (ConvState) and recent History. Resolves with the cursor to move to, the
   * (epoch, head) of that state; null when the user is no longer a member (the cursor goes).
   */
  loadSource(session: Session, conv: string): Promise<SubCursor | null>;
  epoch(sub: number, epoch: bigint, source: string): void;
  /**
   * An EpochChanged that continues (§8.4) moved the cursor of sub-log `sub`, or of source
   * `source`, to `epoch` at the position it had: nothing for the app to hear, but the cursors
   * moved without entries.
   */
  continued(sub: number, epoch: bigint, source: string): void;
  /** The device no longer follows source `source` (SourceEnd): its cursor was dropped. */
  sourceEnd(source: string, last: number): void;
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

/** Where one source stands on a sync stream. */
interface SourceAt {
  /** Its stored cursor as this stream moved it; null while the device has none (its first Batch's `after` starts it). */
  cur: SubCursor | null;
  /** A Heartbeat or Batch showed it at its head since it last fell behind. */
  caught: boolean;
  /** head > pos seen at a heartbeat, since when. */
  behind: { pos: number; since: number } | null;
}

/** The bytes a SyncStart's source cursor takes at most beyond its id (keys, epoch, position). */
const SOURCE_CURSOR_BYTES = 40;

/**
 * Runs the sync streams of one session, one at a time, until the session ends or a stream fails
 * in a way a restart does not fix. The cursors array is the client's mirror of the store's
 * vector cursor, and the sources map of its sources' cursors (by conversation id): updated here
 * after each commit.
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
    private readonly sources: Map<string, SubCursor>,
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

  /**
   * The source cursors a SyncStart names: every one stored, at most {@link Limits.maxSources} and
   * as many as fit the frame (1,000 ids of 128 bytes do not fit the smallest max_frame, §6). Only
   * cursors of groups whose end the device has not learned yet can make more: those beyond are
   * dropped (from the store too), so that the server serves them as sources the device did not
   * name, from where their following started (or not at all, for one the user left) — a replay
   * merged by msg_id, where a cursor that cannot be named would be a gap every time.
   */
  private async namedSources(): Promise<SourceCursor[]> {
    const all = [...this.sources].map(([conv, c]) => ({ conv, epoch: c.epoch, pos: c.pos })).sort((a, b) => (a.conv < b.conv ? -1 : a.conv > b.conv ? 1 : 0));
    let room = this.session.limits.maxFrame - 1024 - this.cursors.length * SOURCE_CURSOR_BYTES;
    let n = 0;
    for (const c of all) {
      room -= c.conv.length + SOURCE_CURSOR_BYTES;
      if (n >= Limits.maxSources || room < 0) break;
      n++;
    }
    if (n < all.length) {
      const store = this.store;
      this.log("warn", "the device has more source cursors than a SyncStart names; dropping the rest", { sources: all.length, named: n });
      for (const c of all.slice(n)) {
        if (hasSources(store)) await store.dropSource(c.conv);
        this.sources.delete(c.conv);
      }
    }
    return all.slice(0, n);
  }

  private async once(): Promise<Restart | Stop> {
    await this.applyRewinds();
    const cur = this.cursors;
    const first = cur[0] ?? { epoch: 0n, pos: 0 };
    const ceiling = this.replayNext ? 0 : this.opts.ceiling;
    let stream: Stream;
    let named: SourceCursor[];
    try {
      named = await this.namedSources();
      stream = await this.session.openStream();
      // Revision 3: the vector cursor is sent for every user, split or not (§6 Sub-logs).
      // Revision 6: and the cursor of every source the device follows (§6 Sources).
      await stream.write(encodeFrame({ type: FrameType.SyncStart, epoch: first.epoch, pos: first.pos, ceiling, subs: cur.map((c) => ({ ...c })), sources: named }, this.session.limits.maxFrame));
    } catch (e) {
      return new Stop({ error: e instanceof Error ? e : new Error(String(e)), progressed: false, moveOn: false });
    }
    this.log("debug", "sync stream started", {
      epoch: String(first.epoch), pos: first.pos, subs: cur.length, ceiling,
      sources: named.map((c) => `${c.conv}@${c.epoch}:${c.pos}`),
    });
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
    // Where each source stands on this stream: those named, then those the server sends frames of.
    const srcs = new Map<string, SourceAt>(named.map((c) => [c.conv, { cur: { epoch: c.epoch, pos: c.pos }, caught: false, behind: null }]));

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
    /** `synced` once every sub-log and every source the stream knows has caught up. */
    const maybeSynced = (): void => {
      for (let i = 0; i < this.cursors.length; i++) if (!caught.has(i)) return;
      for (const at of srcs.values()) if (!at.caught) return;
      if (!synced && ownCaught) {
        synced = true;
        this.hooks.synced(ownCaught.epoch, ownCaught.head);
      }
    };
    const caughtUp = (sub: number, epoch: bigint, head: number): void => {
      caught.add(sub);
      if (sub === 0) ownCaught = { epoch, head };
      maybeSynced();
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
    /** The store's source methods; a frame of a source with a store that has none ends syncing (this client announced revision 5). */
    const sourceStore = (conv: string): SourceMethods => {
      if (!validId(conv)) throw new ProtoError(Code.Malformed, `a frame of source ${JSON.stringify(conv)}: not a conversation id`);
      const store = this.store;
      if (!hasSources(store)) throw new ProtoError(Code.UnexpectedFrame, `a frame of source ${conv}, but the store keeps no sources (this client announced revision 5)`);
      return store;
    };
    /** Where source conv stands on this stream (a source the SyncStart did not name starts from the stored cursor, if any). */
    const srcOf = (conv: string): SourceAt => {
      let at = srcs.get(conv);
      if (!at) {
        const c = this.sources.get(conv);
        at = { cur: c ? { ...c } : null, caught: false, behind: null };
        srcs.set(conv, at);
      }
      return at;
    };

    /** A frame of source f.source (revision 6). */
    const onSourceFrame = async (f: Frame & { source: string }): Promise<void> => {
      const conv = f.source;
      const store = sourceStore(conv);
      switch (f.type) {
        case FrameType.Batch: {
          const at = srcOf(conv);
          const firstSeq = f.entries[0]?.seq;
          if (firstSeq === undefined) return; // a server never sends one (§6: 1 to max_batch entries)
          // §8.4 steps 1–3, on the source's own cursor (or its `after`, where the spec allows it).
          let fresh: Entry[];
          try {
            fresh = await store.applySource(conv, f.epoch, f.after, f.entries);
          } catch (e) {
            if (e instanceof NotContiguousError) {
              const at1 = at.cur ? at.cur.pos + 1 : f.after + 1;
              this.hooks.gap(0, at.cur?.epoch ?? 0n, at1, firstSeq, conv);
              throw new Restart(`batch of source ${conv} at ${firstSeq} (epoch ${f.epoch}, after ${f.after}) does not continue ${at.cur ? `(${at.cur.epoch}, ${at.cur.pos})` : "its start"}: ${e.message}`);
            }
            throw e;
          }
          const last = (f.entries[f.entries.length - 1] as Entry).seq;
          at.cur = { epoch: f.epoch, pos: last };
          this.sources.set(conv, { ...at.cur });
          this.progressed = true;
          at.behind = null;
          this.hooks.entries(f.entries, new Set(fresh), 0, conv);
          if (last >= f.head && !staleEpisode) {
            at.caught = true;
            maybeSynced();
          } else {
            at.caught = false;
            synced = false;
          }
          // The storage ack, only now that the store has committed (§8.4 step 5).
          await stream.write(encodeFrame({ type: FrameType.CursorAck, epoch: f.epoch, pos: last, source: conv }, this.session.limits.maxFrame));
          return;
        }
        case FrameType.Heartbeat: {
          const at = srcOf(conv);
          this.progressed = true;
          endStale();
          if (at.cur && epochMoved(at.cur, f.epoch)) throw new Restart(`heartbeat of source ${conv} of epoch ${f.epoch}, stored ${at.cur.epoch}`);
          if (f.epoch === 0n && at.cur && at.cur.epoch !== 0n) return; // a replica without the log yet proves nothing
          // A source without a cursor has stored nothing yet: it starts where the user log says its
          // following started; a log that does not say (a rebase jumped over it) leaves nothing to compare.
          const pos = at.cur ? at.cur.pos : await store.followStart(conv);
          if (pos === null || f.head <= pos) {
            at.behind = null;
            at.caught = true;
            maybeSynced();
            return;
          }
          // Entries are pending: if pos has not moved for two heartbeat intervals, the stream is stalled.
          if (!at.behind || at.behind.pos !== pos) at.behind = { pos, since: this.clock.now() };
          else if (this.clock.now() - at.behind.since >= 2 * hbMs) throw new Restart(`source ${conv} stalled at ${pos} while the head is ${f.head}`);
          return;
        }
        case FrameType.Stale: {
          const at = srcOf(conv);
          if (at.cur && epochMoved(at.cur, f.epoch)) throw new Restart(`stale frame of source ${conv} of epoch ${f.epoch}, stored ${at.cur.epoch}`);
          staleBegins(f.epoch, f.head, f.unheardMs, conv);
          return;
        }
        case FrameType.TooOld:
        case FrameType.Rebase: {
          // The source alone is rebased: its state and recent history first, then its cursor, so
          // that a rebase cut short leaves the old cursor (and a rebase to do again).
          const to = await this.hooks.loadSource(this.session, conv);
          if (to) {
            await store.rebaseSource(conv, to.epoch, to.pos);
            const stored = this.sources.get(conv);
            // rebaseSource never moves back within an epoch.
            this.sources.set(conv, stored?.epoch === to.epoch && stored.pos > to.pos ? stored : { ...to });
          } else {
            await store.dropSource(conv);
            this.sources.delete(conv);
          }
          this.progressed = true;
          if (to) this.hooks.rebase(0, to.epoch, to.pos, conv);
          throw new Restart(`${f.type === FrameType.TooOld ? "too old" : "rebase"}: source ${conv}`);
        }
        case FrameType.EpochChanged: {
          const at = srcOf(conv);
          // A source without a cursor, or one of no epoch, has no position that could continue:
          // it resyncs as below.
          if (f.continues && at.cur && at.cur.epoch !== 0n) {
            // Restored from a backup holding every position up to the cursor: its position names
            // the same entries in the new epoch. The store has no call that renames a source's
            // epoch and keeps its stored entries; rebaseSource to another epoch drops them, which
            // is acceptable: nothing reads them back (they are a copy of the log) and the view,
            // every message included, stays. Nothing is replayed.
            const to: SubCursor = { epoch: f.epoch, pos: at.cur.pos };
            await store.rebaseSource(conv, to.epoch, to.pos);
            this.sources.set(conv, to);
            this.log("info", "a source's log was restored with everything this device stored; continuing in its new epoch", { source: conv, epoch: String(f.epoch), pos: to.pos });
            this.hooks.continued(0, f.epoch, conv);
            throw new Restart(`epoch continues: source ${conv}`);
          }
          // The conversation log was re-created: its positions of the old epoch mean nothing. Keep
          // the messages and resync it from the new log's first retained position (§8.4).
          const to: SubCursor = { epoch: f.epoch, pos: Math.max(f.first - 1, 0) };
          await store.resetSourceForEpoch(conv, to.epoch, to.pos);
          this.sources.set(conv, to);
          this.hooks.epoch(0, f.epoch, conv);
          throw new Restart(`epoch changed: source ${conv}`);
        }
        case FrameType.SourceEnd: {
          // The user has no entry of the source after `last`: once it is stored up to there, its
          // cursor goes (a cursor below `last` is a gap: the restarted stream sends the rest first).
          const at = srcs.get(conv);
          try {
            await store.endSource(conv, f.last);
          } catch (e) {
            if (e instanceof NotContiguousError) {
              const c = at?.cur ?? this.sources.get(conv) ?? { epoch: 0n, pos: 0 };
              this.hooks.gap(0, c.epoch, c.pos + 1, 0, conv);
              throw new Restart(e.message);
            }
            throw e;
          }
          srcs.delete(conv);
          this.sources.delete(conv);
          this.progressed = true;
          this.hooks.sourceEnd(conv, f.last);
          maybeSynced();
          return;
        }
        default:
          this.log("debug", "sync stream: ignored a frame", { type: f.type, source: conv });
      }
    };
    /** A Stale frame (of a sub-log or a source): an episode begins, told once, and maybe a move to another node. */
    const staleBegins = (epoch: bigint, head: number, unheardMs: number, source: string): void => {
      if (staleEpisode) return;
      staleEpisode = true;
      synced = false; // say so again once a Heartbeat proves the head
      caught.clear();
      for (const at of srcs.values()) at.caught = false;
      this.hooks.stale(epoch, head, unheardMs, source);
      if (this.opts.canMove && this.opts.staleFailoverMs > 0) {
        t.stale = this.clock.setTimeout(() => {
          this.abort(new Stop({ error: new Error(`syncd: the node has been stale for ${this.opts.staleFailoverMs} ms`), progressed: this.progressed, moveOn: true }));
        }, this.opts.staleFailoverMs);
      }
    };

    const onFrame = async (f: Frame): Promise<void> => {
      armSilence();
      if (f.type === FrameType.SourceEnd || ("source" in f && f.source !== "")) {
        await onSourceFrame(f);
        return;
      }
      switch (f.type) {
        case FrameType.Batch: {
          const c = subOf(f.sub);
          const firstSeq = f.entries[0]?.seq;
          // §8.4 steps 1–3: same epoch (or adopt one on a fresh cursor), contiguous from pos + 1.
          const epochOk = c.epoch === 0n && c.pos === 0 ? f.epoch !== 0n : f.epoch === c.epoch;
          if (!epochOk || firstSeq !== c.pos + 1 || f.entries.some((e, i) => e.seq !== c.pos + 1 + i)) {
            this.hooks.gap(f.sub, c.epoch, c.pos + 1, firstSeq ?? 0, "");
            throw new Restart(`batch of ${f.entries.length} entries at ${firstSeq ?? "-"} (epoch ${f.epoch}) does not continue (${c.epoch}, ${c.pos})`);
          }
          let fresh: Entry[];
          try {
            fresh = await this.store.applyBatch(f.sub, f.epoch, f.entries);
          } catch (e) {
            if (e instanceof NotContiguousError) {
              this.hooks.gap(f.sub, c.epoch, c.pos + 1, firstSeq, "");
              throw new Restart(e.message);
            }
            throw e;
          }
          const last = (f.entries[f.entries.length - 1] as Entry).seq;
          this.cursors[f.sub] = { epoch: f.epoch, pos: last };
          this.progressed = true;
          behind.delete(f.sub);
          this.hooks.entries(f.entries, new Set(fresh), f.sub, "");
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
          staleBegins(f.epoch, f.head, f.unheardMs, "");
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
          this.hooks.rebase(f.sub, f.epoch, f.head, "");
          throw new Restart(f.type === FrameType.TooOld ? "too old" : "rebase");
        }
        case FrameType.EpochChanged: {
          const c = subOf(f.sub);
          // A cursor of no epoch has no position that could continue: it resyncs as below.
          if (f.continues && c.epoch !== 0n) {
            // Restored from a backup holding every position up to the cursor: its position names
            // the same entries in the new epoch, so everything stored stays, the run included.
            const to: SubCursor = { epoch: f.epoch, pos: c.pos };
            await this.store.setCursor(f.sub, to, false);
            this.cursors[f.sub] = to;
            this.log("info", "the log was restored with everything this device stored; continuing in its new epoch", { sub: f.sub, epoch: String(f.epoch), pos: to.pos });
            this.hooks.continued(f.sub, f.epoch, "");
            throw new Restart("epoch continues");
          }
          // The log was re-created: positions of the old epoch mean nothing. Keep the messages
          // (msg_ids stay unique) and start the new epoch at first − 1 (§8.4).
          const to: SubCursor = { epoch: f.epoch, pos: Math.max(f.first - 1, 0) };
          await this.store.setCursor(f.sub, to, true);
          this.cursors[f.sub] = to;
          this.hooks.epoch(f.sub, f.epoch, "");
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
