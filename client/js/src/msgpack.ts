// The msgpack layer of §4: a decoder that checks a body's shape while it reads it, and the
// canonical encoder (on top of @msgpack/msgpack).
//
// Why a decoder of our own: §4 makes a body malformed for things a general msgpack decoder
// accepts or hides — a float where an integer is expected (a general decoder turns 1.0 into 1),
// a repeated key (it keeps the last), more than 64 keys, nesting beyond 8, an array of more than
// 1,000 records, extension types — and it must tell a uint64 beyond 2^53 from a number it can
// hold. The walk below is the Go reference's shape check (proto/check.go) with value building
// added, so both refuse exactly the same bodies. Encoding has none of these traps as long as the
// values are built right (see {@link encodeBody}), so @msgpack/msgpack does it.

import { Encoder } from "@msgpack/msgpack";

/** A decoded msgpack float. Kept apart from integers so that §4's "a float where an integer is expected is malformed" holds. */
export class MsgFloat {
  constructor(readonly value: number) {}
}

/**
 * A decoded msgpack value. Integers are `number` when they fit 2^53 exactly and `bigint`
 * otherwise; maps are `Map`s with string keys (§4 allows no other keys).
 */
export type MsgValue = null | boolean | number | bigint | string | Uint8Array | MsgFloat | MsgValue[] | MsgMap;

/** A decoded msgpack map. */
export type MsgMap = Map<string, MsgValue>;

/** Thrown for a body that breaks §4; the frame is malformed. */
export class MalformedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedError";
  }
}

// §4's shape limits (proto/check.go).
const maxDepth = 8; // nested maps and arrays; the body is level 1
const maxMapLen = 64;
const maxArrayLen = 65535;
const maxKeyLen = 64;
/** Records (entries, conversations) come at most 1,000 per frame; longer arrays are lists of ids. */
const maxPage = 1000;

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function isStrCode(c: number): boolean {
  return (c & 0xe0) === 0xa0 || (c >= 0xd9 && c <= 0xdb);
}

/** Whether c starts a msgpack map (fixmap, map16, map32). */
export function isMapCode(c: number): boolean {
  return (c & 0xf0) === 0x80 || c === 0xde || c === 0xdf;
}

class BodyReader {
  off = 0;
  private readonly view: DataView;
  constructor(private readonly b: Uint8Array) {
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  need(n: number): void {
    if (n > this.b.length - this.off) {
      throw new MalformedError("truncated value");
    }
  }

  u8(): number {
    this.need(1);
    return this.b[this.off++] as number;
  }

  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.off);
    this.off += 2;
    return v;
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.off);
    this.off += 4;
    return v;
  }

  bytes(n: number): Uint8Array {
    this.need(n);
    // A copy: a decoded frame must not alias the reader's buffer, which is reused.
    const out = this.b.slice(this.off, this.off + n);
    this.off += n;
    return out;
  }

  str(n: number): string {
    this.need(n);
    const s = this.b.subarray(this.off, this.off + n);
    this.off += n;
    try {
      return utf8.decode(s);
    } catch {
      // Go keeps a str's bytes as they are; a string here must be text. The server's strs are
      // ids (printable ASCII) and messages for humans, so this never refuses a sane frame.
      throw new MalformedError("str is not valid UTF-8");
    }
  }

  value(depth: number): MsgValue {
    const c = this.u8();
    if (c <= 0x7f) return c;
    if (c >= 0xe0) return c - 0x100;
    if ((c & 0xe0) === 0xa0) return this.str(c & 0x1f);
    if ((c & 0xf0) === 0x90) return this.array(c & 0x0f, depth);
    if ((c & 0xf0) === 0x80) return this.map(c & 0x0f, depth);
    switch (c) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xcc:
        return this.u8();
      case 0xcd:
        return this.u16();
      case 0xce:
        return this.u32();
      case 0xcf: {
        this.need(8);
        const v = this.view.getBigUint64(this.off);
        this.off += 8;
        return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
      }
      case 0xd0: {
        this.need(1);
        return this.view.getInt8(this.off++);
      }
      case 0xd1: {
        this.need(2);
        const v = this.view.getInt16(this.off);
        this.off += 2;
        return v;
      }
      case 0xd2: {
        this.need(4);
        const v = this.view.getInt32(this.off);
        this.off += 4;
        return v;
      }
      case 0xd3: {
        this.need(8);
        const v = this.view.getBigInt64(this.off);
        this.off += 8;
        return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
      }
      case 0xca: {
        this.need(4);
        const v = this.view.getFloat32(this.off);
        this.off += 4;
        return new MsgFloat(v);
      }
      case 0xcb: {
        this.need(8);
        const v = this.view.getFloat64(this.off);
        this.off += 8;
        return new MsgFloat(v);
      }
      case 0xc4:
        return this.bytes(this.len(this.u8()));
      case 0xc5:
        return this.bytes(this.len(this.u16()));
      case 0xc6:
        return this.bytes(this.len(this.u32()));
      case 0xd9:
        return this.str(this.len(this.u8()));
      case 0xda:
        return this.str(this.len(this.u16()));
      case 0xdb:
        return this.str(this.len(this.u32()));
      case 0xdc:
        return this.array(this.len(this.u16()), depth);
      case 0xdd:
        return this.array(this.len(this.u32()), depth);
      case 0xde:
        return this.map(this.len(this.u16()), depth);
      case 0xdf:
        return this.map(this.len(this.u32()), depth);
    }
    // 0xc1 (never used) and the extension types (0xc7–0xc9, 0xd4–0xd8): §4 allows neither.
    throw new MalformedError(`msgpack code 0x${c.toString(16).padStart(2, "0")} not allowed`);
  }

  /** A declared length must fit in the bytes that remain (every element takes one byte at least). */
  private len(n: number): number {
    if (n > this.b.length - this.off) {
      throw new MalformedError("truncated value");
    }
    return n;
  }

  private array(n: number, depth: number): MsgValue[] {
    if (depth >= maxDepth) throw new MalformedError("nesting too deep");
    if (n > maxArrayLen) throw new MalformedError(`array of ${n} elements, at most ${maxArrayLen}`);
    this.len(n);
    const out: MsgValue[] = [];
    for (let i = 0; i < n; i++) {
      if (n > maxPage && this.off < this.b.length && !isStrCode(this.b[this.off] as number)) {
        throw new MalformedError(`array of ${n} elements holds a non-string: arrays of more than ${maxPage} elements are lists of ids`);
      }
      out.push(this.value(depth + 1));
    }
    return out;
  }

  private map(n: number, depth: number): MsgMap {
    if (depth >= maxDepth) throw new MalformedError("nesting too deep");
    if (n > maxMapLen) throw new MalformedError(`map of ${n} keys, at most ${maxMapLen}`);
    if (2 * n > this.b.length - this.off) throw new MalformedError("truncated value");
    const out: MsgMap = new Map();
    for (let i = 0; i < n; i++) {
      const c = this.b[this.off];
      if (c === undefined) throw new MalformedError("truncated value");
      if (!isStrCode(c)) throw new MalformedError(`map key with msgpack code 0x${c.toString(16)}, want a string`);
      const start = this.off;
      const key = this.value(depth + 1) as string;
      const keyBytes = this.off - start - (c <= 0xbf ? 1 : 1 + (c === 0xd9 ? 1 : c === 0xda ? 2 : 4));
      if (keyBytes > maxKeyLen) throw new MalformedError(`map key of ${keyBytes} bytes, at most ${maxKeyLen}`);
      if (out.has(key)) throw new MalformedError(`duplicate map key ${JSON.stringify(key)}`);
      out.set(key, this.value(depth + 1));
    }
    return out;
  }
}

