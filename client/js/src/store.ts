// Local storage (§8.1) behind one interface, so that the client core does not know whether it
// runs on memory (now) or IndexedDB (next phase).
//
// The interface is shaped for IndexedDB:
// * every method that writes is one atomic unit — `applyBatch` stores the entries, their effect
//   on the view and the new cursor together (one IDB transaction over the object stores it
//   touches), so a cursor is never ahead of the entries it stands for (§8.4);
// * `putOutbox` must be durable when it resolves (IDB: `durability: "strict"`): the client writes
//   an item before it goes to the network and tells the app "queued" only then; received entries
//   may be written with relaxed durability, because the server's log can refill them (the cursor
//   is written with them, so it never claims more than survived);
// * the view logic (dedup by msg_id, recalls, read and delivered marks, members) is
//   {@link applyEntry}, written against the small async {@link ViewTx} so that an IndexedDB store
//   runs the very same code inside its transaction;
// * marks (§8.8) are written in the transaction of the entries that carry them, with each
//   conversation's {@link ConvPeaks}, and a store tells its listener ({@link Store.onMarks}) what
//   moved once that transaction has committed: the client turns exactly those moves into events,
//   so a step is announced once, and never one that a failed write would take back.
// * sources (revision 6, §6 "Sources: large groups"): a large group's entries come from its
//   conversation log, a source of the sync stream with a cursor of its own — (the conversation
//   log's epoch, a conv_seq) — which `applySource` writes in the transaction of the source's
//   entries, as `applyBatch` does a sub-log's. Where the user's following of each large group
//   started and ended (the user-log entries with `source` set) is noted by `applyBatch` too: it
//   is what makes a Batch's `after` beyond the stored cursor acceptable ({@link sourceStart}).

import type { Ack, Entry, SourceCursor, SubCursor } from "./frames.js";
import { Kind } from "./frames.js";

/** Status of an outbox item (§8.3). */
export type OutboxStatus = "sending" | "sent" | "failed";

/**
 * One mutation of the app in the outbox: written before it is sent, resent with the same cmid
 * and payload until acknowledged or given up. `kind` uses the entry kinds: 1 Send, 2 MarkRead,
 * 3 Recall, 4 CreateGroup, 5 AddMembers, 6 RemoveMembers, 7 SetRole, 9 Edit, 10 React.
 */
export interface OutboxItem {
  /** client_msg_id: the server's dedup key; never changes. */
  cmid: string;
  /** Order of queueing (per device), assigned by the client. */
  seq: number;
  kind: number;
  conv: string;
  /** Send: the other user of a direct conversation that may not exist yet. */
  peer: string;
  body: Uint8Array;
  upTo: number;
  target: string;
  members: string[];
  role: number;
  /** React (revision 7): the reaction (absent in items an older SDK stored). */
  reaction?: string;
  /** React: take the reaction off. */
  remove?: boolean;
  status: OutboxStatus;
  /** Attempts so far, kept across restarts (the schedule goes on where it was). */
  attempts: number;
  /** Earliest next attempt, ms since the epoch (0 = at once). */
  nextAttemptAt: number;
  /** The server's answer once sent. */
  ack: Ack | null;
  /** The last failure, for display and logs. */
  lastError: string;
  /** The §7 code of a failure, when the server gave one (0 otherwise). */
  errorCode: number;
  /** When the app queued it, ms since the epoch. */
  createdAt: number;
}

/** A delivery state past "sent" (§8.8): some other member has a message stored, or has read it. */
export type DeliveryState = "delivered" | "read";

/** The status of a message the user sent, once acknowledged (§8.8): it only moves forward. */
export type MessageStatus = "sent" | "delivered" | "read";

/**
 * The highest mark of one state in a conversation (`value`, of `user`) and the highest of every
 * other user (`second`): enough to know the highest mark of the users other than any one of
 * them — "delivered to (read by) someone other than the sender" — in O(1), without reading every
 * member's mark (a group may have thousands).
 */
export interface MarkPeak {
  user: string;
  value: number;
  second: number;
}

/** A conversation's peaks of delivered and read marks. */
export interface ConvPeaks {
  delivered: MarkPeak;
  read: MarkPeak;
}

/** One user's mark that moved forward in a conversation. */
export interface MarkMove {
  user: string;
  state: DeliveryState;
  from: number;
  to: number;
}

/** What one committed transaction moved in one conversation: its marks, and its peaks before and after. */
export interface MarksChange {
  conv: string;
  moves: MarkMove[];
  before: ConvPeaks;
  after: ConvPeaks;
}

/** A user's marks to raise a conversation's to (from the server's ConvInfo, §8.8). */
export interface UserMarks {
  user: string;
  delivered: number;
  read: number;
}

/** Peaks of a conversation with no marks. */
export function zeroPeaks(): ConvPeaks {
  return { delivered: { user: "", value: 0, second: 0 }, read: { user: "", value: 0, second: 0 } };
}

/** The highest mark of p among the users other than `user`. */
export function peakExcept(p: MarkPeak, user: string): number {
  return p.user === user ? p.second : p.value;
}

/**
 * p after `user`'s mark rose to `value`. Marks only rise, so the user at the top stays until
 * someone passes it, and `second` (the best of the others) only grows.
 */
export function raisePeak(p: MarkPeak, user: string, value: number): MarkPeak {
  if (p.user === user) return { ...p, value: Math.max(p.value, value) };
  if (value > p.value) return { user, value, second: p.value };
  return { ...p, second: Math.max(p.second, value) };
}

/**
 * The status of message `convSeq` sent by `sender`, from its conversation's peaks: read when
 * another user's read mark covers it, delivered when another's delivered (or read) mark does.
 */
export function statusFrom(p: ConvPeaks, sender: string, convSeq: number): MessageStatus {
  const read = peakExcept(p.read, sender);
  if (read >= convSeq) return "read";
  return Math.max(peakExcept(p.delivered, sender), read) >= convSeq ? "delivered" : "sent";
}

/**
 * The marks a store's transaction moved, per conversation, with the conversation's peaks before
 * the transaction (read once) and after. Internal to the stores.
 */
export class MarkBook {
  private readonly changes = new Map<string, MarksChange>();

  /** Records a move; `load` reads the conversation's stored peaks. Returns the peaks to store. */
  async moved(conv: string, m: MarkMove, load: () => Promise<ConvPeaks | undefined>): Promise<ConvPeaks> {
    let c = this.changes.get(conv);
    if (!c) {
      const before = (await load()) ?? zeroPeaks();
      c = this.changes.get(conv) ?? { conv, moves: [], before, after: before };
      this.changes.set(conv, c);
    }
    c.moves.push(m);
    c.after = { ...c.after, [m.state]: raisePeak(c.after[m.state], m.user, m.to) };
    return c.after;
  }

  /** The changes, in the order conversations were first touched. */
  list(): MarksChange[] {
    return [...this.changes.values()];
  }
}

