// Delivery states and read counts (§8.8): marks kept by both stores in the transaction of the
// entries that carry them, with each conversation's peaks; the IndexedDB upgrade from schema 1;
// the client's statuses and events (each step once, never backwards), the ConvInfo marks after a
// rebase, and the Receipts and Readers queries against a scripted node.

import "fake-indexeddb/auto";
import { IDBFactory } from "fake-indexeddb";
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { IndexedDBStore } from "../src/idbstore.js";
import { MemoryStore, NotContiguousError, peakExcept, raisePeak, statusFrom, zeroPeaks, type MarkPeak, type MarksChange, type Store } from "../src/store.js";
import { Client, type ClientConfig } from "../src/client.js";
import { Code, ProtoError } from "../src/codes.js";
import { Connector } from "../src/transport/connect.js";
import { FrameType, Kind, makeEntry, makeFrame, type ConvInfo, type Entry, type Frame, type PartialFrame } from "../src/frames.js";
import type { ClientEvents } from "../src/events.js";
import { FakeNode, testClock, testLimits, until, type ServerStream } from "./fakeserver.js";

const text = (s: string): Uint8Array => new TextEncoder().encode(s);

/** Entry `seq` of the user log: conversation conv's entry convSeq. */
function message(seq: number, sender: string, convSeq = seq, conv = "g1"): Entry {
  return makeEntry({ seq, kind: Kind.Message, msgId: `m.${conv}.${convSeq}`, conv, convSeq, sender, time: 1n, body: text(`${sender} ${convSeq}`) });
}
function mark(seq: number, kind: number, sender: string, upTo: number, convSeq = seq, conv = "g1"): Entry {
  return makeEntry({ seq, kind, msgId: `k.${conv}.${convSeq}`, conv, convSeq, sender, time: 1n, upTo });
}
const delivered = (seq: number, sender: string, upTo: number, convSeq = seq, conv = "g1"): Entry => mark(seq, Kind.Delivered, sender, upTo, convSeq, conv);
const receipt = (seq: number, sender: string, upTo: number, convSeq = seq, conv = "g1"): Entry => mark(seq, Kind.Receipt, sender, upTo, convSeq, conv);

async function openIdb(t: TestContext, factory: IDBFactory, name = "syncd:alice:web"): Promise<IndexedDBStore> {
  const s = await IndexedDBStore.open(name, { indexedDB: factory, marker: null, requestPersistence: false });
  assert.ok(s instanceof IndexedDBStore, `fell back: ${JSON.stringify(s.info?.())}`);
  t.after(() => s.close());
  return s;
}

test("peaks: the highest mark of the users other than any one, as a brute force over every user's mark", () => {
  let seed = 7;
  const rand = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const users = ["", "a", "b", "c", "d"];
  for (let round = 0; round < 200; round++) {
    const marks = new Map<string, number>();
    let p: MarkPeak = zeroPeaks().read;
    for (let i = 0; i < 20; i++) {
      const u = users[1 + rand(4)]!;
      const v = (marks.get(u) ?? 0) + rand(3); // marks only rise (a move of 0 is no move)
      marks.set(u, v);
      p = raisePeak(p, u, v);
      for (const ex of users) {
        const want = Math.max(0, ...[...marks].filter(([w]) => w !== ex).map(([, x]) => x));
        assert.equal(peakExcept(p, ex), want, `round ${round} step ${i}: except ${ex} in ${JSON.stringify([...marks])}`);
      }
    }
  }
  const p = { delivered: raisePeak(zeroPeaks().delivered, "bob", 5), read: raisePeak(zeroPeaks().read, "bob", 3) };
  assert.deepEqual([1, 3, 4, 5, 6].map((n) => statusFrom(p, "alice", n)), ["read", "read", "delivered", "delivered", "sent"]);
  assert.deepEqual([1, 5].map((n) => statusFrom(p, "bob", n)), ["sent", "sent"], "a sender's own marks do not count for its messages");
});

/** Both stores, each with a record of what it told. */
async function stores(t: TestContext): Promise<{ name: string; s: Store; told: MarksChange[][] }[]> {
  const out: { name: string; s: Store; told: MarksChange[][] }[] = [];
  for (const [name, s] of [["memory", new MemoryStore()], ["indexeddb", await openIdb(t, new IDBFactory())]] as const) {
    const told: MarksChange[][] = [];
    s.onMarks?.((c) => told.push(c));
    out.push({ name, s, told });
  }
  return out;
}

