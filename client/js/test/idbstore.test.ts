// The IndexedDB store against fake-indexeddb (an in-memory IndexedDB for Node): the Store
// contract, atomic batches, durability across a reopen, eviction and loss detection, handle
// reopening, the fallback to memory; and the client on it (the ack after the commit, resuming
// from the stored cursor).

import "fake-indexeddb/auto";
import { IDBFactory } from "fake-indexeddb";
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { IndexedDBStore } from "../src/idbstore.js";
import { MemoryStore, NotContiguousError, type OutboxItem, type Store, type StoredRange } from "../src/store.js";
import { digestEqual, digestOf } from "../src/digest.js";
import { Client } from "../src/client.js";
import { Connector } from "../src/transport/connect.js";
import { FrameType, makeEntry, makeFrame, type Entry } from "../src/frames.js";
import { FakeNode, testClock, testLimits, until, type ServerStream } from "./fakeserver.js";

const text = (s: string): Uint8Array => new TextEncoder().encode(s);

function msg(seq: number, conv = "g1", msgId = `1.${seq}.0`): Entry {
  return makeEntry({ seq, kind: 1, msgId, conv, convSeq: seq, sender: "bob", time: 1n, body: text(`m${seq}`) });
}

/** A localStorage stand-in: the store's marker of a database it knew. */
function marker(): Map<string, string> & Pick<Storage, "getItem" | "setItem"> {
  const m = new Map<string, string>() as Map<string, string> & Pick<Storage, "getItem" | "setItem">;
  m.getItem = (k: string) => m.get(k) ?? null;
  m.setItem = (k: string, v: string) => {
    m.set(k, v);
  };
  return m;
}

async function openIdb(t: TestContext, factory: IDBFactory, mark = marker(), name = "syncd:alice:web"): Promise<IndexedDBStore> {
  const s = await IndexedDBStore.open(name, { indexedDB: factory, marker: mark, requestPersistence: false });
  assert.ok(s instanceof IndexedDBStore, `fell back: ${JSON.stringify(s.info?.())}`);
  t.after(() => s.close());
  return s;
}

function item(cmid: string, seq: number): OutboxItem {
  return { cmid, seq, kind: 1, conv: "g1", peer: "", body: text("hi"), upTo: 0, target: "", members: [], role: 0, status: "sending", attempts: 0, nextAttemptAt: 0, ack: null, lastError: "", errorCode: 0, createdAt: 1 };
}

/** Raw access to the database under a store, as another program (or a browser's eviction) would. */
function rawDb(factory: IDBFactory, name: string): Promise<IDBDatabase> {
  return new Promise((ok, fail) => {
    const r = factory.open(name);
    r.onsuccess = () => {
      ok(r.result);
    };
    r.onerror = () => {
      fail(r.error ?? new Error("open"));
    };
  });
}

async function clearStore(factory: IDBFactory, name: string, store: string): Promise<void> {
  const db = await rawDb(factory, name);
  await new Promise<void>((ok) => {
    const tx = db.transaction([store], "readwrite");
    tx.objectStore(store).clear();
    tx.oncomplete = () => {
      ok();
    };
  });
  db.close();
}

