// Codec tests: every golden frame of the Go reference (proto/testdata/golden/*.hex) decodes and
// re-encodes to the same bytes; the §3 reader behaves under random cuts and bad frames.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { encode as libEncode, decode as libDecode } from "@msgpack/msgpack";

import { FrameReader, encodeFrame, FrameTooLargeError, isResponseType, type ReadItem } from "../src/framing.js";
import { FrameType, Kind, PROTO_VERSION, ReportKind, decodeFrame, makeFrame, makeEntry, typeName, type Frame } from "../src/frames.js";
import { decodeBody, decodeValue, MalformedError, MsgFloat } from "../src/msgpack.js";
import { Code, errorFromClose, codeName, retryable } from "../src/codes.js";

const here = dirname(fileURLToPath(import.meta.url));
// build-test/test → client/js → repo root
const goldenDir = join(here, "..", "..", "..", "..", "proto", "testdata", "golden");

function readHex(path: string): Uint8Array {
  const hex = readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => !l.startsWith("#"))
    .join("")
    .trim();
  return Uint8Array.from(hex.match(/../g) ?? [], (h) => parseInt(h, 16));
}

function toHex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function one(items: ReadItem[]): Frame {
  assert.equal(items.length, 1, JSON.stringify(items.map((i) => i.kind)));
  const it = items[0]!;
  if (it.kind !== "frame") assert.fail(`not a frame: ${it.kind} ${"detail" in it ? it.detail : ""}`);
  return (it).frame;
}

const goldens = readdirSync(goldenDir).filter((f) => f.endsWith(".v1.hex")).sort();

test("every golden file is here", () => {
  // 41 frame types, one golden file each: a new type in Go without a schema here fails this.
  assert.equal(goldens.length, Object.keys(FrameType).length);
});

for (const name of goldens) {
  test(`golden ${name}: decode, re-encode byte-exact`, () => {
    const bytes = readHex(join(goldenDir, name));
    const f = one(new FrameReader().push(bytes));
    assert.equal(typeName(f.type) + ".v1.hex", name);
    assert.equal(toHex(encodeFrame(f)), toHex(bytes));
  });
}

// Variants (proto/testdata/golden/variants/<type>.<variant>.v1.hex): frames of types above with
// the keys their fixture leaves out (revision 6's `source`, `after`, `sources`, …).
const variantDir = join(goldenDir, "variants");
const variants = readdirSync(variantDir).filter((f) => f.endsWith(".v1.hex")).sort();

test("variants: there are some, each of a known type", () => {
  assert.ok(variants.length >= 10, `only ${variants.length} variant files`);
});

for (const name of variants) {
  test(`golden variant ${name}: decode, re-encode byte-exact`, () => {
    const bytes = readHex(join(variantDir, name));
    const f = one(new FrameReader().push(bytes));
    assert.equal(typeName(f.type), name.split(".")[0]);
    assert.equal(toHex(encodeFrame(f)), toHex(bytes));
  });
}

/** The epoch of the large group "big" in the Go fixtures (fixtureBigEpoch). */
const bigEpoch = 0x17979cfe362a0002n;

