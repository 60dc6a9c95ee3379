// The browsers the tests drive: Debian's Chromium (over CDP) and Firefox ESR (over WebDriver
// BiDi), both headless, through puppeteer-core with the system binaries (nothing downloaded).

import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A browser the tests can run in. */
export type BrowserName = "chromium" | "firefox";

const executables: Record<BrowserName, string> = {
  chromium: process.env.CHROMIUM_BIN ?? "/usr/bin/chromium",
  firefox: process.env.FIREFOX_BIN ?? "/usr/bin/firefox-esr",
};

/** Whether the browser is installed. */
export function installed(name: BrowserName): boolean {
  return existsSync(executables[name]);
}

/** Options of a launch. */
export interface LaunchOptions {
  /** Pages have no WebTransport, as in a browser that lacks it (the WebSocket journeys). */
  noWebTransport?: boolean;
}

/** A launched browser with a profile of its own, removed at close. */
export interface RunningBrowser {
  name: BrowserName;
  browser: Browser;
  /** Opens a new page at url and waits until the SDK's test kit is loaded (unless sdk is false). */
  open(url: string, opts?: { sdk?: boolean }): Promise<Page>;
  /** Closes every page open() opened that is still open (after each journey). */
  closePages(): Promise<void>;
  close(): Promise<void>;
}

/** Launches a browser headless. */
export async function launch(name: BrowserName, opts: LaunchOptions = {}): Promise<RunningBrowser> {
  const profile = mkdtempSync(join(tmpdir(), `syncd-e2e-${name}-`));
  let browser: Browser;
  const pages = new Set<Page>();
  if (name === "chromium") {
    const args = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync",
      // Chromium penalizes failed WebTransport handshakes, and the penalty spills onto the next
      // good one (research/browser-feasibility.md §4): the refused-origin case must not slow the rest.
      "--webtransport-developer-mode"];
    browser = await puppeteer.launch({ executablePath: executables.chromium, headless: true, userDataDir: profile, args });
  } else {
    browser = await puppeteer.launch({ browser: "firefox", executablePath: executables.firefox, headless: true, userDataDir: profile });
  }
  return {
    name,
    browser,
    async open(url: string, o: { sdk?: boolean } = {}): Promise<Page> {
      const page = await browser.newPage();
      pages.add(page);
      if (opts.noWebTransport) {
        // Before any script of the page: the SDK finds no WebTransport, as in a browser without
        // it (Chromium has no switch that removes the API).
        await page.evaluateOnNewDocument(() => {
          Reflect.deleteProperty(globalThis, "WebTransport");
        });
      }
      page.on("console", (m) => {
        if (process.env.E2E_VERBOSE || m.type() === "error") console.log(`  [${name} console.${m.type()}] ${m.text()}`);
      });
      page.on("pageerror", (e) => console.log(`  [${name} page error] ${String(e)}`));
      await page.goto(url);
      if (o.sdk ?? true) await page.waitForFunction(() => "syncd" in window && "kit" in window, { timeout: 15_000 });
      return page;
    },
    async closePages(): Promise<void> {
      for (const p of pages) if (!p.isClosed()) await p.close();
      pages.clear();
    },
    async close(): Promise<void> {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
