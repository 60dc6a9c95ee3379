// Sources (revision 6, PROTOCOL §6 "Sources: large groups", §8.4): where a source's batch may
// start (sourceStart), the stores' source cursors committed with their entries (both stores
// alike, the IndexedDB schema upgrade), and the client's sync stream with sources against a
// scripted node: SyncStart.sources, batches checked against the source's cursor or its `after`,
// CursorAck{source}, gaps, SourceEnd, a source's TooOld/Rebase/EpochChanged, heartbeats.

import "fake-indexeddb/auto";
import { IDBFactory } from "fake-indexeddb";
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { IndexedDBStore } from "../src/idbstore.js";
import { MemoryStore, NotContiguousError, hasSources, sourceStart, type FollowMarks, type SourceMethods, type Store } from "../src/store.js";
import { Client, type ClientConfig } from "../src/client.js";
import { Code } from "../src/codes.js";
import { Connector } from "../src/transport/connect.js";
import { FrameType, Kind, ReportKind, makeEntry, makeFrame, type ConvInfo, type Entry, type Frame, type PartialFrame } from "../src/frames.js";
import type { ClientEvents } from "../src/events.js";
import { FakeNode, testClock, testLimits, until, type ServerStream } from "./fakeserver.js";

const text = (s: string): Uint8Array => new TextEncoder().encode(s);

/** The large group of these tests, and its conversation log's epoch. */
const big = "g:big";
const E = 1_700_000_000_000_000_002n;

/** A message of the large group, as its source's Batch carries it (seq = conv_seq). */
function srcMsg(convSeq: number, msgId = `5.${convSeq}.0`): Entry {
  return makeEntry({ seq: convSeq, kind: Kind.Message, msgId, conv: big, convSeq, sender: "bob", time: 1n, body: text(`m${convSeq}`) });
}

/** A user-log entry (at seq) that starts or ends alice's following of the large group at convSeq. */
function follow(seq: number, kind: number, convSeq: number): Entry {
  return makeEntry({ seq, kind, msgId: `5.${convSeq}.0`, conv: big, convSeq, sender: "owner", time: 1n, members: ["alice"], source: true });
}

/** alice's own receipt in the large group, as her user log carries it: no conv_seq. */
function ownReceipt(seq: number, upTo: number): Entry {
  return makeEntry({ seq, kind: Kind.Receipt, msgId: `1.${seq}.0`, conv: big, convSeq: 0, sender: "alice", time: 1n, upTo });
}

/** Follow marks for sourceStart, from a map conv_seq → kind. */
function marksOf(m: Record<number, number>): FollowMarks {
  return {
    followAt: (_conv, convSeq) => Promise.resolve(m[convSeq]),
    lastFollowBefore: (_conv, before) => {
      const seqs = Object.keys(m).map(Number).filter((s) => s < before).sort((a, b) => b - a);
      const s = seqs[0];
      return Promise.resolve(s === undefined ? undefined : { convSeq: s, kind: m[s] as number });
    },
  };
}

test("sourceStart: no cursor starts at `after`; a cursor continues itself; an `after` beyond it only where the user log shows a rejoining", async () => {
  const none = marksOf({});
  assert.equal(await sourceStart(none, big, undefined, E, 7000), 7000, "a source the device has no cursor for starts at after");
  assert.equal(await sourceStart(none, big, undefined, E, 0), 0);
  assert.equal(await sourceStart(none, big, { epoch: 0n, pos: 0 }, E, 12), 12, "a cursor (0, 0) is none");
  await assert.rejects(sourceStart(none, big, undefined, 0n, 7000), NotContiguousError, "a batch without an epoch");
  const cur = { epoch: E, pos: 7009 };
  assert.equal(await sourceStart(none, big, cur, E, 0), 7009, "no after: from the cursor");
  assert.equal(await sourceStart(none, big, cur, E, 7009), 7009, "after at the cursor");
  await assert.rejects(sourceStart(none, big, cur, E + 1n, 0), NotContiguousError, "another epoch");
  await assert.rejects(sourceStart(none, big, cur, E, 7005), NotContiguousError, "an after below the cursor");
  await assert.rejects(sourceStart(none, big, cur, E, 7020), NotContiguousError, "an after beyond the cursor, and the log shows nothing");
  // Removed at 7010 (the period's last entry for the user is 7009) and added again at 7020.
  const rejoined = marksOf({ 7000: Kind.MemberAdd, 7010: Kind.MemberRemove, 7020: Kind.MemberAdd });
  assert.equal(await sourceStart(rejoined, big, cur, E, 7020), 7020);
  assert.equal(await sourceStart(rejoined, big, { epoch: E, pos: 7012 }, E, 7020), 7020, "a cursor past the removal (a rebase moved it)");
  await assert.rejects(sourceStart(rejoined, big, { epoch: E, pos: 7008 }, E, 7020), NotContiguousError, "7009 would be skipped");
  await assert.rejects(sourceStart(rejoined, big, { epoch: E, pos: 7005 }, E, 7020), NotContiguousError, "the rest of the period (7006…7009) would be skipped");
  await assert.rejects(sourceStart(rejoined, big, cur, E, 7015), NotContiguousError, "no start of a following at 7015");
  // A whole period in between: added at 7020, removed at 7030, added again at 7040.
  const twice = marksOf({ 7000: Kind.MemberAdd, 7010: Kind.MemberRemove, 7020: Kind.MemberAdd, 7030: Kind.MemberRemove, 7040: Kind.MemberAdd });
  await assert.rejects(sourceStart(twice, big, cur, E, 7040), NotContiguousError, "the period 7021…7029 would be skipped");
  assert.equal(await sourceStart(twice, big, { epoch: E, pos: 7029 }, E, 7040), 7040);
  // The mark at `after` must start a following.
  await assert.rejects(sourceStart(marksOf({ 7010: Kind.MemberRemove, 7020: Kind.MemberRemove }), big, cur, E, 7020), NotContiguousError);
});

