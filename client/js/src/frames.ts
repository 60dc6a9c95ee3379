// Every frame of docs/PROTOCOL.md §6 as a typed interface, and its body encoding (§4).
//
// Integer representation, chosen deliberately:
//
// * `bigint` for epochs and times. The server makes an epoch from the clock in Unix nanoseconds
//   (log/tx.go newEpoch), about 1.7e18, far beyond 2^53; times (`time`, `server_time`,
//   `token_expires`) are int64 Unix nanoseconds too. A `number` would silently lose their last
//   digits, and two different epochs could compare equal.
// * `number` for positions (`seq`, `conv_seq`, `pos`, `head`, `first`, `up_to`, `before`,
//   `ceiling`), request ids, counts, limits, durations and codes. Positions count entries, so
//   2^53 (9e15) is out of reach of any log, and numbers keep the app's code simple
//   (`entry.convSeq + 1`). A position on the wire beyond 2^53 − 1 is refused as malformed rather
//   than rounded; the encoder refuses to write one (RangeError).
// * A value out of its declared range (a uint32 beyond 2^32 − 1, a negative uint) is refused as
//   malformed (§4: a receiver MAY; the Go decoder truncates instead). A float where an integer is
//   expected is malformed (§4).
//
// Field names are camelCase here and snake_case on the wire; each schema below lists the wire
// keys in the order of the Go structs (proto/*.go), which is the order the reference encoder
// writes, so that our encoding of a frame is byte-identical to Go's (proto/testdata/golden).

import { MalformedError, MsgFloat, decodeBody, encodeBody, type EncValue, type MsgMap, type MsgValue } from "./msgpack.js";

/** Frame type numbers (§6). Part of the wire format: never renumbered. */
export const FrameType = {
  Hello: 1,
  Welcome: 2,
  Error: 3,
  Refresh: 4,
  Refreshed: 5,
  Report: 6,
  Send: 10,
  Ack: 11,
  MarkRead: 12,
  Recall: 13,
  CreateGroup: 14,
  AddMembers: 15,
  RemoveMembers: 16,
  SetRole: 17,
  /** Revision 7. */
  Edit: 18,
  /** Revision 7. */
  React: 19,
  SyncStart: 20,
  Batch: 21,
  Heartbeat: 22,
  TooOld: 23,
  EpochChanged: 24,
  Rebase: 25,
  CursorAck: 26,
  Stale: 27,
  SourceEnd: 28,
  ConvList: 30,
  ConvListResult: 31,
  ConvState: 32,
  ConvStateResult: 33,
  History: 34,
  HistoryResult: 35,
  HeadCheck: 36,
  Head: 37,
  Members: 38,
  MembersResult: 39,
  Digest: 40,
  DigestResult: 41,
  Receipts: 42,
  ReceiptsResult: 43,
  Readers: 44,
  ReadersResult: 45,
} as const;

/** A frame type number. */
export type FrameTypeNumber = (typeof FrameType)[keyof typeof FrameType];

/** Entry kinds (§5). An entry of an unknown kind is stored (its position counts) and otherwise ignored. */
export const Kind = {
  Message: 1,
  Receipt: 2,
  Recall: 3,
  GroupCreate: 4,
  MemberAdd: 5,
  MemberRemove: 6,
  RoleChange: 7,
  /**
   * Revision 5, written by the server only: devices of `sender` have stored the conversation up
   * to `up_to` (its delivered mark moved, §8.8).
   */
  Delivered: 8,
  /** Revision 7: `sender` replaced the body of its message `target` with `body`. */
  Edit: 9,
  /**
   * Revision 7: `sender` put `reaction` on the message `target`, or took it off (`remove`). The
   * last reaction entry of a (target, sender, reaction) in conv_seq order says whether it is on.
   */
  Reaction: 10,
} as const;

/** What a Report says the device found wrong (§6 Report): a gap in a Batch, or a Digest that differs from its own. */
export const ReportKind = { Gap: 1, Mismatch: 2 } as const;

/** Group roles (§5): 1 member, 2 admin, 3 owner. */
export const Role = { Member: 1, Admin: 2, Owner: 3 } as const;

/** Conversation kinds (§5): 1 direct, 2 group. */
export const ConvKind = { Direct: 1, Group: 2 } as const;

/**
 * The revision of syncd/1 this SDK speaks (Hello.proto_version, §9): 8, sub-logs (3),
 * reconciliation (4: Digest, Report), delivery states (5: kind 8, Receipts, Readers), large
 * groups as sources of the sync stream (6: SourceEnd, `sources`, `source`, `after`), edits and
 * reactions (7: Edit, React, kinds 9 and 10, folded entries) and cursors that hold across a
 * restore from a backup (8: EpochChanged's `continues`) included.
 * The connection runs at min(ours, the server's) (Welcome.proto_version): the SDK sends Digest
 * and Report only on a connection of revision 4 or more, Receipts and Readers only on one of
 * revision 5 or more. A client whose store cannot keep sources' cursors announces
 * {@link REVISION_RECEIPTS} instead (a server then refuses to sync a user who follows a large
 * group, `needs_upgrade`, rather than let the device miss its entries).
 */
