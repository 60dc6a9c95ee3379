// The digest checks of §8.7 against a scripted node that keeps a user log of its own: it replays
// the log from each SyncStart, answers Digest over it (or as a test says) and HeadCheck with its
// head. What the client does is read from both ends: the frames the node received (Digest,
// Report, SyncStart), the store, and the client's events.

import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { Client, type ClientConfig } from "../src/client.js";
import { Code } from "../src/codes.js";
import { digestEqual, digestOf } from "../src/digest.js";
import { FrameType, PROTO_VERSION, ReportKind, makeEntry, makeFrame, type Digest, type Entry, type Frame, type PartialFrame, type Report, type SyncStart } from "../src/frames.js";
import { MemoryStore } from "../src/store.js";
import { Connector } from "../src/transport/connect.js";
import type { ClientEvents } from "../src/events.js";
import { FakeNode, testClock, testLimits, until, type ServerStream } from "./fakeserver.js";

const text = (s: string): Uint8Array => new TextEncoder().encode(s);
const body = (m: { body: Uint8Array }): string => new TextDecoder().decode(m.body);

function msg(seq: number): Entry {
  return makeEntry({ seq, kind: 1, msgId: `1.${seq}.0`, conv: "g1", convSeq: seq, sender: "bob", time: 1n, body: text(`m${seq}`) });
}

const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** A node with a user log: what the test may change while it runs. */
interface LogNode {
  node: FakeNode;
  /** The log's entries (retained ones), by position. */
  log: Entry[];
  epoch: bigint;
  /** The first retained position. */
  first: number;
  /** The most entries one DigestResult covers (the server's page). */
  page: number;
  /** Answers a Digest instead of the log, when set (return undefined to answer from the log). */
  digest: ((f: Digest) => PartialFrame | undefined) | null;
  /** Sends this instead of replaying, when set (a gap, an EpochChanged). */
  onStart: ((s: ServerStream, f: SyncStart) => boolean) | null;
  starts: SyncStart[];
  streams: ServerStream[];
  /** The Digest requests received, in order. */
  digests(): Digest[];
  /** The Reports received on the control streams of every connection, in order. */
  reports(): Report[];
  /** Ends the current sync stream (FIN): the client restarts it from its cursor. */
  endStream(): void;
}

function logNode(log: Entry[], epoch: bigint, protoVersion?: number): LogNode {
  const ln: LogNode = {
    node: new FakeNode(),
    log, epoch, first: 1, page: 1000, digest: null, onStart: null, starts: [], streams: [],
    digests: () => ln.node.requests.filter((f): f is Digest => f.type === FrameType.Digest),
    reports: () => ln.node.conns.flatMap((c) => c.streams[0]?.frames ?? []).filter((f): f is Report => f.type === FrameType.Report),
    endStream: () => {
      void ln.streams.at(-1)?.s.end();
    },
  };
  const head = (): number => ln.log.at(-1)?.seq ?? ln.first - 1;
  ln.node.script = {
    // Heartbeats 5 s apart: no silence restart in a test's time; the first one comes at once.
    limits: testLimits({ heartbeatMs: 5000 }),
    protoVersion,
    sync: (s, f) => {
      const start = f as SyncStart;
      ln.starts.push(start);
      ln.streams.push(s);
      if (ln.onStart?.(s, start)) return;
      const rest = ln.log.filter((e) => e.seq > start.pos);
      for (let i = 0; i < rest.length; i += 256) s.send(makeFrame(FrameType.Batch, { epoch: ln.epoch, entries: rest.slice(i, i + 256), head: head() }));
      s.send(makeFrame(FrameType.Heartbeat, { epoch: ln.epoch, head: head() }));
    },
    answer: async (f) => {
      if (f.type === FrameType.HeadCheck) return makeFrame(FrameType.Head, { id: f.id, epoch: ln.epoch, head: head(), first: ln.first });
      if (f.type !== FrameType.Digest) return undefined;
      const own = ln.digest?.(f);
      if (own) return own;
      if (f.epoch !== ln.epoch) return makeFrame(FrameType.Error, { id: f.id, code: Code.EpochChanged, message: `the log's epoch is ${ln.epoch}` });
      if (f.from < ln.first) return makeFrame(FrameType.Error, { id: f.id, code: Code.TooOld, message: `first retained ${ln.first}` });
      const to = Math.min(f.to === 0 ? head() : f.to, head(), f.from + ln.page - 1);
      const covered = ln.log.filter((e) => e.seq >= f.from && e.seq <= to);
      return makeFrame(FrameType.DigestResult, { id: f.id, epoch: ln.epoch, from: f.from, to: Math.max(to, f.from - 1), count: covered.length, digest: await digestOf(covered), first: ln.first, head: head() });
    },
  };
  return ln;
}

