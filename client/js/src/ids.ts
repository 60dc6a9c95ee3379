// Ids (§4): the direct conversation id of two users.

/** A valid id (§4): 1–128 bytes of printable ASCII without space. */
export function validId(s: string): boolean {
  return /^[\x21-\x7e]{1,128}$/.test(s);
}

function escapeId(s: string): string {
  return s.replace(/%/g, "%25").replace(/:/g, "%3A");
}

function base64url(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * The one id of the direct conversation of users a and b, in either order (§4; the Go reference
 * is proto.DirectConv): `d:lo:hi` with `%` and `:` escaped when that fits 128 bytes, else
 * `dh:` + base64url(SHA-256(lo + "\n" + hi)) over the unescaped ids. Rejects invalid ids and a == b.
 * Async because the hash is WebCrypto's.
 */
export async function directConv(a: string, b: string): Promise<string> {
  if (!validId(a) || !validId(b) || a === b) throw new RangeError("directConv needs two different valid ids");
  // Ids are ASCII, so comparing UTF-16 code units is comparing bytes.
  const [lo, hi] = a < b ? [a, b] : [b, a];
  const plain = `d:${escapeId(lo)}:${escapeId(hi)}`;
  if (plain.length <= 128) return plain;
  const digest = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(`${lo}\n${hi}`));
  return `dh:${base64url(new Uint8Array(digest))}`;
}

/** The longest reaction, in bytes of UTF-8 (§6 React). */
const MAX_REACTION_LEN = 64;

/**
 * Whether s may be put on a message as a reaction (§6 React): 1–64 bytes of UTF-8 with no
 * control characters and no white space, and not only invisible format characters (Cf, Mn, Me:
 * a zero-width joiner or a variation selector alone shows nothing). The server's rule
 * (proto/ident/ident.go ValidReaction); a string with a lone surrogate is not valid UTF-8.
 */
export function validReaction(s: string): boolean {
  if (s.length === 0 || /[\p{Cs}\p{Cc}\p{White_Space}]/u.test(s)) return false;
  if (new TextEncoder().encode(s).length > MAX_REACTION_LEN) return false;
  return /[^\p{Cf}\p{Mn}\p{Me}]/u.test(s);
}