export const PROTO_VERSION = 8;

/** The first revision with Digest, DigestResult and Report (§9). */
export const REVISION_DIGEST = 4;

/** The first revision with delivered entries (kind 8), ConvInfo's marks, Receipts and Readers (§8.8). */
export const REVISION_RECEIPTS = 5;

/** The first revision with sources (§6 "Sources: large groups"): SyncStart.sources, `source` and `after`, SourceEnd. */
export const REVISION_SOURCES = 6;

/** The first revision with Edit and React, the kinds edit (9) and reaction (10), and folded entries (§5). */
export const REVISION_EDITS = 7;

/** Limits of §3 and §4. */
export const Limits = {
  /** The frame limit before Welcome announces max_frame. */
  defaultMaxFrame: 1 << 20,
  /** No frame may ever exceed this. */
  maxFrameLimit: 16 << 20,
  /** The largest message body. */
  maxBody: 64 << 10,
  /** Most sub-logs a user's stream has (§6 Sub-logs). */
  maxSubLogs: 16,
  /** Longest token. */
  maxTokenLen: 4096,
  /** Welcome.limits.max_batch default. */
  defaultMaxBatch: 256,
  /** Welcome.limits.heartbeat_ms default. */
  defaultHeartbeatMs: 15000,
  /** The most conv_seqs one Receipts names (§6). */
  maxReceiptSeqs: 100,
  /** The most sources one SyncStart names (§6 "Sources"). */
  maxSources: 1000,
  /** The longest reaction, in bytes of UTF-8 (§6 React). */
  maxReactionLen: 64,
} as const;

/** One log entry (§5): of the user log in a Batch, of a conversation log in a HistoryResult. */
export interface Entry {
  /** Position in the log it was read from: seq in a Batch, conv_seq in a HistoryResult. */
  seq: number;
  kind: number;
  msgId: string;
  conv: string;
  convSeq: number;
  sender: string;
  /** Server time of the append, Unix ns. */
  time: bigint;
  /** Kind 1: the message; kind 9 (edit): the new body. */
  body: Uint8Array;
  /** Kind 2: read up to this conv_seq; kind 8: the sender's devices stored the conversation up to it. */
  upTo: number;
  /** Kinds 3, 9, 10: msg_id of the message recalled, edited or reacted to. */
  target: string;
  /** Kinds 4–7; in a user log, empty when more than 32 users are concerned (see memberCount). */
  members: string[];
  /** Kind 7: the role given. */
  role: number;
  /** Kinds 4–7 in a user log: how many users were concerned when members was left out. */
  memberCount: number;
  /**
   * Revision 6, kinds 4–6 in a user log: this membership entry starts (4, 5) or ends (6) the
   * user's following of a large group as a source of the sync stream (§6 "Sources").
   */
  source: boolean;
  /** Revision 7, kind 10: the reaction, 1–64 bytes of UTF-8. */
  reaction: string;
  /** Revision 7, kind 10: the reaction is taken off. */
  remove: boolean;
  /**
   * Revision 7, user logs only: this entry is folded — the entry at this seq of the same log
   * supersedes it (§5 "Folded entries"); 0 when it is not. A folded entry is stored (its position
   * counts, its msg_id is deduplicated) and not applied; it has no body, up_to, reaction or remove.
   */
  folded: number;
  /**
   * Revision 7, a folded entry that had a body (an edit): the SHA-256 of that body (32 bytes),
   * which a digest hashes in place of the body's (§6 Digest); empty otherwise.
   */
  bodyHash: Uint8Array;
}

/** A conversation as the requesting user sees it (§5). */
export interface ConvInfo {
  conv: string;
  kind: number;
  epoch: bigint;
  first: number;
  head: number;
  members: string[];
  readMark: number;
  memberCount: number;
  role: number;
  /** Revision 5: the requesting user's delivered mark (§8.8), at least readMark. */
  deliveredMark: number;
  /** Revision 5, direct conversations: the other member's delivered mark (0 in a group). */
  peerDelivered: number;
  /** Revision 5, direct conversations: the other member's read mark (0 in a group). */
  peerRead: number;
  /** Revision 6: a large group, which the user follows as a source of its sync stream (§6 "Sources"). */
  source: boolean;
}

/**
 * The state of one conv_seq in a ReceiptsResult (§6): `members` who had joined before it,
 * and how many of them have it `delivered` and `read` (read ≤ delivered ≤ members). The
 * message's sender is one of `members` and is not left out (§8.8).
 */
export interface ReceiptCount {
  convSeq: number;
  members: number;
  delivered: number;
  read: number;
}

/** The connection's limits (Welcome.limits); 0 = default or not announced. */
export interface WireLimits {
  maxFrame: number;
  maxBody: number;
  maxBatch: number;
  sendRatePerS: number;
  heartbeatMs: number;
  maxStreams: number;
  sendBurst: number;
  queryRatePerS: number;
  queryBurst: number;
  requestIdleMs: number;
}

