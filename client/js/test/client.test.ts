// The client core against a scripted node: handshake, outbox, sync, rebase, sub-logs, reconnects.

import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { Client, type ClientConfig } from "../src/client.js";
import { Code } from "../src/codes.js";
import { FrameType, makeEntry, makeFrame, type Entry, type Frame } from "../src/frames.js";
import { MemoryStore, type OutboxItem } from "../src/store.js";
import { Connector } from "../src/transport/connect.js";
import type { ClientEvents } from "../src/events.js";
import { FakeNode, testClock, testLimits, until, type ServerStream } from "./fakeserver.js";

const quiet = (): void => undefined;

/** Opens a client that is closed when the test ends, passed or failed (else its timers keep the run alive). */
async function openFor(t: TestContext, cfg: ClientConfig): Promise<Client> {
  const c = await Client.open(cfg);
  t.after(() => c.close());
  return c;
}

function connectorFor(...nodes: FakeNode[]): Connector {
  // Endpoint URLs are "n0", "n1", …: the dialer picks the node by URL.
  return new Connector({
    dialWebTransport: null,
    dialWebSocket: (url) => {
      const n = nodes[Number(url.slice(1))];
      if (!n) return Promise.reject(new Error(`no node at ${url}`));
      return n.dial();
    },
  });
}

function config(store: MemoryStore, nodes: FakeNode[], over: Partial<ClientConfig> = {}): ClientConfig {
  return {
    endpoints: nodes.map((_, i) => ({ webSocketUrl: `n${i}` })),
    device: "phone",
    token: "tok-1",
    store,
    connector: connectorFor(...nodes),
    clock: testClock(0),
    logger: quiet,
    retryScheduleMs: [20, 40],
    requestTimeoutMs: 500,
    ...over,
  };
}

function record<K extends keyof ClientEvents>(c: Client, name: K): ClientEvents[K][] {
  const out: ClientEvents[K][] = [];
  c.on(name, (e) => out.push(e));
  return out;
}

const text = (s: string): Uint8Array => new TextEncoder().encode(s);

function ack(f: Frame, seq: number): ReturnType<typeof makeFrame<11>> {
  return makeFrame(FrameType.Ack, { id: (f as { id: number }).id, msgId: `1.${seq}.0`, conv: (f as { conv: string }).conv, convSeq: seq, epoch: 1n });
}

function msg(seq: number, conv = "g1", msgId = `1.${seq}.0`): Entry {
  return makeEntry({ seq, kind: 1, msgId, conv, convSeq: seq, sender: "bob", time: 1n, body: text(`m${seq}`) });
}

test("offline start: stored messages are readable and sends are queued durably before they resolve", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 5n, [msg(1), msg(2)]);
  const node = new FakeNode({ answer: (f) => ack(f, 3) });
  const c = await openFor(t, config(store, [node], { autoConnect: false }));
  assert.deepEqual((await c.messages("g1")).map((m) => m.convSeq), [1, 2]);
  assert.deepEqual(c.cursor(), [{ epoch: 5n, pos: 2 }]);
  const it = await c.send("g1", text("hi"));
  assert.equal(it.status, "sending");
  const stored = (await store.load()).outbox;
  assert.deepEqual(stored.map((o) => [o.cmid, o.status]), [[it.cmid, "sending"]]);
  assert.equal(node.conns.length, 0, "nothing dialed while offline");
  // Then connected: the queued item goes out with its cmid and is acknowledged.
  const statuses = record(c, "status");
  c.start();
  await until(() => statuses.length === 1, "sent");
  assert.equal(statuses[0]!.item.status, "sent");
  assert.equal(statuses[0]!.item.ack?.convSeq, 3);
  const hello = node.hellos[0]!;
  assert.deepEqual(hello.type === FrameType.Hello && [hello.token, hello.device, hello.protoVersion], ["tok-1", "phone", 8]);
  assert.equal((node.requests[0] as { cmid: string }).cmid, it.cmid);
  assert.equal((await store.load()).outbox[0]!.status, "sent");
  await c.close();
});