// --- the stores ---

/** A localStorage stand-in: the store's marker of a database it knew. */
function marker(): Pick<Storage, "getItem" | "setItem"> {
  const m = new Map<string, string>();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, v) && undefined };
}

async function openIdb(t: TestContext, factory: IDBFactory, name = "syncd:alice:web", mark = marker()): Promise<IndexedDBStore> {
  const s = await IndexedDBStore.open(name, { indexedDB: factory, marker: mark, requestPersistence: false });
  assert.ok(s instanceof IndexedDBStore, `fell back: ${JSON.stringify(s.info?.())}`);
  t.after(() => s.close());
  return s;
}

type SourceStore = Store & SourceMethods;

const kinds: [string, (t: TestContext) => Promise<SourceStore>][] = [
  ["memory", () => Promise.resolve(new MemoryStore())],
  ["idb", (t) => openIdb(t, new IDBFactory())],
];

for (const [kind, open] of kinds) {
  test(`stores (${kind}): a source's batches with its cursor, in one transaction; the checks; dedup with history`, async (t) => {
    const s = await open(t);
    assert.ok(hasSources(s));
    assert.deepEqual((await s.load()).sources, []);
    await s.applyHistory([srcMsg(7002)]); // loaded before, by History
    // No cursor: from `after`, its epoch adopted. An entry without conv or conv_seq gets them.
    const bare = { ...srcMsg(7001), conv: "", convSeq: 0 };
    const fresh = await s.applySource(big, E, 7000, [bare, srcMsg(7002)]);
    assert.deepEqual(fresh.map((e) => e.seq), [7001], "the msg_id History stored is not fresh");
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 7002 }]);
    assert.deepEqual((await s.load()).sources, [{ conv: big, epoch: E, pos: 7002 }]);
    assert.deepEqual((await s.messages(big)).map((m) => [m.convSeq, m.msgId]), [[7001, "5.7001.0"], [7002, "5.7002.0"]]);
    assert.deepEqual((await s.sourceEntries(big, 7000, 7010)).map((e) => [e.seq, e.conv, e.convSeq]), [[7001, big, 7001], [7002, big, 7002]]);
    assert.deepEqual((await s.load()).cursors, [{ epoch: 0n, pos: 0 }], "the user log's cursor does not move");
    // Contiguous from the cursor (after absent, or at the cursor).
    assert.equal((await s.applySource(big, E, 0, [srcMsg(7003)])).length, 1);
    assert.equal((await s.applySource(big, E, 7003, [srcMsg(7004)])).length, 1);
    // Not contiguous, another epoch, an after beyond the cursor without a rejoining: nothing written.
    await assert.rejects(s.applySource(big, E, 0, [srcMsg(7006)]), NotContiguousError);
    await assert.rejects(s.applySource(big, E, 0, [srcMsg(7005), srcMsg(7007)]), NotContiguousError);
    await assert.rejects(s.applySource(big, E + 1n, 0, [srcMsg(7005)]), NotContiguousError);
    await assert.rejects(s.applySource(big, E, 7010, [srcMsg(7011)]), NotContiguousError);
    // An entry of another conversation, or whose conv_seq is not its seq, is an error, not a gap.
    await assert.rejects(s.applySource(big, E, 0, [{ ...srcMsg(7005), conv: "g:other" }]), (e: unknown) => !(e instanceof NotContiguousError));
    await assert.rejects(s.applySource(big, E, 0, [{ ...srcMsg(7005), convSeq: 3 }]), (e: unknown) => !(e instanceof NotContiguousError));
    // A write that fails midway (a body that cannot be stored) leaves nothing either.
    const bad = { ...srcMsg(7006), body: (() => undefined) as unknown as Uint8Array };
    await assert.rejects(s.applySource(big, E, 0, [srcMsg(7005), bad]));
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 7004 }]);
    assert.deepEqual((await s.messages(big)).map((m) => m.convSeq), [7001, 7002, 7003, 7004]);
    // Another source has its own cursor.
    await s.applySource("g:huge", 9n, 0, [{ ...srcMsg(1), conv: "g:huge" }]);
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 7004 }, { conv: "g:huge", epoch: 9n, pos: 1 }]);
  });

  test(`stores (${kind}): the user log's follow marks allow a rejoining's after; followStart; the own receipt without conv_seq`, async (t) => {
    const s = await open(t);
    await s.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 7000), ownReceipt(2, 7003)]);
    assert.equal(await s.followStart(big), 7000);
    assert.equal(await s.followStart("g:none"), null);
    // The user's own receipt there (conv_seq 0) moves the user's own marks and shows nothing.
    assert.equal(await s.readMark(big, "alice"), 7003);
    assert.equal(await s.deliveredMark?.(big, "alice"), 7003);
    assert.deepEqual(await s.messages(big), []);
    await s.applySource(big, E, 7000, [srcMsg(7001), srcMsg(7002)]);
    // Removed at 7003 (the source's last entry for the user is 7002), added again at 7010.
    await s.applyBatch(0, 9n, [follow(3, Kind.MemberRemove, 7003)]);
    assert.equal(await s.followStart(big), null, "the latest mark ended the following");
    await assert.rejects(s.applySource(big, E, 7010, [srcMsg(7011)]), NotContiguousError, "the log does not show the rejoining yet");
    await s.applyBatch(0, 9n, [follow(4, Kind.MemberAdd, 7010)]);
    assert.equal(await s.followStart(big), 7010);
    assert.deepEqual((await s.applySource(big, E, 7010, [srcMsg(7011)])).map((e) => e.seq), [7011]);
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 7011 }]);
    assert.deepEqual((await s.messages(big)).map((m) => m.convSeq), [7001, 7002, 7011]);
  });

  test(`stores (${kind}): SourceEnd drops the cursor (below last: a gap); rebase never back in an epoch; an epoch change drops the entries`, async (t) => {
    const s = await open(t);
    await s.applySource(big, E, 7000, [srcMsg(7001), srcMsg(7002)]);
    await assert.rejects(s.endSource(big, 7005), NotContiguousError, "entries up to 7005 are missing");
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 7002 }]);
    await s.endSource(big, 7002);
    assert.deepEqual(await s.sourceCursors(), []);
    await s.endSource(big, 7002); // seen again: nothing to do
    assert.deepEqual((await s.messages(big)).map((m) => m.convSeq), [7001, 7002], "the messages stay");
    // A rebase of the source: to the head, never back within its epoch.
    await s.rebaseSource(big, E, 9000);
    await s.rebaseSource(big, E, 8000);
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 9000 }]);
    await s.applySource(big, E, 0, [srcMsg(9001)]);
    assert.equal((await s.sourceEntries(big, 1, 10_000)).length, 3);
    await s.rebaseSource(big, E + 1n, 50);
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E + 1n, pos: 50 }]);
    assert.deepEqual(await s.sourceEntries(big, 1, 10_000), [], "another epoch's entries are gone");
    // EpochChanged: first − 1 of the new log, entries dropped, the view kept.
    await s.applySource(big, E + 1n, 0, [{ ...srcMsg(51), msgId: "7.51.0" }]);
    await s.resetSourceForEpoch(big, E + 2n, 4);
    assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E + 2n, pos: 4 }]);
    assert.deepEqual(await s.sourceEntries(big, 1, 10_000), []);
    assert.deepEqual((await s.messages(big)).map((m) => m.convSeq), [51, 7001, 7002, 9001]);
    await s.dropSource(big);
    assert.deepEqual(await s.sourceCursors(), []);
    // A resync drops every source too.
    await s.applySource(big, E, 0, [srcMsg(1)]);
    await s.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 7000)]);
    await s.resetCursors?.();
    assert.deepEqual([await s.sourceCursors(), await s.followStart(big)], [[], null]);
  });
}

