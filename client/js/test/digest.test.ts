// The reconciliation digest against the test vectors the Go reference is tested against
// (proto/testdata/digest_vectors.json, PROTOCOL §6 "Digest"): every record and every digest.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

import { digestEqual, digestOf, digestRecord } from "../src/digest.js";
import { Kind, makeEntry, type Entry } from "../src/frames.js";

const here = dirname(fileURLToPath(import.meta.url));
// build-test/test → client/js → repo root
const vectorsFile = join(here, "..", "..", "..", "..", "proto", "testdata", "digest_vectors.json");

/** One case of the vectors file: entries by the fields the digest covers (absent = zero). */
interface VectorCase {
  name: string;
  entries: { seq: number; kind: number; msg_id?: string; conv?: string; conv_seq?: number; body_hex?: string }[];
  records: string[];
  count: number;
  digest: string;
}

const hex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const unhex = (h: string): Uint8Array => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));

function entryOf(v: VectorCase["entries"][number]): Entry {
  // Every position of the file fits a double exactly (the largest is 2^40 + 1).
  assert.ok(Number.isSafeInteger(v.seq) && Number.isSafeInteger(v.conv_seq ?? 0));
  return makeEntry({ seq: v.seq, kind: v.kind, msgId: v.msg_id ?? "", conv: v.conv ?? "", convSeq: v.conv_seq ?? 0, body: unhex(v.body_hex ?? "") });
}

const vectors = (JSON.parse(readFileSync(vectorsFile, "utf8")) as { cases: VectorCase[] }).cases;

test("digest vectors: the file has the four cases of PROTOCOL §6", () => {
  assert.equal(vectors.length, 4);
  assert.equal(vectors[0]!.digest, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
});

for (const c of vectors) {
  test(`digest vector "${c.name}": every record and the digest`, async () => {
    const entries = c.entries.map(entryOf);
    assert.equal(entries.length, c.count);
    assert.deepEqual(await Promise.all(entries.map(async (e) => hex(await digestRecord(e)))), c.records);
    const d = await digestOf(entries);
    assert.equal(d.length, 32);
    assert.equal(hex(d), c.digest);
  });
}

test("digest: fields it does not cover change nothing; each field it covers changes it; order matters", async () => {
  const v = vectors[1]!;
  const entries = v.entries.map(entryOf);
  // sender, time, up_to, target, members… are not covered (§6).
  const decorated = entries.map((e) => ({ ...e, sender: "zed", time: 123n, upTo: 4, target: "1.2.3", members: ["a"], role: 2, memberCount: 40 }));
  assert.equal(hex(await digestOf(decorated)), v.digest);
  const want = unhex(v.digest);
  const changes: [string, (e: Entry) => Entry][] = [
    ["seq", (e) => ({ ...e, seq: e.seq + 100 })],
    ["kind", (e) => ({ ...e, kind: 9 })],
    ["msg_id", (e) => ({ ...e, msgId: e.msgId + "0" })],
    ["conv", (e) => ({ ...e, conv: "other" })],
    ["conv_seq", (e) => ({ ...e, convSeq: e.convSeq + 1 })],
    ["body", (e) => ({ ...e, body: Uint8Array.of(1) })],
  ];
  for (const [what, change] of changes) {
    const changed = [entries[0]!, change(entries[1]!), entries[2]!];
    assert.ok(!digestEqual(await digestOf(changed), want), `a changed ${what} gives the same digest`);
  }
  assert.ok(!digestEqual(await digestOf([entries[1]!, entries[0]!, entries[2]!]), want), "the order is not covered");
  assert.ok(!digestEqual(await digestOf(entries.slice(0, 2)), want), "a missing entry is not noticed");
  // A body that is a view into a larger buffer is hashed as exactly its bytes.
  const big = new Uint8Array(20).fill(7);
  big.set(unhex("68656c6c6f"), 5);
  const viewed = [{ ...entries[0]!, body: big.subarray(5, 10) }, entries[1]!, entries[2]!];
  assert.equal(hex(await digestOf(viewed)), v.digest);
});

test("digest (revision 7): a folded stub digests like its original (proto TestDigestFoldedLikeOriginal)", async () => {
  const sha = async (s: string): Promise<Uint8Array> => new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
  const edit = makeEntry({ seq: 50, kind: Kind.Edit, msgId: "3.130.0", conv: "g1", convSeq: 20, sender: "alice", time: 7n, target: "3.99.0", body: new TextEncoder().encode("hello, edited") });
  const stub = makeEntry({ seq: 50, kind: Kind.Edit, msgId: "3.130.0", conv: "g1", convSeq: 20, sender: "alice", time: 7n, target: "3.99.0", folded: 53, bodyHash: await sha("hello, edited") });
  const receipt = makeEntry({ seq: 51, kind: Kind.Receipt, msgId: "3.120.0", conv: "g1", convSeq: 13, sender: "carol", upTo: 12 });
  const folded = makeEntry({ seq: 51, kind: Kind.Receipt, msgId: "3.120.0", conv: "g1", convSeq: 13, sender: "carol", folded: 54 });
  for (const [a, b] of [[edit, stub], [receipt, folded]] as const) {
    assert.equal(hex(await digestRecord(b)), hex(await digestRecord(a)), `kind ${a.kind}: the folded record differs`);
  }
  assert.equal(hex(await digestOf([stub, folded])), hex(await digestOf([edit, receipt])));
  // A stub whose hash does not match is a different record.
  const bad = { ...stub, bodyHash: await sha("something else") };
  assert.notEqual(hex(await digestRecord(bad)), hex(await digestRecord(edit)));
  // A body_hash is what a folded entry hashes, never its body (it has none); unfolded, the body counts.
  assert.equal(hex(await digestRecord({ ...stub, body: Uint8Array.of(1) })), hex(await digestRecord(edit)));
  assert.equal(hex(await digestRecord({ ...edit, bodyHash: await sha("ignored") })), hex(await digestRecord(edit)));
  // An entry stored by an older SDK has no folded or bodyHash field at all.
  const old = { seq: edit.seq, kind: edit.kind, msgId: edit.msgId, conv: edit.conv, convSeq: edit.convSeq, body: edit.body };
  assert.equal(hex(await digestRecord(old)), hex(await digestRecord(edit)));
});