test("stores: marks move only forward, in the batch that carries them; a receipt raises the delivered mark; told once after the commit", async (t) => {
  for (const { name, s, told } of await stores(t)) {
    const fresh = await s.applyBatch(0, 5n, [
      message(1, "alice"), message(2, "alice"),
      delivered(3, "bob", 2),
      receipt(4, "bob", 1), // read 1: delivered is already past it
      delivered(5, "bob", 1), // older than what is known: nothing
      delivered(6, "alice", 5), // the user's own devices: a mark like any other (not a peer's)
    ]);
    assert.equal(fresh.length, 6, name);
    assert.deepEqual([await s.deliveredMark!("g1", "bob"), await s.readMark("g1", "bob"), await s.deliveredMark!("g1", "alice")], [2, 1, 5], name);
    assert.deepEqual(told, [[{
      conv: "g1",
      moves: [{ user: "bob", state: "delivered", from: 0, to: 2 }, { user: "bob", state: "read", from: 0, to: 1 }, { user: "alice", state: "delivered", from: 0, to: 5 }],
      before: zeroPeaks(),
      after: { delivered: { user: "alice", value: 5, second: 2 }, read: { user: "bob", value: 1, second: 0 } },
    }]], name);
    // A receipt ahead of the delivered mark moves both; the next batch starts from the last one's peaks.
    told.length = 0;
    await s.applyBatch(0, 5n, [receipt(7, "carol", 4), message(8, "bob")]);
    assert.deepEqual(told.length === 1 && told[0]![0]!.moves, [{ user: "carol", state: "delivered", from: 0, to: 4 }, { user: "carol", state: "read", from: 0, to: 4 }], name);
    assert.deepEqual(told[0]![0]!.before, { delivered: { user: "alice", value: 5, second: 2 }, read: { user: "bob", value: 1, second: 0 } }, name);
    assert.deepEqual(await s.peaks!("g1"), { delivered: { user: "alice", value: 5, second: 4 }, read: { user: "carol", value: 4, second: 1 } }, name);
    // A duplicate (its msg_id stored) and a batch that does not continue move and tell nothing.
    told.length = 0;
    await s.applyBatch(0, 5n, [{ ...receipt(9, "dave", 8), msgId: "k.g1.7" }]);
    await assert.rejects(s.applyBatch(0, 5n, [receipt(11, "dave", 8)]), NotContiguousError);
    assert.equal(told.length, 0, name);
    assert.equal(await s.readMark("g1", "dave"), 0, name);
    // History carries marks too (conversation-log entries, seq = conv_seq).
    await s.applyHistory([{ ...receipt(20, "bob", 6), seq: 20 }]);
    assert.deepEqual(told.map((c) => c[0]!.moves.map((m) => [m.user, m.state, m.to])), [[["bob", "delivered", 6], ["bob", "read", 6]]], name);
    // raiseMarks (a ConvInfo): only what is higher moves; delivered at least read.
    told.length = 0;
    await s.raiseMarks!("g1", [{ user: "bob", delivered: 3, read: 2 }]);
    assert.equal(told.length, 0, `${name}: lower marks change nothing`);
    await s.raiseMarks!("g1", [{ user: "erin", delivered: 0, read: 9 }]);
    assert.deepEqual(told[0]![0]!.moves, [{ user: "erin", state: "delivered", from: 0, to: 9 }, { user: "erin", state: "read", from: 0, to: 9 }], name);
    assert.deepEqual((await s.messageRange!("g1", 2, 8)).map((m) => [m.convSeq, m.sender]), [[2, "alice"], [8, "bob"]], name);
  }
});

test("stores: a batch whose write fails moves no mark and tells nothing", async (t) => {
  const [mem, idb] = await stores(t);
  if (mem!.s instanceof MemoryStore) mem!.s.failWrites = new Error("quota");
  await assert.rejects(mem!.s.applyBatch(0, 5n, [receipt(1, "bob", 1)]));
  // IndexedDB: an entry that cannot be cloned aborts the transaction after the marks were written in it.
  const bad = { ...message(2, "bob"), body: (() => undefined) as unknown as Uint8Array };
  await assert.rejects(idb!.s.applyBatch(0, 5n, [receipt(1, "bob", 1), bad]));
  for (const { name, s, told } of [mem!, idb!]) {
    if (s instanceof MemoryStore) s.failWrites = null;
    assert.equal(told.length, 0, name);
    assert.equal(await s.readMark("g1", "bob"), 0, name);
    assert.deepEqual(await s.peaks!("g1"), zeroPeaks(), name);
  }
});