/** A message of a conversation as stored, for display. */
export interface Message {
  conv: string;
  convSeq: number;
  msgId: string;
  sender: string;
  /** Server time, Unix ns. */
  time: bigint;
  body: Uint8Array;
  /** The sender recalled it (the body is kept: the app decides what to show). */
  recalled: boolean;
  /** Revision 7: the sender edited it; `body` is then its latest edit's. */
  edited: boolean;
  /** Server time of the latest edit shown, Unix ns (0n: never edited). */
  editedAt: bigint;
  /**
   * Revision 7: the reactions on it, reaction → the users who have it on (sorted, never empty);
   * `{}` when none. A user's own reactions are those naming the user.
   */
  reactions: Record<string, string[]>;
}

/**
 * The state of one (sender, reaction) on a message (revision 7): the conv_seq of the last
 * reaction entry applied (`at`) and whether it put the reaction on. The last entry in conv_seq
 * order wins, so entries applied out of order (a History page after the sync stream) cannot undo
 * a later one.
 */
export interface ReactionMark {
  at: number;
  on: boolean;
}

/**
 * What edits and reactions did to a message (revision 7), in its view row, or remembered for a
 * message not stored yet ({@link ViewTx.getEarlyEffects}). Reactions are keyed by
 * {@link reactionKey}.
 */
export interface MsgEffects {
  /** The latest edit's body (absent: never edited). */
  editBody?: Uint8Array;
  /** The conv_seq of the latest edit applied (0 or absent: none). */
  editSeq?: number;
  /** Its server time, Unix ns. */
  editedAt?: bigint;
  reactions?: Record<string, ReactionMark>;
}

/** The key of one (sender, reaction) in {@link MsgEffects.reactions} (neither contains NUL). */
export function reactionKey(sender: string, reaction: string): string {
  return `${sender}\u0000${reaction}`;
}

/**
 * One conversation entry in the view (messages and the other kinds, so it mirrors the log). A
 * message's `body` is the body it was sent with; its edits and reactions (revision 7) are the
 * {@link MsgEffects} fields, absent in rows an older SDK stored.
 */
export interface StoredMsg extends MsgEffects {
  kind: number;
  msgId: string;
  sender: string;
  time: bigint;
  body: Uint8Array;
  recalled: boolean;
  upTo: number;
  target: string;
  members: string[];
}

/** The message a view row of kind 1 shows (its latest edit's body, its reactions on). */
export function toMessage(conv: string, convSeq: number, m: StoredMsg): Message {
  const reactions: Record<string, string[]> = {};
  for (const [key, r] of Object.entries(m.reactions ?? {})) {
    if (!r.on) continue;
    const cut = key.indexOf("\u0000");
    const sender = key.slice(0, cut);
    const reaction = key.slice(cut + 1);
    (reactions[reaction] ??= []).push(sender);
  }
  for (const users of Object.values(reactions)) users.sort();
  const edited = m.editBody !== undefined;
  return {
    conv, convSeq, msgId: m.msgId, sender: m.sender, time: m.time,
    body: (edited ? (m.editBody as Uint8Array) : m.body).slice(), recalled: m.recalled,
    edited, editedAt: edited ? (m.editedAt ?? 0n) : 0n, reactions,
  };
}

/** What a store holds when the client opens it. */
export interface StoreSnapshot {
  /** The vector cursor: one per sub-log from 0 up to the highest stored; `[{epoch: 0n, pos: 0}]` for a new device. */
  cursors: SubCursor[];
  /** Every outbox item, any status, in seq order. */
  outbox: OutboxItem[];
  /** Revision 6: the stored cursor of every source the device follows, in conversation id order (a store without sources: absent). */
  sources?: SourceCursor[];
  /**
   * Set when the store found itself lost or inconsistent (a database evicted or deleted since
   * the last visit, a cursor ahead of the entries it claims): the cursors were reset, the client
   * resyncs from the server and tells the app (`resync` event). Says why.
   */
  reset?: string;
}

/** What kind of storage a store is, for the app to show (the client's `storage` event). */
export interface StoreInfo {
  /** `indexeddb`, or `memory` (nothing survives a reload). */
  kind: "indexeddb" | "memory";
  /** Whether what is stored survives a reload of the page. */
  persistent: boolean;
  /** The answer of `navigator.storage.persist()` (kept under storage pressure); null while unknown or not asked. */
  persisted: boolean | null;
  /** The database's name (IndexedDB). */
  name?: string;
  /** Why the storage is not persistent, when an IndexedDB store fell back to memory (private mode…). */
  reason?: string;
}

/**
 * What a store holds of one sub-log over a range of positions ({@link Store.readEntries}): the
 * entries a digest check compares with the server's (§8.7), with the cursor and the start of
 * the run they belong to, all read at one moment.
 */
export interface StoredRange {
  /** The sub-log's stored cursor ((0, 0) when it has none). */
  cursor: SubCursor;
  /**
   * The first position of the run of entries that ends at the cursor: every position from `base`
   * to `cursor.pos` was stored, none below `base` (a rebase or an epoch change jumped over them;
   * a database written before the SDK kept it counts from its first batch after). `cursor.pos + 1`
   * when nothing is stored under the cursor. A check covers `base` … `cursor.pos` only.
   */
  base: number;
  /** The stored entries at the positions asked for, ascending; a position not stored is absent. */
  entries: Entry[];
}

/** Thrown by {@link Store.applyBatch} when a batch does not continue the stored cursor; nothing was written. */
export class NotContiguousError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotContiguousError";
  }
}

/**
 * What a store keeps for sources (revision 6, §6 "Sources: large groups", §8.4). A store offers
 * all of these or none ({@link hasSources}): a client whose store has none announces revision 5,
 * and a server then refuses to sync a user who follows a large group (`needs_upgrade`) rather
 * than let the device miss the group's entries.
 */
export interface SourceMethods {
  /**
   * Stores a Batch of source `conv` (a large group's conversation log: `seq` is the conv_seq)
   * atomically, as {@link Store.applyBatch} does a sub-log's: checks that it continues the
   * source's stored cursor, or `after` where that is allowed ({@link sourceStart}; else throws
   * {@link NotContiguousError} and writes nothing); stores the entries under (conv, conv_seq),
   * applies them to the view with {@link applyEntry} (dedup by msg_id) and sets the source's
   * cursor to (epoch, last conv_seq). Resolves once committed, with the entries that were new.
   * An entry naming another conversation, or a conv_seq other than its seq, is refused (an
   * Error, not a gap: the server sent what it must not); one that leaves them out gets them.
   */
  applySource(conv: string, epoch: bigint, after: number, entries: readonly Entry[]): Promise<Entry[]>;
  /**
   * SourceEnd{conv, last}: the user has no entry of the source after `last`. With a stored
   * cursor below `last`, entries the user should have are missing: throws
   * {@link NotContiguousError} (the client restarts, and they come first). Otherwise the
   * source's cursor goes (durably); its stored entries and the view stay. No cursor: nothing.
   */
  endSource(conv: string, last: number): Promise<void>;
  /** Drops the cursor of source `conv` without a check (the user is no longer a member); the entries and the view stay. */
  dropSource(conv: string): Promise<void>;
  /**
   * Moves the cursor of source `conv` to (epoch, head) without entries: a rebase of the source
   * (its TooOld or Rebase), or of the user log (a large group it loaded), or an EpochChanged of
   * the source that continues (§8.4: to its stored position in the new epoch). Within the stored epoch
   * it never moves back; moving to another epoch drops the source's stored entries. A source
   * without a cursor gets one.
   */
  rebaseSource(conv: string, epoch: bigint, head: number): Promise<void>;
  /**
   * EpochChanged of source `conv`: its log was re-created. Drops the source's stored entries and
   * sets its cursor to (epoch, pos) — the new log's first retained position − 1 — keeping the view
   * (entries that come again are deduplicated by msg_id).
   */
  resetSourceForEpoch(conv: string, epoch: bigint, pos: number): Promise<void>;
  /** The stored cursor of every source the device follows, in conversation id order: SyncStart.sources. */
  sourceCursors(): Promise<SourceCursor[]>;
  /**
   * Where the user log says the user's current following of `conv` started: the conv_seq of its
   * latest entry with `source` set, if that one started it; null when the latest ended it or the
   * log never said (not stored, or jumped over by a rebase).
   */
  followStart(conv: string): Promise<number | null>;
  /** The stored entries of source `conv` at conv_seqs `from` … `to`, ascending, as received. */
  sourceEntries(conv: string, from: number, to: number): Promise<Entry[]>;
}

