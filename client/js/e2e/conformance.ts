// The conformance kit (docs/CONFORMANCE.md) against the TypeScript SDK in real browsers: this is
// the SDK's driver. It starts `syncd conformance` as a process, and for each scenario starts a run
// through the kit's control API, opens the SDK in a page (a fresh memory store, the run's token,
// a token source that asks the kit for fresh ones), sends the run's messages, and reports what the
// SDK stored until the kit's verdict is final.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { RunningBrowser } from "./browsers.js";
import { PageClient } from "./journeys.js";
import { binaries, freePort } from "./syncd.js";

/** A run of the kit (RunInfo in syncd/conformance). */
interface RunInfo {
  run: string;
  scenario: string;
  user: string;
  device: string;
  token: string;
  token_url: string;
  report_url: string;
  conv: string;
  sends: { conv: string; peer: string; body: string }[] | null;
  timeout_ms: number;
  web?: string;
  cert_hashes?: string[];
}

/** The kit's verdict on a run. */
export interface Verdict {
  run: string;
  scenario: string;
  section: string;
  status: "pending" | "passed" | "failed";
  reasons?: string[];
  /** The SDK's last log lines, when the run failed (the driver's, not the kit's). */
  logs?: string[];
}

/**
 * What the SDK promises beyond the kit's verdict, which also passes a client that resyncs: after a
 * restore that holds its cursor it continues without telling the app (no `epoch` event, §8.4),
 * and after one behind its cursor it resyncs and says so.
 */
async function brokenPromise(scenario: string, pc: PageClient): Promise<string | undefined> {
  const epochs = (await pc.events("epoch")).length;
  if (scenario === "restore" && epochs > 0) return `the SDK emitted ${epochs} epoch event(s) after a restore that holds its cursor: it resynced instead of continuing`;
  if (scenario === "restore_behind" && epochs === 0) return "the SDK emitted no epoch event after a restore behind its cursor";
  return undefined;
}

async function postJSON<T>(url: string, body?: unknown): Promise<T> {
  const res = await fetch(url, { method: "POST", body: body === undefined ? undefined : JSON.stringify(body), headers: { "content-type": "application/json" } });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${url}: ${res.status}: ${text}`);
  return JSON.parse(text) as T;
}

/** A `syncd conformance` process. */
export class Kit {
  private constructor(private readonly proc: ChildProcess, private readonly dir: string, readonly control: string) {}

  static async start(): Promise<Kit> {
    const { syncd } = await binaries();
    const dir = mkdtempSync(join(tmpdir(), "syncd-conformance-"));
    const [listen, control, web] = [await freePort(), await freePort(), await freePort()].map((p) => `127.0.0.1:${p}`);
    const proc = spawn(syncd, ["conformance", "-listen", listen!, "-control", control!, "-web", web!, "-data-dir", dir], { stdio: ["ignore", "pipe", "inherit"] });
    const kit = new Kit(proc, dir, `http://${control}`);
    await new Promise<void>((ok, fail) => {
      let out = "";
      const timer = setTimeout(() => fail(new Error(`syncd conformance did not start in 30 s: ${out}`)), 30_000);
      proc.once("exit", (code) => fail(new Error(`syncd conformance exited with ${code}: ${out}`)));
      proc.stdout!.on("data", (b: Buffer) => {
        out += b.toString();
        if (out.includes("drivers use")) {
          clearTimeout(timer);
          ok();
        }
      });
    });
    return kit;
  }

  async scenarios(): Promise<string[]> {
    const res = await fetch(`${this.control}/v1/scenarios`);
    return ((await res.json()) as { name: string }[]).map((s) => s.name);
  }

  async stop(): Promise<void> {
    const exited = new Promise((ok) => this.proc.once("exit", ok));
    this.proc.kill("SIGTERM");
    await exited;
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Plays one run of scenario with the SDK in a page of browser, until the kit's verdict. */
  async conform(browser: RunningBrowser, pageUrl: string, scenario: string): Promise<Verdict> {
    const info = await postJSON<RunInfo>(`${this.control}/v1/runs`, { scenario });
    if (!info.web || !info.cert_hashes) throw new Error("the kit serves no browser (it runs with -web off)");
    const page = await browser.open(pageUrl);
    await page.exposeFunction("harnessToken", async () => (await postJSON<{ token: string }>(info.token_url)).token);
    const pc = await PageClient.openWith(page, {
      device: info.device, token: info.token, store: "memory", refreshTokens: true,
      nodes: [{ web: info.web, hashes: info.cert_hashes }],
    });
    try {
      for (const s of info.sends ?? []) await pc.send(s.conv, s.body, s.peer);
      const until = Date.now() + info.timeout_ms + 10_000;
      for (;;) {
        const messages = (await pc.messages(info.conv)).map((m) => ({ msg_id: m.msgId, conv_seq: m.convSeq }));
        const v = await postJSON<Verdict>(info.report_url, { conversations: [{ conv: info.conv, messages }] });
        if (v.status === "failed") return { ...v, logs: await pc.logs() };
        if (v.status !== "pending") {
          const broken = await brokenPromise(scenario, pc);
          return broken ? { ...v, status: "failed", reasons: [broken], logs: await pc.logs() } : v;
        }
        if (Date.now() > until) throw new Error(`run ${info.run} still pending after its timeout: ${(v.reasons ?? []).join("; ")}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      await pc.close();
    }
  }
}
