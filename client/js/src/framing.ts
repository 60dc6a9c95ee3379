// The frame layout of §3: length (uint32 BE, counting version, type and body), version (1),
// type, body. A streaming reader with §3's error behaviour, and the writer side.

import { FrameType, Limits, decodeFrame, encodeFrameBody, typeName, UnknownTypeError, type Frame, type PartialFrame } from "./frames.js";
import { MalformedError } from "./msgpack.js";

/** The version byte of every frame header in syncd/1. */
export const FRAME_VERSION = 1;
/** Length (4), version (1), type (1). */
export const HEADER_LEN = 6;

/** Thrown when a frame would exceed the peer's limit: nothing is written (§3: fail it locally as too_large). */
export class FrameTooLargeError extends Error {
  constructor(readonly length: number, readonly limit: number) {
    super(`frame of ${length} bytes, the limit is ${limit}`);
    this.name = "FrameTooLargeError";
  }
}

/**
 * Encodes a whole frame: header and canonical body. maxFrame is the peer's limit on the length
 * field (after Welcome, its max_frame); a longer frame throws {@link FrameTooLargeError}.
 */
export function encodeFrame(f: PartialFrame, maxFrame: number = Limits.maxFrameLimit): Uint8Array {
  const body = encodeFrameBody(f);
  const length = 2 + body.length;
  const limit = Math.min(maxFrame, Limits.maxFrameLimit);
  if (length > limit) {
    throw new FrameTooLargeError(length, limit);
  }
  const out = new Uint8Array(4 + length);
  new DataView(out.buffer).setUint32(0, length);
  out[4] = FRAME_VERSION;
  out[5] = f.type;
  out.set(body, HEADER_LEN);
  return out;
}

/**
 * What a {@link FrameReader} yields: a frame, or one of §3's conditions.
 *
 * * `malformed`, `unknown_type`: the frame was skipped; the stream goes on (a client logs it).
 * * `bad_version`: the frame was skipped; §3 says a peer that speaks another version cannot be
 *   trusted: the caller ends the connection.
 * * `too_large`: the declared length exceeds the limit; the next frame cannot be found, so the
 *   reader stops (every later push yields nothing): the stream cannot continue.
 * * `truncated`: the stream ended inside a frame (from {@link FrameReader.end}).
 */
export type ReadItem =
  | { kind: "frame"; frame: Frame }
  | { kind: "malformed"; frameType: number; detail: string }
  | { kind: "unknown_type"; frameType: number }
  | { kind: "bad_version"; version: number; frameType: number }
  | { kind: "too_large"; length: number; limit: number }
  | { kind: "truncated"; have: number };

/**
 * Cuts a byte stream into frames. Push chunks as they arrive, in any sizes; each push returns
 * the items completed by it. Not safe to share between streams: give each stream one.
 */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private buffered = 0;
  private stopped = false;
  private max: number;

  /** maxFrame: the limit on the length field; 0 or less means the default (1 MiB) until Welcome. */
  constructor(maxFrame = 0) {
    this.max = FrameReader.limit(maxFrame);
  }

  private static limit(maxFrame: number): number {
    return Math.min(maxFrame > 0 ? maxFrame : Limits.defaultMaxFrame, Limits.maxFrameLimit);
  }

  /** Changes the limit for the following frames (once Welcome announces max_frame). */
  setMaxFrame(maxFrame: number): void {
    this.max = FrameReader.limit(maxFrame);
  }

  /** Whether the reader met a frame beyond its limit and stopped. */
  get broken(): boolean {
    return this.stopped;
  }

  /** Adds the next bytes of the stream and returns the items they complete. */
  push(chunk: Uint8Array): ReadItem[] {
    if (this.stopped) return [];
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    const out: ReadItem[] = [];
    for (;;) {
      if (this.buffered < 4) break;
      const length = this.peekLength();
      if (length > this.max) {
        // Not read: with no way to find the next frame the stream cannot continue (§3).
        this.stopped = true;
        this.chunks = [];
        this.buffered = 0;
        out.push({ kind: "too_large", length, limit: this.max });
        break;
      }
      if (this.buffered < 4 + length) break;
      const frame = this.take(4 + length).subarray(4);
      out.push(parse(frame));
    }
    return out;
  }

  /** The stream ended: reports a frame cut short, if any (§3: discarded). */
  end(): ReadItem | null {
    if (this.stopped || this.buffered === 0) return null;
    const have = this.buffered;
    this.chunks = [];
    this.buffered = 0;
    return { kind: "truncated", have };
  }

  private peekLength(): number {
    const h = new Uint8Array(4);
    let n = 0;
    for (const c of this.chunks) {
      for (let i = 0; i < c.length && n < 4; i++) h[n++] = c[i] as number;
      if (n === 4) break;
    }
    return new DataView(h.buffer).getUint32(0);
  }

  /** Removes and returns the first n buffered bytes (one copy at most). */
  private take(n: number): Uint8Array {
    const first = this.chunks[0] as Uint8Array;
    if (first.length >= n) {
      const out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      this.buffered -= n;
      return out;
    }
    const out = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0] as Uint8Array;
      const k = Math.min(c.length, n - off);
      out.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    this.buffered -= n;
    return out;
  }
}

/** Parses one frame (the bytes after the length field). */
function parse(b: Uint8Array): ReadItem {
  if (b.length < 2) {
    return { kind: "malformed", frameType: 0, detail: `frame length ${b.length}, shorter than version and type` };
  }
  const version = b[0] as number;
  const t = b[1] as number;
  if (version !== FRAME_VERSION) {
    return { kind: "bad_version", version, frameType: t };
  }
  try {
    return { kind: "frame", frame: decodeFrame(t, b.subarray(2)) };
  } catch (e) {
    if (e instanceof UnknownTypeError) return { kind: "unknown_type", frameType: t };
    if (e instanceof MalformedError) return { kind: "malformed", frameType: t, detail: `${typeName(t)}: ${e.message}` };
    throw e;
  }
}

/** Whether a frame type is one the server sends in answer to a request (carries the request's id). */
export function isResponseType(t: number): boolean {
  switch (t) {
    case FrameType.Ack:
    case FrameType.ConvListResult:
    case FrameType.ConvStateResult:
    case FrameType.HistoryResult:
    case FrameType.Head:
    case FrameType.MembersResult:
    case FrameType.DigestResult:
    case FrameType.ReceiptsResult:
    case FrameType.ReadersResult:
    case FrameType.Error:
      return true;
  }
  return false;
}