test("outbox: retryable answers are resent with the same cmid, not before retry_after_ms; then FAILED after the schedule", async (t) => {
  const store = new MemoryStore();
  const sentAt: number[] = [];
  let n = 0;
  const node = new FakeNode({
    answer: (f) => {
      sentAt.push(Date.now());
      n++;
      if ((f as { conv: string }).conv === "ok" && n >= 2) return ack(f, 1);
      return makeFrame(FrameType.Error, { id: (f as { id: number }).id, code: Code.Overloaded, retryAfterMs: 150 });
    },
  });
  const c = await openFor(t, config(store, [node]));
  const statuses = record(c, "status");
  const a = await c.send("ok", text("a"));
  await until(() => statuses.length === 1, "sent after one retry");
  assert.equal(statuses[0]!.item.status, "sent");
  assert.ok(sentAt[1]! - sentAt[0]! >= 140, `resent after ${sentAt[1]! - sentAt[0]!} ms, retry_after_ms is 150`);
  assert.deepEqual(node.requests.map((r) => (r as { cmid: string }).cmid), [a.cmid, a.cmid]);
  assert.notEqual((node.requests[0] as { id: number }).id, (node.requests[1] as { id: number }).id, "a new request id per attempt");
  // An item that is always refused: 1 + 2 retries (schedule of two waits), then failed.
  node.requests.length = 0;
  const b = await c.send("never", text("b"));
  await until(() => statuses.length === 2, "failed", 5000);
  const failed = statuses[1]!;
  assert.equal(failed.item.cmid, b.cmid);
  assert.equal(failed.item.status, "failed");
  assert.equal(failed.item.attempts, 3);
  assert.equal(failed.item.errorCode, Code.Overloaded);
  assert.equal(node.requests.length, 3);
  // The user retries by hand: same cmid, back to sending.
  await c.retry(b.cmid);
  assert.equal(statuses[2]!.item.status, "sending");
  await c.close();
});

test("outbox: one in flight per conversation, conversations in parallel; refusals are final", async (t) => {
  const store = new MemoryStore();
  const held: Frame[] = [];
  const node = new FakeNode({
    answer: (f) => {
      const conv = (f as { conv: string }).conv;
      if (conv === "slow") {
        held.push(f);
        return undefined; // answered later by the test
      }
      if (conv === "bad") return makeFrame(FrameType.Error, { id: (f as { id: number }).id, code: Code.NotMember });
      if (f.type === FrameType.Recall) return makeFrame(FrameType.Error, { id: f.id, code: Code.AlreadyRecalled });
      return ack(f, 1);
    },
  });
  const c = await openFor(t, config(store, [node], { requestTimeoutMs: 2000 }));
  const statuses = record(c, "status");
  const s1 = await c.send("slow", text("1"));
  const s2 = await c.send("slow", text("2"));
  const other = await c.send("fast", text("x"));
  await until(() => statuses.some((s) => s.item.cmid === other.cmid), "the other conversation is not held back");
  assert.equal(held.length, 1, "the second item of 'slow' waits for the first's answer");
  assert.equal((held[0] as { cmid: string }).cmid, s1.cmid);
  const srv = node.conns[0]!.streams[1]!;
  srv.send(ack(held[0]!, 1));
  await until(() => held.length === 2, "the second item goes after the first's Ack");
  assert.equal((held[1] as { cmid: string }).cmid, s2.cmid);
  srv.send(ack(held[1]!, 2));
  const bad = await c.send("bad", text("x"));
  const rec = await c.recall("fast", "1.1.0");
  await until(() => statuses.some((s) => s.item.cmid === bad.cmid) && statuses.some((s) => s.item.cmid === rec.cmid), "refusals");
  const badSt = statuses.find((s) => s.item.cmid === bad.cmid)!;
  assert.deepEqual([badSt.item.status, badSt.item.errorCode, node.requests.filter((r) => (r as { cmid: string }).cmid === bad.cmid).length], ["failed", Code.NotMember, 1]);
  assert.equal(statuses.find((s) => s.item.cmid === rec.cmid)!.item.status, "sent", "already_recalled counts as done");
  await assert.rejects(c.send("g", new Uint8Array(65_537)), /too_large/);
  await assert.rejects(c.send("bad id", text("x")), /invalid_argument/);
  await c.close();
});

/** A node whose sync streams the test drives. */
function syncNode(onSync: (s: ServerStream, start: Frame, n: number) => void, answer?: (f: Frame) => ReturnType<typeof makeFrame> | undefined): FakeNode {
  let n = 0;
  return new FakeNode({ limits: testLimits({ heartbeatMs: 200 }), sync: (s, start) => { onSync(s, start, n++); }, answer: (f) => answer?.(f) });
}