/** Whether a store keeps sources (every method of {@link SourceMethods}). */
export function hasSources(s: Store): s is Store & SourceMethods {
  return typeof s.applySource === "function" && typeof s.endSource === "function" && typeof s.dropSource === "function" &&
    typeof s.rebaseSource === "function" && typeof s.resetSourceForEpoch === "function" && typeof s.sourceCursors === "function" &&
    typeof s.followStart === "function" && typeof s.sourceEntries === "function";
}

/** The device's local storage. Every method that writes is atomic. */
export interface Store extends Partial<SourceMethods> {
  /** Loads the cursors and the outbox (the client opens from these with no connection). */
  load(): Promise<StoreSnapshot>;
  /**
   * Stores a Batch of sub-log `sub` atomically: checks that `epoch` equals the stored epoch (or
   * adopts it when the stored cursor is (0, 0)) and that the entries are numbered cursor+1,
   * cursor+2, … (else throws {@link NotContiguousError} and writes nothing); stores the entries,
   * applies them to the view with {@link applyEntry} (dedup by msg_id), and sets the cursor to
   * (epoch, last seq). Resolves once committed, with the entries that were new (not duplicates).
   * After a {@link rewind}, an entry at a position the rewind dropped replaces the stored copy of
   * its msg_id in the view instead of being skipped as a duplicate (§8.7: the stored copy may be
   * the wrong one); it is still not new.
   */
  applyBatch(sub: number, epoch: bigint, entries: readonly Entry[]): Promise<Entry[]>;
  /**
   * Moves sub-log `sub`'s cursor without entries: a rebase (TooOld, Rebase: to the head) or an
   * epoch change (to `first − 1` of the new epoch), or keeps its position in another epoch (an
   * EpochChanged that continues, §8.4): the stored entries and their run
   * ({@link StoredRange.base}) stay. With `dropEntries` the sub-log's stored entries go (their
   * positions mean nothing in another epoch); the view stays.
   */
  setCursor(sub: number, cursor: SubCursor, dropEntries: boolean): Promise<void>;
  /** Applies conversation-log entries (History, a rebase) to the view, deduplicated by msg_id; no cursor moves. Returns the new ones. */
  applyHistory(entries: readonly Entry[]): Promise<Entry[]>;
  /** Writes an outbox item; durable when it resolves. */
  putOutbox(item: OutboxItem): Promise<void>;
  /** Removes an outbox item (the app dismissed a sent or failed one). */
  deleteOutbox(cmid: string): Promise<void>;
  /** The messages of a conversation in conv_seq order, recalled ones included. */
  messages(conv: string): Promise<Message[]>;
  /** How far `user` has read `conv`, as stored (0 if unknown). */
  readMark(conv: string, user: string): Promise<number>;
  /**
   * How far `user`'s devices have stored `conv` (§8.8), as stored (0 if unknown): raised by its
   * delivered (kind 8) and read (kind 2) entries and by {@link raiseMarks} (optional, with the
   * rest of the delivery-state methods: a store without them gives no message statuses).
   */
  deliveredMark?(conv: string, user: string): Promise<number>;
  /** The conversation's peaks of delivered and read marks (zero when none is stored). */
  peaks?(conv: string): Promise<ConvPeaks>;
  /**
   * Raises users' marks of `conv` to at least the values given (the server's ConvInfo after a
   * rebase, §8.8); a delivered mark is raised to at least the read one. Never lowers a mark.
   */
  raiseMarks?(conv: string, marks: readonly UserMarks[]): Promise<void>;
  /** The stored messages of `conv` with conv_seq `from` … `to`, ascending. */
  messageRange?(conv: string, from: number, to: number): Promise<Message[]>;
  /**
   * Registers the client's handler of mark moves: called after each transaction that moved
   * marks (a batch, history, raiseMarks) has committed, with what it moved.
   */
  onMarks?(fn: (changes: MarksChange[]) => void): void;
  /** The stored members of a group, sorted; `complete` is false after a change too large to be listed in the log (§5). */
  members(conv: string): Promise<{ members: string[]; complete: boolean }>;
  /** Replaces a group's stored members (from the server's Members pages). */
  setMembers(conv: string, users: readonly string[]): Promise<void>;
  /** The highest conv_seq stored of a conversation (0 if none): how far the local copy goes. */
  convHead(conv: string): Promise<number>;
  /** The ids of the conversations stored here. */
  conversations(): Promise<string[]>;
  /** Releases the store. */
  close(): Promise<void>;
  /** What kind of storage this is (optional: a store without it counts as persistent). */
  info?(): StoreInfo;
  /**
   * Registers the client's handler for a store found lost while the client runs (its database
   * deleted under it): the client reloads the snapshot, resyncs from the server and resends its
   * outbox items into the store (optional).
   */
  onReset?(fn: (reason: string) => void): void;
  /**
   * The stored entries of sub-log `sub` at positions `from` … `to`, with the cursor and the base
   * of their run, read in one transaction (optional: a store without it and {@link rewind} is not
   * checked against the server, §8.7).
   */
  readEntries?(sub: number, from: number, to: number): Promise<StoredRange>;
  /**
   * Refetches sub-log `sub` from `from` (§8.7, a digest mismatch), in one transaction: sets its
   * cursor back to (epoch, from − 1), deletes the stored entries at `from` and above, and
   * remembers that entries re-arriving up to the old cursor replace the stored copies of their
   * msg_ids in the view (see {@link applyBatch}). The view stays. Does nothing and resolves false
   * when the stored cursor is of another epoch, or `from` is not within `base` … `cursor.pos`
   * ({@link StoredRange.base}): the store moved since the check (optional, as readEntries).
   */
  rewind?(sub: number, epoch: bigint, from: number): Promise<boolean>;
  /** Drops the cursors and stored entries (the view stays): the next sync starts over (optional; a resync). */
  resetCursors?(): Promise<void>;
  /** One outbox item as stored now, other tabs' writes included (optional: for shared stores). */
  getOutbox?(cmid: string): Promise<OutboxItem | undefined>;
}

