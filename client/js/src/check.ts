// Checking what the device stored (PROTOCOL §8.7): the checks of §8.4 prove that every batch
// continued the stored cursor, not that what the store holds afterwards is what the server holds
// — a storage bug, a database restored from a backup, a browser extension or a migration may
// change it. So the client asks the server for the digest (digest.ts) of a range of each sub-log
// it stored, computes its own over exactly the range the answer covers, and compares:
//
// * when: after the first Heartbeat of every new sync stream (a resume has caught up), over the
//   newest entries stored, [max(base, pos − 999), pos]; and with every head check (§8.5), over the
//   next window of a walk through the whole stored run, so that all of it is checked over hours;
// * a mismatch: Report{mismatch} on the control stream, the `mismatch` event, and a refetch — the
//   sync runner rewinds the store to (epoch, from − 1) and replays from there (ceiling 0), the
//   re-arriving entries replacing the stored copies of their msg_ids; the range is checked again
//   after the replay has caught up, and if it still differs the SDK gives up on it (no loop: it
//   keeps what the server sent, reports nothing more, and logs an error — a bug of a store or
//   of the server);
// * too_old: asked again once from the first retained position (a HeadCheck tells it);
//   epoch_changed: that sub-log is not checked again on this connection in that epoch (the sync
//   stream says EpochChanged if the log was re-created; the answering replica may just be behind).
//
// The walk goes forward, from the oldest checkable position up to the cursor, then starts over:
// the server pages a DigestResult forward (at most 1,000 entries and about max_frame bytes, "go on
// from to + 1"), so a walk backwards would have to guess where an answer cut short ends.
//
// One check per sub-log at a time; checks never block the sync stream (they read the store and
// ask on the request stream), and one costs one Digest query — two after a too_old.

import { Code } from "./codes.js";
import { digestEqual, digestOf } from "./digest.js";
import { FrameType, REVISION_DIGEST, ReportKind, type DigestResult, type Response, type SubCursor } from "./frames.js";
import type { Logger, Session } from "./session.js";
import type { Store } from "./store.js";
import type { SyncRunner } from "./sync.js";

/** The most positions one check asks about: a DigestResult covers at most 1,000 entries (§6). */
export const CHECK_WINDOW = 1000;

/** The most ranges given up on that the checker remembers (oldest forgotten first). */
const MAX_GIVEN_UP = 64;

/** Which window a check covers: the newest entries (after a resume), or the next one of the walk (periodic). */
export type CheckMode = "recent" | "walk";

/**
 * What one check found:
 * * `match`: the server's digest equals the device's over the range the answer covered;
 * * `mismatch`: it differs: reported, and the range is being refetched;
 * * `gave_up`: it differs again after a refetch (or over a range given up before): the SDK keeps
 *   what the server sent and reports nothing more for it;
 * * `nothing`: nothing to compare (nothing stored, a replica behind the device, the store moved);
 * * `skipped`: not checked (a server or store that cannot, a check already in flight, an error
 *   of the query, an epoch the server says is not the log's).
 */
export type CheckOutcome = "match" | "mismatch" | "gave_up" | "nothing" | "skipped";

/** A range of positions of one sub-log in one epoch. */
interface Range {
  sub: number;
  epoch: bigint;
  from: number;
  to: number;
}

/** What the checker tells the client. */
export interface CheckHooks {
  /** A mismatch over `from`..`to`: `refetching` true when the SDK refetches it, false when it gives up on it. */
  mismatch(r: Range & { refetching: boolean }): void;
  /** The store was rewound for a refetch (the cursor moved back). */
  rewound(sub: number): void;
}

function overlaps(a: Range, b: Range): boolean {
  return a.sub === b.sub && a.epoch === b.epoch && a.from <= b.to && b.from <= a.to;
}

/**
 * The digest checks of one client. Its memory — ranges refetched and not yet confirmed, ranges
 * given up on, where the walk is — lasts as long as the client, across connections, so that a
 * range that keeps differing is refetched once, not once per reconnect. Not safe for concurrent
 * use across clients; calls for one client may overlap (they run one per sub-log).
 */
export class Checker {
  private readonly busy = new Set<number>();
  /** Refetched, waiting for the check after the replay. */
  private readonly repaired: Range[] = [];
  private readonly givenUp: Range[] = [];
  /** Per sub-log: the range to check next, a refetched one. */
  private readonly recheck = new Map<number, Range>();
  /** Per sub-log: where the walk goes on. */
  private readonly walkFrom = new Map<number, { epoch: bigint; from: number }>();
  /** Per sub-log: the first retained position the server last told. */
  private readonly firstKnown = new Map<number, { epoch: bigint; first: number }>();
  /** Per sub-log: an epoch the server said is not the log's, on this connection. */
  private readonly suspended = new Map<number, bigint>();