test("idb: marks and peaks survive a reopen", async (t) => {
  const factory = new IDBFactory();
  const a = await openIdb(t, factory);
  await a.applyBatch(0, 5n, [message(1, "alice"), delivered(2, "bob", 1)]);
  await a.close();
  const b = await openIdb(t, factory);
  assert.equal(await b.deliveredMark("g1", "bob"), 1);
  assert.deepEqual(await b.peaks("g1"), { delivered: { user: "bob", value: 1, second: 0 }, read: zeroPeaks().read });
});

/** Writes a database as the schema-1 SDK left it. */
async function writeV1(factory: IDBFactory, name: string): Promise<void> {
  const v1 = ["entries", "cursors", "msgRefs", "view", "readMarks", "members", "incomplete", "earlyRecalls", "convs", "outbox", "meta"];
  const db = await new Promise<IDBDatabase>((ok, fail) => {
    const r = factory.open(name, 1);
    r.onupgradeneeded = () => {
      for (const n of v1) r.result.createObjectStore(n);
    };
    r.onsuccess = () => {
      ok(r.result);
    };
    r.onerror = () => {
      fail(r.error ?? new Error("open"));
    };
  });
  const tx = db.transaction(v1, "readwrite");
  tx.objectStore("meta").put({ id: "old-id", createdAt: 1 }, "identity");
  tx.objectStore("readMarks").put(3, ["g1", "bob"]);
  tx.objectStore("readMarks").put(2, ["g1", "carol"]);
  tx.objectStore("readMarks").put(4, ["g2", "alice"]);
  // A delivered entry a schema-1 SDK stored as an unknown kind.
  const entries = [message(1, "alice"), delivered(2, "carol", 7), delivered(3, "dave", 1)];
  entries.forEach((e) => tx.objectStore("entries").put(e, [0, e.seq]));
  tx.objectStore("cursors").put({ epoch: 5n, pos: 3, last: 3, base: 1 }, 0);
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

test("idb: a schema-1 database is upgraded: read marks are delivered marks, stored delivered entries count, peaks computed", async (t) => {
  const factory = new IDBFactory();
  await writeV1(factory, "syncd:old");
  const s = await openIdb(t, factory, "syncd:old");
  const snap = await s.load();
  assert.equal(snap.reset, undefined, "the upgrade is no loss");
  assert.deepEqual(snap.cursors, [{ epoch: 5n, pos: 3 }]);
  assert.deepEqual(await Promise.all([["g1", "bob"], ["g1", "carol"], ["g1", "dave"], ["g2", "alice"]].map(([c, u]) => s.deliveredMark(c!, u!))), [3, 7, 1, 4]);
  assert.equal(await s.readMark("g1", "bob"), 3);
  assert.deepEqual(await s.peaks("g1"), { delivered: { user: "carol", value: 7, second: 3 }, read: { user: "bob", value: 3, second: 2 } });
  assert.deepEqual(await s.peaks("g2"), { delivered: { user: "alice", value: 4, second: 0 }, read: { user: "alice", value: 4, second: 0 } });
  // And it goes on from there: a later batch moves the upgraded marks.
  await s.applyBatch(0, 5n, [receipt(4, "carol", 8)]);
  assert.deepEqual(await s.peaks("g1"), { delivered: { user: "carol", value: 8, second: 3 }, read: { user: "carol", value: 8, second: 3 } });
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

/** A node (user "alice") whose sync stream the test drives and whose requests `answer` answers. */
function node(answer?: (f: Frame) => PartialFrame | undefined, protoVersion?: number): { n: FakeNode; stream: () => ServerStream | null } {
  let stream: ServerStream | null = null;
  const n = new FakeNode({ limits: testLimits({ heartbeatMs: 200 }), protoVersion, sync: (s) => { stream = s; }, answer: (f) => answer?.(f) });
  return { n, stream: () => stream };
}

test("client: a direct conversation's statuses and events — each step once, in order, never backwards", async (t) => {
  const store = new MemoryStore();
  const { n, stream } = node();
  const c = await openFor(t, config(store, n));
  const statuses = record(c, "messageStatus");
  const deliveries = record(c, "delivery");
  await until(() => stream() !== null, "the sync stream");
  const conv = "d:alice:bob";
  const send = (entries: Entry[], head: number): void => {
    stream()!.send(makeFrame(FrameType.Batch, { epoch: 5n, entries, head }));
  };
  send([message(1, "alice", 1, conv), message(2, "alice", 2, conv), message(3, "bob", 3, conv)], 3);
  await until(async () => (await c.messages(conv)).length === 3, "stored");
  assert.deepEqual(await Promise.all([1, 2].map((s) => c.statusOf(conv, s))), ["sent", "sent"]);
  // bob's devices stored up to 1: message 1 delivered.
  send([delivered(4, "bob", 1, 4, conv)], 4);
  await until(() => statuses.length === 1, "the delivered step");
  assert.deepEqual(statuses, [{ conv, convSeq: 1, msgId: `m.${conv}.1`, status: "delivered" }]);
  assert.deepEqual(deliveries, [{ conv, user: "bob", state: "delivered", upTo: 1 }]);
  assert.deepEqual(await Promise.all([1, 2].map((s) => c.statusOf(conv, s))), ["delivered", "sent"]);
  // bob reads up to 3: 1 read; 2 delivered then read (each step once); bob's own 3 is not told.
  send([receipt(5, "bob", 3, 5, conv)], 5);
  await until(() => statuses.length === 4, "the read steps");
  assert.deepEqual(statuses.slice(1).map((e) => [e.convSeq, e.status]), [[1, "read"], [2, "delivered"], [2, "read"]]);
  assert.deepEqual(deliveries.slice(1).map((e) => [e.state, e.upTo]), [["delivered", 3], ["read", 3]]);
  // Older marks, alice's own marks, a replayed entry: no step back, nothing told again.
  send([delivered(6, "bob", 2, 6, conv), receipt(7, "alice", 3, 7, conv), delivered(8, "alice", 8, 8, conv)], 8);
  await until(async () => (await c.deliveredMark(conv, "alice")) === 8, "alice's own marks stored");
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(statuses.length, 4);
  assert.equal(deliveries.length, 3, "the user's own marks are no delivery event");
  assert.deepEqual(await Promise.all([1, 2, 9].map((s) => c.statusOf(conv, s))), ["read", "read", "sent"]);
  assert.deepEqual(await c.peerMarks(conv), { delivered: 3, read: 3 });
  assert.equal(await c.statusOf(conv, 3), "read", "bob's message 3, read by alice (her receipt): statusOf judges by its sender");
});

test("client: in a group a message is delivered, then read, as soon as one other member's mark covers it", async (t) => {
  const store = new MemoryStore();
  const { n, stream } = node();
  const c = await openFor(t, config(store, n));
  const statuses = record(c, "messageStatus");
  await until(() => stream() !== null, "the sync stream");
  stream()!.send(makeFrame(FrameType.Batch, {
    epoch: 5n, head: 5,
    entries: [message(1, "alice"), message(2, "alice"), delivered(3, "carol", 2), receipt(4, "bob", 1), receipt(5, "carol", 1)],
  }));
  await until(() => statuses.length === 3, "the steps");
  // Per message, in conv_seq order: 1 went past both steps in this one batch.
  assert.deepEqual(statuses.map((e) => [e.convSeq, e.status]), [[1, "delivered"], [1, "read"], [2, "delivered"]]);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(statuses.length, 3, "a second reader of 1 is no new step");
  assert.deepEqual(await c.peerMarks("g1"), { delivered: 2, read: 1 });
});

test("client: after a rebase the ConvInfo marks stand for the entries jumped over", async (t) => {
  const store = new MemoryStore();
  const conv = "d:alice:bob";
  await store.applyBatch(0, 5n, [message(1, "alice", 3, conv), message(2, "alice", 5, conv)]);
  const info: ConvInfo = { conv, kind: 1, epoch: 1n, first: 1, head: 5, members: ["alice", "bob"], memberCount: 2, readMark: 4, role: 1, deliveredMark: 6, peerDelivered: 5, peerRead: 3, source: false };
  const { n, stream } = node((f) => {
    if (f.type === FrameType.ConvList) return makeFrame(FrameType.ConvListResult, { id: f.id, convs: [info] });
    return undefined;
  });
  const c = await openFor(t, config(store, n));
  const statuses = record(c, "messageStatus");
  const deliveries = record(c, "delivery");
  const rebases = record(c, "rebase");
  await until(() => stream() !== null, "the sync stream");
  stream()!.send(makeFrame(FrameType.TooOld, { epoch: 5n, first: 50, head: 100 }));
  await until(() => rebases.length === 1 && statuses.length === 3, "the rebase and its steps");
  assert.deepEqual(statuses.map((e) => [e.convSeq, e.status]), [[3, "delivered"], [3, "read"], [5, "delivered"]]);
  assert.deepEqual(deliveries.map((e) => [e.user, e.state, e.upTo]), [["bob", "delivered", 5], ["bob", "read", 3]], "alice's own marks are stored, not told");
  assert.deepEqual([await c.deliveredMark(conv, "alice"), await c.readMark(conv, "alice")], [6, 4]);
});

test("client: receipts() and readers() — frames, validation, answers; refused on a revision-4 connection", async (t) => {
  const store = new MemoryStore();
  const { n } = node((f) => {
    if (f.type === FrameType.Receipts) return makeFrame(FrameType.ReceiptsResult, { id: f.id, counts: f.seqs.map((s) => ({ convSeq: s, members: 3, delivered: 2, read: s === 1 ? 2 : 0 })) });
    if (f.type === FrameType.Readers) {
      if (f.conv === "nope") return makeFrame(FrameType.Error, { id: f.id, code: Code.NotMember });
      return makeFrame(FrameType.ReadersResult, { id: f.id, users: f.after === "" ? ["bob"] : [], next: f.after === "" ? "carol" : "", more: f.after === "" });
    }
    return undefined;
  });
  const c = await openFor(t, config(store, n));
  await until(() => c.connected, "connected");
  assert.deepEqual(await c.receipts("g1", [1, 2]), [{ convSeq: 1, members: 3, delivered: 2, read: 2 }, { convSeq: 2, members: 3, delivered: 2, read: 0 }]);
  assert.deepEqual(await c.readers("g1", 1, "read"), { users: ["bob"], next: "carol", more: true });
  assert.deepEqual(await c.readers("g1", 1, "delivered", { after: "carol", limit: 50 }), { users: [], next: "", more: false });
  const sent = n.requests.filter((f) => f.type === FrameType.Receipts || f.type === FrameType.Readers);
  assert.deepEqual(sent.map((f) => f.type === FrameType.Receipts ? [f.conv, f.seqs] : f.type === FrameType.Readers ? [f.conv, f.convSeq, f.state, f.after, f.limit] : []),
    [["g1", [1, 2]], ["g1", 1, Kind.Receipt, "", 0], ["g1", 1, Kind.Delivered, "carol", 50]]);
  await assert.rejects(c.readers("nope", 1, "read"), (e: unknown) => e instanceof ProtoError && e.code === Code.NotMember);
  const invalid = (e: unknown): boolean => e instanceof ProtoError && e.code === Code.InvalidArgument;
  await assert.rejects(c.receipts("g1", []), invalid);
  await assert.rejects(c.receipts("g1", Array.from({ length: 101 }, (_, i) => i + 1)), invalid);
  await assert.rejects(c.receipts("g1", [0]), invalid);
  await assert.rejects(c.readers("g1", 0, "read"), invalid);
  await assert.rejects(c.readers("g1", 1, "seen" as "read"), invalid);
  assert.equal(n.requests.length, 4, "nothing invalid was sent");
  // A server of revision 4 would answer unknown_frame: the client does not ask.
  const old = node(undefined, 4);
  const c4 = await openFor(t, config(new MemoryStore(), old.n));
  await until(() => c4.connected, "connected at revision 4");
  await assert.rejects(c4.receipts("g1", [1]), (e: unknown) => e instanceof ProtoError && e.code === Code.UnknownFrame);
  await assert.rejects(c4.readers("g1", 1, "read"), (e: unknown) => e instanceof ProtoError && e.code === Code.UnknownFrame);
  assert.equal(old.n.requests.length, 0);
});