async function openFor(t: TestContext, store: MemoryStore, ln: LogNode, over: Partial<ClientConfig> = {}): Promise<{ c: Client; logs: string[] }> {
  const logs: string[] = [];
  const c = await Client.open({
    endpoints: [{ webSocketUrl: "n0" }],
    device: "phone",
    token: "tok-1",
    store,
    connector: new Connector({ dialWebTransport: null, dialWebSocket: () => ln.node.dial() }),
    clock: testClock(0),
    logger: (level, m, data) => logs.push(`${level} ${m} ${JSON.stringify(data ?? {}, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))}`),
    requestTimeoutMs: 1000,
    ...over,
  });
  t.after(() => c.close());
  return { c, logs };
}

function record<K extends keyof ClientEvents>(c: Client, name: K): ClientEvents[K][] {
  const out: ClientEvents[K][] = [];
  c.on(name, (e) => out.push(e));
  return out;
}

/** How many checks ended with outcome, from the client's debug log. */
const outcomes = (logs: string[], outcome: string): number => logs.filter((l) => l.startsWith("debug digest check ") && l.includes(`"outcome":"${outcome}"`)).length;

const quietly = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test("check: a digest that matches changes nothing (one Digest over the newest entries after the resume)", async (t) => {
  const store = new MemoryStore();
  const log = range(1, 5).map(msg);
  await store.applyBatch(0, 9n, log);
  const ln = logNode(log, 9n);
  const { c, logs } = await openFor(t, store, ln);
  const mismatches = record(c, "mismatch");
  await until(() => outcomes(logs, "match") === 1, "a matching check");
  assert.deepEqual(ln.digests(), [makeFrame(FrameType.Digest, { id: ln.digests()[0]!.id, epoch: 9n, from: 1, to: 5 })]);
  await quietly(150);
  assert.deepEqual(ln.reports(), []);
  assert.deepEqual(mismatches, []);
  assert.equal(ln.starts.length, 1, "no restart");
  assert.deepEqual(c.cursor(), [{ epoch: 9n, pos: 5 }]);
  assert.deepEqual((await store.messages("g1")).map(body), ["m1", "m2", "m3", "m4", "m5"]);
});

test("check: a mismatch is reported once, the range refetched from its start with ceiling 0, the stored copies replaced; the check after the replay matches", async (t) => {
  const store = new MemoryStore();
  const log = range(1, 6).map(msg);
  // What the device stored went wrong: entry 3's body changed (a storage bug, a bad migration).
  await store.applyBatch(0, 9n, log.map((e) => (e.seq === 3 ? { ...e, body: text("tampered") } : e)));
  const ln = logNode(log, 9n);
  const { c, logs } = await openFor(t, store, ln, { ceiling: 50 });
  const mismatches = record(c, "mismatch");
  const entries = record(c, "entry");
  await until(() => outcomes(logs, "match") === 1, "the check after the refetch", 5000);
  assert.deepEqual(mismatches, [{ sub: 0, epoch: 9n, from: 1, to: 6, refetching: true }]);
  assert.deepEqual(ln.reports(), [makeFrame(FrameType.Report, { kind: ReportKind.Mismatch, sub: 0, epoch: 9n, from: 1, to: 6 })]);
  assert.deepEqual(ln.starts.map((s) => [s.epoch, s.pos, s.ceiling]), [[9n, 6, 50], [9n, 0, 0]], "a replay from from − 1, never a rebase");
  assert.deepEqual(ln.digests().map((d) => [d.from, d.to]), [[1, 6], [1, 6]]);
  // The refetched entries replaced the stored copies: the view and the stored entries are the server's.
  assert.deepEqual((await store.messages("g1")).map(body), ["m1", "m2", "m3", "m4", "m5", "m6"]);
  assert.ok(digestEqual(await digestOf((await store.readEntries(0, 1, 6)).entries), await digestOf(log)));
  assert.deepEqual(entries.map((e) => [e.entry.seq, e.duplicate]), range(1, 6).map((n) => [n, true]), "nothing new: the same msg_ids");
  assert.deepEqual(c.cursor(), [{ epoch: 9n, pos: 6 }]);
  // The next restart is an ordinary one again.
  ln.endStream();
  await until(() => ln.starts.length === 3, "a restart");
  assert.equal(ln.starts[2]!.ceiling, 50);
  assert.equal(ln.reports().length, 1);
});

