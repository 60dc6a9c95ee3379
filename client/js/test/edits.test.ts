// Revision 7: edits and reactions (§5 "Edits and reactions", "Folded entries"), in both stores
// and through the client: the view, early effects, folded entries, the outbox frames, the
// reaction rule and the messageChanged event.

import "fake-indexeddb/auto";
import { IDBFactory } from "fake-indexeddb";
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { Client, type ClientConfig } from "../src/client.js";
import { Code, ProtoError } from "../src/codes.js";
import { FrameType, Kind, makeEntry, makeFrame, type Entry, type Frame } from "../src/frames.js";
import { validReaction } from "../src/ids.js";
import { IndexedDBStore } from "../src/idbstore.js";
import { itemFrame } from "../src/outbox.js";
import { MemoryStore, type OutboxItem, type Store } from "../src/store.js";
import { Connector } from "../src/transport/connect.js";
import type { ClientEvents } from "../src/events.js";
import { FakeNode, testClock, testLimits, until, type ServerStream } from "./fakeserver.js";

const text = (s: string): Uint8Array => new TextEncoder().encode(s);
const str = (b: Uint8Array): string => new TextDecoder().decode(b);

const message = (seq: number, msgId: string, body: string, sender = "alice"): Entry =>
  makeEntry({ seq, kind: Kind.Message, msgId, conv: "g1", convSeq: seq, sender, time: BigInt(seq), body: text(body) });
const edit = (seq: number, target: string, body: string): Entry =>
  makeEntry({ seq, kind: Kind.Edit, msgId: `3.${seq}.0`, conv: "g1", convSeq: seq, sender: "alice", time: BigInt(seq), target, body: text(body) });
const reaction = (seq: number, target: string, sender: string, r: string, remove = false): Entry =>
  makeEntry({ seq, kind: Kind.Reaction, msgId: `3.${seq}.0`, conv: "g1", convSeq: seq, sender, time: BigInt(seq), target, reaction: r, remove });

type Shown = [string, boolean, bigint, Record<string, string[]>];
async function shown(s: Store): Promise<Shown[]> {
  return (await s.messages("g1")).map((m) => [str(m.body), m.edited, m.editedAt, m.reactions]);
}

const stores: [string, (t: TestContext) => Promise<Store>][] = [
  ["memory", () => Promise.resolve(new MemoryStore())],
  ["idb", async (t) => {
    const s = await IndexedDBStore.open(`syncd:edits:${Math.random()}`, { indexedDB: new IDBFactory(), requestPersistence: false });
    t.after(() => s.close());
    return s;
  }],
];

