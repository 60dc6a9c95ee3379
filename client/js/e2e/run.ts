// Runs the browser journeys: every journey in Chromium over WebTransport and again with
// WebTransport turned off (the WebSocket fallback), the main ones in Firefox; then every scenario
// of the conformance kit (docs/CONFORMANCE.md) in each of those browsers. Prints one line per run
// and exits 1 if any failed. `node build/run.js [filter]` runs the journeys whose name contains
// filter and the scenarios whose "conformance <name>" does (`node build/run.js conformance`: all
// scenarios, no journey). Needs /usr/bin/chromium and /usr/bin/firefox-esr (Debian's chromium and
// firefox-esr packages) and Go to build syncd, unless SYNCD_BIN and SYNCCTL_BIN are set.

import { Cluster, checkTokenVector } from "./syncd.js";
import { launch, installed, type BrowserName } from "./browsers.js";
import { servePages } from "./pages.js";
import { journeys, type Ctx } from "./journeys.js";
import { Kit } from "./conformance.js";

interface Variant {
  browser: BrowserName;
  transport: "webtransport" | "websocket";
  noWebTransport?: boolean;
}

const variants: Variant[] = [
  { browser: "chromium", transport: "webtransport" },
  { browser: "chromium", transport: "websocket", noWebTransport: true },
  { browser: "firefox", transport: "webtransport" },
];

async function main(): Promise<number> {
  checkTokenVector();
  const filter = process.argv[2] ?? "";
  const pages = await servePages();
  const single = await Cluster.start(1);
  const kit = await Kit.start();
  const scenarios = (await kit.scenarios()).filter((s) => `conformance ${s}`.includes(filter));
  let failed = 0, passed = 0, skipped = 0, n = 0;
  try {
    for (const v of variants) {
      if (!installed(v.browser)) {
        console.log(`SKIP ${v.browser}: not installed (apt-get install ${v.browser === "firefox" ? "firefox-esr" : "chromium"})`);
        skipped++;
        continue;
      }
      const browser = await launch(v.browser, { noWebTransport: v.noWebTransport });
      try {
        for (const j of journeys) {
          if (!j.name.includes(filter) || (v.browser === "firefox" && !j.firefox)) continue;
          const label = `${j.name} [${v.browser}, ${v.transport}]`;
          const extra: Cluster[] = [];
          const ctx: Ctx = {
            browser, transport: v.transport, single, pageUrl: `${pages.origin}/index.html`, tag: `t${++n}`,
            cluster: async (size, flags) => {
              const c = await Cluster.start(size, flags);
              extra.push(c);
              return c;
            },
            log: (msg) => console.log(`     ${label}: ${msg}`),
          };
          const start = Date.now();
          try {
            await j.run(ctx);
            passed++;
            console.log(`ok   ${label} (${Date.now() - start} ms)`);
          } catch (e) {
            failed++;
            console.log(`FAIL ${label} (${Date.now() - start} ms): ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
          } finally {
            await browser.closePages();
            for (const c of extra) await c.stop();
          }
        }
        for (const scenario of scenarios) {
          const label = `conformance ${scenario} [${v.browser}, ${v.transport}]`;
          const start = Date.now();
          try {
            const verdict = await kit.conform(browser, `${pages.origin}/index.html`, scenario);
            if (verdict.status === "passed") {
              passed++;
              console.log(`ok   ${label} (${Date.now() - start} ms)`);
            } else {
              failed++;
              console.log(`FAIL ${label} (${Date.now() - start} ms): ${(verdict.reasons ?? []).join("; ")} [${verdict.section}]`);
              for (const line of (verdict.logs ?? []).slice(-30)) console.log(`     ${line}`);
            }
          } catch (e) {
            failed++;
            console.log(`FAIL ${label} (${Date.now() - start} ms): ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
          } finally {
            await browser.closePages();
          }
        }
      } finally {
        await browser.close();
      }
    }
  } finally {
    await kit.stop();
    await single.stop();
    await pages.close();
  }
  console.log(`${passed} passed, ${failed} failed, ${skipped} browsers skipped`);
  return failed > 0 || passed === 0 ? 1 : 0;
}

main().then((code) => process.exit(code), (e: unknown) => {
  console.error(e);
  process.exit(1);
});