test("check: the walk with the head checks goes through the whole run a page at a time and finds what the newest window does not", async (t) => {
  const store = new MemoryStore();
  const log = range(1, 1000).map(msg);
  await store.applyBatch(0, 9n, log.map((e) => (e.seq === 850 ? { ...e, body: text("tampered") } : e)));
  const ln = logNode(log, 9n);
  ln.page = 400; // the server covers at most 400 entries per answer: the walk goes on from its `to`
  const { c, logs } = await openFor(t, store, ln, { headCheckMs: 100 });
  const mismatches = record(c, "mismatch");
  await until(() => mismatches.length === 1, "the walk finds entry 850", 5000);
  assert.deepEqual(mismatches[0], { sub: 0, epoch: 9n, from: 801, to: 1000, refetching: true });
  const asked = ln.digests().map((d) => [d.from, d.to]);
  // After the resume: the newest 1,000 (covered: 1..400, which match). Then the walk: 1..1000
  // (covered 1..400), 401..1000 (401..800), 801..1000 — or the same from where the first left.
  assert.deepEqual(asked[0], [1, 1000]);
  assert.ok(asked.some(([f]) => f === 401) && asked.some(([f]) => f === 801), JSON.stringify(asked));
  await until(() => outcomes(logs, "match") >= 2 && ln.starts.length === 2, "refetched from 801 and checked again", 5000);
  assert.deepEqual([ln.starts[1]!.pos, ln.starts[1]!.ceiling], [800, 0]);
  await until(async () => body((await store.messages("g1"))[849]!) === "m850", "entry 850 repaired");
  assert.equal(ln.reports().length, 1);
});

test("check: a range that still differs after the refetch is given up on: no second report, no second refetch, no loop across resumes", async (t) => {
  const store = new MemoryStore();
  const log = range(1, 4).map(msg);
  await store.applyBatch(0, 9n, log);
  const ln = logNode(log, 9n);
  // A server whose digest never matches (a bug on either side).
  ln.digest = (f) => makeFrame(FrameType.DigestResult, { id: f.id, epoch: f.epoch, from: f.from, to: 4, count: 5 - f.from, digest: new Uint8Array(32), first: 1, head: 4 });
  const { c, logs } = await openFor(t, store, ln);
  const mismatches = record(c, "mismatch");
  await until(() => mismatches.length === 2, "the mismatch, then the one after the refetch", 5000);
  assert.deepEqual(mismatches.map((m) => m.refetching), [true, false]);
  assert.equal(ln.reports().length, 1);
  assert.equal(ln.starts.length, 2, "one refetch");
  assert.ok(logs.some((l) => l.startsWith("error digest check: the range still differs")));
  // Another resume (a restart, then a new connection) checks again and stays quiet.
  ln.endStream();
  await until(() => outcomes(logs, "gave_up") === 2, "the check after a restart", 3000);
  ln.node.conns[0]!.close(Code.Unavailable, "retry_after_ms=10; bye");
  await until(() => outcomes(logs, "gave_up") === 3, "the check after a reconnect", 5000);
  await quietly(150);
  assert.equal(mismatches.length, 2);
  assert.equal(ln.reports().length, 1);
  assert.equal(ln.starts.length, 4, "no refetch after giving up");
  assert.deepEqual(c.cursor(), [{ epoch: 9n, pos: 4 }]);
});

test("check: too_old is asked again once from the first retained position (a HeadCheck tells it), and not again", async (t) => {
  const store = new MemoryStore();
  const log = range(1, 8).map(msg);
  await store.applyBatch(0, 9n, log);
  const ln = logNode(log.slice(3), 9n); // retention trimmed 1..3
  ln.first = 4;
  const { logs } = await openFor(t, store, ln);
  await until(() => outcomes(logs, "match") === 1, "a match over what is retained");
  assert.deepEqual(ln.digests().map((d) => [d.from, d.to]), [[1, 8], [4, 8]]);
  assert.deepEqual(ln.node.requests.map((r) => r.type), [FrameType.Digest, FrameType.HeadCheck, FrameType.Digest]);
  // A server that keeps answering too_old (its Head is behind its Digest): one more try at most.
  ln.digest = (f) => makeFrame(FrameType.Error, { id: f.id, code: Code.TooOld, message: "trimmed" });
  ln.first = 2;
  ln.endStream();
  await until(() => outcomes(logs, "nothing") === 1, "the check after the restart");
  await quietly(150);
  assert.deepEqual(ln.digests().map((d) => [d.from, d.to]), [[1, 8], [4, 8], [4, 8]], "from the first retained position known, then no retry: it is not above");
  assert.deepEqual(ln.reports(), []);
});