test("idb: source cursors survive a reopen", async (t) => {
  const factory = new IDBFactory();
  const mark = marker();
  const a = await openIdb(t, factory, "syncd:alice:web", mark);
  await a.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 7000)]);
  await a.applySource(big, E, 7000, [srcMsg(7001)]);
  await a.close();
  const b = await openIdb(t, factory, "syncd:alice:web", mark);
  const snap = await b.load();
  assert.equal(snap.reset, undefined);
  assert.deepEqual(snap.sources, [{ conv: big, epoch: E, pos: 7001 }]);
  assert.equal(await b.followStart(big), 7000);
  assert.deepEqual((await b.applySource(big, E, 0, [srcMsg(7002)])).map((e) => e.seq), [7002]);
});

/** Writes a schema-2 database (the object stores of an SDK of revision 5) holding a little of everything. */
async function writeV2(factory: IDBFactory, name: string): Promise<void> {
  const v2 = ["entries", "cursors", "msgRefs", "view", "readMarks", "deliveredMarks", "peaks", "members", "incomplete", "earlyRecalls", "convs", "outbox", "meta"];
  const db = await new Promise<IDBDatabase>((ok, fail) => {
    const r = factory.open(name, 2);
    r.onupgradeneeded = () => {
      for (const n of v2) r.result.createObjectStore(n);
    };
    r.onsuccess = () => {
      ok(r.result);
    };
    r.onerror = () => {
      fail(r.error ?? new Error("open"));
    };
  });
  const tx = db.transaction(v2, "readwrite");
  tx.objectStore("meta").put({ id: "old-id", createdAt: 1 }, "identity");
  const m = makeEntry({ seq: 1, kind: Kind.Message, msgId: "1.1.0", conv: "g1", convSeq: 1, sender: "bob", time: 1n, body: text("kept") });
  tx.objectStore("entries").put(m, [0, 1]);
  tx.objectStore("msgRefs").put({ conv: "g1", convSeq: 1 }, "1.1.0");
  tx.objectStore("view").put({ kind: 1, msgId: "1.1.0", sender: "bob", time: 1n, body: text("kept"), recalled: false, upTo: 0, target: "", members: [], conv: "g1", convSeq: 1 }, ["g1", 1]);
  tx.objectStore("convs").put(true, "g1");
  tx.objectStore("readMarks").put(1, ["g1", "alice"]);
  tx.objectStore("deliveredMarks").put(1, ["g1", "alice"]);
  tx.objectStore("cursors").put({ epoch: 5n, pos: 1, last: 1, base: 1 }, 0);
  tx.objectStore("outbox").put({ cmid: "c1", seq: 1, kind: 1, conv: "g1", peer: "", body: text("queued"), upTo: 0, target: "", members: [], role: 0, status: "sending", attempts: 0, nextAttemptAt: 0, ack: null, lastError: "", errorCode: 0, createdAt: 1 }, "c1");
  await new Promise<void>((ok, fail) => {
    tx.oncomplete = () => {
      ok();
    };
    tx.onabort = () => {
      fail(tx.error ?? new Error("abort"));
    };
  });
  db.close();
}