/** One sub-log's cursor in SyncStart.subs. */
export interface SubCursor {
  epoch: bigint;
  pos: number;
}

/**
 * One source's cursor in SyncStart.sources (revision 6): the device's cursor in a large group's
 * conversation log — the log's epoch, and the last conv_seq stored.
 */
export interface SourceCursor {
  conv: string;
  epoch: bigint;
  pos: number;
}

/** One sub-log's head in Head.subs. */
export interface SubHead {
  epoch: bigint;
  head: number;
  first: number;
}

/** A member and its role, in MembersResult. */
export interface Member {
  user: string;
  role: number;
}

/** 1 Hello (C→S). */
export interface Hello { type: 1; token: string; device: string; clientVersion: string; protoVersion: number }
/** 2 Welcome (S→C). */
export interface Welcome { type: 2; user: string; device: string; serverTime: bigint; session: string; protoVersion: number; limits: WireLimits; tokenExpires: bigint }
/** 3 Error (S→C). */
export interface ErrorFrame { type: 3; id: number; code: number; message: string; retryAfterMs: number }
/** 4 Refresh (C→S). */
export interface Refresh { type: 4; token: string }
/** 5 Refreshed (S→C). */
export interface Refreshed { type: 5; tokenExpires: bigint }
/**
 * 6 Report (C→S, control stream, revision 4): the device found its copy of a log wrong. `kind`
 * is a {@link ReportKind}; `conv` "" = the user's own log (sub-log `sub`); gap: `from` = the
 * stored position + 1, `to` = the first seq the Batch carried instead (0: none); mismatch: the
 * range `from`..`to` whose digest differed. Never answered (but for an Error when it is invalid).
 */
export interface Report { type: 6; kind: number; conv: string; sub: number; epoch: bigint; from: number; to: number }
/** 10 Send (C→S). */
export interface Send { type: 10; id: number; conv: string; cmid: string; body: Uint8Array; peer: string }
/** 11 Ack (S→C). */
export interface Ack { type: 11; id: number; msgId: string; conv: string; convSeq: number; time: bigint; epoch: bigint; duplicate: boolean; noop: boolean }
/** 12 MarkRead (C→S). */
export interface MarkRead { type: 12; id: number; conv: string; cmid: string; upTo: number }
/** 13 Recall (C→S). */
export interface Recall { type: 13; id: number; conv: string; cmid: string; target: string }
/** 14 CreateGroup (C→S). */
export interface CreateGroup { type: 14; id: number; conv: string; cmid: string; members: string[] }
/** 15 AddMembers (C→S). */
export interface AddMembers { type: 15; id: number; conv: string; cmid: string; members: string[] }
/** 16 RemoveMembers (C→S). */
export interface RemoveMembers { type: 16; id: number; conv: string; cmid: string; members: string[] }
/** 17 SetRole (C→S). */
export interface SetRole { type: 17; id: number; conv: string; cmid: string; members: string[]; role: number }
/** 18 Edit (C→S, revision 7): replace the body of this user's message `target` (no edit window). */
export interface Edit { type: 18; id: number; conv: string; cmid: string; target: string; body: Uint8Array }
/** 19 React (C→S, revision 7): put `reaction` on the message `target`, or take it off (`remove`). */
export interface React { type: 19; id: number; conv: string; cmid: string; target: string; reaction: string; remove: boolean }
/** 20 SyncStart (C→S). `sources` (revision 6): the cursor of each source the device follows. */
export interface SyncStart { type: 20; epoch: bigint; pos: number; ceiling: number; maxBatch: number; subs: SubCursor[]; sources: SourceCursor[] }
/**
 * 21 Batch (S→C). `source` (revision 6): the large group whose conversation log the entries are
 * of ("" for the user log and its sub-logs; `seq` is then the conv_seq, and epoch, head and
 * contiguity are the conversation log's). `after` (revision 6, a source's batches only): the
 * position the first entry follows, when the device's cursor does not say it (0: absent).
 */
export interface Batch { type: 21; epoch: bigint; entries: Entry[]; head: number; sub: number; source: string; after: number }
/** 22 Heartbeat (S→C). `source` (revision 6): the source it is of ("" for the user log and its sub-logs). */
export interface Heartbeat { type: 22; epoch: bigint; head: number; serverTime: bigint; sub: number; source: string }
/** 23 TooOld (S→C). `source` (revision 6): the source it is about. */
export interface TooOld { type: 23; epoch: bigint; first: number; head: number; sub: number; source: string }
/**
 * 24 EpochChanged (S→C). `source` (revision 6): the source it is about. `continues` (revision 8):
 * the log was restored from a backup holding every position up to the device's cursor, so the
 * stored entries and position stay good under the new epoch (§8.4); absent = false.
 */