test("idb: batches, the view (dedup, recall before its message, read marks, members) and the cursor, as MemoryStore", async (t) => {
  const s = await openIdb(t, new IDBFactory());
  const mem = new MemoryStore();
  const batch1: Entry[] = [
    makeEntry({ seq: 1, kind: 3, msgId: "1.9.0", conv: "g1", convSeq: 9, sender: "bob", time: 1n, target: "1.3.0" }), // recall before its message
    msg(2),
    makeEntry({ seq: 3, kind: 4, msgId: "1.4.0", conv: "g1", convSeq: 4, sender: "bob", time: 1n, members: ["carol"] }),
  ];
  const batch2: Entry[] = [msg(4, "g1", "1.2.0") /* a duplicate msg_id */, { ...msg(5, "g1", "1.3.0"), convSeq: 3 }, makeEntry({ seq: 6, kind: 2, msgId: "1.10.0", conv: "g1", convSeq: 10, sender: "carol", time: 1n, upTo: 3 })];
  for (const st of [s, mem] as Store[]) {
    assert.equal((await st.applyBatch(0, 7n, batch1)).length, 3);
    const fresh = await st.applyBatch(0, 7n, batch2);
    assert.deepEqual(fresh.map((e) => e.seq), [5, 6], "the duplicate msg_id is not fresh");
  }
  for (const q of [(st: Store) => st.messages("g1"), (st: Store) => st.members("g1"), (st: Store) => st.readMark("g1", "carol"),
    (st: Store) => st.convHead("g1"), (st: Store) => st.conversations(), async (st: Store) => (await st.load()).cursors]) {
    assert.deepEqual(await q(s), await q(mem));
  }
  const msgs = await s.messages("g1");
  assert.deepEqual(msgs.map((m) => [m.convSeq, m.recalled]), [[2, false], [3, true]]);
  assert.deepEqual((await s.load()).cursors, [{ epoch: 7n, pos: 6 }]);
  // A batch that does not continue the cursor writes nothing.
  await assert.rejects(s.applyBatch(0, 7n, [msg(8)]), NotContiguousError);
  await assert.rejects(s.applyBatch(0, 8n, [msg(7)]), NotContiguousError);
  assert.deepEqual((await s.load()).cursors, [{ epoch: 7n, pos: 6 }]);
  // History merges by msg_id, moves no cursor.
  assert.equal((await s.applyHistory([{ ...msg(1, "g2", "1.50.0"), convSeq: 0 }, msg(2)])).length, 1);
  assert.deepEqual((await s.messages("g2")).map((m) => m.convSeq), [1]);
});

test("idb: a batch is atomic: a write that fails midway leaves no entry, no view change and the old cursor", async (t) => {
  const s = await openIdb(t, new IDBFactory());
  await s.applyBatch(0, 7n, [msg(1)]);
  // The third entry cannot be stored (a function is not cloneable): the transaction aborts.
  const bad = { ...msg(4), body: (() => undefined) as unknown as Uint8Array };
  await assert.rejects(s.applyBatch(0, 7n, [msg(2), msg(3), bad]));
  assert.deepEqual((await s.load()).cursors, [{ epoch: 7n, pos: 1 }]);
  assert.deepEqual((await s.messages("g1")).map((m) => m.convSeq), [1]);
  assert.deepEqual((await s.applyBatch(0, 7n, [msg(2), msg(3)])).map((e) => e.seq), [2, 3], "the retry stores them as new");
});

test("idb: the cursor and the outbox survive a reopen (a reload); a rebase's cursor; an epoch change drops entries", async (t) => {
  const factory = new IDBFactory();
  const mark = marker();
  const a = await openIdb(t, factory, mark);
  await a.applyBatch(0, 7n, [msg(1), msg(2)]);
  await a.putOutbox(item("c1", 1));
  await a.putOutbox({ ...item("c2", 2), status: "sent" });
  await a.deleteOutbox("c2");
  await a.close();
  const b = await openIdb(t, factory, mark);
  const snap = await b.load();
  assert.equal(snap.reset, undefined, "nothing lost");
  assert.deepEqual(snap.cursors, [{ epoch: 7n, pos: 2 }]);
  assert.deepEqual(snap.outbox.map((o) => [o.cmid, o.status, new TextDecoder().decode(o.body)]), [["c1", "sending", "hi"]]);
  assert.deepEqual((await b.getOutbox("c1"))?.cmid, "c1");
  await b.setCursor(0, { epoch: 7n, pos: 500 }, false); // a rebase: no entries up to 500
  await b.setCursor(2, { epoch: 9n, pos: 4 }, true);
  const again = await b.load();
  assert.equal(again.reset, undefined, "a rebased cursor is not a loss");
  assert.deepEqual(again.cursors, [{ epoch: 7n, pos: 500 }, { epoch: 0n, pos: 0 }, { epoch: 9n, pos: 4 }]);
});