test("idb: a schema-2 database is upgraded to the current schema (4): everything kept, the source stores and earlyEffects added empty", async (t) => {
  const factory = new IDBFactory();
  await writeV2(factory, "syncd:v2");
  const s = await openIdb(t, factory, "syncd:v2");
  const snap = await s.load();
  assert.equal(snap.reset, undefined, "the upgrade is no loss");
  assert.deepEqual(snap.cursors, [{ epoch: 5n, pos: 1 }]);
  assert.deepEqual(snap.sources, []);
  assert.deepEqual(snap.outbox.map((o) => o.cmid), ["c1"]);
  assert.deepEqual((await s.messages("g1")).map((m) => new TextDecoder().decode(m.body)), ["kept"]);
  // A view row of an older SDK has no edit or reaction fields: a message never edited, without reactions.
  assert.deepEqual((await s.messages("g1")).map((m) => [m.edited, m.editedAt, m.reactions]), [[false, 0n, {}]]);
  assert.equal(await s.readMark("g1", "alice"), 1);
  assert.equal(await s.deliveredMark("g1", "alice"), 1);
  // The new stores work, and the old ones go on.
  await s.applyBatch(0, 5n, [follow(2, Kind.MemberAdd, 7000)]);
  await s.applySource(big, E, 7000, [srcMsg(7001)]);
  assert.equal(await s.followStart(big), 7000);
  assert.deepEqual(await s.sourceCursors(), [{ conv: big, epoch: E, pos: 7001 }]);
  await s.close();
  const db = await new Promise<IDBDatabase>((ok, fail) => {
    const r = factory.open("syncd:v2");
    r.onsuccess = () => {
      ok(r.result);
    };
    r.onerror = () => {
      fail(r.error ?? new Error("open"));
    };
  });
  assert.equal(db.version, 4);
  assert.ok(["sourceCursors", "sourceEntries", "follows", "earlyEffects"].every((n) => db.objectStoreNames.contains(n)));
  db.close();
});