test("golden variants decode as Go wrote them (revision 6: sources)", () => {
  const v = (name: string): Frame => one(new FrameReader().push(readHex(join(variantDir, `${name}.v1.hex`))));
  assert.deepEqual(v("sync_start.sources"), makeFrame(FrameType.SyncStart, {
    epoch: 9n, pos: 40, ceiling: 100_000, subs: [{ epoch: 9n, pos: 40 }],
    sources: [{ conv: "big", epoch: bigEpoch, pos: 7001 }, { conv: "g:new", epoch: 0n, pos: 0 }],
  }));
  // The user log's entries that start and end the following, and the user's own receipt there.
  const following = v("batch.following");
  if (following.type !== FrameType.Batch) assert.fail("not a batch");
  assert.deepEqual([following.epoch, following.head, following.source, following.after], [9n, 46, "", 0]);
  assert.deepEqual(following.entries, [
    makeEntry({ seq: 44, kind: Kind.MemberAdd, msgId: "5.7000.0", conv: "big", convSeq: 7000, sender: "alice", time: 3n, memberCount: 1200, source: true }),
    makeEntry({ seq: 45, kind: Kind.Receipt, msgId: "1.45.0", conv: "big", convSeq: 0, sender: "alice", time: 4n, upTo: 7002 }),
    makeEntry({ seq: 46, kind: Kind.MemberRemove, msgId: "5.7003.0", conv: "big", convSeq: 7003, sender: "alice", time: 5n, members: ["alice"], source: true }),
  ]);
  assert.deepEqual(v("batch.source"), makeFrame(FrameType.Batch, {
    epoch: bigEpoch, head: 7002, source: "big", after: 7000,
    entries: [makeEntry({ seq: 7001, kind: Kind.Message, msgId: "5.7001.0", conv: "big", convSeq: 7001, sender: "bob", time: 6n, body: new TextEncoder().encode("hi all") })],
  }));
  assert.deepEqual(v("heartbeat.source"), makeFrame(FrameType.Heartbeat, { epoch: bigEpoch, head: 7002, serverTime: 1_700_000_000_000_000_000n, source: "big" }));
  assert.deepEqual(v("too_old.source"), makeFrame(FrameType.TooOld, { epoch: bigEpoch, first: 5000, head: 7002, source: "big" }));
  assert.deepEqual(v("epoch_changed.source"), makeFrame(FrameType.EpochChanged, { epoch: bigEpoch + 1n, first: 1, head: 2, source: "big" }));
  assert.deepEqual(v("rebase.source"), makeFrame(FrameType.Rebase, { epoch: bigEpoch, head: 90_000, source: "big" }));
  assert.deepEqual(v("cursor_ack.source"), makeFrame(FrameType.CursorAck, { epoch: bigEpoch, pos: 7001, source: "big" }));
  assert.deepEqual(v("stale.source"), makeFrame(FrameType.Stale, { epoch: bigEpoch, head: 7002, unheardMs: 2500, source: "big" }));
  const state = v("conv_state_result.source");
  if (state.type !== FrameType.ConvStateResult) assert.fail("not a conv state result");
  assert.equal(state.id, 9);
  assert.deepEqual(state.conv, {
    conv: "big", kind: 2, epoch: bigEpoch, first: 1, head: 7002, members: [], readMark: 7002, memberCount: 1200, role: 1,
    deliveredMark: 7002, peerDelivered: 0, peerRead: 0, source: true,
  });
  // The new frame type of revision 6: 28 SourceEnd.
  const end = one(new FrameReader().push(readHex(join(goldenDir, "source_end.v1.hex"))));
  assert.deepEqual(end, makeFrame(FrameType.SourceEnd, { source: "big", last: 2 ** 33 }));
  assert.equal(typeName(FrameType.SourceEnd), "source_end");
  assert.ok(!isResponseType(FrameType.SourceEnd), "SourceEnd is a sync stream frame, not a response");
  // A frame without the new keys decodes them as zero: an older server's frames are the user log's.
  const plain = one(new FrameReader().push(readHex(join(goldenDir, "batch.v1.hex"))));
  if (plain.type !== FrameType.Batch) assert.fail("not a batch");
  assert.deepEqual([plain.source, plain.after, plain.entries.every((e) => !e.source)], ["", 0, true]);
});