for (const [name, open] of stores) {
  test(`${name}: an edit replaces its target's body (last by conv_seq wins); reactions are state per (sender, reaction)`, async (t) => {
    const s = await open(t);
    await s.applyBatch(0, 9n, [message(1, "1.1.0", "hello"), message(2, "1.2.0", "other", "bob")]);
    assert.deepEqual(await shown(s), [["hello", false, 0n, {}], ["other", false, 0n, {}]]);
    await s.applyBatch(0, 9n, [
      edit(3, "1.1.0", "hello, edited"),
      reaction(4, "1.1.0", "bob", "👍"),
      reaction(5, "1.1.0", "carol", "👍"),
      reaction(6, "1.1.0", "bob", "❤️"),
      reaction(7, "1.1.0", "carol", "👍", true),
      reaction(8, "1.1.0", "bob", "👍"), // a repeat: changes nothing shown
    ]);
    assert.deepEqual(await shown(s), [["hello, edited", true, 3n, { "👍": ["bob"], "❤️": ["bob"] }], ["other", false, 0n, {}]]);
    await s.applyBatch(0, 9n, [edit(9, "1.1.0", "again"), reaction(10, "1.1.0", "bob", "❤️", true)]);
    assert.deepEqual((await shown(s))[0], ["again", true, 9n, { "👍": ["bob"] }]);
    // An edit or a reaction of something that is not a message changes nothing.
    await s.applyBatch(0, 9n, [reaction(11, "3.9.0", "bob", "👍")]);
    assert.deepEqual((await shown(s)).length, 2);
  });

  test(`${name}: an edit or a reaction of a message not stored yet is remembered and shown when the message comes`, async (t) => {
    const s = await open(t);
    await s.applyHistory([edit(20, "1.5.0", "edited early"), reaction(21, "1.5.0", "bob", "🎉"), reaction(22, "1.5.0", "carol", "🎉")]);
    assert.deepEqual(await shown(s), []);
    await s.applyHistory([reaction(23, "1.5.0", "carol", "🎉", true)]);
    await s.applyHistory([message(5, "1.5.0", "original")]);
    assert.deepEqual(await shown(s), [["edited early", true, 20n, { "🎉": ["bob"] }]]);
    // Older entries applied afterwards (a History page) do not undo later ones.
    await s.applyHistory([edit(15, "1.5.0", "older edit"), reaction(19, "1.5.0", "carol", "🎉")]);
    assert.deepEqual(await shown(s), [["edited early", true, 20n, { "🎉": ["bob"] }]]);
    // Once taken, they are gone: the same msg_id again is a duplicate, and a refetched copy keeps the effects.
    await s.applyHistory([message(5, "1.5.0", "original")]);
    assert.deepEqual(await shown(s), [["edited early", true, 20n, { "🎉": ["bob"] }]]);
  });

  test(`${name}: a folded entry is stored (position counts, msg_id deduplicated) and not applied`, async (t) => {
    const s = await open(t);
    await s.applyBatch(0, 9n, [message(1, "1.1.0", "hello")]);
    const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode("first edit")));
    const stub = makeEntry({ ...edit(2, "1.1.0", ""), folded: 5, bodyHash: hash });
    const foldedReaction = makeEntry({ seq: 3, kind: Kind.Reaction, msgId: "3.3.0", conv: "g1", convSeq: 3, sender: "bob", time: 3n, target: "1.1.0", folded: 4 });
    const foldedReceipt = makeEntry({ seq: 4, kind: Kind.Receipt, msgId: "3.4.0", conv: "g1", convSeq: 4, sender: "bob", time: 4n, folded: 6 });
    const fresh = await s.applyBatch(0, 9n, [stub, foldedReaction, foldedReceipt]);
    assert.equal(fresh.length, 3, "new entries, stored");
    assert.deepEqual(await shown(s), [["hello", false, 0n, {}]], "nothing applied: no empty body, no reaction");
    assert.equal(await s.readMark("g1", "bob"), 0, "a folded receipt (up_to absent) moves no mark");
    assert.deepEqual((await s.load()).cursors, [{ epoch: 9n, pos: 4 }]);
    // The whole copy of a folded entry (from History) is a duplicate: it creates nothing.
    assert.deepEqual(await s.applyHistory([edit(2, "1.1.0", "first edit")]), []);
    assert.deepEqual(await shown(s), [["hello", false, 0n, {}]]);
    // The entries that folded them carry the state.
    await s.applyBatch(0, 9n, [edit(5, "1.1.0", "second edit")]);
    assert.deepEqual(await shown(s), [["second edit", true, 5n, {}]]);
    // Stored as received: the stub keeps folded and body_hash, for the digest.
    const range = await s.readEntries?.(0, 2, 2);
    if (range) assert.deepEqual([range.entries[0]?.folded, range.entries[0]?.bodyHash], [5, hash]);
  });
}

test("validReaction: the server's rule (proto/ident ValidReaction)", () => {
  for (const ok of ["👍", "❤️", "👨‍👩‍👧‍👦", "+1", "thumbs_up", "x".repeat(64), "é", "日本"]) assert.ok(validReaction(ok), ok);
  const bad = ["", "x".repeat(65), "👍".repeat(17), "a b", "a\tb", "\n", "a\u00a0b", "a\u3000b", "\u0007", "\u007f", "\u200d", "\ufe0f", "\u200d\ufe0f", "\u0301", "\ud83d"];
  for (const no of bad) assert.ok(!validReaction(no), JSON.stringify(no));
  assert.ok(validReaction("👍".repeat(16)), "64 bytes of UTF-8");
});

test("outbox: edit and react items map to Edit (18) and React (19) frames", () => {
  const base = { cmid: "c1", seq: 1, conv: "g1", peer: "", body: new Uint8Array(0), upTo: 0, target: "1.1.0", members: [], role: 0, status: "sending", attempts: 0, nextAttemptAt: 0, ack: null, lastError: "", errorCode: 0, createdAt: 0 } satisfies Omit<OutboxItem, "kind">;
  assert.deepEqual(itemFrame({ ...base, kind: Kind.Edit, body: text("new") }, 7), { type: FrameType.Edit, id: 7, conv: "g1", cmid: "c1", target: "1.1.0", body: text("new") });
  assert.deepEqual(itemFrame({ ...base, kind: Kind.Reaction, reaction: "👍", remove: true }, 8), { type: FrameType.React, id: 8, conv: "g1", cmid: "c1", target: "1.1.0", reaction: "👍", remove: true });
  assert.deepEqual(itemFrame({ ...base, kind: Kind.Reaction }, 9), { type: FrameType.React, id: 9, conv: "g1", cmid: "c1", target: "1.1.0", reaction: "", remove: false });
});

// --- the client ---