/** The view operations {@link applyEntry} needs, inside one transaction of a store. */
export interface ViewTx {
  getMsgRef(msgId: string): Promise<{ conv: string; convSeq: number } | undefined>;
  putMsgRef(msgId: string, ref: { conv: string; convSeq: number }): Promise<void>;
  getView(conv: string, convSeq: number): Promise<StoredMsg | undefined>;
  putView(conv: string, convSeq: number, m: StoredMsg): Promise<void>;
  delView(conv: string, convSeq: number): Promise<void>;
  getReadMark(conv: string, user: string): Promise<number>;
  /** Raises a read mark (called only with a higher value than stored). */
  putReadMark(conv: string, user: string, upTo: number): Promise<void>;
  /** A delivered mark (optional: a ViewTx without these keeps no delivered marks). */
  getDeliveredMark?(conv: string, user: string): Promise<number>;
  /** Raises a delivered mark (called only with a higher value than stored). */
  putDeliveredMark?(conv: string, user: string, upTo: number): Promise<void>;
  addMember(conv: string, user: string): Promise<void>;
  removeMember(conv: string, user: string): Promise<void>;
  markMembersIncomplete(conv: string): Promise<void>;
  /** Remembers a recall whose target is not stored yet (possible after a rebase). */
  takeEarlyRecall(msgId: string): Promise<boolean>;
  putEarlyRecall(msgId: string): Promise<void>;
  /**
   * Revision 7: the edits and reactions remembered for a message not stored yet (an edit or a
   * reaction whose target is before the device's history, or not yet paged with History), as
   * early recalls are. Optional: a ViewTx without these ignores such edits and reactions.
   */
  getEarlyEffects?(msgId: string): Promise<MsgEffects | undefined>;
  /** Writes (or, with undefined, forgets) the effects remembered for msgId. */
  putEarlyEffects?(msgId: string, fx: MsgEffects | undefined): Promise<void>;
  putConv(conv: string): Promise<void>;
}

/**
 * Applies one entry to the view (§8.4 step 4), inside the caller's transaction. Returns false for
 * a duplicate: an entry whose msg_id is already stored creates nothing new (its position still
 * counts). The Go SDK's store (client/internal/store/syncstate.go) does the same.
 *
 * With `replace` (an entry refetched after a digest mismatch, §8.7), a duplicate is applied
 * anyway over the stored copy, which may be the wrong one: its view row is rewritten (and moved,
 * if the stored copy put its msg_id elsewhere), its effects applied again. Effects are safe to
 * apply twice in log order (read marks only move forward, recalls only set a flag, membership
 * changes replay in order, edits and reactions are last-wins by conv_seq), and a message keeps
 * its `recalled` flag, edits and reactions: those may be in another sub-log, which is not
 * refetched. It still returns false: nothing new was created.
 *
 * Revision 7: an edit (kind 9) replaces its target's body and a reaction (kind 10) sets the state
 * of its (sender, reaction) on the target, both last-wins by conv_seq; one whose target is not
 * stored is remembered and applied when the target comes (like a recall). A folded entry
 * (`folded` set, §5) is stored — its row in the view, its msg_id deduplicated — and not applied:
 * the entry that folded it, later in the same log, carries the state.
 */
export async function applyEntry(tx: ViewTx, e: Entry, replace = false): Promise<boolean> {
  let fresh = true;
  if (e.msgId !== "") {
    const ref = await tx.getMsgRef(e.msgId);
    if (ref) {
      if (!replace) return false;
      fresh = false;
      if ((ref.conv !== e.conv || ref.convSeq !== e.convSeq) && ref.convSeq !== 0) {
        const old = await tx.getView(ref.conv, ref.convSeq);
        if (old?.msgId === e.msgId) await tx.delView(ref.conv, ref.convSeq);
      }
    }
    await tx.putMsgRef(e.msgId, { conv: e.conv, convSeq: e.convSeq });
  }
  if (e.conv === "") return fresh; // nothing to attach it to (an unknown kind): stored by position only
  await tx.putConv(e.conv);
  const m: StoredMsg = { kind: e.kind, msgId: e.msgId, sender: e.sender, time: e.time, body: new Uint8Array(0), recalled: false, upTo: 0, target: "", members: [] };
  if (e.folded) {
    // Revision 7: stored, not applied (the entry at `folded` says the state it would have given).
    m.target = e.target;
    if (e.convSeq !== 0) await tx.putView(e.conv, e.convSeq, m);
    return fresh;
  }
  switch (e.kind) {
    case Kind.Message:
      m.body = e.body;
      if (e.msgId !== "" && (await tx.takeEarlyRecall(e.msgId))) m.recalled = true;
      if (!fresh && e.convSeq !== 0) {
        const old = await tx.getView(e.conv, e.convSeq);
        if (old?.msgId === e.msgId) {
          if (old.recalled) m.recalled = true;
          mergeEffects(m, old);
        }
      }
      if (e.msgId !== "" && tx.getEarlyEffects && tx.putEarlyEffects) {
        const early = await tx.getEarlyEffects(e.msgId);
        if (early) {
          mergeEffects(m, early);
          await tx.putEarlyEffects(e.msgId, undefined);
        }
      }
      break;
    case Kind.Edit:
    case Kind.Reaction:
      m.target = e.target;
      if (e.target !== "") await applyToTarget(tx, e);
      break;
    case Kind.Receipt:
      m.upTo = e.upTo;
      if (e.sender === "") break;
      // A receipt raises the delivered mark too: what was read was stored (§8.8).
      await raiseDelivered(tx, e.conv, e.sender, e.upTo);
      if (e.upTo > (await tx.getReadMark(e.conv, e.sender))) {
        await tx.putReadMark(e.conv, e.sender, e.upTo); // read marks only move forward
      }
      break;
    case Kind.Delivered:
      m.upTo = e.upTo;
      if (e.sender !== "") await raiseDelivered(tx, e.conv, e.sender, e.upTo);
      break;
    case Kind.Recall:
      m.target = e.target;
      if (e.target !== "") await markRecalled(tx, e.target);
      break;
    case Kind.GroupCreate:
    case Kind.MemberAdd:
    case Kind.MemberRemove:
    case Kind.RoleChange:
      m.members = e.members;
      if (e.memberCount > 0) {
        await tx.markMembersIncomplete(e.conv); // more than 32 users: the list is not in the log
      } else if (e.kind === Kind.MemberRemove) {
        for (const u of e.members) await tx.removeMember(e.conv, u);
      } else if (e.kind !== Kind.RoleChange) {
        if (e.kind === Kind.GroupCreate && e.sender !== "") await tx.addMember(e.conv, e.sender); // the creator is a member
        for (const u of e.members) await tx.addMember(e.conv, u);
      }
      break;
  }
  if (e.convSeq !== 0) await tx.putView(e.conv, e.convSeq, m);
  return fresh;
}

/** Raises user's delivered mark of conv to upTo if that is higher (marks only move forward). */
async function raiseDelivered(tx: ViewTx, conv: string, user: string, upTo: number): Promise<void> {
  if (!tx.getDeliveredMark || !tx.putDeliveredMark) return;
  if (upTo > (await tx.getDeliveredMark(conv, user))) await tx.putDeliveredMark(conv, user, upTo);
}