  constructor(
    private readonly store: Store,
    private readonly cursors: () => readonly SubCursor[],
    private readonly hooks: CheckHooks,
    private readonly log: Logger,
  ) {}

  /** A new connection: an epoch_changed from the last one's server no longer holds checks back. */
  newSession(): void {
    this.suspended.clear();
  }

  /** The server's first retained position of sub-log `sub` in `epoch` (a Head): checks start no lower. */
  noteFirst(sub: number, epoch: bigint, first: number): void {
    this.firstKnown.set(sub, { epoch, first });
  }

  /** Whether the server and the store can be checked: a revision-4 connection and a store with readEntries and rewind. */
  can(session: Session): boolean {
    return session.revision >= REVISION_DIGEST && this.store.readEntries !== undefined && this.store.rewind !== undefined;
  }

  /**
   * Checks one window of sub-log `sub` (see {@link CheckMode}; a range refetched and not yet
   * confirmed goes first). Never rejects: what goes wrong is logged and the check skipped.
   */
  async check(session: Session, runner: SyncRunner, sub: number, mode: CheckMode): Promise<CheckOutcome> {
    if (!this.can(session) || this.busy.has(sub)) return "skipped";
    this.busy.add(sub);
    try {
      const outcome = await this.checkOnce(session, runner, sub, mode);
      this.log("debug", "digest check", { sub, mode, outcome });
      return outcome;
    } catch (e) {
      this.log("warn", "a digest check failed", { sub, err: String(e) });
      return "skipped";
    } finally {
      this.busy.delete(sub);
    }
  }

  private async checkOnce(session: Session, runner: SyncRunner, sub: number, mode: CheckMode): Promise<CheckOutcome> {
    const store = this.store;
    if (!store.readEntries) return "skipped";
    const mirror = this.cursors()[sub];
    if (!mirror || mirror.epoch === 0n || mirror.pos === 0) return "nothing";
    if (this.suspended.get(sub) === mirror.epoch) return "skipped";
    // The cursor and the run's base as stored now (one position read: the entries are read once
    // the server has said which range it covers).
    const now = await store.readEntries(sub, mirror.pos, mirror.pos);
    const { epoch, pos } = now.cursor;
    if (epoch === 0n || pos === 0) return "nothing";
    const known = this.firstKnown.get(sub);
    const lo = Math.max(now.base, known?.epoch === epoch ? known.first : 1);
    if (lo > pos) return "nothing";

    let again = this.recheck.get(sub);
    if (again && again.epoch !== epoch) {
      this.forget(again);
      again = undefined;
    }
    let from: number;
    let to: number;
    if (again) {
      from = Math.max(again.from, lo);
      to = Math.min(again.to, pos);
    } else if (mode === "recent") {
      from = Math.max(lo, pos - CHECK_WINDOW + 1);
      to = pos;
    } else {
      const w = this.walkFrom.get(sub);
      from = w && w.epoch === epoch && w.from >= lo && w.from <= pos ? w.from : lo;
      to = Math.min(pos, from + CHECK_WINDOW - 1);
    }
    if (from > to) {
      if (again) this.forget(again); // nothing of it is stored any more
      return "nothing";
    }

    let answer = await this.ask(session, sub, epoch, from, to);
    if (answer === "too_old") {
      // Trimmed by retention: ask once more from the first retained position (§8.7); what is
      // stored below it cannot be checked any more.
      const first = await this.headFirst(session, sub, epoch);
      if (first === null || first <= from || first > to) return "nothing";
      from = first;
      answer = await this.ask(session, sub, epoch, from, to);
    }
    if (answer === "epoch_changed") {
      // As the replica answering sees it: it may be ahead of the sync stream, or behind a
      // re-creation. Not acted on: the sync stream says EpochChanged if it is so (§8.7).
      this.suspended.set(sub, epoch);
      this.log("info", "digest check: the server says the epoch is not the log's; not checking it on this connection", { sub, epoch: String(epoch) });
      return "skipped";
    }
    if (typeof answer === "string") return answer === "too_old" ? "nothing" : "skipped";
    const r = answer;
    // count 0: nothing there yet on the replica answering; another epoch: not ours to compare.
    if (r.count === 0 || r.to < r.from || r.epoch !== epoch || r.from !== from) return "nothing";
    if (mode === "walk" && !again) this.walkFrom.set(sub, { epoch, from: r.to + 1 });

    const stored = await store.readEntries(sub, r.from, r.to);
    // The store moved while the server answered (an epoch change, a rebase, a reset): the
    // answer is about positions the device no longer holds as they were.
    if (stored.cursor.epoch !== epoch || stored.cursor.pos < r.to || stored.base > r.from) return "nothing";
    const range: Range = { sub, epoch, from: r.from, to: r.to };
    if (digestEqual(await digestOf(stored.entries), r.digest)) {
      if (again) {
        this.forget(again);
        this.log("info", "digest check: the refetched range now matches the server's", { sub, from: r.from, to: r.to });
      }
      return "match";
    }
    return this.mismatch(session, runner, range);
  }