test("golden values decode as Go wrote them", () => {
  const send = one(new FrameReader().push(readHex(join(goldenDir, "send.v1.hex"))));
  assert.deepEqual(send, makeFrame(FrameType.Send, { id: 1, conv: "d:alice:bob", cmid: "cm-1", body: new TextEncoder().encode("hello"), peer: "bob" }));
  const ack = one(new FrameReader().push(readHex(join(goldenDir, "ack.v1.hex"))));
  assert.equal(ack.type, FrameType.Ack);
  if (ack.type !== FrameType.Ack) return;
  // time is 0x17979cfe362a0000 ns: beyond 2^53, kept exact as a bigint.
  assert.equal(ack.time, 0x17979cfe362a0000n);
  assert.equal(ack.epoch, 5n);
  const batch = one(new FrameReader().push(readHex(join(goldenDir, "batch.v1.hex"))));
  if (batch.type !== FrameType.Batch) assert.fail("not a batch");
  assert.equal(batch.head, 2 ** 40);
  assert.equal(batch.sub, 2);
  assert.deepEqual(batch.entries.map((e) => e.seq), [41, 42, 43]);
  assert.deepEqual(batch.entries[0]!.body, Uint8Array.of(0, 1, 0xff));
  assert.equal(batch.entries[2]!.memberCount, 40);
  const sync = one(new FrameReader().push(readHex(join(goldenDir, "sync_start.v1.hex"))));
  if (sync.type !== FrameType.SyncStart) assert.fail("not a sync start");
  assert.deepEqual(sync.subs, [{ epoch: 9n, pos: 40 }, { epoch: 0n, pos: 0 }, { epoch: 11n, pos: 3 }]);
  // Revision 4.
  const digest = one(new FrameReader().push(readHex(join(goldenDir, "digest.v1.hex"))));
  assert.deepEqual(digest, makeFrame(FrameType.Digest, { id: 14, sub: 2, epoch: 9n, from: 41, to: 2 ** 40 }));
  const result = one(new FrameReader().push(readHex(join(goldenDir, "digest_result.v1.hex"))));
  if (result.type !== FrameType.DigestResult) assert.fail("not a digest result");
  assert.deepEqual([result.id, result.epoch, result.from, result.to, result.count, result.first, result.head], [14, 9n, 41, 41, 1, 7, 42]);
  assert.equal(toHex(result.digest), "78fcaec17f90cff56fe0a07dc490ee5b0019b83248ca87c7e3f4613c0e247c38");
  const report = one(new FrameReader().push(readHex(join(goldenDir, "report.v1.hex"))));
  assert.deepEqual(report, makeFrame(FrameType.Report, { kind: ReportKind.Mismatch, conv: "g1", epoch: 9n, from: 40, to: 59 }));
  // A DigestResult answers a request: the session routes it to its request by id.
  assert.ok(isResponseType(FrameType.DigestResult));
  // Revision 5: delivery states and read counts.
  const receipts = one(new FrameReader().push(readHex(join(goldenDir, "receipts.v1.hex"))));
  assert.deepEqual(receipts, makeFrame(FrameType.Receipts, { id: 15, conv: "g1", seqs: [12, 2 ** 40, 3] }));
  const counts = one(new FrameReader().push(readHex(join(goldenDir, "receipts_result.v1.hex"))));
  assert.deepEqual(counts, makeFrame(FrameType.ReceiptsResult, { id: 15, counts: [
    { convSeq: 12, members: 300, delivered: 120, read: 7 }, { convSeq: 2 ** 40, members: 0, delivered: 0, read: 0 }, { convSeq: 3, members: 2 ** 20, delivered: 2 ** 20, read: 1 },
  ] }));
  const readers = one(new FrameReader().push(readHex(join(goldenDir, "readers.v1.hex"))));
  assert.deepEqual(readers, makeFrame(FrameType.Readers, { id: 16, conv: "g1", convSeq: 12, state: Kind.Delivered, after: "alice", limit: 50 }));
  const page = one(new FrameReader().push(readHex(join(goldenDir, "readers_result.v1.hex"))));
  assert.deepEqual(page, makeFrame(FrameType.ReadersResult, { id: 16, users: ["bob", "carol"], next: "dave", more: true }));
  const state = one(new FrameReader().push(readHex(join(goldenDir, "conv_state_result.v1.hex"))));
  if (state.type !== FrameType.ConvStateResult) assert.fail("not a conv state result");
  assert.deepEqual([state.conv.readMark, state.conv.deliveredMark, state.conv.peerDelivered, state.conv.peerRead], [999, 1000, 998, 997]);
  const history = one(new FrameReader().push(readHex(join(goldenDir, "history_result.v1.hex"))));
  if (history.type !== FrameType.HistoryResult) assert.fail("not a history result");
  assert.deepEqual(history.entries.map((e) => [e.kind, e.sender, e.upTo]), [[Kind.Message, "bob", 11], [Kind.Delivered, "carol", 41]]);
  assert.ok(isResponseType(FrameType.ReceiptsResult) && isResponseType(FrameType.ReadersResult));
  // A position list refuses what a position refuses.
  assert.throws(() => decodeFrame(FrameType.Receipts, libEncode({ seqs: [1, -2] })), MalformedError);
  assert.throws(() => decodeFrame(FrameType.Receipts, libEncode({ seqs: ["1"] })), MalformedError);
  assert.throws(() => encodeFrame(makeFrame(FrameType.Receipts, { id: 1, conv: "g", seqs: [1.5] })), RangeError);
  assert.ok(!isResponseType(FrameType.Report));
});

