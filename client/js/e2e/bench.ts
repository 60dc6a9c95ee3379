// The browser benchmark of docs/BENCHMARKS.md ("Browsers"), everything in one run against one
// syncd process: catch-up of a 100,000-entry log in Chromium over WebTransport (and WebSocket)
// beside the Go SDK's replay over raw QUIC (syncbench -scenario catchup, the same log), live push
// p50/p99 in the browser beside syncbench -scenario delivery, and the page's JS heap holding the
// 100,000 entries in the SDK's memory store.
//
//   node build/bench.js [entries]      (default 100000; SYNCD_BIN, SYNCCTL_BIN, SYNCBENCH_BIN or a Go toolchain)

import { execFile } from "node:child_process";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { Cluster, repo } from "./syncd.js";
import { launch } from "./browsers.js";
import { servePages } from "./pages.js";
import type { OpenArgs, PushArgs } from "./pagekit.js";

const run = promisify(execFile);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function syncbench(args: string[]): Promise<string> {
  const bin = process.env.SYNCBENCH_BIN;
  const { stdout, stderr } = bin
    ? await run(bin, args, { maxBuffer: 1 << 24 })
    : await run("go", ["run", "./cmd/syncbench", ...args], { cwd: repo, maxBuffer: 1 << 24 });
  return stdout + stderr;
}

async function main(): Promise<void> {
  const entries = Number(process.argv[2] ?? 100_000);
  // Limits raised as for syncbench against an external node: the backlog is written by 8
  // pipelining devices, and the push pairs send faster than a person.
  const c = await Cluster.start(1, ["-send-rate", "100000", "-send-burst", "100000", "-query-rate", "100000", "-query-burst", "100000"]);
  const pages = await servePages();
  try {
    const n = c.nodes[0]!;
    copyFileSync(join(c.root, "token.key"), join(n.dir, "token.key")); // syncbench reads it from the data dir
    console.log(`# browser benchmark: ${entries} entries; node ${n.id}; ${new Date().toISOString()}`);

    // Go over raw QUIC: fill the backlog, replay it three times (syncbench prints the log's user).
    const goCatchUp = await syncbench(["-scenario", "catchup", "-addr", n.client, "-data-dir", n.dir, "-catchup", String(entries), "-repeat", "3"]);
    const m = /backlog in the log of user (\S+), head (\d+)/.exec(goCatchUp);
    if (!m) throw new Error(`syncbench did not name the backlog's user:\n${goCatchUp}`);
    const [, user, headStr] = m;
    const head = Number(headStr);
    const goRate = /catch-up\s+\|?\s*([\d.]+) entries\/s/.exec(goCatchUp)?.[1] ?? goCatchUp.split("\n").filter((l) => l.includes("catchup:")).join("; ");
    console.log(`go (raw QUIC) catch-up: ${goRate} entries/s (median of 3)`);

    const hashes = await c.certHashes();
    const args = (u: string, device: string): OpenArgs => ({ device, token: c.token(u, device), nodes: [{ web: n.web, hashes }], store: "memory" });
    for (const variant of [{ name: "webtransport", noWebTransport: false }, { name: "websocket", noWebTransport: true }]) {
      const browser = await launch("chromium", { noWebTransport: variant.noWebTransport });
      try {
        const rates: number[] = [];
        let heapMiB = 0;
        for (let k = 0; k < 3; k++) {
          const page = await browser.open(`${pages.origin}/index.html`);
          const r = await page.evaluate((a, h) => window.bench.catchUp(a, h), args(user!, `browser-${variant.name}-${k}`), head);
          if (r.transport !== variant.name) throw new Error(`catch-up went over ${r.transport}, want ${variant.name}`);
          rates.push((head / r.ms) * 1000);
          const cdp = await page.createCDPSession();
          await cdp.send("HeapProfiler.collectGarbage");
          const { usedSize } = await cdp.send("Runtime.getHeapUsage");
          heapMiB = usedSize / (1 << 20);
          console.log(`chromium ${variant.name} catch-up ${k + 1}: ${head} entries in ${r.ms.toFixed(0)} ms (${rates.at(-1)!.toFixed(0)} entries/s), ${r.entries} entry events; JS heap after GC with the log in memory: ${heapMiB.toFixed(1)} MiB`);
          await page.evaluate(() => window.bench.closeAll());
          await page.close();
        }
        console.log(`chromium ${variant.name} catch-up: ${median(rates).toFixed(0)} entries/s (median of 3); heap ${heapMiB.toFixed(1)} MiB for ${head} entries`);

        // Live push: 20 pairs in one page, 10 sends/s each (200/s), 10 s.
        const pairs = 20;
        const run = `p${Date.now().toString(36)}${variant.name[0]}`;
        const senderUsers = Array.from({ length: pairs }, (_, k) => `${run}s${k}`);
        const receiverUsers = Array.from({ length: pairs }, (_, k) => `${run}r${k}`);
        const push: PushArgs = {
          senders: senderUsers.map((u) => args(u, "web")), senderUsers,
          receivers: receiverUsers.map((u) => args(u, "web")), receiverUsers,
          intervalMs: 100, durationMs: 10_000,
        };
        const page = await browser.open(`${pages.origin}/index.html`);
        const p = await page.evaluate((a) => window.bench.push(a), push);
        console.log(`chromium ${variant.name} push (${pairs} pairs, 200 sends/s, 10 s): ${p.latencies.length} of ${p.sent} entries; append→page p50 ${percentile(p.latencies, 50).toFixed(2)} ms, p99 ${percentile(p.latencies, 99).toFixed(2)} ms`);
        await page.close();
      } finally {
        await browser.close();
      }
    }
    const goDelivery = await syncbench(["-scenario", "delivery", "-addr", n.client, "-data-dir", n.dir, "-rate", "200", "-receivers", "20", "-duration", "10s"]);
    console.log(`go (raw QUIC) delivery: ${goDelivery.split("\n").filter((l) => l.startsWith("delivery") || l.includes("delivery:")).join("; ")}`);
  } finally {
    await pages.close();
    await c.stop();
  }
}

main().then(() => process.exit(0), (e: unknown) => {
  console.error(e);
  process.exit(1);
});