export interface EpochChanged { type: 24; epoch: bigint; first: number; head: number; sub: number; source: string; continues: boolean }
/** 25 Rebase (S→C). `source` (revision 6): the source it is about. */
export interface Rebase { type: 25; epoch: bigint; head: number; sub: number; source: string }
/** 26 CursorAck (C→S). `source` (revision 6): the source acknowledged ("" for the user log and its sub-logs). */
export interface CursorAck { type: 26; epoch: bigint; pos: number; sub: number; source: string }
/** 27 Stale (S→C). `source` (revision 6): the source whose replica this is. */
export interface Stale { type: 27; epoch: bigint; head: number; unheardMs: number; sub: number; source: string }
/**
 * 28 SourceEnd (S→C, revision 6): the user has no entry of source `source` after conv_seq
 * `last` (removed from the group at `last` + 1, or a SyncStart named a source the user does not
 * follow beyond its cursor). The client drops the source's cursor once it has stored it up to `last`.
 */
export interface SourceEnd { type: 28; source: string; last: number }
/** 30 ConvList (C→S). */
export interface ConvList { type: 30; id: number; after: string; limit: number }
/** 31 ConvListResult (S→C). */
export interface ConvListResult { type: 31; id: number; convs: ConvInfo[]; more: boolean }
/** 32 ConvState (C→S). */
export interface ConvState { type: 32; id: number; conv: string }
/** 33 ConvStateResult (S→C). */
export interface ConvStateResult { type: 33; id: number; conv: ConvInfo }
/** 34 History (C→S). */
export interface History { type: 34; id: number; conv: string; before: number; limit: number }
/** 35 HistoryResult (S→C). */
export interface HistoryResult { type: 35; id: number; entries: Entry[]; epoch: bigint; first: number; head: number }
/** 36 HeadCheck (C→S). */
export interface HeadCheck { type: 36; id: number }
/** 37 Head (S→C). */
export interface Head { type: 37; id: number; epoch: bigint; head: number; first: number; subs: SubHead[] }
/** 38 Members (C→S). */
export interface Members { type: 38; id: number; conv: string; after: string; limit: number }
/** 39 MembersResult (S→C). */
export interface MembersResult { type: 39; id: number; members: Member[]; more: boolean }
/**
 * 40 Digest (C→S, revision 4): the digest of positions `from`..`to` (0 = up to the head) of the
 * user's log (`conv` "", sub-log `sub`) or of a conversation's history, in `epoch`.
 */
export interface Digest { type: 40; id: number; conv: string; sub: number; epoch: bigint; from: number; to: number }
/**
 * 41 DigestResult (S→C, revision 4): the digest (32 bytes, see digest.ts) of the entries at
 * `from`..`to` — the part of the asked range the server covered (a page at most; `to` = `from` − 1
 * and `count` 0 when nothing is there yet) — and the log's retained range `first`..`head`.
 */
export interface DigestResult { type: 41; id: number; epoch: bigint; from: number; to: number; count: number; digest: Uint8Array; first: number; head: number }
/** 42 Receipts (C→S, revision 5): delivered and read counts of 1 to 100 conv_seqs of `conv` (§8.8). */
export interface Receipts { type: 42; id: number; conv: string; seqs: number[] }
/** 43 ReceiptsResult (S→C, revision 5): one count per requested conv_seq, in the request's order. */
export interface ReceiptsResult { type: 43; id: number; counts: ReceiptCount[] }
/**
 * 44 Readers (C→S, revision 5): a page of the members (ids above `after`) who have `convSeq`
 * delivered (`state` {@link Kind.Delivered}) or read ({@link Kind.Receipt}); `limit` 0 = 1,000.
 */
export interface Readers { type: 44; id: number; conv: string; convSeq: number; state: number; after: string; limit: number }
/**
 * 45 ReadersResult (S→C, revision 5): `users` ascending; `next` the last member id the server
 * looked at (the next page's `after`); `more` while members remain to be looked at — a page may
 * be empty with `more` set (the server looks at 10,000 member records per request at most).
 */
export interface ReadersResult { type: 45; id: number; users: string[]; next: string; more: boolean }

/** Any frame this version knows. */
export type Frame =
  | Hello | Welcome | ErrorFrame | Refresh | Refreshed | Report
  | Send | Ack | MarkRead | Recall | CreateGroup | AddMembers | RemoveMembers | SetRole | Edit | React
  | SyncStart | Batch | Heartbeat | TooOld | EpochChanged | Rebase | CursorAck | Stale | SourceEnd
  | ConvList | ConvListResult | ConvState | ConvStateResult | History | HistoryResult
  | HeadCheck | Head | Members | MembersResult | Digest | DigestResult
  | Receipts | ReceiptsResult | Readers | ReadersResult;

/** A mutation request (answered by Ack or Error). */
export type Mutation = Send | MarkRead | Recall | CreateGroup | AddMembers | RemoveMembers | SetRole | Edit | React;
/** A query request. */
export type Query = ConvList | ConvState | History | HeadCheck | Members | Digest | Receipts | Readers;
/** A request: carries an id its response repeats. */
export type Request = Mutation | Query;
/** A response on a request stream. */
export type Response = Ack | ConvListResult | ConvStateResult | HistoryResult | Head | MembersResult | DigestResult | ReceiptsResult | ReadersResult | ErrorFrame;