/**
 * Raises users' marks to the values given, inside the caller's transaction: the delivered mark
 * first (read implies delivered), as a receipt does.
 */
export async function raiseMarksIn(tx: ViewTx, conv: string, marks: readonly UserMarks[]): Promise<void> {
  for (const u of marks) {
    if (u.user === "") continue;
    await raiseDelivered(tx, conv, u.user, Math.max(u.delivered, u.read));
    if (u.read > (await tx.getReadMark(conv, u.user))) await tx.putReadMark(conv, u.user, u.read);
  }
}

/** Applies edit or reaction e to the effects fx (last-wins by conv_seq); whether it changed them. */
function effectOf(fx: MsgEffects, e: Entry): boolean {
  if (e.kind === Kind.Edit) {
    if ((fx.editSeq ?? 0) > e.convSeq) return false;
    fx.editBody = e.body;
    fx.editSeq = e.convSeq;
    fx.editedAt = e.time;
    return true;
  }
  const key = reactionKey(e.sender, e.reaction);
  const had = fx.reactions?.[key];
  if (had && had.at > e.convSeq) return false;
  fx.reactions = { ...fx.reactions, [key]: { at: e.convSeq, on: !e.remove } };
  return true;
}

/** Merges the effects `from` into `into`, entry by entry, the later (by conv_seq) winning. */
function mergeEffects(into: MsgEffects, from: MsgEffects): void {
  if (from.editBody !== undefined && (from.editSeq ?? 0) >= (into.editSeq ?? 0)) {
    into.editBody = from.editBody;
    into.editSeq = from.editSeq ?? 0;
    into.editedAt = from.editedAt ?? 0n;
  }
  for (const [key, r] of Object.entries(from.reactions ?? {})) {
    const had = into.reactions?.[key];
    if (!had || had.at <= r.at) into.reactions = { ...into.reactions, [key]: r };
  }
}

/**
 * Applies an edit or a reaction to its target message; one whose target is not stored is
 * remembered (when the ViewTx can) and applied when the message comes.
 */
async function applyToTarget(tx: ViewTx, e: Entry): Promise<void> {
  const ref = await tx.getMsgRef(e.target);
  const m = ref && ref.convSeq !== 0 ? await tx.getView(ref.conv, ref.convSeq) : undefined;
  if (ref && m) {
    if (m.kind !== Kind.Message) return; // not a message: nothing to edit or react to
    const next: StoredMsg = { ...m };
    if (effectOf(next, e)) await tx.putView(ref.conv, ref.convSeq, next);
    return;
  }
  if (!tx.getEarlyEffects || !tx.putEarlyEffects) return; // ignored: this ViewTx remembers none
  const fx: MsgEffects = { ...(await tx.getEarlyEffects(e.target)) };
  if (effectOf(fx, e)) await tx.putEarlyEffects(e.target, fx);
}

async function markRecalled(tx: ViewTx, target: string): Promise<void> {
  const ref = await tx.getMsgRef(target);
  const m = ref && ref.convSeq !== 0 ? await tx.getView(ref.conv, ref.convSeq) : undefined;
  if (ref && m) {
    if (!m.recalled) await tx.putView(ref.conv, ref.convSeq, { ...m, recalled: true });
    return;
  }
  await tx.putEarlyRecall(target);
}

// --- sources ---

/** Whether entry kind `k` of a follow mark starts a following (group_create, member_add) rather than ends it. */
export function followStarts(k: number): boolean {
  return k === Kind.GroupCreate || k === Kind.MemberAdd;
}

/**
 * Whether a user-log entry says where the user's following of a large group starts or ends
 * (§5 Entry.source): a group_create, member_add or member_remove with `source` set and a
 * position in its conversation. Stores note these in the transaction of their batch.
 */
export function isFollowMark(e: Entry): boolean {
  return e.source && e.conv !== "" && e.convSeq !== 0 && (followStarts(e.kind) || e.kind === Kind.MemberRemove);
}

/** The follow marks a store noted (see {@link isFollowMark}), read inside its transaction. */
export interface FollowMarks {
  /** The kind of the follow mark of `conv` at `convSeq`, undefined when there is none. */
  followAt(conv: string, convSeq: number): Promise<number | undefined>;
  /** The follow mark of `conv` with the highest conv_seq below `before`, undefined when there is none. */
  lastFollowBefore(conv: string, before: number): Promise<{ convSeq: number; kind: number } | undefined>;
}

/**
 * The position a Batch of source `conv` in `epoch`, carrying `after` (0: absent), continues
 * from (§6 "Where a source starts", §8.4), given the source's stored cursor `cur`:
 *
 * * no stored cursor: `after` — a source the SyncStart did not name, or whose cursor a
 *   SourceEnd dropped and which the user joined again (the gate stored the user-log entry that
 *   started the following first, so `after` must be where that entry is, unless a rebase of
 *   the user log jumped over it and the log does not say); its epoch is adopted;
 * * a stored cursor: the batch's epoch must be the cursor's; an `after` of 0 or at the cursor
 *   continues the cursor; an `after` beyond it (the user was removed and added again, and the
 *   positions between were not the user's) only when the user log shows exactly that: a
 *   member_add (or group_create) with `source` set at conv_seq `after`, and before it, as the
 *   latest follow mark, the removal that ended the period the cursor is in, at most one past the
 *   cursor (that period's last entry for the user is the one before the removal) — so neither the
 *   rest of that period nor a whole period between is skipped.
 *
 * Anything else throws {@link NotContiguousError}: a gap, handled as a user-log gap.
 */
export async function sourceStart(marks: FollowMarks, conv: string, cur: SubCursor | undefined, epoch: bigint, after: number): Promise<number> {
  if (epoch === 0n) throw new NotContiguousError(`batch of source ${conv} without an epoch`);
  if (!cur || (cur.epoch === 0n && cur.pos === 0)) {
    // Where the log says the following started, if it says (a rebase of the user log may have
    // jumped over the entry): a first batch from elsewhere is a gap.
    const last = await marks.lastFollowBefore(conv, Number.MAX_SAFE_INTEGER);
    if (last !== undefined && followStarts(last.kind) && last.convSeq !== after) {
      throw new NotContiguousError(`source ${conv}: the first batch follows ${after}, the user log says the following started at ${last.convSeq}`);
    }
    return after;
  }
  if (cur.epoch === 0n) throw new NotContiguousError(`stored cursor (0, ${cur.pos}) of source ${conv} has no epoch`);
  if (epoch !== cur.epoch) throw new NotContiguousError(`batch of source ${conv} of epoch ${epoch}, stored epoch ${cur.epoch}`);
  if (after === 0 || after === cur.pos) return cur.pos;
  if (after > cur.pos) {
    const at = await marks.followAt(conv, after);
    if (at !== undefined && followStarts(at)) {
      const before = await marks.lastFollowBefore(conv, after);
      if (before?.kind === Kind.MemberRemove && before.convSeq <= cur.pos + 1) return after;
    }
  }
  throw new NotContiguousError(`source ${conv}: the batch follows ${after}, the stored cursor is at ${cur.pos} and the log shows no rejoining there`);
}