  private async mismatch(session: Session, runner: SyncRunner, range: Range): Promise<CheckOutcome> {
    const data = { sub: range.sub, epoch: String(range.epoch), from: range.from, to: range.to };
    if (this.givenUp.some((g) => overlaps(g, range))) {
      this.log("debug", "digest check: a range given up on still differs", data);
      return "gave_up";
    }
    const before = this.repaired.find((g) => overlaps(g, range));
    if (before) {
      // It still differs after the refetch (§8.7 step 4): no loop. What is stored now is what
      // the server sent; the server logged the first report with the user, device and time.
      this.forget(before);
      this.givenUp.push({ ...range, from: Math.min(range.from, before.from), to: Math.max(range.to, before.to) });
      if (this.givenUp.length > MAX_GIVEN_UP) this.givenUp.shift();
      this.log("error", "digest check: the range still differs from the server's after a refetch; keeping what the server sent (a bug: tell syncd's developers)", data);
      this.hooks.mismatch({ ...range, refetching: false });
      return "gave_up";
    }
    this.log("warn", "digest check: what the device stored differs from the server's log; refetching", data);
    void session.report({ kind: ReportKind.Mismatch, conv: "", sub: range.sub, epoch: range.epoch, from: range.from, to: range.to });
    this.hooks.mismatch({ ...range, refetching: true });
    this.repaired.push(range);
    this.recheck.set(range.sub, range);
    let rewound: boolean;
    try {
      rewound = await runner.rewind(range.sub, range.epoch, range.from);
    } catch (e) {
      this.forget(range);
      throw e;
    }
    if (rewound) this.hooks.rewound(range.sub);
    else this.forget(range); // the store moved on (an epoch change): nothing to refetch there
    return "mismatch";
  }

  /** Forgets a refetched range (confirmed, given up, or gone). */
  private forget(r: Range): void {
    const i = this.repaired.indexOf(r);
    if (i >= 0) this.repaired.splice(i, 1);
    if (this.recheck.get(r.sub) === r) this.recheck.delete(r.sub);
  }

  /** One Digest of the user's sub-log `sub`. */
  private async ask(session: Session, sub: number, epoch: bigint, from: number, to: number): Promise<DigestResult | "too_old" | "epoch_changed" | "error"> {
    let r: Response;
    try {
      r = await session.request((id) => ({ type: FrameType.Digest, id, sub, epoch, from, to }));
    } catch (e) {
      this.log("debug", "digest check: no answer", { sub, err: String(e) });
      return "error";
    }
    if (r.type === FrameType.DigestResult) return r;
    if (r.type === FrameType.Error) {
      if (r.code === Code.TooOld) return "too_old";
      if (r.code === Code.EpochChanged) return "epoch_changed";
      this.log("info", "digest check: refused", { sub, code: r.code, message: r.message });
    }
    return "error";
  }

  /** The first retained position of sub-log `sub` in `epoch`, from a HeadCheck; null when the server says otherwise. */
  private async headFirst(session: Session, sub: number, epoch: bigint): Promise<number | null> {
    let r: Response;
    try {
      r = await session.request((id) => ({ type: FrameType.HeadCheck, id }));
    } catch {
      return null;
    }
    if (r.type !== FrameType.Head) return null;
    const h = r.subs.length > 0 ? r.subs[sub] : sub === 0 ? { epoch: r.epoch, first: r.first } : undefined;
    if (!h || h.epoch !== epoch) return null;
    this.noteFirst(sub, epoch, h.first);
    return h.first;
  }
}