/** A frame of the given type number. */
export type FrameOf<T extends Frame["type"]> = Extract<Frame, { type: T }>;

// --- schemas ---

/** "strs": an array of str; "poss": an array of positions (Receipts.seqs). */
type Scalar = "u8" | "u16" | "u32" | "pos" | "u64" | "i64" | "str" | "bin" | "bool" | "strs" | "poss";
type FieldKind = Scalar | { readonly map: Schema } | { readonly list: Schema };
/** [property, wire key, kind], in the Go struct's order. */
type Schema = readonly (readonly [string, string, FieldKind])[];

const entrySchema: Schema = [
  ["seq", "seq", "pos"],
  ["kind", "kind", "u8"],
  ["msgId", "msg_id", "str"],
  ["conv", "conv", "str"],
  ["convSeq", "conv_seq", "pos"],
  ["sender", "sender", "str"],
  ["time", "time", "i64"],
  ["body", "body", "bin"],
  ["upTo", "up_to", "pos"],
  ["target", "target", "str"],
  ["members", "members", "strs"],
  ["role", "role", "u8"],
  ["memberCount", "member_count", "u32"],
  ["source", "source", "bool"],
  ["reaction", "reaction", "str"],
  ["remove", "remove", "bool"],
  ["folded", "folded", "pos"],
  ["bodyHash", "body_hash", "bin"],
];

const convInfoSchema: Schema = [
  ["conv", "conv", "str"],
  ["kind", "kind", "u8"],
  ["epoch", "epoch", "u64"],
  ["first", "first", "pos"],
  ["head", "head", "pos"],
  ["members", "members", "strs"],
  ["readMark", "read_mark", "pos"],
  ["memberCount", "member_count", "u32"],
  ["role", "role", "u8"],
  ["deliveredMark", "delivered_mark", "pos"],
  ["peerDelivered", "peer_delivered", "pos"],
  ["peerRead", "peer_read", "pos"],
  ["source", "source", "bool"],
];

const receiptCountSchema: Schema = [
  ["convSeq", "conv_seq", "pos"],
  ["members", "members", "u32"],
  ["delivered", "delivered", "u32"],
  ["read", "read", "u32"],
];

const limitsSchema: Schema = [
  ["maxFrame", "max_frame", "u32"],
  ["maxBody", "max_body", "u32"],
  ["maxBatch", "max_batch", "u32"],
  ["sendRatePerS", "send_rate_per_s", "u32"],
  ["heartbeatMs", "heartbeat_ms", "u32"],
  ["maxStreams", "max_streams", "u32"],
  ["sendBurst", "send_burst", "u32"],
  ["queryRatePerS", "query_rate_per_s", "u32"],
  ["queryBurst", "query_burst", "u32"],
  ["requestIdleMs", "request_idle_ms", "u32"],
];

const subCursorSchema: Schema = [
  ["epoch", "epoch", "u64"],
  ["pos", "pos", "pos"],
];

const sourceCursorSchema: Schema = [
  ["conv", "conv", "str"],
  ["epoch", "epoch", "u64"],
  ["pos", "pos", "pos"],
];

const subHeadSchema: Schema = [
  ["epoch", "epoch", "u64"],
  ["head", "head", "pos"],
  ["first", "first", "pos"],
];

const memberSchema: Schema = [
  ["user", "user", "str"],
  ["role", "role", "u8"],
];

const mutationHead: Schema = [
  ["id", "id", "pos"],
  ["conv", "conv", "str"],
  ["cmid", "cmid", "str"],
];