/**
 * Decodes a frame body: exactly one msgpack map, shape-checked as §4 says (and as Go's
 * proto.CheckShape does), with nothing after it. Throws {@link MalformedError}.
 */
export function decodeBody(body: Uint8Array): MsgMap {
  if (body.length === 0 || !isMapCode(body[0] as number)) {
    throw new MalformedError("body is not a msgpack map");
  }
  const r = new BodyReader(body);
  const v = r.value(0) as MsgMap;
  if (r.off !== body.length) {
    throw new MalformedError(`${body.length - r.off} trailing bytes`);
  }
  return v;
}

/**
 * Decodes any single msgpack value with the same checks as {@link decodeBody} but without
 * requiring a map (tests compare it with @msgpack/msgpack).
 */
export function decodeValue(b: Uint8Array): MsgValue {
  const r = new BodyReader(b);
  const v = r.value(0);
  if (r.off !== b.length) throw new MalformedError(`${b.length - r.off} trailing bytes`);
  return v;
}

/** A value {@link encodeBody} writes: what frames.ts builds (plain objects are maps, keys in insertion order). */
export type EncValue = null | boolean | number | bigint | string | Uint8Array | readonly EncValue[] | { readonly [key: string]: EncValue };

// useBigInt64: bigints are written as uint64/int64. @msgpack/msgpack would then write a *number*
// beyond 32 bits as a float, so canonical() turns every integer outside int32/uint32 into a bigint
// first: the result is the smallest integer encoding, as the Go encoder's compact ints.
const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });

const two32 = 0x1_0000_0000;
const minInt32 = -0x8000_0000;

function canonical(v: EncValue): EncValue {
  if (typeof v === "number") {
    if (!Number.isSafeInteger(v)) {
      // Floats are never used on the wire (§4), and an unsafe integer has already lost digits.
      throw new RangeError(`not an exact integer: ${v}`);
    }
    return v >= two32 || v < minInt32 ? BigInt(v) : v;
  }
  if (typeof v === "bigint") {
    if (v > 0xffff_ffff_ffff_ffffn || v < -0x8000_0000_0000_0000n) {
      throw new RangeError(`integer beyond 64 bits: ${v}`);
    }
    return v < BigInt(two32) && v >= BigInt(minInt32) ? Number(v) : v;
  }
  if (v === null || typeof v !== "object" || v instanceof Uint8Array) {
    return v;
  }
  if (Array.isArray(v)) {
    return (v as readonly EncValue[]).map(canonical);
  }
  const out: Record<string, EncValue> = {};
  for (const [k, x] of Object.entries(v as { readonly [key: string]: EncValue })) {
    out[k] = canonical(x);
  }
  return out;
}

/**
 * Encodes a frame body in the reference encoder's canonical form: a map with keys in the order
 * given (frames.ts lists them in the Go structs' order), integers in their smallest form. The
 * caller leaves zero fields out (§4).
 */
export function encodeBody(body: { readonly [key: string]: EncValue }): Uint8Array {
  return encoder.encode(canonical(body));
}