test("golden frames of revision 7 decode as Go wrote them: Edit, React, edits and reactions, folded entries", async () => {
  const text = (x: string): Uint8Array => new TextEncoder().encode(x);
  const edit = one(new FrameReader().push(readHex(join(goldenDir, "edit.v1.hex"))));
  assert.deepEqual(edit, makeFrame(FrameType.Edit, { id: 13, conv: "g1", cmid: "cm-13", target: "3.99.0", body: text("hello, edited") }));
  const react = one(new FrameReader().push(readHex(join(goldenDir, "react.v1.hex"))));
  assert.deepEqual(react, makeFrame(FrameType.React, { id: 14, conv: "g1", cmid: "cm-14", target: "3.99.0", reaction: "👍", remove: true }));
  assert.deepEqual([typeName(FrameType.Edit), typeName(FrameType.React)], ["edit", "react"]);
  assert.ok(!isResponseType(FrameType.Edit) && !isResponseType(FrameType.React), "mutations, answered by Ack");
  // Our own encoding of the same frames is Go's, byte for byte (built from fields, not decoded).
  assert.equal(toHex(encodeFrame({ type: FrameType.Edit, id: 13, conv: "g1", cmid: "cm-13", target: "3.99.0", body: text("hello, edited") })), toHex(readHex(join(goldenDir, "edit.v1.hex"))));
  assert.equal(toHex(encodeFrame({ type: FrameType.React, id: 14, conv: "g1", cmid: "cm-14", target: "3.99.0", reaction: "👍", remove: true })), toHex(readHex(join(goldenDir, "react.v1.hex"))));
  // remove false is left out, as Go does.
  assert.ok(!toHex(encodeFrame({ type: FrameType.React, id: 14, conv: "g1", cmid: "cm-14", target: "3.99.0", reaction: "👍" })).includes(toHex(text("remove"))));
  const v = (name: string): Frame => one(new FrameReader().push(readHex(join(variantDir, `${name}.v1.hex`))));
  assert.deepEqual(v("batch.edits"), makeFrame(FrameType.Batch, {
    epoch: 9n, head: 52, entries: [
      makeEntry({ seq: 50, kind: Kind.Edit, msgId: "3.130.0", conv: "g1", convSeq: 20, sender: "alice", time: 7n, target: "3.99.0", body: text("hello, edited") }),
      makeEntry({ seq: 51, kind: Kind.Reaction, msgId: "3.131.0", conv: "g1", convSeq: 21, sender: "bob", time: 8n, target: "3.99.0", reaction: "👍" }),
      makeEntry({ seq: 52, kind: Kind.Reaction, msgId: "3.132.0", conv: "g1", convSeq: 22, sender: "bob", time: 9n, target: "3.99.0", reaction: "👍", remove: true }),
    ],
  }));
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode("hello, edited")));
  assert.deepEqual(v("batch.folded"), makeFrame(FrameType.Batch, {
    epoch: 9n, head: 54, entries: [
      makeEntry({ seq: 50, kind: Kind.Edit, msgId: "3.130.0", conv: "g1", convSeq: 20, sender: "alice", time: 7n, target: "3.99.0", folded: 53, bodyHash: hash }),
      makeEntry({ seq: 51, kind: Kind.Receipt, msgId: "3.120.0", conv: "g1", convSeq: 13, sender: "carol", time: 1n, folded: 54 }),
    ],
  }));
  // A frame of an older server has none of the new keys: zero values.
  const plain = one(new FrameReader().push(readHex(join(goldenDir, "batch.v1.hex"))));
  if (plain.type !== FrameType.Batch) assert.fail("not a batch");
  assert.ok(plain.entries.every((e) => e.reaction === "" && !e.remove && e.folded === 0 && e.bodyHash.length === 0));
});