test("stores: readEntries by sub-log and range, with the cursor and the run's base after rebases, an epoch that continues and an epoch change (both stores alike)", async (t) => {
  const factory = new IDBFactory();
  const mark = marker();
  const idb = await openIdb(t, factory, mark);
  const mem = new MemoryStore();
  const seqs = (r: StoredRange): number[] => r.entries.map((e) => e.seq);
  for (const st of [idb, mem] as Store[]) {
    const read = (sub: number, from: number, to: number) => st.readEntries!(sub, from, to);
    await st.applyBatch(0, 7n, [1, 2, 3, 4, 5].map((n) => msg(n)));
    await st.applyBatch(2, 9n, [msg(1, "g2", "2.1.0")]);
    const r = await read(0, 2, 4);
    assert.deepEqual([seqs(r), r.cursor, r.base], [[2, 3, 4], { epoch: 7n, pos: 5 }, 1]);
    assert.deepEqual(r.entries[0], msg(2), "the entry as it was stored");
    assert.deepEqual(seqs(await read(0, 4, 10)), [4, 5]);
    assert.deepEqual(seqs(await read(2, 1, 1)), [1]);
    assert.deepEqual(await read(1, 1, 5), { cursor: { epoch: 0n, pos: 0 }, base: 1, entries: [] }, "a sub-log never written");
    assert.deepEqual(seqs(await read(0, 1, 2 ** 40)), [1, 2, 3, 4, 5], "a range far wider than what is stored");
    // A rebase jumps to 100: entries 6..100 were never stored here, so the run starts at 101.
    await st.setCursor(0, { epoch: 7n, pos: 100 }, false);
    assert.equal((await read(0, 100, 100)).base, 101);
    await st.applyBatch(0, 7n, [msg(101), msg(102)]);
    const after = await read(0, 1, 102);
    assert.deepEqual([seqs(after), after.base], [[1, 2, 3, 4, 5, 101, 102], 101]);
    // A rebase that does not move the cursor (the head was not ahead) keeps the run.
    await st.setCursor(0, { epoch: 7n, pos: 102 }, false);
    assert.equal((await read(0, 102, 102)).base, 101);
    // An EpochChanged that continues (§8.4): the same position in another epoch keeps the entries and the run.
    await st.setCursor(0, { epoch: 8n, pos: 102 }, false);
    const continued = await read(0, 1, 102);
    assert.deepEqual([seqs(continued), continued.cursor, continued.base], [[1, 2, 3, 4, 5, 101, 102], { epoch: 8n, pos: 102 }, 101]);
    await st.applyBatch(0, 8n, [msg(103)]);
    const next = await read(0, 103, 103);
    assert.deepEqual([next.cursor, next.base], [{ epoch: 8n, pos: 103 }, 101]);
    // An epoch change drops the sub-log's entries; the new run starts after the new cursor.
    await st.setCursor(0, { epoch: 9n, pos: 3 }, true);
    assert.deepEqual(await read(0, 1, 200), { cursor: { epoch: 9n, pos: 3 }, base: 4, entries: [] });
  }
});