/**
 * The entries of a Batch of source `conv`, each with its conversation and conv_seq: one that
 * leaves either out gets `conv` and its seq; one naming another conversation, or a conv_seq
 * other than its seq, is refused (an Error: the server sent what it must not). Then checked
 * contiguous from `from` (else {@link NotContiguousError}).
 */
export function sourceEntriesOf(conv: string, entries: readonly Entry[], from: number): Entry[] {
  return entries.map((e, i) => {
    if (e.conv !== "" && e.conv !== conv) throw new Error(`syncd: a batch of source ${conv} holds an entry of conversation ${e.conv}`);
    if (e.convSeq !== 0 && e.convSeq !== e.seq) throw new Error(`syncd: a batch of source ${conv} holds an entry at seq ${e.seq} with conv_seq ${e.convSeq}`);
    if (e.seq !== from + 1 + i) throw new NotContiguousError(`source ${conv}: entry ${i} has seq ${e.seq}, want ${from + 1 + i}`);
    return { ...e, conv, convSeq: e.seq };
  });
}

// --- the in-memory store ---

type Table = Map<string, unknown>;
const DELETED = Symbol("deleted");

const tableNames = [
  "entries", "cursors", "runs", "msgRefs", "view", "readMarks", "deliveredMarks", "peaks", "members", "incomplete", "earlyRecalls", "convs", "outbox",
  "sourceCursors", "sourceEntries", "follows", "earlyEffects",
] as const;
type TableName = (typeof tableNames)[number];

const k = (...parts: (string | number)[]): string => parts.join("\u0000");

/**
 * What a store keeps of a sub-log's run besides its cursor: the run's first position
 * ({@link StoredRange.base}) and, after a rewind, the highest position whose re-arriving entry
 * replaces the stored copy of its msg_id (0: none). The IndexedDB store keeps both in its
 * cursor record.
 */
interface RunInfo {
  base: number;
  repairTo: number;
}

/** Writes staged over the committed tables, applied all at once by commit(): all or nothing. */
class MemTx implements ViewTx, FollowMarks {
  private staged = new Map<TableName, Map<string, unknown>>();
  /** The marks this transaction moved (told to the listener after commit). */
  readonly book = new MarkBook();
  constructor(private readonly tables: Map<TableName, Table>) {}

  get<T>(t: TableName, key: string, _as?: T): T | undefined {
    const s = this.staged.get(t)?.get(key);
    if (s === DELETED) return undefined;
    if (s !== undefined) return s as T;
    return this.tables.get(t)?.get(key) as T | undefined;
  }
  put(t: TableName, key: string, v: unknown): void {
    let m = this.staged.get(t);
    if (!m) this.staged.set(t, (m = new Map<string, unknown>()));
    m.set(key, v);
  }
  del(t: TableName, key: string): void {
    this.put(t, key, DELETED);
  }
  commit(): void {
    for (const [t, m] of this.staged) {
      const table = this.tables.get(t) as Table;
      for (const [key, v] of m) {
        if (v === DELETED) table.delete(key);
        else table.set(key, v);
      }
    }
    this.staged.clear();
  }

  getMsgRef(msgId: string): Promise<{ conv: string; convSeq: number } | undefined> {
    return Promise.resolve(this.get("msgRefs", msgId));
  }
  putMsgRef(msgId: string, ref: { conv: string; convSeq: number }): Promise<void> {
    this.put("msgRefs", msgId, ref);
    return Promise.resolve();
  }
  getView(conv: string, convSeq: number): Promise<StoredMsg | undefined> {
    return Promise.resolve(this.get("view", k(conv, convSeq)));
  }
  putView(conv: string, convSeq: number, m: StoredMsg): Promise<void> {
    this.put("view", k(conv, convSeq), { ...m, convSeq, conv });
    return Promise.resolve();
  }
  delView(conv: string, convSeq: number): Promise<void> {
    this.del("view", k(conv, convSeq));
    return Promise.resolve();
  }
  getReadMark(conv: string, user: string): Promise<number> {
    return Promise.resolve(this.get<number>("readMarks", k(conv, user)) ?? 0);
  }
  putReadMark(conv: string, user: string, upTo: number): Promise<void> {
    return this.raise("readMarks", "read", conv, user, upTo);
  }
  getDeliveredMark(conv: string, user: string): Promise<number> {
    return Promise.resolve(this.get<number>("deliveredMarks", k(conv, user)) ?? 0);
  }
  putDeliveredMark(conv: string, user: string, upTo: number): Promise<void> {
    return this.raise("deliveredMarks", "delivered", conv, user, upTo);
  }
  /** Raises a mark and the conversation's peaks with it, noting the move. */
  private async raise(table: TableName, state: DeliveryState, conv: string, user: string, upTo: number): Promise<void> {
    const from = this.get<number>(table, k(conv, user)) ?? 0;
    if (upTo <= from) return;
    this.put(table, k(conv, user), upTo);
    this.put("peaks", conv, await this.book.moved(conv, { user, state, from, to: upTo }, () => Promise.resolve(this.get<ConvPeaks>("peaks", conv))));
  }
  addMember(conv: string, user: string): Promise<void> {
    this.put("members", k(conv, user), true);
    return Promise.resolve();
  }
  removeMember(conv: string, user: string): Promise<void> {
    this.del("members", k(conv, user));
    return Promise.resolve();
  }
  markMembersIncomplete(conv: string): Promise<void> {
    this.put("incomplete", conv, true);
    return Promise.resolve();
  }
  takeEarlyRecall(msgId: string): Promise<boolean> {
    const had = this.get("earlyRecalls", msgId) !== undefined;
    if (had) this.del("earlyRecalls", msgId);
    return Promise.resolve(had);
  }
  putEarlyRecall(msgId: string): Promise<void> {
    this.put("earlyRecalls", msgId, true);
    return Promise.resolve();
  }
  getEarlyEffects(msgId: string): Promise<MsgEffects | undefined> {
    return Promise.resolve(this.get<MsgEffects>("earlyEffects", msgId));
  }
  putEarlyEffects(msgId: string, fx: MsgEffects | undefined): Promise<void> {
    if (fx) this.put("earlyEffects", msgId, fx);
    else this.del("earlyEffects", msgId);
    return Promise.resolve();
  }
  putConv(conv: string): Promise<void> {
    this.put("convs", conv, true);
    return Promise.resolve();
  }
  followAt(conv: string, convSeq: number): Promise<number | undefined> {
    return Promise.resolve(this.get<number>("follows", k(conv, convSeq)));
  }
  lastFollowBefore(conv: string, before: number): Promise<{ convSeq: number; kind: number } | undefined> {
    const prefix = k(conv, "");
    let best: { convSeq: number; kind: number } | undefined;
    const keys = new Set([...(this.tables.get("follows") as Table).keys(), ...(this.staged.get("follows")?.keys() ?? [])]);
    for (const key of keys) {
      if (!key.startsWith(prefix)) continue;
      const convSeq = Number(key.slice(prefix.length));
      const kind = this.get<number>("follows", key);
      if (kind !== undefined && convSeq < before && (!best || convSeq > best.convSeq)) best = { convSeq, kind };
    }
    return Promise.resolve(best);
  }
}