test("golden frames of revision 8 decode as Go wrote them: EpochChanged continues", () => {
  const bytes = readHex(join(variantDir, "epoch_changed.continues.v1.hex"));
  assert.deepEqual(one(new FrameReader().push(bytes)), makeFrame(FrameType.EpochChanged, { epoch: bigEpoch + 1n, first: 1, head: 70, sub: 1, continues: true }));
  // Our own encoding of the frame is Go's, byte for byte (built from fields, not decoded).
  assert.equal(toHex(encodeFrame({ type: FrameType.EpochChanged, epoch: bigEpoch + 1n, first: 1, head: 70, sub: 1, continues: true })), toHex(bytes));
  // An older server's EpochChanged has no key: it does not continue (the client resyncs).
  const older = one(new FrameReader().push(readHex(join(variantDir, "epoch_changed.source.v1.hex"))));
  assert.equal(older.type === FrameType.EpochChanged && older.continues, false);
  assert.equal(makeFrame(FrameType.EpochChanged).continues, false);
  // continues false is left out, as Go does.
  assert.ok(!toHex(encodeFrame({ type: FrameType.EpochChanged, epoch: 5n, first: 1, head: 2, continues: false })).includes(toHex(new TextEncoder().encode("continues"))));
  assert.equal(PROTO_VERSION, 8);
});

test("PROTOCOL §10 examples", () => {
  assert.equal(toHex(encodeFrame(makeFrame(FrameType.HeadCheck, { id: 11 }))), "00000007012481a269640b");
  assert.equal(toHex(encodeFrame({ type: FrameType.HeadCheck })), "00000003012480");
});

test("zero fields are omitted; missing and nil keys decode as zero; unknown keys are ignored", () => {
  const body = libEncode({ id: 3, future_field: [1, 2], message: null });
  const f = decodeFrame(FrameType.Error, body);
  assert.deepEqual(f, makeFrame(FrameType.Error, { id: 3 }));
  assert.equal(toHex(encodeFrame(makeFrame(FrameType.Error, { id: 3 }))), toHex(Uint8Array.of(0, 0, 0, 7, 1, 3, 0x81, 0xa2, 0x69, 0x64, 3)));
});

test("integers: canonical smallest forms, bigint epochs and times, positions refused beyond 2^53", () => {
  const cases: [number | bigint, string][] = [
    [0x7f, "7f"], [0x80, "cc80"], [0x100, "cd0100"], [0x10000, "ce00010000"], [2 ** 32, "cf0000000100000000"],
  ];
  for (const [v, hex] of cases) {
    const b = encodeFrame(makeFrame(FrameType.HeadCheck, { id: Number(v) }));
    assert.equal(toHex(b.subarray(10)), hex, `id ${v}`);
  }
  const t = -5n;
  const hb = encodeFrame(makeFrame(FrameType.Heartbeat, { epoch: 2n ** 64n - 1n, serverTime: t }));
  const back = one(new FrameReader().push(hb));
  assert.deepEqual(back, makeFrame(FrameType.Heartbeat, { epoch: 2n ** 64n - 1n, serverTime: -5n }));
  // A head of 2^53 on the wire: refused as malformed, never rounded.
  const big = libEncode({ head: 2n ** 53n }, { useBigInt64: true });
  assert.throws(() => decodeFrame(FrameType.Heartbeat, big), MalformedError);
  assert.throws(() => encodeFrame(makeFrame(FrameType.HeadCheck, { id: 2 ** 53 })), RangeError);
  assert.throws(() => encodeFrame(makeFrame(FrameType.CursorAck, { epoch: -1n })), RangeError);
  assert.throws(() => encodeFrame(makeFrame(FrameType.CursorAck, { sub: 2 ** 32 })), RangeError);
});