test("stores: rewind drops the entries from `from` on and moves the cursor back at once; the refetched entries replace the stored copies (both stores alike)", async (t) => {
  const factory = new IDBFactory();
  const mark = marker();
  const idb = await openIdb(t, factory, mark);
  const mem = new MemoryStore();
  const right = [msg(1), msg(2), msg(3), msg(4)];
  // The damaged copy: entry 3's body changed, entry 4's msg_id put at conv_seq 40.
  const damaged = [msg(1), msg(2), { ...msg(3), body: text("evil") }, { ...msg(4), convSeq: 40 }];
  for (const st of [idb, mem] as Store[]) {
    await st.applyBatch(0, 7n, damaged);
    // Message 2's recall is in another sub-log (a conversation that moved at a split): not refetched.
    await st.applyBatch(1, 9n, [makeEntry({ seq: 1, kind: 3, msgId: "1.50.0", conv: "g1", convSeq: 50, sender: "bob", time: 1n, target: "1.2.0" })]);
    const before = await digestOf((await st.readEntries!(0, 1, 4)).entries);
    assert.ok(!digestEqual(before, await digestOf(right)));
    // A rewind the store cannot do (another epoch, outside base..pos) changes nothing.
    assert.equal(await st.rewind!(0, 8n, 2), false);
    assert.equal(await st.rewind!(0, 7n, 0), false);
    assert.equal(await st.rewind!(0, 7n, 5), false);
    assert.deepEqual((await st.load()).cursors[0], { epoch: 7n, pos: 4 });
    assert.equal(await st.rewind!(0, 7n, 2), true);
    assert.deepEqual((await st.load()).cursors[0], { epoch: 7n, pos: 1 });
    const rewound = await st.readEntries!(0, 1, 10);
    assert.deepEqual([rewound.entries.map((e) => e.seq), rewound.base], [[1], 1]);
    assert.equal((await st.messages("g1")).find((m) => m.convSeq === 3)?.body.length, 4, "the view stays until the entries come again");
    // The refetch: msg_ids already stored, so nothing is new, but every stored copy is replaced.
    assert.deepEqual(await st.applyBatch(0, 7n, right.slice(1)), []);
    const msgs = await st.messages("g1");
    assert.deepEqual(msgs.map((m) => [m.convSeq, new TextDecoder().decode(m.body), m.recalled]), [[1, "m1", false], [2, "m2", true], [3, "m3", false], [4, "m4", false]]);
    assert.ok(digestEqual(await digestOf((await st.readEntries!(0, 1, 4)).entries), await digestOf(right)));
    // Past the old cursor, a duplicate msg_id is a duplicate again: it changes nothing.
    assert.deepEqual(await st.applyBatch(0, 7n, [{ ...msg(5, "g1", "1.3.0"), body: text("later") }]), []);
    assert.equal(new TextDecoder().decode((await st.messages("g1")).find((m) => m.convSeq === 3)?.body), "m3");
    // A rewind to the start of a run after a rebase: the cursor goes back to the rebase point.
    await st.setCursor(0, { epoch: 7n, pos: 100 }, false);
    await st.applyBatch(0, 7n, [msg(101), msg(102)]);
    assert.equal(await st.rewind!(0, 7n, 100), false, "below the run");
    assert.equal(await st.rewind!(0, 7n, 101), true);
    assert.deepEqual((await st.load()).cursors[0], { epoch: 7n, pos: 100 });
  }
  // What the IndexedDB store wrote is consistent on a reopen (load checks the entry its cursor names).
  await idb.close();
  const again = await openIdb(t, factory, mark);
  const snap = await again.load();
  assert.equal(snap.reset, undefined);
  assert.deepEqual(snap.cursors, [{ epoch: 7n, pos: 100 }, { epoch: 9n, pos: 1 }]);
});

test("idb: a database evicted since the last visit, or a cursor ahead of its entries, is a resync, never a half-empty view", async (t) => {
  const factory = new IDBFactory();
  const mark = marker();
  const a = await openIdb(t, factory, mark);
  await a.applyBatch(0, 7n, [msg(1), msg(2)]);
  await a.close();
  // The browser evicted the database (the marker of the last visit survived).
  await new Promise<void>((ok) => {
    factory.deleteDatabase("syncd:alice:web").onsuccess = () => {
      ok();
    };
  });
  const b = await openIdb(t, factory, mark);
  const snap = await b.load();
  assert.match(snap.reset ?? "", /evicted or deleted/);
  assert.deepEqual(snap.cursors, [{ epoch: 0n, pos: 0 }]);
  assert.equal((await b.load()).reset, undefined, "told once");
  await b.applyBatch(0, 7n, [msg(1), msg(2), msg(3)]);
  await b.close();
  // Entries gone but the cursor kept (a partial loss): the cursor is not trusted.
  await clearStore(factory, "syncd:alice:web", "entries");
  const c = await openIdb(t, factory, mark);
  const snap2 = await c.load();
  assert.match(snap2.reset ?? "", /cursor of sub-log 0 is at 3 but entry 3 is not stored/);
  assert.deepEqual(snap2.cursors, [{ epoch: 0n, pos: 0 }]);
  assert.deepEqual((await c.load()).cursors, [{ epoch: 0n, pos: 0 }], "reset in the database too");
  // The view stays; the replay from 0 merges into it by msg_id.
  assert.deepEqual((await c.applyBatch(0, 7n, [msg(1), msg(2), msg(3)])).length, 0);
  assert.deepEqual((await c.messages("g1")).map((m) => m.convSeq), [1, 2, 3]);
});

test("idb: a handle that dies is reopened; a database deleted under a running store is reported", async (t) => {
  const factory = new IDBFactory();
  const s = await openIdb(t, factory);
  await s.applyBatch(0, 7n, [msg(1)]);
  // The browser closed the connection (as when the backing store fails): the next call reopens.
  (s as unknown as { db: IDBDatabase }).db.close();
  assert.deepEqual((await s.messages("g1")).map((m) => m.convSeq), [1]);
  await s.putOutbox(item("c1", 1));
  // Deleted under it (site data cleared): versionchange closes the handle; the reopen finds a new database.
  const resets: string[] = [];
  s.onReset((r) => resets.push(r));
  await new Promise<void>((ok) => {
    factory.deleteDatabase("syncd:alice:web").onsuccess = () => {
      ok();
    };
  });
  assert.deepEqual((await s.load()).cursors, [{ epoch: 0n, pos: 0 }]);
  await until(() => resets.length === 1, "the loss reported");
  assert.match(resets[0]!, /deleted while the app ran/);
});