const schemas: { readonly [T in Frame["type"]]: Schema } = {
  1: [["token", "token", "str"], ["device", "device", "str"], ["clientVersion", "client_version", "str"], ["protoVersion", "proto_version", "u32"]],
  2: [
    ["user", "user", "str"],
    ["device", "device", "str"],
    ["serverTime", "server_time", "i64"],
    ["session", "session", "str"],
    ["protoVersion", "proto_version", "u32"],
    ["limits", "limits", { map: limitsSchema }],
    ["tokenExpires", "token_expires", "i64"],
  ],
  3: [["id", "id", "pos"], ["code", "code", "u16"], ["message", "message", "str"], ["retryAfterMs", "retry_after_ms", "u32"]],
  4: [["token", "token", "str"]],
  5: [["tokenExpires", "token_expires", "i64"]],
  6: [["kind", "kind", "u8"], ["conv", "conv", "str"], ["sub", "sub", "u32"], ["epoch", "epoch", "u64"], ["from", "from", "pos"], ["to", "to", "pos"]],
  10: [...mutationHead, ["body", "body", "bin"], ["peer", "peer", "str"]],
  11: [
    ["id", "id", "pos"],
    ["msgId", "msg_id", "str"],
    ["conv", "conv", "str"],
    ["convSeq", "conv_seq", "pos"],
    ["time", "time", "i64"],
    ["epoch", "epoch", "u64"],
    ["duplicate", "duplicate", "bool"],
    ["noop", "noop", "bool"],
  ],
  12: [...mutationHead, ["upTo", "up_to", "pos"]],
  13: [...mutationHead, ["target", "target", "str"]],
  14: [...mutationHead, ["members", "members", "strs"]],
  15: [...mutationHead, ["members", "members", "strs"]],
  16: [...mutationHead, ["members", "members", "strs"]],
  17: [...mutationHead, ["members", "members", "strs"], ["role", "role", "u8"]],
  18: [...mutationHead, ["target", "target", "str"], ["body", "body", "bin"]],
  19: [...mutationHead, ["target", "target", "str"], ["reaction", "reaction", "str"], ["remove", "remove", "bool"]],
  20: [
    ["epoch", "epoch", "u64"],
    ["pos", "pos", "pos"],
    ["ceiling", "ceiling", "pos"],
    ["maxBatch", "max_batch", "u32"],
    ["subs", "subs", { list: subCursorSchema }],
    ["sources", "sources", { list: sourceCursorSchema }],
  ],
  21: [
    ["epoch", "epoch", "u64"],
    ["entries", "entries", { list: entrySchema }],
    ["head", "head", "pos"],
    ["sub", "sub", "u32"],
    ["source", "source", "str"],
    ["after", "after", "pos"],
  ],
  22: [["epoch", "epoch", "u64"], ["head", "head", "pos"], ["serverTime", "server_time", "i64"], ["sub", "sub", "u32"], ["source", "source", "str"]],
  23: [["epoch", "epoch", "u64"], ["first", "first", "pos"], ["head", "head", "pos"], ["sub", "sub", "u32"], ["source", "source", "str"]],
  24: [["epoch", "epoch", "u64"], ["first", "first", "pos"], ["head", "head", "pos"], ["sub", "sub", "u32"], ["source", "source", "str"], ["continues", "continues", "bool"]],
  25: [["epoch", "epoch", "u64"], ["head", "head", "pos"], ["sub", "sub", "u32"], ["source", "source", "str"]],
  26: [["epoch", "epoch", "u64"], ["pos", "pos", "pos"], ["sub", "sub", "u32"], ["source", "source", "str"]],
  27: [["epoch", "epoch", "u64"], ["head", "head", "pos"], ["unheardMs", "unheard_ms", "pos"], ["sub", "sub", "u32"], ["source", "source", "str"]],
  28: [["source", "source", "str"], ["last", "last", "pos"]],
  30: [["id", "id", "pos"], ["after", "after", "str"], ["limit", "limit", "u32"]],
  31: [["id", "id", "pos"], ["convs", "convs", { list: convInfoSchema }], ["more", "more", "bool"]],
  32: [["id", "id", "pos"], ["conv", "conv", "str"]],
  33: [["id", "id", "pos"], ["conv", "conv", { map: convInfoSchema }]],
  34: [["id", "id", "pos"], ["conv", "conv", "str"], ["before", "before", "pos"], ["limit", "limit", "u32"]],
  35: [
    ["id", "id", "pos"],
    ["entries", "entries", { list: entrySchema }],
    ["epoch", "epoch", "u64"],
    ["first", "first", "pos"],
    ["head", "head", "pos"],
  ],
  36: [["id", "id", "pos"]],
  37: [["id", "id", "pos"], ["epoch", "epoch", "u64"], ["head", "head", "pos"], ["first", "first", "pos"], ["subs", "subs", { list: subHeadSchema }]],
  38: [["id", "id", "pos"], ["conv", "conv", "str"], ["after", "after", "str"], ["limit", "limit", "u32"]],
  39: [["id", "id", "pos"], ["members", "members", { list: memberSchema }], ["more", "more", "bool"]],
  40: [["id", "id", "pos"], ["conv", "conv", "str"], ["sub", "sub", "u32"], ["epoch", "epoch", "u64"], ["from", "from", "pos"], ["to", "to", "pos"]],
  41: [
    ["id", "id", "pos"],
    ["epoch", "epoch", "u64"],
    ["from", "from", "pos"],
    ["to", "to", "pos"],
    ["count", "count", "pos"],
    ["digest", "digest", "bin"],
    ["first", "first", "pos"],
    ["head", "head", "pos"],
  ],
  42: [["id", "id", "pos"], ["conv", "conv", "str"], ["seqs", "seqs", "poss"]],
  43: [["id", "id", "pos"], ["counts", "counts", { list: receiptCountSchema }]],
  44: [
    ["id", "id", "pos"],
    ["conv", "conv", "str"],
    ["convSeq", "conv_seq", "pos"],
    ["state", "state", "u8"],
    ["after", "after", "str"],
    ["limit", "limit", "u32"],
  ],
  45: [["id", "id", "pos"], ["users", "users", "strs"], ["next", "next", "str"], ["more", "more", "bool"]],
};

/** Whether t is a frame type this version knows. */
export function knownType(t: number): t is Frame["type"] {
  return Object.prototype.hasOwnProperty.call(schemas, t);
}

const typeNames: ReadonlyMap<number, string> = new Map(
  Object.entries(FrameType).map(([k, v]) => [v, k.replace(/[A-Z]/g, (c, i: number) => (i ? "_" : "") + c.toLowerCase())]),
);