test("§4 refusals: floats for integers, out of range, wrong types, shape limits", () => {
  const bad: [string, unknown][] = [
    ["float for an integer", { id: 1.5 }],
    ["negative uint", { id: -1 }],
    ["uint16 out of range", { code: 70000 }],
    ["str for an integer", { code: "1" }],
    ["int for a str", { message: 5 }],
  ];
  for (const [what, body] of bad) {
    assert.throws(() => decodeFrame(FrameType.Error, libEncode(body)), MalformedError, what);
  }
  // An integral float (1.0): a general decoder would call it 1; §4 calls it malformed.
  assert.throws(() => decodeFrame(FrameType.Error, Uint8Array.of(0x81, 0xa2, 0x69, 0x64, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0)), MalformedError);
  const shape: [string, Uint8Array][] = [
    ["not a map", Uint8Array.of(0x90)],
    ["empty", new Uint8Array(0)],
    ["trailing bytes", Uint8Array.of(0x80, 0x00)],
    ["duplicate key", Uint8Array.of(0x82, 0xa1, 0x61, 1, 0xa1, 0x61, 2)],
    ["non-string key", Uint8Array.of(0x81, 0x01, 0x01)],
    ["0xc1", Uint8Array.of(0x81, 0xa1, 0x61, 0xc1)],
    ["extension", Uint8Array.of(0x81, 0xa1, 0x61, 0xd4, 0x01, 0x00)],
    ["truncated str", Uint8Array.of(0x81, 0xa1, 0x61, 0xa5, 0x61)],
    ["declared length beyond the body", Uint8Array.of(0x81, 0xa1, 0x61, 0xdd, 0xff, 0xff, 0xff, 0xff)],
    ["65 keys", libEncode(Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 0])))],
    ["a key of 65 bytes", libEncode({ ["k".repeat(65)]: 0 })],
    ["nesting 9 deep", libEncode({ a: [[[[[[[[1]]]]]]]] })],
    ["1,001 non-strings", libEncode({ a: Array.from({ length: 1001 }, () => 0) })],
    ["invalid UTF-8", Uint8Array.of(0x81, 0xa1, 0x61, 0xa1, 0xff)],
  ];
  for (const [what, b] of shape) {
    assert.throws(() => decodeBody(b), MalformedError, what);
  }
  // The limits themselves are allowed.
  decodeBody(libEncode(Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 0]))));
  decodeBody(libEncode({ ["k".repeat(64)]: 0 }));
  decodeBody(libEncode({ a: [[[[[[[1]]]]]]] }));
  decodeBody(libEncode({ a: Array.from({ length: 1001 }, () => "x") }));
});

test("the decoder agrees with @msgpack/msgpack on random values", () => {
  let seed = 12345;
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const gen = (depth: number): unknown => {
    switch (rnd(depth > 4 ? 6 : 9)) {
      case 0: return rnd(2) === 0;
      case 1: return null;
      case 2: return rnd(1 << 20) - (1 << 19);
      case 3: return [0, 0x7f, 0x80, 0xffff, 0x10000, 2 ** 32, 2 ** 52, -(2 ** 40)][rnd(8)];
      case 4: return "s".repeat(rnd(40)) + "é";
      case 5: return Uint8Array.from({ length: rnd(300) }, () => rnd(256));
      case 6: return Array.from({ length: rnd(5) }, () => gen(depth + 1));
      default: return Object.fromEntries(Array.from({ length: rnd(5) }, (_, i) => [`k${i}`, gen(depth + 1)]));
    }
  };
  const plain = (v: unknown): unknown => {
    if (v instanceof Map) return Object.fromEntries([...v].map(([k, x]) => [k, plain(x)]));
    if (Array.isArray(v)) return v.map(plain);
    if (v instanceof MsgFloat) return v.value;
    return v;
  };
  for (let i = 0; i < 300; i++) {
    const b = libEncode(gen(0));
    assert.deepEqual(plain(decodeValue(b)), libDecode(b));
  }
});

/** A stream of frames of every kind the reader must handle, and what it must yield. */
function sampleStream(): { bytes: Uint8Array; kinds: string[] } {
  const parts: Uint8Array[] = [];
  const kinds: string[] = [];
  const add = (b: Uint8Array, kind: string): void => {
    parts.push(b);
    kinds.push(kind);
  };
  add(encodeFrame(makeFrame(FrameType.HeadCheck, { id: 1 })), "frame");
  add(Uint8Array.of(0, 0, 0, 3, 1, 200, 0x80), "unknown_type");
  const batch = makeFrame(FrameType.Batch, {
    epoch: 7n,
    head: 9,
    entries: Array.from({ length: 50 }, (_, i) => makeEntry({ seq: i + 1, kind: 1, msgId: `1.${i + 1}.0`, conv: "g", convSeq: i + 1, body: new Uint8Array(1000).fill(i) })),
  });
  add(encodeFrame(batch), "frame");
  add(Uint8Array.of(0, 0, 0, 1, 1), "malformed"); // length < 2
  add(Uint8Array.of(0, 0, 0, 4, 1, 3, 0x81, 0xc1), "malformed"); // bad body
  add(Uint8Array.of(0, 0, 0, 3, 2, 36, 0x80), "bad_version");
  add(encodeFrame(makeFrame(FrameType.Ack, { id: 2, msgId: "1.2.3" })), "frame");
  const total = parts.reduce((n, p) => n + p.length, 0);
  const bytes = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    bytes.set(p, off);
    off += p.length;
  }
  return { bytes, kinds };
}