test("idb: where IndexedDB cannot open (private mode), a memory store that says it is not persistent", async () => {
  const refusing = { open: () => { throw new DOMException("The operation is insecure.", "SecurityError"); } } as unknown as IDBFactory;
  const s = await IndexedDBStore.open("x", { indexedDB: refusing, marker: null });
  assert.ok(s instanceof MemoryStore);
  const info = s.info?.();
  assert.equal(info?.persistent, false);
  assert.match(info?.reason ?? "", /IndexedDB refused to open: The operation is insecure/);
  const idb = await IndexedDBStore.open("y", { indexedDB: new IDBFactory(), marker: null, requestPersistence: false });
  assert.deepEqual(idb.info?.(), { kind: "indexeddb", persistent: true, persisted: null, name: "y" });
  await idb.close();
});

test("idb + client: CursorAck only after the batch committed; a reopened client resumes from the stored cursor and resends its outbox", async (t) => {
  const factory = new IDBFactory();
  const mark = marker();
  const starts: { pos: number; subs: unknown }[] = [];
  let stream: ServerStream | null = null;
  let answer = false;
  const node = new FakeNode({
    limits: testLimits({ heartbeatMs: 5000 }),
    sync: (s, start) => {
      starts.push({ pos: start.type === FrameType.SyncStart ? start.pos : -1, subs: null });
      stream = s;
    },
    answer: (f) => (answer ? makeFrame(FrameType.Ack, { id: (f as { id: number }).id, msgId: "1.9.0", conv: "g1", convSeq: 9, epoch: 7n }) : undefined),
  });
  const cfg = async () => ({
    endpoints: [{ webSocketUrl: "n0" }], device: "web", token: "t", store: await openIdb(t, factory, mark),
    connector: new Connector({ dialWebTransport: null, dialWebSocket: () => node.dial() }), clock: testClock(0), logger: () => undefined,
    lifecycle: false, requestTimeoutMs: 300, retryScheduleMs: [100, 100, 100],
  });
  const c1 = await Client.open(await cfg());
  const storage: unknown[] = [];
  c1.on("storage", (e) => storage.push(e));
  await until(() => stream !== null, "sync stream");
  await c1.send("g1", text("queued"));
  stream!.send(makeFrame(FrameType.Batch, { epoch: 7n, entries: [msg(1), msg(2)], head: 2 }));
  const ack = await stream!.frame(1);
  assert.equal(ack.type, FrameType.CursorAck);
  // The ack is sent after the commit: a fresh handle on the database already sees the cursor.
  const peek = await IndexedDBStore.open("syncd:alice:web", { indexedDB: factory, marker: null, requestPersistence: false });
  assert.deepEqual((await peek.load()).cursors, [{ epoch: 7n, pos: 2 }]);
  await peek.close();
  assert.deepEqual(storage, [{ kind: "indexeddb", persistent: true, persisted: null, name: "syncd:alice:web" }]);
  await c1.close();
  // The app reloads: the next client starts from (7, 2) and sends the queued item.
  answer = true;
  stream = null;
  const c2 = await Client.open(await cfg());
  t.after(() => c2.close());
  const statuses: string[] = [];
  c2.on("status", (e) => statuses.push(e.item.status));
  await until(() => starts.length === 2, "the second sync stream");
  assert.equal(starts[1]!.pos, 2);
  await until(() => statuses.includes("sent"), "the queued item sent after the reload", 3000);
  assert.deepEqual((await c2.messages("g1")).map((m) => m.convSeq), [1, 2]);
  await c2.close();
});

/**
 * Web Locks as a page has them (navigator.locks), for Node: exclusive locks by name, granted in
 * request order, released when the callback's promise settles; `ifAvailable` answers null at once
 * when held.
 */