test("sync: batches stored then acknowledged; a gap is refetched from the stored cursor; duplicates merged by msg_id", async (t) => {
  const store = new MemoryStore();
  await store.applyHistory([makeEntry({ seq: 2, kind: 1, msgId: "1.2.0", conv: "g1", convSeq: 2, body: text("from history") })]);
  const starts: Frame[] = [];
  const acksSeen: { pos: number; storedAt: number }[] = [];
  let stream: ServerStream | null = null;
  const node = syncNode((s, start) => {
    starts.push(start);
    stream = s;
  });
  const c = await openFor(t, config(store, [node]));
  const entries = record(c, "entry");
  const gaps = record(c, "gap");
  const synced = record(c, "synced");
  await until(() => starts.length === 1, "SyncStart");
  const st = starts[0]!;
  assert.deepEqual(st.type === FrameType.SyncStart && [st.epoch, st.pos, st.subs], [0n, 0, [{ epoch: 0n, pos: 0 }]]);
  stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(1), msg(2)], head: 2 }));
  const ackFrame = await stream!.frame(1);
  const cursorWhenAcked = (await store.load()).cursors[0]!;
  acksSeen.push({ pos: ackFrame.type === FrameType.CursorAck ? ackFrame.pos : -1, storedAt: cursorWhenAcked.pos });
  assert.deepEqual(ackFrame, makeFrame(FrameType.CursorAck, { epoch: 9n, pos: 2 }));
  assert.deepEqual(acksSeen, [{ pos: 2, storedAt: 2 }], "the ack comes after the store committed");
  assert.deepEqual(entries.map((e) => [e.entry.seq, e.duplicate]), [[1, false], [2, true]]);
  await until(() => synced.length === 1, "synced");
  assert.deepEqual(synced[0], { epoch: 9n, head: 2 });
  // A batch that skips position 3: nothing stored, a gap, a new SyncStart from (9, 2).
  stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(4)], head: 4 }));
  await until(() => starts.length === 2, "restart after the gap");
  assert.deepEqual(gaps, [{ sub: 0, at: 3, source: "" }]);
  const st2 = starts[1]!;
  assert.deepEqual(st2.type === FrameType.SyncStart && [st2.epoch, st2.pos], [9n, 2]);
  assert.deepEqual((await store.load()).cursors, [{ epoch: 9n, pos: 2 }]);
  // Another epoch in a batch is refused the same way.
  stream!.send(makeFrame(FrameType.Batch, { epoch: 10n, entries: [msg(3)], head: 3 }));
  await until(() => starts.length === 3, "restart after an epoch mismatch");
  assert.equal((await store.messages("g1")).length, 2);
  await c.close();
});

/** A MemoryStore whose applyBatch waits until the test opens the gate: a slow disk. */
class GatedStore extends MemoryStore {
  gate: Promise<void> | null = null;
  override async applyBatch(sub: number, epoch: bigint, entries: readonly Entry[]): Promise<Entry[]> {
    if (this.gate) await this.gate;
    return super.applyBatch(sub, epoch, entries);
  }
}

test("sync: the ack waits for the store; a store that fails sends no ack", async (t) => {
  const store = new GatedStore();
  let open!: () => void;
  store.gate = new Promise((r) => (open = r));
  let stream: ServerStream | null = null;
  const node = syncNode((s) => {
    stream = s;
  });
  const c = await openFor(t, config(store, [node]));
  await until(() => stream !== null, "sync stream");
  stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(1)], head: 1 }));
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(stream!.frames.map((f) => f.type), [FrameType.SyncStart], "no CursorAck while the store has not committed");
  open();
  assert.deepEqual(await stream!.frame(1), makeFrame(FrameType.CursorAck, { epoch: 9n, pos: 1 }));
  stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(2)], head: 2 }));
  await stream!.frame(2);
  store.failWrites = new Error("quota exceeded");
  stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(3)], head: 3 }));
  await until(() => node.conns[0]!.closeInfo !== null, "the connection ends on a store failure");
  assert.equal(stream!.frames.length, 3, "no CursorAck for what was not stored");
  await c.close();
});