// --- the client ---

const quiet = (): void => undefined;

function config(store: Store, node: FakeNode): ClientConfig {
  return {
    endpoints: [{ webSocketUrl: "n0" }], device: "phone", token: "tok-1", store, logger: quiet, clock: testClock(0),
    connector: new Connector({ dialWebTransport: null, dialWebSocket: () => node.dial() }),
    retryScheduleMs: [20], requestTimeoutMs: 500,
  };
}

async function openFor(t: TestContext, cfg: ClientConfig): Promise<Client> {
  const c = await Client.open(cfg);
  t.after(() => c.close());
  return c;
}

function record<K extends keyof ClientEvents>(c: Client, name: K): ClientEvents[K][] {
  const out: ClientEvents[K][] = [];
  c.on(name, (e) => out.push(e));
  return out;
}

/** A node (user "alice") whose sync streams the test drives: every SyncStart, and the latest stream. */
function syncNode(answer?: (f: Frame) => PartialFrame | undefined): { node: FakeNode; starts: Frame[]; stream: () => ServerStream } {
  const starts: Frame[] = [];
  let stream: ServerStream | null = null;
  const node = new FakeNode({
    limits: testLimits({ heartbeatMs: 300 }),
    sync: (s, start) => {
      starts.push(start);
      stream = s;
    },
    answer: (f) => answer?.(f),
  });
  return {
    node, starts, stream: () => {
      if (!stream) throw new Error("no sync stream yet");
      return stream;
    },
  };
}

/** The sources a SyncStart named. */
function namedIn(f: Frame | undefined): unknown {
  return f?.type === FrameType.SyncStart ? f.sources : f;
}

/** The Reports the client sent on the control stream of its first connection. */
const reports = (n: FakeNode): Frame[] => (n.conns[0]?.streams[0]?.frames ?? []).filter((f) => f.type === FrameType.Report);

function bigInfo(over: Partial<ConvInfo> = {}): ConvInfo {
  return { conv: big, kind: 2, epoch: E, first: 50, head: 100, members: [], memberCount: 1200, readMark: 0, role: 1, deliveredMark: 0, peerDelivered: 0, peerRead: 0, source: true, ...over };
}

test("client: revision 6; SyncStart names the stored source cursors; a source's first batch starts at its after, is stored, acked with CursorAck{source} and told with its source; synced waits for every source", async (t) => {
  const store = new MemoryStore();
  await store.rebaseSource("g:old", 7n, 40); // a group the device followed
  const { node, starts, stream } = syncNode();
  const c = await openFor(t, config(store, node));
  assert.deepEqual(c.sourceCursors(), [{ conv: "g:old", epoch: 7n, pos: 40 }], "read from the store at open");
  const entries = record(c, "entry");
  const synced = record(c, "synced");
  const ends = record(c, "sourceEnd");
  await until(() => starts.length === 1, "SyncStart");
  const hello = node.hellos[0];
  assert.equal(hello?.type === FrameType.Hello && hello.protoVersion, 8, "the current revision (PROTO_VERSION)");
  assert.deepEqual(namedIn(starts[0]), [{ conv: "g:old", epoch: 7n, pos: 40 }]);
  // The user log first (the gate): the entry that starts the following of the large group.
  stream().send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [follow(1, Kind.MemberAdd, 7000)], head: 1 }));
  await stream().frame(1);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(synced.length, 0, "not synced while a source named is not caught up");
  // The user left g:old meanwhile: its cursor goes.
  stream().send(makeFrame(FrameType.SourceEnd, { source: "g:old", last: 40 }));
  await until(() => ends.length === 1, "sourceEnd");
  assert.deepEqual(ends, [{ source: "g:old", last: 40 }]);
  await until(() => synced.length === 1, "synced once g:old ended");
  // The large group's source: its first batch follows the conv_seq of the entry that started it.
  stream().send(makeFrame(FrameType.Batch, { epoch: E, source: big, after: 7000, entries: [srcMsg(7001), srcMsg(7002)], head: 7003 }));
  assert.deepEqual(await stream().frame(2), makeFrame(FrameType.CursorAck, { epoch: E, pos: 7002, source: big }));
  assert.deepEqual(await store.sourceCursors(), [{ conv: big, epoch: E, pos: 7002 }]);
  stream().send(makeFrame(FrameType.Batch, { epoch: E, source: big, entries: [srcMsg(7003)], head: 7003 }));
  assert.deepEqual(await stream().frame(3), makeFrame(FrameType.CursorAck, { epoch: E, pos: 7003, source: big }));
  assert.deepEqual(entries.map((e) => [e.entry.seq, e.sub, e.source, e.duplicate]), [[1, 0, "", false], [7001, 0, big, false], [7002, 0, big, false], [7003, 0, big, false]]);
  stream().send(makeFrame(FrameType.Heartbeat, { epoch: E, head: 7003, source: big }));
  stream().send(makeFrame(FrameType.Heartbeat, { epoch: 9n, head: 1 }));
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual((await c.messages(big)).map((m) => m.convSeq), [7001, 7002, 7003]);
  assert.deepEqual(c.sourceCursors(), [{ conv: big, epoch: E, pos: 7003 }]);
  // A new stream (the server ended this one) names the source's stored cursor, not g:old's.
  void stream().s.end();
  await until(() => starts.length === 2, "restart");
  assert.deepEqual(namedIn(starts[1]), [{ conv: big, epoch: E, pos: 7003 }]);
  const st = starts[1];
  assert.deepEqual(st?.type === FrameType.SyncStart && [st.epoch, st.pos], [9n, 1]);
  await c.close();
});