/** The snake_case name of a frame type ("sync_start", …) or "type(N)". */
export function typeName(t: number): string {
  return typeNames.get(t) ?? `type(${t})`;
}

// --- decoding ---

const uintMax: Record<"u8" | "u16" | "u32", number> = { u8: 0xff, u16: 0xffff, u32: 0xffff_ffff };

function bad(key: string, what: string): never {
  throw new MalformedError(`${key}: ${what}`);
}

function describe(v: MsgValue): string {
  if (v instanceof MsgFloat) return "a float";
  if (v instanceof Uint8Array) return "bin";
  if (v instanceof Map) return "a map";
  if (Array.isArray(v)) return "an array";
  return typeof v;
}

function decodeScalar(key: string, kind: Scalar, v: MsgValue | undefined): unknown {
  const missing = v === undefined || v === null; // §4: a missing key or nil is the zero value
  switch (kind) {
    case "u8":
    case "u16":
    case "u32":
      if (missing) return 0;
      if (typeof v !== "number") bad(key, `want an integer, got ${describe(v)}`);
      if (v < 0 || v > uintMax[kind]) bad(key, `${v} out of range for ${kind}`);
      return v;
    case "pos":
      if (missing) return 0;
      if (typeof v === "bigint") bad(key, `${v} beyond 2^53: not representable exactly (this SDK keeps positions as numbers)`);
      if (typeof v !== "number") bad(key, `want an integer, got ${describe(v)}`);
      if (v < 0) bad(key, `negative value ${v} for a uint64`);
      return v;
    case "u64":
      if (missing) return 0n;
      if (typeof v !== "number" && typeof v !== "bigint") bad(key, `want an integer, got ${describe(v)}`);
      if (v < 0) bad(key, `negative value ${v} for a uint64`);
      return BigInt(v);
    case "i64":
      if (missing) return 0n;
      if (typeof v !== "number" && typeof v !== "bigint") bad(key, `want an integer, got ${describe(v)}`);
      if (typeof v === "bigint" && v > 0x7fff_ffff_ffff_ffffn) bad(key, `${v} beyond int64`);
      return BigInt(v);
    case "str":
      if (missing) return "";
      if (typeof v !== "string") bad(key, `want a str, got ${describe(v)}`);
      return v;
    case "bin":
      if (missing) return new Uint8Array(0);
      if (!(v instanceof Uint8Array)) bad(key, `want bin, got ${describe(v)}`);
      return v;
    case "bool":
      if (missing) return false;
      if (typeof v !== "boolean") bad(key, `want a bool, got ${describe(v)}`);
      return v;
    case "strs":
      if (missing) return [];
      if (!Array.isArray(v)) bad(key, `want an array, got ${describe(v)}`);
      return v.map((s, i) => {
        if (typeof s !== "string") bad(`${key}[${i}]`, `want a str, got ${describe(s)}`);
        return s;
      });
    case "poss":
      if (missing) return [];
      if (!Array.isArray(v)) bad(key, `want an array, got ${describe(v)}`);
      return v.map((x, i) => decodeScalar(`${key}[${i}]`, "pos", x));
  }
}

function decodeMap(schema: Schema, m: MsgMap | null | undefined, at: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [prop, key, kind] of schema) {
    const v = m?.get(key);
    const path = at ? `${at}.${key}` : key;
    if (typeof kind === "string") {
      out[prop] = decodeScalar(path, kind, v);
    } else if ("map" in kind) {
      if (v !== undefined && v !== null && !(v instanceof Map)) bad(path, `want a map, got ${describe(v)}`);
      out[prop] = decodeMap(kind.map, v, path);
    } else {
      if (v === undefined || v === null) {
        out[prop] = [];
        continue;
      }
      if (!Array.isArray(v)) bad(path, `want an array, got ${describe(v)}`);
      out[prop] = v.map((x, i) => {
        if (x !== null && !(x instanceof Map)) bad(`${path}[${i}]`, `want a map, got ${describe(x)}`);
        return decodeMap(kind.list, x, `${path}[${i}]`);
      });
    }
  }
  return out;
}

/** Thrown by {@link decodeFrame} for a type this version does not know (the frame is skipped, §3). */
export class UnknownTypeError extends Error {
  constructor(readonly frameType: number) {
    super(`unknown frame type ${frameType}`);
    this.name = "UnknownTypeError";
  }
}

/**
 * Decodes the body of a frame of type t. Missing keys are zero values, unknown keys are ignored
 * (§4). Throws {@link UnknownTypeError} or {@link MalformedError}.
 */
export function decodeFrame(t: number, body: Uint8Array): Frame {
  if (!knownType(t)) {
    throw new UnknownTypeError(t);
  }
  const m = decodeBody(body);
  const f = decodeMap(schemas[t], m, "");
  f["type"] = t;
  return f as unknown as Frame;
}

// --- encoding ---