test("sync: TooOld rebases (ConvList, History) to the head; EpochChanged restarts at first − 1 keeping messages", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, [msg(1)]);
  const starts: Frame[] = [];
  let stream: ServerStream | null = null;
  const node = syncNode(
    (s, start) => {
      starts.push(start);
      stream = s;
    },
    (f) => {
      if (f.type === FrameType.ConvList) return makeFrame(FrameType.ConvListResult, { id: f.id, convs: [{ conv: "g1", kind: 2, epoch: 1n, first: 1, head: 7, members: ["alice", "bob"], memberCount: 2, readMark: 0, role: 1, deliveredMark: 0, peerDelivered: 0, peerRead: 0, source: false }] });
      if (f.type === FrameType.History) return makeFrame(FrameType.HistoryResult, { id: f.id, epoch: 1n, first: 1, head: 7, entries: [msg(6), msg(7)].map((e) => ({ ...e, seq: e.convSeq })) });
      return undefined;
    },
  );
  const c = await openFor(t, config(store, [node]));
  const rebases = record(c, "rebase");
  const epochs = record(c, "epoch");
  await until(() => starts.length === 1, "SyncStart");
  stream!.send(makeFrame(FrameType.TooOld, { epoch: 9n, first: 50, head: 100 }));
  await until(() => starts.length === 2, "restart after the rebase");
  assert.deepEqual(rebases, [{ sub: 0, epoch: 9n, head: 100, source: "" }]);
  const st = starts[1]!;
  assert.deepEqual(st.type === FrameType.SyncStart && [st.epoch, st.pos], [9n, 100]);
  assert.deepEqual((await store.messages("g1")).map((m) => m.convSeq), [1, 6, 7], "recent history loaded");
  assert.deepEqual((await store.members("g1")).members, ["alice", "bob"]);
  assert.deepEqual(node.requests.map((r) => r.type), [FrameType.ConvList, FrameType.History]);
  stream!.send(makeFrame(FrameType.EpochChanged, { epoch: 11n, first: 4, head: 9 }));
  await until(() => starts.length === 3, "restart after the epoch change");
  assert.deepEqual(epochs, [{ sub: 0, epoch: 11n, source: "" }]);
  const st3 = starts[2]!;
  assert.deepEqual(st3.type === FrameType.SyncStart && [st3.epoch, st3.pos], [11n, 3]);
  assert.equal((await store.messages("g1")).length, 3, "messages kept across the epoch change");
  await c.close();
});

test("sync: an EpochChanged that continues keeps everything stored and restarts at (new epoch, stored pos), no epoch event", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, [msg(1), msg(2)]);
  const starts: Frame[] = [];
  let stream: ServerStream | null = null;
  const node = syncNode((s, start) => {
    starts.push(start);
    stream = s;
  });
  const c = await openFor(t, config(store, [node]));
  const epochs = record(c, "epoch");
  await until(() => starts.length === 1, "SyncStart");
  // Restored from a backup holding positions 1..2 of epoch 9: they are 1..2 of epoch 11 (§8.4).
  stream!.send(makeFrame(FrameType.EpochChanged, { epoch: 11n, first: 1, head: 5, continues: true }));
  await until(() => starts.length === 2, "restart after the epoch change");
  const st = starts[1]!;
  assert.deepEqual(st.type === FrameType.SyncStart && [st.epoch, st.pos, st.subs], [11n, 2, [{ epoch: 11n, pos: 2 }]], "nothing replayed");
  assert.deepEqual(epochs, [], "nothing for the app to hear");
  assert.deepEqual((await store.messages("g1")).map((m) => m.convSeq), [1, 2], "messages kept");
  // The new epoch goes on from there, and the stored run still starts at 1 (its entries stay checkable).
  stream!.send(makeFrame(FrameType.Batch, { epoch: 11n, entries: [msg(3)], head: 3 }));
  assert.deepEqual(await stream!.frame(1), makeFrame(FrameType.CursorAck, { epoch: 11n, pos: 3 }));
  assert.deepEqual(c.cursor(), [{ epoch: 11n, pos: 3 }]);
  assert.deepEqual((await store.messages("g1")).map((m) => m.convSeq), [1, 2, 3]);
  const stored = await store.readEntries(0, 1, 3);
  assert.deepEqual([stored.cursor, stored.base, stored.entries.map((e) => e.seq)], [{ epoch: 11n, pos: 3 }, 1, [1, 2, 3]]);
  await c.close();
});

test("sync: sub-logs have their own cursors and acks; the next SyncStart sends the whole vector", async (t) => {
  const store = new MemoryStore();
  const starts: Frame[] = [];
  let stream: ServerStream | null = null;
  const node = syncNode((s, start) => {
    starts.push(start);
    stream = s;
  });
  const c = await openFor(t, config(store, [node]));
  await until(() => starts.length === 1, "SyncStart");
  stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(1)], head: 1 }));
  stream!.send(makeFrame(FrameType.Batch, { epoch: 21n, sub: 2, entries: [msg(1, "g2", "2.1.0")], head: 1 }));
  await stream!.frame(2);
  assert.deepEqual(stream!.frames.slice(1), [makeFrame(FrameType.CursorAck, { epoch: 9n, pos: 1 }), makeFrame(FrameType.CursorAck, { epoch: 21n, pos: 1, sub: 2 })]);
  // A stream that ends (the server's FIN) restarts with the vector cursor.
  void stream!.s.end();
  await until(() => starts.length === 2, "restart");
  const st = starts[1]!;
  assert.deepEqual(st.type === FrameType.SyncStart && st.subs, [{ epoch: 9n, pos: 1 }, { epoch: 0n, pos: 0 }, { epoch: 21n, pos: 1 }]);
  assert.deepEqual((await store.load()).cursors.length, 3);
  await c.close();
});