test("check: epoch_changed stops checks of that epoch on the connection, without acting; the sync stream's EpochChanged resyncs, then the new epoch is checked", async (t) => {
  const store = new MemoryStore();
  const log = range(1, 3).map(msg);
  await store.applyBatch(0, 9n, log);
  const ln = logNode(log, 9n);
  // A replica that already sees the log re-created (epoch 10), while the sync stream does not yet.
  ln.digest = (f) => makeFrame(FrameType.Error, { id: f.id, code: Code.EpochChanged, message: "epoch 10" });
  const { c, logs } = await openFor(t, store, ln);
  const epochs = record(c, "epoch");
  await until(() => outcomes(logs, "skipped") === 1, "the check answered epoch_changed");
  ln.endStream();
  await until(() => ln.starts.length === 2 && outcomes(logs, "skipped") === 2, "the check after the restart: skipped");
  assert.equal(ln.digests().length, 1, "not asked again in that epoch on this connection");
  assert.equal(ln.starts.length, 2, "nothing refetched");
  // Now the sync stream says it: the device resyncs the new epoch, which is checked.
  ln.epoch = 10n;
  ln.digest = null;
  ln.onStart = (s) => {
    ln.onStart = null;
    s.send(makeFrame(FrameType.EpochChanged, { epoch: 10n, first: 1, head: 3 }));
    return true;
  };
  ln.endStream();
  await until(() => outcomes(logs, "match") === 1, "the new epoch checked", 5000);
  assert.deepEqual(epochs, [{ sub: 0, epoch: 10n, source: "" }]);
  assert.deepEqual(ln.digests().map((d) => d.epoch), [9n, 10n]);
  assert.deepEqual(ln.reports(), []);
});

test("check: a gap is reported once per incident, not once per retry; a new gap is a new report", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, range(1, 2).map(msg));
  const ln = logNode(range(1, 8).map(msg), 9n);
  let broken = true;
  ln.onStart = (s, f) => {
    if (!broken) return false;
    // A batch that skips position pos + 1, every time.
    s.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: ln.log.filter((e) => e.seq > f.pos + 1), head: 8 }));
    return true;
  };
  const { c } = await openFor(t, store, ln);
  const gaps = record(c, "gap");
  // Two restarts without progress end the connection; the client redials and meets it again.
  await until(() => ln.node.conns.length === 2 && gaps.length >= 3, "the gap again after a reconnect", 5000);
  assert.deepEqual(ln.reports(), [makeFrame(FrameType.Report, { kind: ReportKind.Gap, sub: 0, epoch: 9n, from: 3, to: 4 })]);
  assert.equal((await store.load()).cursors[0]!.pos, 2, "nothing of the gapped batches stored");
  // The node gets it right; later a gap at another position is another incident.
  broken = false;
  ln.endStream();
  await until(() => c.cursor()[0]!.pos === 8, "caught up");
  ln.log.push(msg(10));
  ln.streams.at(-1)!.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(10)], head: 10 }));
  await until(() => ln.reports().length === 2, "the second gap reported");
  assert.deepEqual(ln.reports()[1], makeFrame(FrameType.Report, { kind: ReportKind.Gap, sub: 0, epoch: 9n, from: 9, to: 10 }));
});

test("check: a revision-3 server gets no Digest and no Report", async (t) => {
  const store = new MemoryStore();
  await store.applyBatch(0, 9n, range(1, 2).map((n) => ({ ...msg(n), body: text("not the server's") })));
  const ln = logNode(range(1, 4).map(msg), 9n, 3);
  ln.onStart = (s, f) => {
    if (ln.starts.length > 1) return false;
    s.send(makeFrame(FrameType.Batch, { epoch: 9n, entries: [msg(f.pos + 2)], head: 4 })); // a gap
    return true;
  };
  const { c, logs } = await openFor(t, store, ln);
  const gaps = record(c, "gap");
  await until(() => gaps.length === 1 && c.cursor()[0]!.pos === 4, "the gap, then caught up");
  await quietly(150);
  assert.equal(outcomes(logs, "skipped"), 0, "not even tried");
  assert.deepEqual(ln.digests(), []);
  assert.deepEqual(ln.reports(), []);
  const hello = ln.node.hellos[0] as Frame;
  assert.equal(hello.type === FrameType.Hello && hello.protoVersion, PROTO_VERSION);
});