function isZero(kind: FieldKind, v: unknown): boolean {
  if (typeof kind !== "string") {
    if ("list" in kind) return !Array.isArray(v) || v.length === 0;
    return v === undefined || Object.keys(encodeMap(kind.map, v as Record<string, unknown>, "")).length === 0;
  }
  switch (kind) {
    case "bin":
    case "strs":
    case "poss":
      return v === undefined || (v as ArrayLike<unknown>).length === 0;
    default:
      return v === undefined || v === 0 || v === 0n || v === "" || v === false;
  }
}

function checkScalar(key: string, kind: Scalar, v: unknown): EncValue {
  const wrong = (what: string): never => {
    throw new RangeError(`${key}: ${what}`);
  };
  switch (kind) {
    case "u8":
    case "u16":
    case "u32":
    case "pos":
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) wrong(`want a non-negative integer number, got ${String(v)}`);
      if (kind !== "pos" && (v as number) > uintMax[kind]) wrong(`${String(v)} out of range for ${kind}`);
      return v as number;
    case "u64":
      if (typeof v !== "bigint" || v < 0n || v > 0xffff_ffff_ffff_ffffn) wrong(`want a uint64 bigint, got ${String(v)}`);
      return v as bigint;
    case "i64":
      if (typeof v !== "bigint" || v < -0x8000_0000_0000_0000n || v > 0x7fff_ffff_ffff_ffffn) wrong(`want an int64 bigint, got ${String(v)}`);
      return v as bigint;
    case "str":
      if (typeof v !== "string") wrong("want a string");
      return v as string;
    case "bin":
      if (!(v instanceof Uint8Array)) wrong("want a Uint8Array");
      return v as Uint8Array;
    case "bool":
      if (typeof v !== "boolean") wrong("want a boolean");
      return v as boolean;
    case "strs":
      if (!Array.isArray(v) || !v.every((s) => typeof s === "string")) wrong("want an array of strings");
      return v as string[];
    case "poss":
      if (!Array.isArray(v)) wrong("want an array of positions");
      return (v as unknown[]).map((x, i) => checkScalar(`${key}[${i}]`, "pos", x) as number);
  }
}

function encodeMap(schema: Schema, obj: Record<string, unknown>, at: string): Record<string, EncValue> {
  const out: Record<string, EncValue> = {};
  for (const [prop, key, kind] of schema) {
    const v = obj[prop];
    if (isZero(kind, v)) continue; // §4: the reference encoder omits every zero field
    const path = at ? `${at}.${key}` : key;
    if (typeof kind === "string") {
      out[key] = checkScalar(path, kind, v);
    } else if ("map" in kind) {
      out[key] = encodeMap(kind.map, v as Record<string, unknown>, path);
    } else {
      // Elements of a list are written whole, even when all-zero (an empty map, as Go does).
      out[key] = (v as Record<string, unknown>[]).map((x, i) => encodeMap(kind.list, x, `${path}[${i}]`));
    }
  }
  return out;
}

/**
 * Encodes a frame's body (without the header) canonically: the Go reference's key order, zero
 * fields omitted, smallest integer forms. Fields left undefined count as zero, so a caller may
 * build a frame with only the fields it sets. Throws RangeError for a value the wire cannot
 * carry exactly.
 */
export function encodeFrameBody(f: PartialFrame): Uint8Array {
  // The type says f.type is known; a caller outside TypeScript may pass anything.
  const t: number = f.type;
  if (!knownType(t)) {
    throw new RangeError(`unknown frame type ${t}`);
  }
  return encodeBody(encodeMap(schemas[t], f, ""));
}

/** A frame with only its type required: absent fields are zero (§4), as in Go's struct literals. */
export type PartialFrame = PartialOf<Frame>;

/** PartialFrame of a subset of frames (e.g. `PartialOf<Query>`). */
export type PartialOf<U extends Frame> = U extends Frame ? Partial<U> & { type: U["type"] } : never;

/** The zero value of every field of a frame of type t, with the given fields set. */
export function makeFrame<T extends Frame["type"]>(t: T, fields: Partial<Omit<FrameOf<T>, "type">> = {}): FrameOf<T> {
  const zero = decodeMap(schemas[t], undefined, "");
  return { ...zero, ...fields, type: t } as unknown as FrameOf<T>;
}

/** An entry with every field zero but those given. */
export function makeEntry(fields: Partial<Entry> = {}): Entry {
  return { ...(decodeMap(entrySchema, undefined, "") as unknown as Entry), ...fields };
}

/** Welcome limits with the protocol defaults filled in (Go's Limits.WithDefaults). */
export function limitsWithDefaults(l: WireLimits): WireLimits {
  const def = (v: number, d: number, max: number): number => Math.min(v === 0 ? d : v, max);
  return {
    ...l,
    maxFrame: def(l.maxFrame, Limits.defaultMaxFrame, Limits.maxFrameLimit),
    maxBody: def(l.maxBody, Limits.maxBody, Limits.maxBody),
    maxBatch: def(l.maxBatch, Limits.defaultMaxBatch, 1000),
    heartbeatMs: def(l.heartbeatMs, Limits.defaultHeartbeatMs, 0xffff_ffff),
  };
}