test("reconnect: a refusal's retry_after_ms is honored; a failed dial moves to the next node; token refused → tokenProvider", async (t) => {
  const store = new MemoryStore();
  const down = new FakeNode();
  down.dial = () => Promise.reject(new Error("unreachable"));
  const busy = new FakeNode({ refuse: { code: Code.TooManyConnections, reason: "node full", retryAfterMs: 700 } });
  const tokens: string[] = [];
  const c = await openFor(t, config(store, [down, busy], {
    token: "",
    tokenProvider: () => {
      tokens.push(`t${tokens.length + 1}`);
      return Promise.resolve(tokens[tokens.length - 1]!);
    },
  }));
  const conn = record(c, "connection");
  await until(() => busy.hellos.length === 1, "the second node tried after the first failed");
  const t0 = Date.now();
  busy.script = { refuse: { code: Code.TokenExpired, reason: "token expired" } };
  await until(() => busy.hellos.length === 2, "redial after the retry-after", 3000);
  assert.ok(Date.now() - t0 >= 600, `redialed after ${Date.now() - t0} ms; retry_after_ms 700`);
  const disc = conn.filter((e) => e.state === "disconnected");
  assert.ok(disc.some((e) => (e.retryInMs ?? 0) >= 700));
  busy.script = {};
  await until(() => busy.hellos.length === 3, "redial after the token was refused", 5000);
  const h = busy.hellos[2]!;
  assert.equal(h.type === FrameType.Hello && h.token, "t2", "a fresh token after token_expired");
  assert.equal((busy.hellos[1] as { token: string }).token, "t1");
  await until(() => c.connected, "connected");
  await c.close();
});

test("status of the outbox survives a restart of the app (resumed from the store)", async (t) => {
  const store = new MemoryStore();
  const node = new FakeNode({ answer: () => undefined });
  const c1 = await openFor(t, config(store, [node], { autoConnect: false }));
  const it = await c1.send("g1", text("x"));
  await c1.close();
  const node2 = new FakeNode({ answer: (f) => ack(f, 1) });
  const c2 = await openFor(t, config(store, [node2]));
  const statuses = record(c2, "status");
  await until(() => statuses.length === 1, "resumed and sent");
  assert.equal(statuses[0]!.item.cmid, it.cmid);
  const items: OutboxItem[] = c2.outboxItems();
  assert.deepEqual(items.map((o) => o.status), ["sent"]);
  await c2.close();
});

test("sync: Stale is reported once per episode and moves to another node after staleFailoverMs; a Heartbeat ends it", async (t) => {
  const store = new MemoryStore();
  const streams: ServerStream[] = [];
  const a = syncNode((s) => streams.push(s));
  const b = syncNode((s) => streams.push(s));
  const c = await openFor(t, config(store, [a, b], { staleFailoverMs: 150 }));
  const stale = record(c, "stale");
  const synced = record(c, "synced");
  const transports = record(c, "transport");
  await until(() => streams.length === 1, "sync on node a");
  streams[0]!.send(makeFrame(FrameType.Stale, { epoch: 0n, head: 0, unheardMs: 2500 }));
  streams[0]!.send(makeFrame(FrameType.Stale, { epoch: 0n, head: 0, unheardMs: 2600 }));
  await until(() => streams.length === 2, "moved to node b", 3000);
  assert.deepEqual(stale, [{ epoch: 0n, head: 0, unheardMs: 2500, source: "" }]);
  assert.equal(b.conns.length, 1);
  assert.deepEqual(transports.map((t) => t.endpoint), [0, 1]);
  streams[1]!.send(makeFrame(FrameType.Heartbeat, { epoch: 0n, head: 0 }));
  await until(() => synced.length === 1, "synced on node b");
  await c.close();
});