function config(store: MemoryStore, node: FakeNode): ClientConfig {
  return {
    endpoints: [{ webSocketUrl: "n0" }],
    device: "phone",
    token: "tok-1",
    store,
    connector: new Connector({ dialWebTransport: null, dialWebSocket: () => node.dial() }),
    clock: testClock(0),
    logger: () => undefined,
    retryScheduleMs: [20, 40],
    requestTimeoutMs: 500,
  };
}

function record<K extends keyof ClientEvents>(c: Client, name: K): ClientEvents[K][] {
  const out: ClientEvents[K][] = [];
  c.on(name, (e) => out.push(e));
  return out;
}

test("client: edit and react go through the outbox as Edit and React; applied entries fire messageChanged", async (t) => {
  const store = new MemoryStore();
  let stream: ServerStream | null = null;
  let seq = 100;
  const node = new FakeNode({
    limits: testLimits({ heartbeatMs: 200 }),
    sync: (s) => {
      stream = s;
    },
    answer: (f: Frame) => {
      if (f.type === FrameType.React && f.reaction === "🚫") return makeFrame(FrameType.Error, { id: f.id, code: Code.AlreadyRecalled, message: "recalled" });
      const id = (f as { id: number }).id;
      seq++;
      return makeFrame(FrameType.Ack, { id, msgId: `1.${seq}.0`, conv: "g1", convSeq: seq, epoch: 1n });
    },
  });
  const c = await Client.open(config(store, node));
  t.after(() => c.close());
  const changed = record(c, "messageChanged");
  const statuses = record(c, "status");
  await until(() => stream !== null, "sync stream");

  // Refused at once, not queued.
  await assert.rejects(c.react("g1", "1.1.0", "a b"), (e: unknown) => e instanceof ProtoError && e.code === Code.InvalidArgument);
  await assert.rejects(c.react("g1", "1.1.0", "\u200d"), (e: unknown) => e instanceof ProtoError && e.code === Code.InvalidArgument);
  await assert.rejects(c.edit("g1", "1.1.0", new Uint8Array(64 * 1024 + 1)), (e: unknown) => e instanceof ProtoError && e.code === Code.TooLarge);
  assert.equal(c.outboxItems().length, 0);

  const e1 = await c.edit("g1", "1.1.0", text("fixed"));
  const r1 = await c.react("g1", "1.1.0", "👍");
  const r2 = await c.react("g1", "1.1.0", "👍", true);
  assert.deepEqual([e1.kind, r1.kind, r1.reaction, r2.remove], [Kind.Edit, Kind.Reaction, "👍", true]);
  await until(() => statuses.filter((s) => s.item.status === "sent").length === 3, "three acks");
  const sent = node.requests.filter((f) => f.type === FrameType.Edit || f.type === FrameType.React);
  assert.deepEqual(sent.map((f) => f.type === FrameType.Edit ? ["edit", f.target, str(f.body)] : f.type === FrameType.React ? ["react", f.reaction, f.remove] : []), [
    ["edit", "1.1.0", "fixed"], ["react", "👍", false], ["react", "👍", true],
  ]);
  // already_recalled finishes a recall, but fails an edit or a reaction.
  const r3 = await c.react("g1", "1.1.0", "🚫");
  await until(() => statuses.some((s) => s.item.cmid === r3.cmid && s.item.status === "failed"), "refused");

  // Applied from the sync stream: the view changes and messageChanged follows the entry.
  stream!.send(makeFrame(FrameType.Batch, {
    epoch: 9n, head: 4, entries: [
      makeEntry({ seq: 1, kind: Kind.Message, msgId: "1.1.0", conv: "g1", convSeq: 1, sender: "alice", time: 1n, body: text("typo") }),
      makeEntry({ seq: 2, kind: Kind.Edit, msgId: "1.2.0", conv: "g1", convSeq: 2, sender: "alice", time: 2n, target: "1.1.0", body: text("fixed") }),
      makeEntry({ seq: 3, kind: Kind.Reaction, msgId: "1.3.0", conv: "g1", convSeq: 3, sender: "bob", time: 3n, target: "1.1.0", reaction: "👍" }),
      makeEntry({ seq: 4, kind: Kind.Reaction, msgId: "1.4.0", conv: "g1", convSeq: 4, sender: "bob", time: 4n, target: "1.1.0", folded: 9 }),
    ],
  }));
  await until(() => changed.length === 2, "messageChanged");
  assert.deepEqual(changed.map((e) => [e.conv, e.msgId, e.cause, e.entry.seq]), [["g1", "1.1.0", "edit", 2], ["g1", "1.1.0", "reaction", 3]]);
  const [m] = await c.messages("g1");
  assert.deepEqual(m && [str(m.body), m.edited, m.editedAt, m.reactions], ["fixed", true, 2n, { "👍": ["bob"] }]);
});