test("client: a source's batch that does not continue is a gap (reported once with its conversation, restarted from the stored cursor); a rejoining's after is accepted once the user log shows it; SourceEnd beyond the cursor is a gap", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 7000)]);
  await store.applySource(big, E, 7000, [srcMsg(7001), srcMsg(7002)]);
  const { node, starts, stream } = syncNode();
  const c = await openFor(t, config(store, node));
  const gaps = record(c, "gap");
  await until(() => starts.length === 1, "SyncStart");
  // 7003 is skipped: nothing stored, a gap, a new SyncStart from the stored cursor.
  stream().send(makeFrame(FrameType.Batch, { epoch: E, source: big, entries: [srcMsg(7004)], head: 7004 }));
  await until(() => starts.length === 2, "restart after the gap");
  assert.deepEqual(gaps, [{ sub: 0, at: 7003, source: big }]);
  assert.deepEqual(namedIn(starts[1]), [{ conv: big, epoch: E, pos: 7002 }]);
  await until(() => reports(node).length === 1, "the gap reported");
  assert.deepEqual(reports(node), [makeFrame(FrameType.Report, { kind: ReportKind.Gap, conv: big, epoch: E, from: 7003, to: 7004 })]);
  stream().send(makeFrame(FrameType.Heartbeat, { epoch: 9n, head: 1 })); // progress: no restart loop
  // The same gap again at the same cursor (another epoch, this time): not reported twice.
  stream().send(makeFrame(FrameType.Batch, { epoch: E + 1n, source: big, entries: [srcMsg(7003)], head: 7004 }));
  await until(() => starts.length === 3, "restart after the epoch mismatch");
  assert.equal(gaps.length, 2);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(reports(node).length, 1, "the same gap is reported once");
  stream().send(makeFrame(FrameType.Batch, { epoch: E, source: big, entries: [srcMsg(7003)], head: 7003 }));
  await stream().frame(1);
  // An after beyond the cursor that the user log does not explain: a gap.
  stream().send(makeFrame(FrameType.Batch, { epoch: E, source: big, after: 7010, entries: [srcMsg(7011)], head: 7011 }));
  await until(() => starts.length === 4, "restart after an unexplained after");
  assert.deepEqual(gaps.at(-1), { sub: 0, at: 7004, source: big });
  // The user log shows the removal at 7004 and the rejoining at 7010 (the gate sends it first).
  stream().send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [follow(2, Kind.MemberRemove, 7004), follow(3, Kind.MemberAdd, 7010)], head: 3 }));
  await stream().frame(1);
  stream().send(makeFrame(FrameType.Batch, { epoch: E, source: big, after: 7010, entries: [srcMsg(7011)], head: 7011 }));
  assert.deepEqual(await stream().frame(2), makeFrame(FrameType.CursorAck, { epoch: E, pos: 7011, source: big }));
  // SourceEnd beyond the cursor: entries are missing, a gap; at the cursor: the cursor goes.
  stream().send(makeFrame(FrameType.SourceEnd, { source: big, last: 7015 }));
  await until(() => starts.length === 5, "restart after SourceEnd beyond the cursor");
  assert.deepEqual(gaps.at(-1), { sub: 0, at: 7012, source: big });
  assert.deepEqual(namedIn(starts[4]), [{ conv: big, epoch: E, pos: 7011 }]);
  stream().send(makeFrame(FrameType.SourceEnd, { source: big, last: 7011 }));
  await until(async () => (await store.sourceCursors()).length === 0, "the cursor dropped");
  assert.deepEqual(c.sourceCursors(), []);
  assert.deepEqual((await c.messages(big)).map((m) => m.convSeq), [7001, 7002, 7003, 7011]);
  await c.close();
});

