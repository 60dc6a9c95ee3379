// @ts-check
// The example chat's backend: what an app's own server does for its pages, in 100 lines of
// Node with no dependency. It serves the page and the SDK, and stands in for the app's login:
// GET /session?user=alice mints a device token for alice (PROTOCOL §2.2) with the node's key and
// returns it with the node's browser addresses and the certificate hashes pages pin (fetched
// from the admin API). A real app mints tokens only for users it has authenticated.
//
// Run from client/js with a node on its defaults started from the repository root
// (go run ./cmd/syncd, whose data directory is ./syncd-data): npm run example

import { createServer } from "node:http";
import { createHash, createHmac } from "node:crypto";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, resolve } from "node:path";

const here = import.meta.dirname;
const dataDir = resolve(process.env.SYNCD_DATA_DIR ?? join(here, "../../../syncd-data"));
const adminAddr = process.env.SYNCD_ADMIN ?? "127.0.0.1:7380";
const webAddr = process.env.SYNCD_WEB ?? "127.0.0.1:7301";
const port = Number(process.env.PORT ?? 8080);

/** @type {Record<string, string>} */
const mounts = {
  "/dist/": join(here, "../dist"),
  "/vendor/msgpack/": join(here, "../node_modules/@msgpack/msgpack/dist.esm"),
  "/": here,
};
/** @type {Record<string, string>} */
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".map": "application/json" };

/**
 * A device token for user's device, valid for a day (PROTOCOL §2.2).
 * @param {string} user
 * @param {string} device
 */
async function mintToken(user, device) {
  const secret = Buffer.from((await readFile(join(dataDir, "token.key"), "utf8")).trim(), "hex");
  const iat = Math.floor(Date.now() / 1000);
  const kid = createHash("sha256").update(secret).digest("hex").slice(0, 8);
  const signed = "v1." + Buffer.from(JSON.stringify({ u: user, d: device, exp: iat + 86400, iat, kid })).toString("base64url");
  return signed + "." + createHmac("sha256", secret).update(signed).digest("base64url");
}

/** The hashes of the node's browser certificates, which the page pins (GET /v1/webtransport/certs). */
async function certHashes() {
  const token = (await readFile(join(dataDir, "admin.token"), "utf8")).trim();
  const r = await fetch(`http://${adminAddr}/v1/webtransport/certs`, { headers: { authorization: `Bearer ${token}` } });
  if (!r.ok) throw new Error(`the node's admin API answered ${r.status}`);
  /** @type {{certs: {sha256: string}[]}} */
  const body = await r.json();
  return body.certs.map((c) => c.sha256);
}

const ids = /^[\x21-\x7e]{1,64}$/;

createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  try {
    if (url.pathname === "/session") {
      const user = url.searchParams.get("user") ?? "";
      const device = url.searchParams.get("device") ?? "browser";
      if (!ids.test(user) || !ids.test(device)) {
        res.writeHead(400).end("user and device: 1-64 printable characters, no space");
        return;
      }
      const body = JSON.stringify({ user, device, token: await mintToken(user, device), web: webAddr, certHashes: await certHashes() });
      res.writeHead(200, { "content-type": "application/json", "cache-control": "no-store" }).end(body);
      return;
    }
    const prefix = Object.keys(mounts).find((p) => url.pathname.startsWith(p)) ?? "/";
    const file = normalize(join(mounts[prefix], url.pathname.slice(prefix.length) || "index.html"));
    if (!file.startsWith(mounts[prefix]) || file.endsWith(".mjs") && prefix === "/") {
      res.writeHead(404).end();
      return;
    }
    const body = await readFile(file);
    res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream" }).end(body);
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    res.writeHead(msg.includes("ENOENT") && !url.pathname.startsWith("/session") ? 404 : 502).end(
      url.pathname === "/session" ? `is syncd running on its defaults from the repository root (go run ./cmd/syncd)? ${msg}` : "");
  }
}).listen(port, "127.0.0.1", () => {
  console.log(`example chat on http://localhost:${port} (syncd: browsers at ${webAddr}, admin at ${adminAddr}, data in ${dataDir})`);
});