test("sync: superseded stops syncing but keeps the connection for the outbox", async (t) => {
  const store = new MemoryStore();
  const streams: ServerStream[] = [];
  const node = syncNode((s) => streams.push(s), (f) => ack(f, 1));
  const c = await openFor(t, config(store, [node]));
  const sup = record(c, "superseded");
  const statuses = record(c, "status");
  await until(() => streams.length === 1, "sync");
  streams[0]!.send(makeFrame(FrameType.Error, { code: Code.Superseded, message: "another stream" }));
  await until(() => sup.length === 1, "superseded");
  await c.send("g1", text("still sending"));
  await until(() => statuses.length === 1, "sent on the same connection");
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(streams.length, 1, "no new sync stream: it does not fight");
  assert.equal(node.conns.length, 1);
  await c.close();
});

test("sync: no frame for 3 heartbeat intervals restarts the stream; twice without progress ends the connection", async (t) => {
  const store = new MemoryStore();
  const streams: ServerStream[] = [];
  const node = syncNode((s) => streams.push(s)); // heartbeat_ms 200, and the node says nothing
  const c = await openFor(t, config(store, [node]));
  await until(() => streams.length === 2, "restarted after 600 ms of silence", 3000);
  await until(() => node.conns[0]!.closeInfo !== null, "the connection ends after two silent streams", 3000);
  await until(() => node.conns.length === 2, "redialed after the backoff", 3000);
  await c.close();
});

test("liveness: a request unanswered while the server says nothing gets the connection probed, closed as dead and redialed", async (t) => {
  // A node killed outright sends no close; WebTransport notices at QUIC's idle timeout (Firefox:
  // later). The queued item must not wait for that.
  const store = new MemoryStore();
  let first: unknown = null;
  const node: FakeNode = new FakeNode({ answer: (f, conn) => {
    first ??= conn;
    return conn === first ? undefined : ack(f, 1);
  } });
  const c = await openFor(t, config(store, [node], { requestTimeoutMs: 400, probeTimeoutMs: 300, retryScheduleMs: [50, 50, 50] }));
  const statuses = record(c, "status");
  const start = Date.now();
  await c.send("g1", text("to a dead node"));
  await until(() => node.conns[0]?.closeInfo?.how === "local", "the silent connection closed by the client", 3000);
  const heads = node.requests.filter((r) => r.type === FrameType.HeadCheck);
  assert.ok(heads.length >= 1, "probed with a HeadCheck");
  await until(() => statuses.length === 1, "sent on the new connection", 5000);
  assert.equal(statuses[0]!.item.status, "sent");
  assert.ok(Date.now() - start < 4000, `took ${Date.now() - start} ms`);
  await c.close();
});

test("liveness: no heartbeat for an interval and a margin → probe; answered → it stays; unanswered → the connection ends", async (t) => {
  const store = new MemoryStore();
  let probes = 0;
  const node = new FakeNode({
    limits: testLimits({ heartbeatMs: 1000 }),
    // One heartbeat, then silence (the node died, or its packets stopped coming). The sync
    // stream's own silence rule (3 heartbeat intervals) would only restart the stream at 3 s.
    sync: (s) => {
      s.send(makeFrame(FrameType.Heartbeat, { epoch: 0n, head: 0 }));
    },
    answer: (f) => (f.type === FrameType.HeadCheck && ++probes === 1 ? makeFrame(FrameType.Head, { id: (f as { id: number }).id, epoch: 0n, head: 0 }) : undefined),
  });
  const start = Date.now();
  const c = await openFor(t, config(store, [node], { probeTimeoutMs: 300 }));
  await until(() => probes === 1, "a probe after a silent heartbeat interval", 3000);
  assert.ok(Date.now() - start >= 1900, `probed after ${Date.now() - start} ms; heartbeat_ms 1000 + 1000 margin`);
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(node.conns[0]!.closeInfo, null, "an answered probe keeps the connection");
  await until(() => node.conns[0]!.closeInfo?.how === "local", "closed once a probe goes unanswered", 4000);
  assert.equal(probes, 2);
  await until(() => node.conns.length === 2, "redialed", 5000);
  await c.close();
});

test("lifecycle: online forgets WebTransport failures and dials at once; checkConnection probes a connection", async (t) => {
  const store = new MemoryStore();
  const node = new FakeNode();
  let down = true;
  const real = node.dial;
  node.dial = () => (down ? Promise.reject(new Error("unreachable")) : real());
  const c = await openFor(t, config(store, [node], { lifecycle: false }));
  const conns = record(c, "connection");
  const net = record(c, "network");
  // Let the backoff grow to seconds.
  await until(() => conns.filter((e) => e.state === "disconnected").length >= 3, "three failed dials", 6000);
  down = false;
  const before = Date.now();
  c.networkChanged(true);
  await until(() => c.connected, "connected at once", 1000);
  assert.ok(Date.now() - before < 500, `dialed ${Date.now() - before} ms after online`);
  assert.deepEqual(net, [{ online: true }]);
  c.checkConnection("test");
  await until(() => node.requests.some((r) => r.type === FrameType.HeadCheck), "probed");
  await c.close();
});