test("client: a source's TooOld rebases it alone (ConvState, History) to the head; EpochChanged resyncs it from first − 1; a heartbeat of another epoch restarts; a rebase finding the user gone drops it", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 5)]);
  await store.rebaseSource(big, E, 10);
  let member = true;
  const { node, starts, stream } = syncNode((f) => {
    if (f.type === FrameType.ConvState) {
      if (!member) return makeFrame(FrameType.Error, { id: f.id, code: Code.NotMember });
      return makeFrame(FrameType.ConvStateResult, { id: f.id, conv: bigInfo({ readMark: 60 }) });
    }
    if (f.type === FrameType.History) return makeFrame(FrameType.HistoryResult, { id: f.id, epoch: E, first: 50, head: 100, entries: [srcMsg(99), srcMsg(100)] });
    if (f.type === FrameType.ConvList) return makeFrame(FrameType.ConvListResult, { id: f.id, convs: [bigInfo({ head: 300, epoch: E + 1n })] });
    return undefined;
  });
  const c = await openFor(t, config(store, node));
  const rebases = record(c, "rebase");
  const epochs = record(c, "epoch");
  await until(() => starts.length === 1, "SyncStart");
  stream().send(makeFrame(FrameType.TooOld, { epoch: E, first: 50, head: 100, source: big }));
  await until(() => starts.length === 2, "restart after the source's rebase");
  assert.deepEqual(node.requests.map((r) => r.type), [FrameType.ConvState, FrameType.History]);
  assert.deepEqual(rebases, [{ sub: 0, epoch: E, head: 100, source: big }]);
  assert.deepEqual(namedIn(starts[1]), [{ conv: big, epoch: E, pos: 100 }]);
  const st = starts[1];
  assert.deepEqual(st?.type === FrameType.SyncStart && [st.epoch, st.pos], [9n, 1], "the user log's cursor stays");
  assert.deepEqual((await c.messages(big)).map((m) => m.convSeq), [99, 100], "recent history loaded");
  assert.equal(await c.readMark(big, "alice"), 60, "the ConvState's marks stored");
  // The conversation log was re-created: from its first retained position − 1, in the new epoch.
  stream().send(makeFrame(FrameType.EpochChanged, { epoch: E + 1n, first: 5, head: 9, source: big }));
  await until(() => starts.length === 3, "restart after the epoch change");
  assert.deepEqual(epochs, [{ sub: 0, epoch: E + 1n, source: big }]);
  assert.deepEqual(namedIn(starts[2]), [{ conv: big, epoch: E + 1n, pos: 4 }]);
  assert.deepEqual((await c.messages(big)).map((m) => m.convSeq), [99, 100], "messages kept");
  // A heartbeat of another epoch than the stored one: restart (the server answers EpochChanged).
  stream().send(makeFrame(FrameType.Heartbeat, { epoch: E + 5n, head: 9, source: big }));
  await until(() => starts.length === 4, "restart after a heartbeat of another epoch");
  assert.deepEqual(namedIn(starts[3]), [{ conv: big, epoch: E + 1n, pos: 4 }]);
  // A rebase of the user log jumps the large group's source to the head it loaded, too.
  stream().send(makeFrame(FrameType.TooOld, { epoch: 9n, first: 20, head: 40 }));
  await until(() => starts.length === 5, "restart after the user log's rebase");
  assert.deepEqual(namedIn(starts[4]), [{ conv: big, epoch: E + 1n, pos: 300 }]);
  const st5 = starts[4];
  assert.deepEqual(st5?.type === FrameType.SyncStart && [st5.epoch, st5.pos], [9n, 40]);
  // A rebase of the source that finds the user no longer a member: its cursor goes.
  member = false;
  stream().send(makeFrame(FrameType.Rebase, { epoch: E + 1n, head: 900, source: big }));
  await until(() => starts.length === 6, "restart after the source's rebase");
  assert.deepEqual(namedIn(starts[5]), []);
  assert.deepEqual(await store.sourceCursors(), []);
  assert.equal(rebases.length, 2, "the user log's rebase told, not the dropped source's");
  await c.close();
});