/**
 * A {@link Store} in memory: for tests, for private browsing where IndexedDB fails, and as the
 * reference the IndexedDB store must behave like. Nothing survives a reload. Values are cloned on
 * the way in and out, as a database would, so the app cannot change stored state by accident.
 */
export class MemoryStore implements Store {
  private readonly tables = new Map<TableName, Table>(tableNames.map((t) => [t, new Map()]));
  /** Makes every write fail (tests of a store that fails: quota, a closed database). */
  failWrites: Error | null = null;
  /** Set when this memory store stands in for an IndexedDB store that could not open: why. */
  notPersistedReason: string | null = null;
  private marksHandler: ((changes: MarksChange[]) => void) | null = null;

  onMarks(fn: (changes: MarksChange[]) => void): void {
    this.marksHandler = fn;
  }

  /** Commits tx and tells the listener what it moved. */
  private commit(tx: MemTx): void {
    tx.commit();
    const changes = tx.book.list();
    if (changes.length > 0) this.marksHandler?.(structuredClone(changes));
  }

  /** Memory: nothing survives a reload. */
  info(): StoreInfo {
    const i: StoreInfo = { kind: "memory", persistent: false, persisted: null };
    if (this.notPersistedReason !== null) i.reason = this.notPersistedReason;
    return i;
  }

  /** Drops the cursors and entries, the sources' too (a resync). */
  resetCursors(): Promise<void> {
    for (const t of ["cursors", "runs", "entries", "sourceCursors", "sourceEntries", "follows"] as const) this.table(t).clear();
    return Promise.resolve();
  }

  getOutbox(cmid: string): Promise<OutboxItem | undefined> {
    const v = this.table("outbox").get(cmid) as OutboxItem | undefined;
    return Promise.resolve(v && structuredClone(v));
  }

  private table(t: TableName): Table {
    return this.tables.get(t) as Table;
  }

  private cursor(sub: number): SubCursor {
    return (this.table("cursors").get(String(sub)) as SubCursor | undefined) ?? { epoch: 0n, pos: 0 };
  }

  /** The run of sub-log sub (a sub-log never written: from position 1, nothing to replace). */
  private run(sub: number): RunInfo {
    return (this.table("runs").get(String(sub)) as RunInfo | undefined) ?? { base: this.cursor(sub).pos + 1, repairTo: 0 };
  }

  load(): Promise<StoreSnapshot> {
    const cursors: SubCursor[] = [];
    for (let sub = 0; sub < 16; sub++) cursors.push(this.cursor(sub));
    while (cursors.length > 1 && cursors[cursors.length - 1]?.epoch === 0n && cursors[cursors.length - 1]?.pos === 0) cursors.pop();
    const outbox = [...this.table("outbox").values()].map((v) => structuredClone(v) as OutboxItem).sort((a, b) => a.seq - b.seq);
    return Promise.resolve({ cursors: structuredClone(cursors), outbox, sources: this.sourceList() });
  }

  async applyBatch(sub: number, epoch: bigint, entries: readonly Entry[]): Promise<Entry[]> {
    if (this.failWrites) throw this.failWrites;
    const cur = this.cursor(sub);
    if (epoch === 0n) throw new NotContiguousError("batch without an epoch");
    if (cur.epoch !== 0n && epoch !== cur.epoch) throw new NotContiguousError(`batch of epoch ${epoch}, stored epoch ${cur.epoch}`);
    if (cur.epoch === 0n && cur.pos !== 0) throw new NotContiguousError(`stored cursor (0, ${cur.pos}) has no epoch`);
    entries.forEach((e, i) => {
      if (e.seq !== cur.pos + 1 + i) throw new NotContiguousError(`entry ${i} has seq ${e.seq}, want ${cur.pos + 1 + i}`);
    });
    if (entries.length === 0) return [];
    const run = this.run(sub);
    const tx = new MemTx(this.tables);
    const fresh: Entry[] = [];
    for (const e of entries) {
      const copy = structuredClone(e);
      tx.put("entries", k(sub, e.seq), copy);
      // Before the dedup: only the user log says where a following started or ended.
      if (isFollowMark(e)) tx.put("follows", k(e.conv, e.convSeq), e.kind);
      if (await applyEntry(tx, copy, e.seq <= run.repairTo)) fresh.push(e);
    }
    const last = (entries[entries.length - 1] as Entry).seq;
    tx.put("cursors", String(sub), { epoch, pos: last });
    tx.put("runs", String(sub), { base: run.base, repairTo: last < run.repairTo ? run.repairTo : 0 } satisfies RunInfo);
    this.commit(tx);
    return fresh;
  }