test("reader: random cuts of a stream yield the same items", () => {
  const { bytes, kinds } = sampleStream();
  const whole = new FrameReader().push(bytes);
  assert.deepEqual(whole.map((i) => i.kind), kinds);
  let seed = 99;
  for (let round = 0; round < 200; round++) {
    const r = new FrameReader();
    const got: ReadItem[] = [];
    let off = 0;
    while (off < bytes.length) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      const n = round % 3 === 0 ? 1 + (seed % 7) : 1 + (seed % 20000);
      got.push(...r.push(bytes.subarray(off, off + n)));
      off += n;
    }
    assert.equal(r.end(), null);
    assert.deepEqual(got, whole, `round ${round}`);
  }
});

test("reader: too large stops the stream; truncated at the end; limit changes", () => {
  const r = new FrameReader(100);
  const big = encodeFrame(makeFrame(FrameType.Send, { id: 1, body: new Uint8Array(200) }));
  assert.deepEqual(r.push(big).map((i) => i.kind), ["too_large"]);
  assert.ok(r.broken);
  assert.deepEqual(r.push(encodeFrame(makeFrame(FrameType.HeadCheck, { id: 1 }))), []);
  const r2 = new FrameReader(100);
  r2.setMaxFrame(1000);
  assert.equal(r2.push(big)[0]?.kind, "frame");
  const cut = encodeFrame(makeFrame(FrameType.HeadCheck, { id: 1 })).subarray(0, 5);
  const r3 = new FrameReader();
  assert.deepEqual(r3.push(cut), []);
  assert.deepEqual(r3.end(), { kind: "truncated", have: 5 });
  assert.throws(() => encodeFrame(makeFrame(FrameType.Send, { id: 1, body: new Uint8Array(200) }), 100), FrameTooLargeError);
});

test("close reasons (§2 grammar, as proto.ErrorFromClose)", () => {
  const cases: [number, string, number, number, string][] = [
    [41, "retry_after_ms=1000; server overloaded (handshakes); retry later", 41, 1000, "server overloaded (handshakes); retry later"],
    [43, "too many", 43, 0, "too many"],
    [41, "retry_after_ms=; x", 41, 0, "retry_after_ms=; x"],
    [41, "retry_after_ms=12x; x", 41, 0, "retry_after_ms=12x; x"],
    [41, "retry_after_ms=+5; x", 41, 0, "retry_after_ms=+5; x"],
    [41, "retry_after_ms=5", 41, 0, "retry_after_ms=5"],
    [41, "retry_after_ms=99999999999; x", 41, 0, "retry_after_ms=99999999999; x"],
    [41, "retry_after_ms=007; ", 41, 7, ""],
    [70000, "x", Code.Internal, 0, "x"],
  ];
  for (const [code, reason, wantCode, wantRetry, wantMsg] of cases) {
    const e = errorFromClose(code, reason);
    assert.deepEqual([e.code, e.retryAfterMs, e.serverMessage], [wantCode, wantRetry, wantMsg], reason);
  }
  assert.equal(codeName(Code.NotMember), "not_member");
  assert.equal(codeName(Code.TooManyConnections), "too_many_connections");
  assert.equal(codeName(99), "code(99)");
  assert.equal(codeName(Code.TooOld), "too_old");
  assert.equal(codeName(Code.EpochChanged), "epoch_changed");
  assert.deepEqual([34, 35].map((c) => codeName(c)), ["too_old", "epoch_changed"]);
  assert.deepEqual([40, 41, 43, 44, 45].map(retryable), [true, true, true, true, true]);
  assert.deepEqual([0, 1, 34, 35, 42, 46, 50, 99].map(retryable), [false, false, false, false, false, false, false, false]);
});

test("direct conversation ids (§4 test vectors)", async () => {
  const { directConv } = await import("../src/ids.js");
  assert.equal(await directConv("bob", "alice"), "d:alice:bob");
  assert.equal(await directConv("x:y", "z"), "d:x%3Ay:z");
  assert.equal(await directConv("50%", "a"), "d:50%25:a");
  assert.equal(await directConv("u".repeat(70), "u".repeat(70) + "v"), "dh:qBNlu87Ib1KmhVz57L9-WCKiKH0-JuSN3Qu_eOiPue4");
  await assert.rejects(directConv("a", "a"), RangeError);
});
