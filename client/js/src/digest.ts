// The reconciliation digest of PROTOCOL §6 ("Digest"): one implementation, for what the SDK asks
// the server (Digest → DigestResult) and what it computes over the entries it stored. The Go
// reference is proto.Digester (proto/digest.go); both are tested against
// proto/testdata/digest_vectors.json.
//
//   digest = SHA-256( record(e₁) ‖ record(e₂) ‖ … )        entries in ascending position order
//
//   record(e), 57 bytes and the two ids:
//   ┌──────────┬────────┬────────────┬────────┬──────────┬──────┬──────────┬──────────────────┐
//   │ seq      │ kind   │ len(msg_id)│ msg_id │ len(conv)│ conv │ conv_seq │ SHA-256(body)    │
//   │ u64 BE   │ u8     │ u32 BE     │ bytes  │ u32 BE   │ bytes│ u64 BE   │ 32 bytes         │
//   └──────────┴────────┴────────────┴────────┴──────────┴──────┴──────────┴──────────────────┘
//
// `seq` is the entry's position in the log digested (its seq in the user log, its conv_seq in a
// conversation's history); an absent field is its zero value (an empty id has length 0); an entry
// without a body hashes the empty string, and so does the digest of no entries
// (e3b0c442…b855). A folded entry (revision 7: `folded` set) hashes its `body_hash` in place of
// SHA-256(body) — the hash of the body it had before it was folded, or of the empty body when it
// has none — so a stub digests like the entry a device stored before the fold. Other fields (sender, time, up_to, target, role, members) are not covered: the
// server never changes what a msg_id stands for, and a user log lists members only up to 32.
//
// WebCrypto (`crypto.subtle.digest`, in every browser and in Node ≥ 20) has no incremental hash,
// so the records are laid out in one buffer and hashed once: at most 1,000 entries per
// DigestResult, a few dozen bytes each, so the buffer stays small. Each body is hashed on its own
// first (those hashes run concurrently).

import type { Entry } from "./frames.js";

/**
 * The fields of an entry the digest covers: what a store must keep of an entry for it to be
 * checked. `folded` and `bodyHash` (revision 7) may be absent: an entry stored by an older SDK
 * was never folded.
 */
export type DigestFields = Pick<Entry, "seq" | "kind" | "msgId" | "conv" | "convSeq" | "body"> & Partial<Pick<Entry, "folded" | "bodyHash">>;

/** The length of a digest (and of a body hash): a SHA-256. */
export const DIGEST_LEN = 32;

/** The length of a record without its msg_id and conv bytes. */
const RECORD_FIXED = 8 + 1 + 4 + 4 + 8 + DIGEST_LEN;

/** SHA-256 of the empty string: the body hash of an entry without a body, and the digest of no entries. */
const EMPTY_SHA256 = Uint8Array.from(
  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".match(/../g) ?? [],
  (h) => parseInt(h, 16),
);

const utf8 = new TextEncoder();

async function sha256(b: Uint8Array<ArrayBuffer>): Promise<Uint8Array> {
  if (b.length === 0) return EMPTY_SHA256.slice();
  return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", b));
}

/** A body's hash. Copied first: WebCrypto takes bytes over an ArrayBuffer, and a stored body may be a view of anything. */
function bodyHash(body: Uint8Array): Promise<Uint8Array> {
  return body.length === 0 ? Promise.resolve(EMPTY_SHA256.slice()) : sha256(body.slice());
}

/** Lays out e's record in out at off (out has room); returns the offset after it. */
function putRecord(out: Uint8Array, off: number, e: DigestFields, msgId: Uint8Array, conv: Uint8Array, bodyHash: Uint8Array): number {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  v.setBigUint64(off, BigInt(e.seq));
  off += 8;
  v.setUint8(off, e.kind);
  off += 1;
  v.setUint32(off, msgId.length);
  off += 4;
  out.set(msgId, off);
  off += msgId.length;
  v.setUint32(off, conv.length);
  off += 4;
  out.set(conv, off);
  off += conv.length;
  v.setBigUint64(off, BigInt(e.convSeq));
  off += 8;
  out.set(bodyHash, off);
  return off + DIGEST_LEN;
}

/** The hash a record carries for e: its body's, or a folded entry's body_hash (SHA-256("") without one). */
function recordHash(e: DigestFields): Promise<Uint8Array> {
  if (e.folded) return Promise.resolve(e.bodyHash?.length === DIGEST_LEN ? e.bodyHash.slice() : EMPTY_SHA256.slice());
  return bodyHash(e.body);
}

/** The records of entries, in the order given, in one buffer (what the digest hashes). */
async function records(entries: readonly DigestFields[]): Promise<Uint8Array<ArrayBuffer>> {
  const ids = entries.map((e) => [utf8.encode(e.msgId), utf8.encode(e.conv)] as const);
  const bodies = await Promise.all(entries.map(recordHash));
  const size = ids.reduce((n, [m, c]) => n + RECORD_FIXED + m.length + c.length, 0);
  const out = new Uint8Array(size);
  let off = 0;
  entries.forEach((e, i) => {
    const [m, c] = ids[i] as readonly [Uint8Array, Uint8Array];
    off = putRecord(out, off, e, m, c, bodies[i] as Uint8Array);
  });
  return out;
}

/**
 * The record of one entry (the diagram at the top of digest.ts): what the digest hashes for it.
 * Exported for the test vectors and for comparing records byte by byte with another implementation.
 */
export function digestRecord(e: DigestFields): Promise<Uint8Array> {
  return records([e]);
}

/**
 * The digest (32 bytes) of entries, in the order given: a store's entries of exactly the
 * positions a DigestResult covered, ascending, compare equal to its `digest` when they are the
 * server's. It checks neither order nor contiguity: a position missing from what was stored
 * simply gives another digest. Resolves with a new array the caller owns.
 */
export async function digestOf(entries: readonly DigestFields[]): Promise<Uint8Array> {
  if (entries.length === 0) return EMPTY_SHA256.slice();
  return sha256(await records(entries));
}

/** Whether two digests are the same bytes. */
export function digestEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