test("client: a source's EpochChanged that continues moves its cursor to (new epoch, stored pos), nothing replayed, no epoch event; one without a cursor resyncs", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 7000)]);
  await store.applySource(big, E, 7000, [srcMsg(7001), srcMsg(7002)]);
  const { node, starts, stream } = syncNode();
  const c = await openFor(t, config(store, node));
  const epochs = record(c, "epoch");
  await until(() => starts.length === 1, "SyncStart");
  assert.deepEqual(namedIn(starts[0]), [{ conv: big, epoch: E, pos: 7002 }]);
  // The group's log was restored from a backup holding everything up to 7002 (§8.4).
  stream().send(makeFrame(FrameType.EpochChanged, { epoch: E + 1n, first: 1, head: 7005, source: big, continues: true }));
  await until(() => starts.length === 2, "restart after the epoch change");
  assert.deepEqual(namedIn(starts[1]), [{ conv: big, epoch: E + 1n, pos: 7002 }], "from the stored position, nothing replayed");
  const st = starts[1];
  assert.deepEqual(st?.type === FrameType.SyncStart && [st.epoch, st.pos], [9n, 1], "the user log's cursor stays");
  assert.deepEqual(epochs, [], "nothing for the app to hear");
  assert.deepEqual(await store.sourceCursors(), [{ conv: big, epoch: E + 1n, pos: 7002 }]);
  assert.deepEqual((await c.messages(big)).map((m) => m.convSeq), [7001, 7002], "messages kept");
  // The new epoch goes on from there.
  stream().send(makeFrame(FrameType.Batch, { epoch: E + 1n, source: big, entries: [srcMsg(7003)], head: 7003 }));
  assert.deepEqual(await stream().frame(1), makeFrame(FrameType.CursorAck, { epoch: E + 1n, pos: 7003, source: big }));
  assert.deepEqual(c.sourceCursors(), [{ conv: big, epoch: E + 1n, pos: 7003 }]);
  assert.deepEqual((await c.messages(big)).map((m) => m.convSeq), [7001, 7002, 7003]);
  // A source the device has no cursor for has no position to continue from: it resyncs.
  stream().send(makeFrame(FrameType.EpochChanged, { epoch: 7n, first: 3, head: 9, source: "g:new", continues: true }));
  await until(() => starts.length === 3, "restart after the other source's epoch change");
  assert.deepEqual(epochs, [{ sub: 0, epoch: 7n, source: "g:new" }]);
  assert.deepEqual(namedIn(starts[2]), [{ conv: big, epoch: E + 1n, pos: 7003 }, { conv: "g:new", epoch: 7n, pos: 2 }]);
  await c.close();
});

test("client: a source's heartbeats: pending entries without a batch for two intervals restart the stream; a source without a cursor is pending from where the user log says it starts", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, [follow(1, Kind.MemberAdd, 7000)]);
  const { node, starts, stream } = syncNode();
  const c = await openFor(t, config(store, node));
  const synced = record(c, "synced");
  await until(() => starts.length === 1, "SyncStart");
  assert.deepEqual(namedIn(starts[0]), []);
  stream().send(makeFrame(FrameType.Heartbeat, { epoch: 9n, head: 1 }));
  // The server's heartbeat of a source it has not started sending: its head is the cursor's.
  stream().send(makeFrame(FrameType.Heartbeat, { epoch: E, head: 0, source: big }));
  await until(() => synced.length === 1, "synced");
  // Entries beyond where the following started, and no batch: stalled after two intervals.
  const at = Date.now();
  const beat = setInterval(() => {
    stream().send(makeFrame(FrameType.Heartbeat, { epoch: E, head: 7005, source: big }));
  }, 100);
  t.after(() => {
    clearInterval(beat);
  });
  await until(() => starts.length === 2, "restart of a stalled source", 3000);
  clearInterval(beat);
  assert.ok(Date.now() - at >= 2 * 300, "not before two heartbeat intervals");
  await c.close();
});

test("client: a store without sources announces revision 5 and names none", async (t) => {
  const base = new MemoryStore();
  const sourceMethods = new Set<PropertyKey>(["applySource", "endSource", "dropSource", "rebaseSource", "resetSourceForEpoch", "sourceCursors", "followStart", "sourceEntries"]);
  const store = new Proxy(base, {
    get(target, p) {
      if (sourceMethods.has(p)) return undefined;
      const v: unknown = Reflect.get(target, p, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as Store;
  assert.ok(!hasSources(store));
  const { node, starts } = syncNode();
  const c = await openFor(t, config(store, node));
  await until(() => starts.length === 1, "SyncStart");
  const hello = node.hellos[0];
  assert.equal(hello?.type === FrameType.Hello && hello.protoVersion, 5);
  assert.deepEqual(namedIn(starts[0]), []);
  await c.close();
});
