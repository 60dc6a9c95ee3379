// Serves the SDK and the test pages to the browsers from http://localhost:<port> (a loopback
// origin, which a node admits by default): the compiled SDK (dist/), its one dependency
// (@msgpack/msgpack's ES modules, mapped by the page's import map) and e2e/pages.

import { createServer, type Server } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, resolve } from "node:path";

const root = resolve(import.meta.dirname, "../..");
const mounts: Record<string, string> = {
  "/dist/": join(root, "dist"),
  "/kit/": join(root, "e2e/build"),
  "/vendor/msgpack/": join(root, "node_modules/@msgpack/msgpack/dist.esm"),
  "/": join(root, "e2e/pages"),
};
const types: Record<string, string> = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
  ".map": "application/json", ".css": "text/css",
};

/** A running page server. */
export interface PageServer {
  origin: string;
  close(): Promise<void>;
}

/** Starts the page server on a free port of localhost. */
export async function servePages(): Promise<PageServer> {
  const srv: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    const prefix = Object.keys(mounts).find((p) => path.startsWith(p)) ?? "/";
    const file = normalize(join(mounts[prefix]!, path.slice(prefix.length) || "index.html"));
    if (!file.startsWith(mounts[prefix]!)) {
      res.writeHead(403).end();
      return;
    }
    readFile(file).then(
      (body) => res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" }).end(body),
      () => res.writeHead(404).end(),
    );
  });
  await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
  const a = srv.address();
  const port = typeof a === "object" && a ? a.port : 0;
  return {
    origin: `http://localhost:${port}`,
    close: () => new Promise((ok) => srv.close(() => ok())),
  };
}