class FakeLocks {
  private held = new Set<string>();
  private queue = new Map<string, (() => void)[]>();
  request(name: string, opts: { ifAvailable?: boolean }, cb: (lock: unknown) => unknown): Promise<unknown> {
    if (this.held.has(name)) {
      if (opts.ifAvailable) return Promise.resolve(cb(null));
      return new Promise((ok) => {
        const q = this.queue.get(name) ?? [];
        q.push(() => {
          ok(this.grant(name, cb));
        });
        this.queue.set(name, q);
      });
    }
    return this.grant(name, cb);
  }
  private async grant(name: string, cb: (lock: unknown) => unknown): Promise<unknown> {
    this.held.add(name);
    try {
      return await cb({ name });
    } finally {
      this.held.delete(name);
      this.queue.get(name)?.shift()?.();
    }
  }
}

test("tabs: one leader holds the connection, a follower reads the shared store, its send goes out through the leader, and it takes over", async (t) => {
  const g = globalThis as { navigator?: unknown };
  const savedNav = Object.getOwnPropertyDescriptor(globalThis, "navigator");
  Object.defineProperty(globalThis, "navigator", { value: { locks: new FakeLocks() }, configurable: true, writable: true });
  t.after(() => {
    if (savedNav) Object.defineProperty(globalThis, "navigator", savedNav);
    else delete g.navigator;
  });
  const factory = new IDBFactory();
  const streams: ServerStream[] = [];
  let seq = 0;
  const node = new FakeNode({
    limits: testLimits({ heartbeatMs: 5000 }),
    sync: (s) => streams.push(s),
    answer: (f) => makeFrame(FrameType.Ack, { id: (f as { id: number }).id, msgId: `1.${++seq + 100}.0`, conv: "g1", convSeq: seq + 100, epoch: 7n }),
  });
  const open = async (): Promise<Client> => {
    const c = await Client.open({
      endpoints: [{ webSocketUrl: "n0" }], device: "web", token: "t", store: await openIdb(t, factory, marker(), "syncd:alice:web"),
      connector: new Connector({ dialWebTransport: null, dialWebSocket: () => node.dial() }), clock: testClock(0),
      logger: () => undefined, lifecycle: false, requestTimeoutMs: 500, retryScheduleMs: [100, 100],
    });
    t.after(() => c.close());

    return c;
  };
  const a = await open();
  const roleA: string[] = [];
  a.on("role", (e) => roleA.push(e.role));
  await until(() => a.role === "leader" && streams.length === 1, "A leads and syncs");
  const b = await open();
  const roleB: string[] = [];
  b.on("role", (e) => roleB.push(e.role));
  const entriesB: number[] = [];
  b.on("entry", (e) => entriesB.push(e.entry.seq));
  const statusB: string[] = [];
  b.on("status", (e) => statusB.push(e.item.status));
  await until(() => roleB.includes("follower"), "B follows");
  assert.equal(node.conns.length, 1, "one connection for the two tabs");
  // The leader stores a batch: the follower hears of it and reads it from the shared store.
  streams[0]!.send(makeFrame(FrameType.Batch, { epoch: 7n, entries: [msg(1), msg(2)], head: 2 }));
  await until(() => entriesB.length === 2, "B's entry events");
  assert.deepEqual((await b.messages("g1")).map((m) => m.convSeq), [1, 2]);
  assert.deepEqual(b.cursor(), [{ epoch: 7n, pos: 2 }]);
  // The follower sends: the leader sends it; the follower sees it sent.
  const it = await b.send("g1", text("from B"));
  await until(() => statusB.includes("sent"), "B's item sent by A", 3000);
  assert.equal(b.outboxItem(it.cmid)?.status, "sent");
  assert.equal(node.requests.filter((r) => (r as { cmid?: string }).cmid === it.cmid).length, 1, "sent once");
  // The leader's tab goes: B takes over from the stored cursor.
  await a.close();
  await until(() => roleB.includes("leader"), "B leads", 3000);
  await until(() => streams.length === 2, "B's sync stream", 3000);
  await streams[1]!.frame(0);
  const st = streams[1]!.frames[0]!;
  assert.deepEqual(st.type === FrameType.SyncStart && st.subs, [{ epoch: 7n, pos: 2 }], "from the stored cursor");
  assert.deepEqual(roleA, ["leader"]);
  assert.deepEqual(roleB, ["follower", "leader"]);
  await b.close();
});