  setCursor(sub: number, cursor: SubCursor, dropEntries: boolean): Promise<void> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    const prev = this.cursor(sub);
    // A cursor that moves without entries starts a new run after it; one that stays keeps its run,
    // in another epoch too (an EpochChanged that continues: its positions name the same entries).
    const stays = !dropEntries && prev.pos === cursor.pos;
    if (dropEntries) this.dropEntries(sub, 1);
    this.table("runs").set(String(sub), { base: stays ? this.run(sub).base : cursor.pos + 1, repairTo: 0 } satisfies RunInfo);
    this.table("cursors").set(String(sub), { ...cursor });
    return Promise.resolve();
  }

  private dropEntries(sub: number, from: number): void {
    const prefix = k(sub, "");
    for (const key of [...this.table("entries").keys()]) {
      if (key.startsWith(prefix) && Number(key.slice(prefix.length)) >= from) this.table("entries").delete(key);
    }
  }

  readEntries(sub: number, from: number, to: number): Promise<StoredRange> {
    const table = this.table("entries");
    const entries: Entry[] = [];
    if (to - from + 1 <= table.size) {
      for (let seq = Math.max(from, 1); seq <= to; seq++) {
        const e = table.get(k(sub, seq)) as Entry | undefined;
        if (e) entries.push(structuredClone(e));
      }
    } else {
      // A range wider than what is stored: scan what is stored instead of every position.
      const prefix = k(sub, "");
      for (const [key, e] of table) {
        const seq = Number(key.slice(prefix.length));
        if (key.startsWith(prefix) && seq >= from && seq <= to) entries.push(structuredClone(e as Entry));
      }
      entries.sort((a, b) => a.seq - b.seq);
    }
    return Promise.resolve({ cursor: { ...this.cursor(sub) }, base: this.run(sub).base, entries });
  }

  rewind(sub: number, epoch: bigint, from: number): Promise<boolean> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    const cur = this.cursor(sub);
    const run = this.run(sub);
    if (cur.epoch !== epoch || epoch === 0n || from < run.base || from > cur.pos) return Promise.resolve(false);
    this.dropEntries(sub, from);
    this.table("runs").set(String(sub), { base: run.base, repairTo: Math.max(run.repairTo, cur.pos) } satisfies RunInfo);
    this.table("cursors").set(String(sub), { epoch, pos: from - 1 });
    return Promise.resolve(true);
  }

  async applyHistory(entries: readonly Entry[]): Promise<Entry[]> {
    if (this.failWrites) throw this.failWrites;
    const tx = new MemTx(this.tables);
    const fresh: Entry[] = [];
    for (const e of entries) {
      // A HistoryResult's seq is the conv_seq (§6).
      const copy = structuredClone({ ...e, convSeq: e.convSeq || e.seq });
      if (await applyEntry(tx, copy)) fresh.push(e);
    }
    this.commit(tx);
    return fresh;
  }

  putOutbox(item: OutboxItem): Promise<void> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    this.table("outbox").set(item.cmid, structuredClone(item));
    return Promise.resolve();
  }

  deleteOutbox(cmid: string): Promise<void> {
    this.table("outbox").delete(cmid);
    return Promise.resolve();
  }

  messages(conv: string): Promise<Message[]> {
    const prefix = k(conv, "");
    const out: Message[] = [];
    for (const [key, v] of this.table("view")) {
      if (!key.startsWith(prefix)) continue;
      const m = v as StoredMsg & { convSeq: number };
      if (m.kind !== Kind.Message) continue;
      out.push(toMessage(conv, m.convSeq, structuredClone(m)));
    }
    return Promise.resolve(out.sort((a, b) => a.convSeq - b.convSeq));
  }

  readMark(conv: string, user: string): Promise<number> {
    return Promise.resolve((this.table("readMarks").get(k(conv, user)) as number | undefined) ?? 0);
  }

  deliveredMark(conv: string, user: string): Promise<number> {
    return Promise.resolve((this.table("deliveredMarks").get(k(conv, user)) as number | undefined) ?? 0);
  }

  peaks(conv: string): Promise<ConvPeaks> {
    const p = this.table("peaks").get(conv) as ConvPeaks | undefined;
    return Promise.resolve(p ? structuredClone(p) : zeroPeaks());
  }

  async raiseMarks(conv: string, marks: readonly UserMarks[]): Promise<void> {
    if (this.failWrites) throw this.failWrites;
    const tx = new MemTx(this.tables);
    await raiseMarksIn(tx, conv, marks);
    this.commit(tx);
  }

  async messageRange(conv: string, from: number, to: number): Promise<Message[]> {
    const out: Message[] = [];
    if (to - from + 1 <= this.table("view").size) {
      for (let seq = Math.max(from, 1); seq <= to; seq++) {
        const m = this.table("view").get(k(conv, seq)) as StoredMsg | undefined;
        if (m?.kind === Kind.Message) out.push(toMessage(conv, seq, structuredClone(m)));
      }
      return out;
    }
    return (await this.messages(conv)).filter((m) => m.convSeq >= from && m.convSeq <= to);
  }

  members(conv: string): Promise<{ members: string[]; complete: boolean }> {
    const prefix = k(conv, "");
    const members = [...this.table("members").keys()].filter((key) => key.startsWith(prefix)).map((key) => key.slice(prefix.length));
    return Promise.resolve({ members: members.sort(), complete: !this.table("incomplete").has(conv) });
  }

  setMembers(conv: string, users: readonly string[]): Promise<void> {
    const prefix = k(conv, "");
    for (const key of [...this.table("members").keys()]) if (key.startsWith(prefix)) this.table("members").delete(key);
    for (const u of users) this.table("members").set(k(conv, u), true);
    this.table("incomplete").delete(conv);
    return Promise.resolve();
  }

  convHead(conv: string): Promise<number> {
    const prefix = k(conv, "");
    let head = 0;
    for (const [key, v] of this.table("view")) {
      if (key.startsWith(prefix)) head = Math.max(head, (v as { convSeq: number }).convSeq);
    }
    return Promise.resolve(head);
  }

  conversations(): Promise<string[]> {
    return Promise.resolve([...this.table("convs").keys()].sort());
  }

  // --- sources (revision 6) ---

  private sourceList(): SourceCursor[] {
    return [...this.table("sourceCursors")].map(([conv, c]) => ({ conv, ...(c as SubCursor) })).sort((a, b) => (a.conv < b.conv ? -1 : a.conv > b.conv ? 1 : 0));
  }

  private dropSourceEntries(conv: string): void {
    const prefix = k(conv, "");
    for (const key of [...this.table("sourceEntries").keys()]) if (key.startsWith(prefix)) this.table("sourceEntries").delete(key);
  }

  async applySource(conv: string, epoch: bigint, after: number, entries: readonly Entry[]): Promise<Entry[]> {
    if (this.failWrites) throw this.failWrites;
    const tx = new MemTx(this.tables);
    const from = await sourceStart(tx, conv, tx.get<SubCursor>("sourceCursors", conv), epoch, after);
    const own = sourceEntriesOf(conv, entries, from);
    const last = own[own.length - 1];
    if (!last) return [];
    const fresh: Entry[] = [];
    for (const [i, e] of own.entries()) {
      const copy = structuredClone(e);
      tx.put("sourceEntries", k(conv, e.seq), copy);
      if (await applyEntry(tx, copy)) fresh.push(entries[i] as Entry);
    }
    tx.put("sourceCursors", conv, { epoch, pos: last.seq } satisfies SubCursor);
    this.commit(tx);
    return fresh;
  }

  endSource(conv: string, last: number): Promise<void> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    const cur = this.table("sourceCursors").get(conv) as SubCursor | undefined;
    if (!cur) return Promise.resolve();
    if (cur.pos < last) return Promise.reject(new NotContiguousError(`source ${conv} ends at ${last}, stored up to ${cur.pos}`));
    this.table("sourceCursors").delete(conv);
    return Promise.resolve();
  }

  dropSource(conv: string): Promise<void> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    this.table("sourceCursors").delete(conv);
    return Promise.resolve();
  }

  rebaseSource(conv: string, epoch: bigint, head: number): Promise<void> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    if (epoch === 0n) return Promise.reject(new Error(`syncd: rebase of source ${conv} to epoch 0`));
    const cur = this.table("sourceCursors").get(conv) as SubCursor | undefined;
    if (cur?.epoch === epoch && head <= cur.pos) return Promise.resolve(); // never back within an epoch
    if (cur && cur.epoch !== epoch) this.dropSourceEntries(conv);
    this.table("sourceCursors").set(conv, { epoch, pos: head } satisfies SubCursor);
    return Promise.resolve();
  }

  resetSourceForEpoch(conv: string, epoch: bigint, pos: number): Promise<void> {
    if (this.failWrites) return Promise.reject(this.failWrites);
    if (epoch === 0n) return Promise.reject(new Error(`syncd: reset of source ${conv} to epoch 0`));
    this.dropSourceEntries(conv);
    this.table("sourceCursors").set(conv, { epoch, pos } satisfies SubCursor);
    return Promise.resolve();
  }

  sourceCursors(): Promise<SourceCursor[]> {
    return Promise.resolve(this.sourceList());
  }

  async followStart(conv: string): Promise<number | null> {
    const m = await new MemTx(this.tables).lastFollowBefore(conv, Number.MAX_SAFE_INTEGER);
    return m && followStarts(m.kind) ? m.convSeq : null;
  }

  sourceEntries(conv: string, from: number, to: number): Promise<Entry[]> {
    const prefix = k(conv, "");
    const out: Entry[] = [];
    for (const [key, e] of this.table("sourceEntries")) {
      const seq = Number(key.slice(prefix.length));
      if (key.startsWith(prefix) && seq >= from && seq <= to) out.push(structuredClone(e as Entry));
    }
    return Promise.resolve(out.sort((a, b) => a.seq - b.seq));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