test("token: refreshed on the control stream ahead of its expiry", async (t) => {
  const store = new MemoryStore();
  const expires = BigInt(Date.now() + 400) * 1_000_000n; // 400 ms: refresh at a quarter left
  const node = new FakeNode({ tokenExpires: expires });
  let calls = 0;
  const c = await openFor(t, config(store, [node], {
    tokenProvider: () => {
      calls++;
      return Promise.resolve(`fresh-${calls}`);
    },
  }));
  await until(() => (node.conns[0]?.streams[0]?.frames.length ?? 0) >= 2, "Refresh on the control stream", 2000);
  const control = node.conns[0]!.streams[0]!;
  assert.deepEqual(control.frames[1], makeFrame(FrameType.Refresh, { token: "fresh-1" }));
  control.send(makeFrame(FrameType.Refreshed, { tokenExpires: expires + 3_600_000_000_000n }));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(node.conns.length, 1, "the session goes on");
  await c.close();
});

test("outbox: unavailable twice in a row moves to the next node, where the item is resent", async (t) => {
  const store = new MemoryStore();
  const a = new FakeNode({ answer: (f) => makeFrame(FrameType.Error, { id: (f as { id: number }).id, code: Code.Unavailable, retryAfterMs: 10 }) });
  const b = new FakeNode({ answer: (f) => ack(f, 1) });
  const c = await openFor(t, config(store, [a, b], { retryScheduleMs: [10, 10, 10, 10] }));
  const statuses = record(c, "status");
  const it = await c.send("g1", text("x"));
  await until(() => statuses.length === 1, "sent on node b", 5000);
  assert.equal(a.requests.length, 2);
  assert.equal((b.requests[0] as { cmid: string }).cmid, it.cmid);
  await c.close();
});

test("over the WebSocket mux: handshake, a 900 KB catch-up within credit, acks, and a refusal's close status", async (t) => {
  const { dialThroughMux } = await import("./muxbridge.js");
  const store = new MemoryStore();
  let stream: ServerStream | null = null;
  const node = syncNode((s) => {
    stream = s;
  }, (f) => ack(f, 1));
  // The bridge never sends beyond the client's credit: 900 KB only get through if the client
  // grants CREDIT as it reads (else the stream stalls at 256 KiB and the wait below times out).
  const stats = { creditsFromClient: 0, dataRecordsToClient: 0 };
  const connector = new Connector({ dialWebTransport: null, dialWebSocket: () => dialThroughMux(node, stats) });
  const c = await openFor(t, config(store, [node], { connector }));
  const statuses = record(c, "status");
  await c.send("g1", text("over ws"));
  await until(() => statuses.length === 1 && stream !== null, "sent over the mux");
  const big = (seq: number): Entry => ({ ...msg(seq), body: new Uint8Array(60_000).fill(seq) });
  for (let b = 0; b < 3; b++) {
    stream!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: Array.from({ length: 5 }, (_, i) => big(b * 5 + i + 1)), head: 15 }));
  }
  await until(async () => (await store.load()).cursors[0]!.pos === 15, "900 KB stored", 5000);
  assert.ok(stats.creditsFromClient >= 5, `the client granted credit as it read (${stats.creditsFromClient} CREDIT records)`);
  await stream!.frame(3);
  assert.deepEqual(stream!.frames.slice(1).map((f) => f.type === FrameType.CursorAck && f.pos), [5, 10, 15]);
  assert.equal((await store.messages("g1")).length, 15);
  // A refusal arrives as close status 4000 + code with §2's reason.
  const conns = record(c, "connection");
  node.conns[0]!.close(Code.Unavailable, "retry_after_ms=300; node leaving");
  await until(() => conns.some((e) => e.state === "disconnected"), "disconnected");
  const d = conns.find((e) => e.state === "disconnected")!;
  assert.ok(d.error instanceof Error && "code" in d.error && d.error.code === Code.Unavailable, String(d.error));
  assert.ok((d.retryInMs ?? 0) >= 300);
  await c.close();
});

