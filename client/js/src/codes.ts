// Error codes (docs/PROTOCOL.md §7) and the close-reason grammar of §2. The Go reference is
// proto/codes.go and proto/closereason.go.

/**
 * The error codes of §7. Numbers are part of the wire format and never change. A receiver treats
 * 0 and any code it does not know like {@link Code.Internal}.
 */
export const Code = {
  Malformed: 1,
  UnknownFrame: 2,
  FrameTooLarge: 3,
  UnsupportedVersion: 4,
  UnexpectedFrame: 5,
  NeedsUpgrade: 6,
  Unauthenticated: 10,
  TokenExpired: 11,
  Forbidden: 12,
  InvalidArgument: 20,
  TooLarge: 21,
  NotMember: 22,
  NoConversation: 23,
  ConversationExists: 24,
  NotGroup: 25,
  NoMessage: 26,
  NotSender: 27,
  RecallWindow: 28,
  AlreadyRecalled: 29,
  Conflict: 30,
  NotPermitted: 31,
  GroupFull: 32,
  TooManyGroups: 33,
  /** Revision 4: a Digest range starts below the log's first retained position. */
  TooOld: 34,
  /** Revision 4: a Digest names an epoch other than the log's. */
  EpochChanged: 35,
  RateLimited: 40,
  Overloaded: 41,
  TooManyStreams: 42,
  TooManyConnections: 43,
  Unavailable: 44,
  Timeout: 45,
  Superseded: 46,
  Internal: 50,
} as const;

/** A §7 error code (a uint16 on the wire; unknown values are possible from a newer server). */
export type Code = number;

const codeNames: ReadonlyMap<number, string> = new Map(
  Object.entries(Code).map(([k, v]) => [v, k.replace(/[A-Z]/g, (c, i: number) => (i ? "_" : "") + c.toLowerCase())]),
);

/** The snake_case name of a code ("not_member", …), or "code(N)" for one this version does not know. */
export function codeName(code: number): string {
  return codeNames.get(code) ?? `code(${code})`;
}

/** Whether this version knows the code. */
export function codeKnown(code: number): boolean {
  return codeNames.has(code);
}

/**
 * Whether the same request (for a mutation: the same cmid and payload) may be sent again after a
 * backoff of at least the error's retry_after_ms. Unknown codes are not retryable (§7: treat them
 * like internal).
 */
export function retryable(code: number): boolean {
  switch (code) {
    case Code.RateLimited:
    case Code.Overloaded:
    case Code.TooManyConnections:
    case Code.Unavailable:
    case Code.Timeout:
      return true;
  }
  return false;
}

/**
 * A §7 error: what an Error frame carries, what a connection close stands for (§2), or a local
 * refusal with a protocol code (a request beyond max_frame fails locally as too_large). It is the
 * error type the SDK rejects promises with whenever the server (or the protocol) said why.
 */
export class ProtoError extends Error {
  /** The §7 code. */
  readonly code: number;
  /** The minimum wait before retrying or reconnecting, in ms; 0 = none. */
  readonly retryAfterMs: number;
  /** The request this error answers; 0 when not tied to one. */
  readonly id: number;

  constructor(code: number, message: string, retryAfterMs = 0, id = 0) {
    super(`syncd: ${codeName(code)}${message ? ": " + message : ""}${retryAfterMs > 0 ? ` (retry after ${retryAfterMs}ms)` : ""}`);
    this.name = "ProtoError";
    this.code = code;
    this.retryAfterMs = retryAfterMs;
    this.id = id;
    this.serverMessage = message;
  }

  /** The message as the server (or the SDK) wrote it, without the code: for humans and logs. */
  readonly serverMessage: string;

  /** Whether the code is retryable (see {@link retryable}). */
  get retryable(): boolean {
    return retryable(this.code);
  }
}

const retryAfterKey = "retry_after_ms=";

/**
 * The error a connection close stands for (§2): the application close code and the reason phrase
 * `[ "retry_after_ms=" 1*DIGIT "; " ] message`. A reason without the prefix, or with a malformed
 * one, is all message. A code beyond uint16 (never sent) becomes internal, as in Go's
 * proto.ErrorFromClose.
 */
export function errorFromClose(code: number, reason: string): ProtoError {
  const c = Number.isInteger(code) && code >= 0 && code <= 0xffff ? code : Code.Internal;
  if (!reason.startsWith(retryAfterKey)) {
    return new ProtoError(c, reason);
  }
  const rest = reason.slice(retryAfterKey.length);
  const sep = rest.indexOf("; ");
  const digits = sep < 0 ? "" : rest.slice(0, sep);
  // 1*DIGIT and a value that fits a uint32, as strconv.ParseUint(digits, 10, 32) accepts.
  if (!/^[0-9]+$/.test(digits) || Number(digits) > 0xffffffff) {
    return new ProtoError(c, reason);
  }
  return new ProtoError(c, rest.slice(sep + 2), Number(digits));
}