test("over the WebSocket mux: a send queued before the connection is answered (stream ids follow the streams' first records)", async (t) => {
  // At connect the outbox opens its request stream before the sync stream, but the sync stream
  // writes first: with ids taken at creation the server (which ignores a record below the highest
  // id it has seen, §2.4) dropped the request, and the item stayed `sending` for good.
  const { dialThroughMux } = await import("./muxbridge.js");
  const store = new MemoryStore();
  const node = syncNode(() => undefined, (f) => ack(f, 1));
  const connector = new Connector({ dialWebTransport: null, dialWebSocket: () => dialThroughMux(node, { creditsFromClient: 0, dataRecordsToClient: 0 }) });
  const c = await openFor(t, config(store, [node], { connector, autoConnect: false }));
  const statuses = record(c, "status");
  await c.send("g1", text("queued offline"));
  c.start();
  await until(() => statuses.length === 1, "the queued item acknowledged");
  assert.equal(statuses[0]!.item.status, "sent");
  await c.close();
});

test("head check: a head the cursor does not reach within two heartbeat intervals restarts the sync stream", async (t) => {
  const store = new MemoryStore();
  const starts: Frame[] = [];
  let sync: ServerStream | null = null;
  const node = syncNode((s, start) => {
    starts.push(start);
    sync = s;
  }, (f) => (f.type === FrameType.HeadCheck ? makeFrame(FrameType.Head, { id: f.id, epoch: 0n, head: 5, first: 1 }) : undefined));
  // heartbeat_ms 200 in syncNode; silence would restart after 600 ms, so keep the stream alive.
  const c = await openFor(t, config(store, [node], { headCheckMs: 50 }));
  await until(() => starts.length === 1, "SyncStart");
  // Heartbeats that claim head 0 (caught up): only the head check knows the head is 5.
  const keepAlive = setInterval(() => {
    sync?.send(makeFrame(FrameType.Heartbeat, { epoch: 0n, head: 0 }));
  }, 100);
  try {
    await until(() => node.requests.some((r) => r.type === FrameType.HeadCheck), "a head check", 2000);
    await until(() => starts.length >= 2, "restart: the cursor stayed at 0 while the head is 5", 3000);
  } finally {
    clearInterval(keepAlive);
  }
  await c.close();
});

test("reconnect: a close that arrives after the streams failed still gives its retry_after_ms (WebTransport's order)", async (t) => {
  // Over WebTransport a server's close can reach the page after its streams have failed: the
  // session must take the close's error (and retry-after) rather than end as a local close and
  // redial at once. Found by the conformance kit's retry_after scenario.
  const store = new MemoryStore();
  const node = syncNode(() => undefined);
  const c = await openFor(t, config(store, [node]));
  const conns = record(c, "connection");
  await until(() => conns.some((e) => e.state === "connected"), "connected");
  const sc = node.conns[0]!;
  await until(() => sc.streams.length >= 2, "the sync stream open");
  for (const s of sc.streams) s.s.reset(Code.Overloaded); // every stream fails first…
  setTimeout(() => { sc.close(Code.Overloaded, "retry_after_ms=700; busy"); }, 30); // …the close comes after
  await until(() => conns.some((e) => e.state === "disconnected"), "disconnected");
  const d = conns.find((e) => e.state === "disconnected")!;
  assert.ok(d.error instanceof Error && "code" in d.error && d.error.code === Code.Overloaded, String(d.error));
  assert.ok((d.retryInMs ?? 0) >= 700, `redial in ${d.retryInMs} ms; the close said retry_after_ms 700`);
  await c.close();
});

test("reconnect: an Error on the control stream before a close that comes as a lost connection gives its retry_after_ms", async (t) => {
  // Chromium and Firefox report a WebTransport session the server closed as "connection lost",
  // without the close's code and reason: the Error frame the server wrote first is then all the
  // page has of the retry-after (found by the conformance kit's retry_after scenario).
  const store = new MemoryStore();
  const node = syncNode(() => undefined);
  const c = await openFor(t, config(store, [node]));
  const conns = record(c, "connection");
  await until(() => conns.some((e) => e.state === "connected"), "connected");
  const sc = node.conns[0]!;
  sc.streams[0]!.send(makeFrame(FrameType.Error, { id: 0, code: Code.Overloaded, message: "busy", retryAfterMs: 700 }));
  setTimeout(() => { sc.lose(); }, 30);
  await until(() => conns.some((e) => e.state === "disconnected"), "disconnected");
  const d = conns.find((e) => e.state === "disconnected")!;
  assert.ok(d.error instanceof Error && "code" in d.error && d.error.code === Code.Overloaded, String(d.error));
  assert.ok((d.retryInMs ?? 0) >= 700, `redial in ${d.retryInMs} ms; the Error said retry_after_ms 700`);
  await c.close();
});
