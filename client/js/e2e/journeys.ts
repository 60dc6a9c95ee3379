// The journeys of issue 22 §3, each through a real browser, the real SDK and real syncd
// processes: what an app developer's users do, checked from both ends.

import type { Page } from "puppeteer-core";
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import type { Cluster } from "./syncd.js";
import type { RunningBrowser } from "./browsers.js";
import type { FloodArgs, OpenArgs, PlainMessage } from "./pagekit.js";

/** What a journey runs with. */
export interface Ctx {
  browser: RunningBrowser;
  /** The transport the journey expects the SDK to choose. */
  transport: "webtransport" | "websocket";
  /** A single node, shared by the journeys (each uses users of its own). */
  single: Cluster;
  /** Starts a cluster of its own (stopped after the journey). */
  cluster(n: number, extra?: string[]): Promise<Cluster>;
  /** The URL of the test page. */
  pageUrl: string;
  /** A name unique to this run of the journey, for user ids. */
  tag: string;
  log(msg: string): void;
}

/** A journey: fails by throwing. */
export interface Journey {
  name: string;
  /** Runs in Firefox too (the main journeys). */
  firefox: boolean;
  /** Needs the SDK's IndexedDB store. */
  needsIndexedDB?: boolean;
  run(ctx: Ctx): Promise<void>;
}

/** The direct conversation of two users (PROTOCOL §4, short ids). */
export function directConv(a: string, b: string): string {
  const [lo, hi] = a < b ? [a, b] : [b, a];
  const esc = (s: string) => s.replaceAll("%", "%25").replaceAll(":", "%3A");
  return `d:${esc(lo)}:${esc(hi)}`;
}

/**
 * The sub-log of a user split into k that gets conversation conv's entries: FNV-1a (64 bit) of
 * "sub:" + conv, modulo k — the server's log.SubLogOf, which is part of its persisted layout.
 */
export function subLogOf(conv: string, k: number): number {
  let h = 0xcbf29ce484222325n;
  for (const b of new TextEncoder().encode(`sub:${conv}`)) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return Number(h % BigInt(k));
}

export function assert(cond: unknown, msg: string): asserts cond {
  if (!cond) throw new Error(msg);
}

/** Polls fn until it returns a value that is not undefined, or fails after timeoutMs. */
export async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A page's client: the kit's calls, typed. */
export class PageClient {
  private constructor(readonly page: Page, readonly id: string) {}

  /** The arguments of a client of user on cluster (hashes: the nodes' pinned certificates, fetched when the cluster is up). */
  static args(cluster: Cluster, hashes: string[], user: string, device: string, opts: { store?: string; ttl?: number; refresh?: boolean } = {}): OpenArgs {
    return {
      device, token: cluster.token(user, device, opts.ttl ?? 3600), store: opts.store ?? "memory",
      nodes: cluster.nodes.map((n) => ({ web: n.web, hashes })), refreshTokens: opts.refresh ?? false,
    };
  }

  /** Opens a client in page; hashes default to the cluster's current ones (give them when a node is down). */
  static async open(page: Page, cluster: Cluster, user: string, device: string, opts: { store?: string; ttl?: number; refresh?: boolean; hashes?: string[] } = {}): Promise<PageClient> {
    const hashes = opts.hashes ?? await cluster.certHashes();
    const args = PageClient.args(cluster, hashes, user, device, opts);
    if (opts.refresh) {
      await page.exposeFunction("harnessToken", (dev: string) => cluster.token(user, dev, opts.ttl ?? 3600));
    }
    return PageClient.openWith(page, args);
  }

  /** Opens a client in page with args (a token source, if args.refreshTokens, exposed as harnessToken by the caller). */
  static async openWith(page: Page, args: OpenArgs): Promise<PageClient> {
    const id = await page.evaluate((a) => window.kit.open(a), args);
    return new PageClient(page, id);
  }

  send(conv: string, body: string, peer?: string): Promise<string> {
    return this.page.evaluate((id, c, b, p) => window.kit.send(id, c, b, p), this.id, conv, body, peer);
  }
  markRead(conv: string, convSeq: number): Promise<string> {
    return this.page.evaluate((id, c, s) => window.kit.markRead(id, c, s), this.id, conv, convSeq);
  }
  statusOf(conv: string, convSeq: number): Promise<string> {
    return this.page.evaluate((id, c, s) => window.kit.statusOf(id, c, s), this.id, conv, convSeq);
  }
  peerMarks(conv: string): Promise<{ delivered: number; read: number }> {
    return this.page.evaluate((id, c) => window.kit.peerMarks(id, c), this.id, conv);
  }
  receipts(conv: string, seqs: number[]): Promise<{ convSeq: number; members: number; delivered: number; read: number }[]> {
    return this.page.evaluate((id, c, s) => window.kit.receipts(id, c, s), this.id, conv, seqs);
  }
  readers(conv: string, convSeq: number, state: "delivered" | "read"): Promise<string[]> {
    return this.page.evaluate((id, c, s, st) => window.kit.readers(id, c, s, st), this.id, conv, convSeq, state);
  }
  /** The messageStatus events of one message, oldest first: its steps ("delivered", "read"). */
  async steps(msgId: string): Promise<string[]> {
    return (await this.events("messageStatus"))
      .map((e) => JSON.parse(e.detail) as { msgId: string; status: string })
      .filter((e) => e.msgId === msgId).map((e) => e.status);
  }
  recall(conv: string, msgId: string): Promise<string> {
    return this.page.evaluate((id, c, m) => window.kit.recall(id, c, m), this.id, conv, msgId);
  }
  status(cmid: string): Promise<{ status: string; msgId: string }> {
    return this.page.evaluate((id, c) => window.kit.status(id, c), this.id, cmid);
  }
  messages(conv: string): Promise<PlainMessage[]> {
    return this.page.evaluate((id, c) => window.kit.messages(id, c), this.id, conv);
  }
  events(name?: string): Promise<{ name: string; detail: string }[]> {
    return this.page.evaluate((id, n) => window.kit.events(id, n), this.id, name);
  }
  bodies(): Promise<string[]> {
    return this.page.evaluate((id) => window.kit.bodies(id), this.id);
  }
  initialCursor(): Promise<{ epoch: string; pos: number }[]> {
    return this.page.evaluate((id) => window.kit.initialCursor(id), this.id);
  }
  role(): Promise<string> {
    return this.page.evaluate((id) => window.kit.role(id), this.id);
  }
  logs(): Promise<string[]> {
    return this.page.evaluate((id) => window.kit.logs(id), this.id);
  }
  cursor(): Promise<{ epoch: string; pos: number }[]> {
    return this.page.evaluate((id) => window.kit.cursor(id), this.id);
  }
  close(): Promise<void> {
    return this.page.evaluate((id) => window.kit.close(id), this.id);
  }

  /** Waits until the outbox item is sent; returns its msg_id. */
  async sent(cmid: string, timeoutMs = 20_000): Promise<string> {
    return waitFor(`${cmid} to be sent`, async () => {
      const s = await this.status(cmid);
      if (s.status === "failed") throw new Error(`${cmid} failed`);
      return s.status === "sent" ? s.msgId : undefined;
    }, timeoutMs);
  }

  /** Waits until conv holds a message with body; returns it. */
  async message(conv: string, body: string, timeoutMs = 20_000): Promise<PlainMessage> {
    return waitFor(`"${body}" in ${conv}`, async () => (await this.messages(conv)).find((m) => m.body === body), timeoutMs);
  }

  /** Waits until the tab has the role. */
  async hasRole(role: string, timeoutMs = 20_000): Promise<void> {
    await waitFor(`the tab to be ${role}`, async () => ((await this.role()) === role ? true : undefined), timeoutMs);
  }

  /** Dumps events and the SDK's log (on a failure). */
  async dump(ctx: Ctx, label: string): Promise<void> {
    try {
      ctx.log(`${label} events: ${JSON.stringify((await this.events()).filter((x) => x.name !== "entry").slice(-40))}`);
      ctx.log(`${label} SDK log:\n${(await this.logs()).slice(-60).join("\n")}`);
    } catch (e) {
      ctx.log(`${label}: no dump (${String(e)})`);
    }
  }

  /** The transport of the last connection. */
  async transport(): Promise<string> {
    const t = await waitFor("a transport event", async () => (await this.events("transport")).at(-1));
    return (JSON.parse(t.detail) as { kind: string }).kind;
  }
}

/** Entries a Go device (syncctl) pulls, as JSON lines. */
interface PulledEntry {
  kind: string;
  msg_id: string;
  conv: string;
  conv_seq: number;
  from: string;
  body?: string;
  up_to?: number;
  target?: string;
}

async function pull(c: Cluster, user: string, device: string): Promise<PulledEntry[]> {
  const out = await c.syncctl(user, device, ["pull", "-wait", "500ms"]);
  return out.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as PulledEntry);
}

async function goSend(c: Cluster, user: string, conv: string, peer: string, body: string): Promise<{ msg_id: string; conv_seq: number }> {
  const out = await c.syncctl(user, "go", ["send", "-conv", conv, "-peer", peer, "-body", body]);
  return JSON.parse(out) as { msg_id: string; conv_seq: number };
}

/** Opens the page and a client of user on cluster c; checks the transport chosen. */
async function openClient(ctx: Ctx, c: Cluster, user: string, opts: { store?: string; ttl?: number; refresh?: boolean } = {}): Promise<PageClient> {
  const page = await ctx.browser.open(ctx.pageUrl);
  const pc = await PageClient.open(page, c, user, "web", opts);
  const kind = await pc.transport();
  assert(kind === ctx.transport, `the SDK chose ${kind}, want ${ctx.transport}`);
  return pc;
}

/** Starts the example chat's backend (client/js/example/server.mjs) against node 0 of c. */
async function startExample(c: Cluster, port: number): Promise<() => void> {
  const n = c.nodes[0]!;
  const proc = spawn(process.execPath, [resolve(import.meta.dirname, "../../example/server.mjs")], {
    env: { ...process.env, SYNCD_DATA_DIR: n.dir, SYNCD_ADMIN: n.admin, SYNCD_WEB: n.web, PORT: String(port) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((ok, fail) => {
    proc.once("exit", (code) => fail(new Error(`the example server exited with ${code}`)));
    proc.stdout!.once("data", () => ok());
  });
  return () => proc.kill();
}

export const journeys: Journey[] = [
  {
    name: "the example chat page talks with a Go device",
    firefox: false,
    async run(ctx) {
      const c = ctx.single;
      // The example mints tokens with the data directory's token.key: the harness's cluster keeps
      // its key elsewhere, so the node's own is the one the example must find.
      const { copyFileSync } = await import("node:fs");
      copyFileSync(resolve(c.root, "token.key"), resolve(c.nodes[0]!.dir, "token.key"));
      copyFileSync(resolve(c.root, "admin.token"), resolve(c.nodes[0]!.dir, "admin.token"));
      const port = 20000 + Math.floor(Math.random() * 20000);
      const stop = await startExample(c, port);
      try {
        const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
        const page = await ctx.browser.open(`http://localhost:${port}/`, { sdk: false });
        await page.type("#user", alice);
        await page.click("#login button");
        await page.waitForSelector("#app:not([hidden])");
        await page.type("#peer", bob);
        await page.click("#new button");
        await page.type("#text", "hello from the example page");
        await page.click("#compose button");
        await waitFor("the page to show the message sent", async () =>
          (await page.$$eval(".msg.mine .meta", (els) => els.map((e) => e.textContent))).includes("✓ sent") ? true : undefined);
        const conv = directConv(alice, bob);
        await waitFor("the Go device to get the page's message", async () =>
          (await pull(c, bob, "go")).some((e) => e.body === "hello from the example page") ? true : undefined);
        await goSend(c, bob, conv, alice, "hello back, from syncctl");
        await waitFor("the page to show the reply", async () =>
          (await page.$$eval(".msg .text", (els) => els.map((e) => e.textContent))).includes("hello back, from syncctl") ? true : undefined);
      } finally {
        stop();
      }
    },
  },
  {
    name: "send, receive, receipt and recall between a browser and a Go device",
    firefox: true,
    async run(ctx) {
      const c = ctx.single;
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const web = await openClient(ctx, c, alice);
      const fromGo = await goSend(c, bob, conv, alice, "hi alice, from Go");
      const got = await web.message(conv, "hi alice, from Go");
      assert(got.sender === bob && got.msgId === fromGo.msg_id, `the browser stored ${JSON.stringify(got)}`);
      const mine = await web.sent(await web.send(conv, "hi bob, from the browser"));
      await web.sent(await web.markRead(conv, got.convSeq));
      await web.sent(await web.recall(conv, mine));
      const entries = await waitFor("the Go device to get the message, the receipt and the recall", async () => {
        const es = await pull(c, bob, "go");
        return es.some((e) => e.kind === "recall") ? es : undefined;
      });
      const msg = entries.find((e) => e.kind === "message" && e.body === "hi bob, from the browser");
      assert(msg?.msg_id === mine, `the Go device got ${JSON.stringify(entries)}`);
      assert(entries.some((e) => e.kind === "receipt" && e.from === alice && e.up_to === got.convSeq), "no receipt from the browser");
      assert(entries.some((e) => e.kind === "recall" && e.target === mine), "no recall from the browser");
      // And the other way: the Go device's recall reaches the browser.
      await c.syncctl(bob, "go", ["recall", "-conv", conv, "-msg-id", fromGo.msg_id]);
      await waitFor("the Go device's recall in the browser", async () =>
        (await web.messages(conv)).find((m) => m.msgId === fromGo.msg_id && m.recalled));
      const bodies = await web.bodies();
      assert(bodies.filter((b) => b === "hi alice, from Go").length === 1, `bodies ${JSON.stringify(bodies)}: not exactly once`);
      await web.page.close();
    },
  },
  {
    name: "a message queued while the server is down is delivered once after it returns",
    firefox: true,
    async run(ctx) {
      const c = await ctx.cluster(1);
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const web = await openClient(ctx, c, alice);
      await web.sent(await web.send(conv, "before the outage", bob));
      c.kill(0);
      const cmid = await web.send(conv, "queued while the node is down", bob);
      await new Promise((r) => setTimeout(r, 1500));
      assert((await web.status(cmid)).status === "sending", "the queued message is not waiting");
      await c.startNode(0);
      try {
        await web.sent(cmid, 30_000);
      } catch (e) {
        ctx.log(`events: ${JSON.stringify((await web.events()).filter((x) => x.name !== "entry"), null, 1)}`);
        ctx.log(`SDK log:\n${(await web.logs()).join("\n")}`);
        throw e;
      }
      const entries = await waitFor("the Go device to get the queued message", async () => {
        const es = await pull(c, bob, "go");
        return es.some((e) => e.body === "queued while the node is down") ? es : undefined;
      }, 30_000);
      const n = entries.filter((e) => e.body === "queued while the node is down").length;
      assert(n === 1, `the queued message arrived ${n} times`);
      await web.page.close();
    },
  },
  {
    name: "a three-node cluster: the serving node is killed, the page fails over",
    firefox: false,
    async run(ctx) {
      const c = await ctx.cluster(3);
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const web = await openClient(ctx, c, alice);
      await web.sent(await web.send(conv, "one", bob));
      const url = (JSON.parse((await web.events("transport")).at(-1)!.detail) as { url: string }).url;
      const serving = c.nodes.findIndex((n) => url.includes(n.web));
      assert(serving >= 0, `connected to ${url}, which is no node's`);
      ctx.log(`serving node n${serving + 1}; killing it`);
      c.kill(serving);
      const cmid = await web.send(conv, "two", bob);
      await web.sent(cmid, 60_000);
      await goSend(c, bob, conv, alice, "three, from Go");
      await web.message(conv, "three, from Go", 60_000);
      const bodies = (await web.messages(conv)).map((m) => m.body);
      assert(JSON.stringify(bodies) === JSON.stringify(["one", "two", "three, from Go"]), `the conversation holds ${JSON.stringify(bodies)}`);
      await web.page.close();
    },
  },
  {
    name: "a split user's vector cursor",
    firefox: false,
    async run(ctx) {
      const c = ctx.single;
      const hot = `hot-${ctx.tag}`;
      const web = await openClient(ctx, c, hot);
      // Two senders whose conversations go to each sub-log (the server's choice, SubLogOf): with
      // names picked at random all four went to one sub-log now and then.
      const senders: string[] = [];
      for (let i = 0, per = [0, 0]; senders.length < 4; i++) {
        const s = `fan${i}-${ctx.tag}`;
        const sub = subLogOf(directConv(s, hot), 2);
        if (per[sub]! < 2) {
          per[sub]!++;
          senders.push(s);
        }
      }
      await goSend(c, senders[0]!, directConv(senders[0]!, hot), hot, "before the split");
      await web.message(directConv(senders[0]!, hot), "before the split");
      await c.admin(["split-user", "-user", hot, "-subs", "2"]);
      // Every source shard learns of the split through its own log, so the first sends after
      // the command may still go to sub-log 0: send in rounds until entries came through both.
      let cursor = await web.cursor();
      for (let round = 1; round <= 10 && !(cursor.length === 2 && cursor.every((x) => x.pos > 0)); round++) {
        for (const s of senders) await goSend(c, s, directConv(s, hot), hot, `after the split, from ${s}, round ${round}`);
        for (const s of senders) await web.message(directConv(s, hot), `after the split, from ${s}, round ${round}`, 30_000);
        cursor = await web.cursor();
      }
      assert(cursor.length === 2 && cursor.every((x) => x.pos > 0), `cursor ${JSON.stringify(cursor)}: want one position per sub-log`);
      await web.page.close();
    },
  },
  {
    name: "a page of an origin the node does not allow is refused",
    firefox: true,
    async run(ctx) {
      const c = await ctx.cluster(1, ["-allowed-origins", "https://chat.example.com"]);
      const page = await ctx.browser.open(ctx.pageUrl);
      const web = await PageClient.open(page, c, `eve-${ctx.tag}`, "web");
      await waitFor("a failed connection", async () => (await web.events("connection")).find((e) => e.detail.includes("disconnected")));
      assert((await web.events("transport")).length === 0, "a session was made from a refused origin");
      const metrics = await (await fetch(`http://${c.nodes[0]!.admin}/metrics`)).text();
      assert(/syncd_web_refused_total\{reason="origin"\} [1-9]/.test(metrics), "the node did not count the refused origin");
      assert(!/syncd_sessions_total\{transport="(webtransport|websocket)"\} [1-9]/.test(metrics), "the node counted a browser session");
      await web.close();
      await page.close();
    },
  },
  {
    name: "a token that expires is refreshed and the session goes on",
    firefox: true,
    async run(ctx) {
      const c = ctx.single;
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const web = await openClient(ctx, c, alice, { ttl: 4, refresh: true });
      await web.sent(await web.send(conv, "before the first expiry", bob));
      await new Promise((r) => setTimeout(r, 9000)); // two expiries
      await web.sent(await web.send(conv, "after two expiries", bob));
      const conns = (await web.events("connection")).filter((e) => e.detail.includes('"connected"')).length;
      assert(conns === 1, `the client connected ${conns} times: the token was not refreshed in the session`);
      await web.page.close();
    },
  },
  {
    name: "a reload mid-sync resumes from the stored cursor with no gap and no duplicate (IndexedDB)",
    firefox: true,
    needsIndexedDB: true,
    async run(ctx) {
      // Senders write fast: the backlog is made in seconds. Delivery reports off: the reader's
      // acks would add delivered entries to its own log (its conversations are direct), and the
      // positions checked here (the head at total, the entries after the reload) must not depend
      // on when the server's report rounds run.
      const c = await ctx.cluster(1, ["-send-rate", "100000", "-send-burst", "100000", "-delivery-reports=false"]);
      const hashes = await c.certHashes();
      const me = `reader-${ctx.tag}`;
      const store = `idb:syncd-reload-${ctx.tag}`;
      // Twelve conversations in parallel: each send is a replicated commit (~30 ms here), one
      // at a time per conversation.
      const senders = Array.from({ length: 12 }, (_, i) => `writer${i}-${ctx.tag}`);
      const perSender = 250;
      const total = senders.length * perSender;
      const page = await ctx.browser.open(ctx.pageUrl);
      // The backlog is written while the reader is away.
      const flood: FloodArgs = { senders: senders.map((u) => ({ user: u, args: PageClient.args(c, hashes, u, "w") })), peer: me, perSender };
      const t0 = Date.now();
      const sent = await page.evaluate((a) => window.kit.flood(a), flood);
      assert(sent === total, `flooded ${sent}`);
      const t1 = Date.now();
      let web = await PageClient.open(page, c, me, "web", { store, hashes });
      const kind = await web.transport();
      assert(kind === ctx.transport, `the SDK chose ${kind}, want ${ctx.transport}`);
      // Reload while the backlog streams in.
      const at = await waitFor("the catch-up to be under way", async () => {
        const pos = (await web.cursor())[0]?.pos ?? 0;
        return pos >= 200 ? pos : undefined;
      }, 30_000);
      await page.reload();
      await page.waitForFunction(() => "kit" in window, { timeout: 15_000 });
      web = await PageClient.open(page, c, me, "web", { store, hashes });
      const resumed = (await web.initialCursor())[0]?.pos ?? 0;
      ctx.log(`reloaded at cursor ${at}; the store's cursor after the reload: ${resumed} of ${total}`);
      assert(resumed >= at, `the reloaded client starts at ${resumed}, below ${at} seen before the reload`);
      assert(resumed < total, `the catch-up was over (${resumed}) before the reload: nothing tested mid-sync`);
      try {
        await waitFor("the cursor to reach the head", async () => ((await web.cursor())[0]?.pos === total ? true : undefined), 60_000);
      } catch (e) {
        await web.dump(ctx, "reader");
        throw e;
      }
      ctx.log(`backlog of ${total} written in ${t1 - t0} ms; caught up ${Date.now() - t1} ms after it`);
      // Every message stored once, in order, in its conversation; the entries after the reload
      // are exactly those after the stored cursor (no gap, no duplicate).
      for (const s of senders) {
        const msgs = await web.messages(directConv(s, me));
        const want = Array.from({ length: perSender }, (_, i) => `${s} ${i + 1}`);
        assert(JSON.stringify(msgs.map((m) => m.body)) === JSON.stringify(want), `${s}'s conversation holds ${msgs.length} messages, not 1..${perSender} in order`);
        assert(new Set(msgs.map((m) => m.msgId)).size === perSender, "a msg_id stored twice");
      }
      const after = await web.bodies();
      assert(!after.some((b) => b.startsWith("dup:")), "an entry arrived twice after the reload");
      assert(after.length === total - resumed, `${after.length} entries after the reload, want ${total - resumed} (from ${resumed} to ${total})`);
      assert((await web.events("resync")).length === 0, "a resync: the store was not trusted");
      await page.close();
    },
  },
  {
    name: "an app opened with the node down shows the stored messages and sends once it returns (offline start)",
    firefox: true,
    needsIndexedDB: true,
    async run(ctx) {
      const c = await ctx.cluster(1);
      const hashes = await c.certHashes();
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const store = `idb:syncd-offline-${ctx.tag}`;
      let page = await ctx.browser.open(ctx.pageUrl);
      let web = await PageClient.open(page, c, alice, "web", { store, hashes });
      await goSend(c, bob, conv, alice, "stored one");
      await goSend(c, bob, conv, alice, "stored two");
      await web.message(conv, "stored two");
      const persistent = await page.evaluate((id) => window.kit.storage(id), web.id);
      assert(persistent.kind === "indexeddb" && persistent.persistent, `storage ${JSON.stringify(persistent)}`);
      await page.close();
      c.kill(0);
      // The app starts with the node down: what was stored shows at once, a send is queued.
      page = await ctx.browser.open(ctx.pageUrl);
      web = await PageClient.open(page, c, alice, "web", { store, hashes });
      const shown = (await web.messages(conv)).map((m) => m.body);
      assert(JSON.stringify(shown) === JSON.stringify(["stored one", "stored two"]), `offline, the page shows ${JSON.stringify(shown)}`);
      const cmid = await web.send(conv, "written offline", bob);
      await new Promise((r) => setTimeout(r, 1500));
      assert((await web.status(cmid)).status === "sending", "the offline message is not waiting");
      assert(!(await web.events("connection")).some((e) => e.detail.includes('"connected"')), "connected while the node is down?");
      await c.startNode(0);
      try {
        await web.sent(cmid, 40_000);
      } catch (e) {
        await web.dump(ctx, "offline");
        throw e;
      }
      const entries = await waitFor("the Go device to get the offline message", async () => {
        const es = await pull(c, bob, "check");
        return es.some((e) => e.body === "written offline") ? es : undefined;
      }, 30_000);
      const n = entries.filter((e) => e.body === "written offline").length;
      assert(n === 1, `the offline message arrived ${n} times`);
      await web.message(conv, "written offline"); // and its own copy through sync
      await page.close();
    },
  },
  {
    name: "two tabs of one device: both show new messages, the follower's send is delivered once, closing the leader hands over",
    firefox: true,
    needsIndexedDB: true,
    async run(ctx) {
      const c = await ctx.cluster(1);
      const hashes = await c.certHashes();
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const store = `idb:syncd-tabs-${ctx.tag}`;
      const pageA = await ctx.browser.open(ctx.pageUrl);
      const a = await PageClient.open(pageA, c, alice, "web", { store, hashes });
      await a.hasRole("leader");
      const pageB = await ctx.browser.open(ctx.pageUrl);
      const b = await PageClient.open(pageB, c, alice, "web", { store, hashes });
      try {
        await b.hasRole("follower");
        assert((await a.transport()) === ctx.transport, "the leader's transport");
        // A message from Go: both tabs show it (B reads the shared store and hears of it).
        await goSend(c, bob, conv, alice, "to both tabs");
        await a.message(conv, "to both tabs");
        await b.message(conv, "to both tabs");
        await waitFor("the follower's entry event", async () => ((await b.bodies()).includes("to both tabs") ? true : undefined));
        // The follower sends: through the shared outbox, sent by the leader, delivered once.
        const cmid = await b.send(conv, "from the follower tab", bob);
        await b.sent(cmid);
        await a.message(conv, "from the follower tab");
        // The leader tab closes: the follower takes over from the stored cursor.
        await pageA.close();
        await b.hasRole("leader");
        await waitFor("the new leader's connection", async () => ((await b.events("transport")).length > 0 ? true : undefined));
        await goSend(c, bob, conv, alice, "after the handover");
        await b.message(conv, "after the handover");
        await b.sent(await b.send(conv, "from the new leader", bob));
        const entries: PulledEntry[] = []; // each pull prints what is new since the last one
        await waitFor("the Go device to get both", async () => {
          entries.push(...await pull(c, bob, "check")); // not "go": goSend's device has synced past them
          return entries.some((e) => e.body === "from the new leader") ? true : undefined;
        });
        for (const body of ["from the follower tab", "from the new leader"]) {
          const n = entries.filter((e) => e.body === body).length;
          assert(n === 1, `"${body}" arrived ${n} times`);
        }
        const bodies = (await b.messages(conv)).map((m) => m.body);
        const want = ["to both tabs", "from the follower tab", "after the handover", "from the new leader"];
        assert(JSON.stringify(bodies) === JSON.stringify(want), `the follower-turned-leader holds ${JSON.stringify(bodies)}`);
        assert((await b.events("superseded")).length === 0, "the tabs fought over the sync stream");
      } catch (e) {
        if (!pageA.isClosed()) await a.dump(ctx, "tab A");
        await b.dump(ctx, "tab B");
        throw e;
      }
      await pageB.close();
    },
  },
  {
    name: "a stored copy damaged behind the SDK's back is found by the digest check and refetched from the server (IndexedDB)",
    firefox: true,
    needsIndexedDB: true,
    async run(ctx) {
      const c = await ctx.cluster(1);
      const hashes = await c.certHashes();
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const store = `idb:syncd-digest-${ctx.tag}`;
      const want = ["one", "two", "three", "four", "five"];
      const page = await ctx.browser.open(ctx.pageUrl);
      let web = await PageClient.open(page, c, alice, "web", { store, hashes });
      for (const b of want) await goSend(c, bob, conv, alice, b);
      await web.message(conv, "five");
      await web.close();
      // A storage bug (or a bad backup) while the app is closed: an entry of the middle gone, another's body changed.
      const damage = await page.evaluate((name) => window.kit.damage(name, ["two"], { four: "tampered" }), store.slice(4));
      assert(damage.removed.length === 1 && damage.tampered.length === 1, `damaged ${JSON.stringify(damage)}`);
      ctx.log(`removed entry ${damage.removed[0]}, tampered with entry ${damage.tampered[0]}`);
      web = await PageClient.open(page, c, alice, "web", { store, hashes });
      // The check runs right after the resume and may repair the copy before this read: either the
      // damage shows, or the mismatch that repaired it is already on record.
      const before = (await web.messages(conv)).map((m) => m.body);
      const seen = before.includes("tampered") || (await web.events("mismatch")).length > 0;
      assert(seen, `the damage neither shows nor was found: ${JSON.stringify(before)}`);
      try {
        // After the resume, the check of the newest entries differs: reported, refetched, checked again.
        const m = await waitFor("a mismatch event", async () => (await web.events("mismatch")).at(0));
        const ev = JSON.parse(m.detail) as { sub: number; from: number; to: number; refetching: boolean };
        assert(ev.refetching && ev.sub === 0 && ev.from <= damage.removed[0]! && ev.to >= damage.tampered[0]!, `mismatch ${m.detail}`);
        await waitFor("the stored copy repaired", async () => {
          const bodies = (await web.messages(conv)).map((x) => x.body);
          return JSON.stringify(bodies) === JSON.stringify(want) ? true : undefined;
        });
        await waitFor("the check after the refetch to match", async () => ((await web.logs()).some((l) => l.includes('"outcome":"match"')) ? true : undefined));
        assert((await web.events("mismatch")).length === 1, "more than one mismatch");
        assert((await web.events("resync")).length === 0, "a resync: the damage was taken for a lost store");
        // The server counted the client's report.
        const metrics = await (await fetch(`http://${c.nodes[0]!.admin}/metrics`)).text();
        assert(/^syncd_client_digest_mismatches_total 1$/m.test(metrics), "the node did not count the reported mismatch");
        // The repaired copy is right for good: after a reload of the client, its check matches.
        await web.close();
        web = await PageClient.open(page, c, alice, "web", { store, hashes });
        await waitFor("the check after reopening to match", async () => ((await web.logs()).some((l) => l.includes('"outcome":"match"')) ? true : undefined));
        assert((await web.events("mismatch")).length === 0, "a mismatch after the repair");
        assert(JSON.stringify((await web.messages(conv)).map((x) => x.body)) === JSON.stringify(want), "the repaired copy did not last");
      } catch (e) {
        await web.dump(ctx, "damaged");
        throw e;
      }
      await page.close();
    },
  },
  {
    name: "delivery states: sent, delivered on the first of two devices, read from the other; never backwards, told once, kept across a reload (IndexedDB)",
    firefox: true,
    needsIndexedDB: true,
    async run(ctx) {
      const c = await ctx.cluster(1);
      const hashes = await c.certHashes();
      const alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`;
      const conv = directConv(alice, bob);
      const store = `idb:syncd-ticks-${ctx.tag}`;
      const pageA = await ctx.browser.open(ctx.pageUrl);
      let a = await PageClient.open(pageA, c, alice, "web", { store, hashes });
      assert((await a.transport()) === ctx.transport, "alice's transport");
      const pageB1 = await ctx.browser.open(ctx.pageUrl);
      const b1 = await PageClient.open(pageB1, c, bob, "web-1", { hashes });
      const pageB2 = await ctx.browser.open(ctx.pageUrl);
      let b2: PageClient | null = null;
      const convSeqOf = async (msgId: string): Promise<number> => (await a.messages(conv)).find((m) => m.msgId === msgId)?.convSeq ?? 0;
      try {
        // Sent, then delivered as soon as ONE of bob's devices has stored it (the server's report
        // round is 250 ms).
        const one = await a.sent(await a.send(conv, "one", bob));
        await b1.message(conv, "one");
        await waitFor("'one' delivered", async () => ((await a.steps(one)).includes("delivered") ? true : undefined));
        const seq1 = await waitFor("'one' stored by alice", async () => (await convSeqOf(one)) || undefined);
        assert((await a.statusOf(conv, seq1)) === "delivered", `'one' is ${await a.statusOf(conv, seq1)}`);
        const told = (await a.events("delivery")).map((e) => JSON.parse(e.detail) as { user: string; state: string; upTo: number });
        assert(told.some((e) => e.user === bob && e.state === "delivered" && e.upTo >= seq1), `delivery events ${JSON.stringify(told)}`);
        // bob's second device stores it too (nothing new for alice), then bob reads it there.
        b2 = await PageClient.open(pageB2, c, bob, "web-2", { hashes });
        const got = await b2.message(conv, "one");
        await b2.sent(await b2.markRead(conv, got.convSeq));
        await waitFor("'one' read", async () => ((await a.statusOf(conv, seq1)) === "read" ? true : undefined));
        await waitFor("the read step told", async () => ((await a.steps(one)).includes("read") ? true : undefined));
        const marks = await a.peerMarks(conv);
        assert(marks.read >= seq1 && marks.delivered >= marks.read, `peer marks ${JSON.stringify(marks)}`);
        // The server's counts and names (a direct conversation answers from its two members).
        const [count] = await a.receipts(conv, [seq1]);
        assert(count?.convSeq === seq1 && count.members === 2 && count.delivered >= 1 && count.read >= 1, `receipts ${JSON.stringify(count)}`);
        assert((await a.readers(conv, seq1, "read")).includes(bob), "bob is not among the readers");
        assert((await a.readers(conv, seq1, "delivered")).includes(bob), "bob is not among those who have it delivered");
        // With every device of bob closed, a message stays sent: delivered means a device stored it.
        await b1.close();
        await b2.close();
        const two = await a.sent(await a.send(conv, "two", bob));
        const seq2 = await waitFor("'two' stored by alice", async () => (await convSeqOf(two)) || undefined);
        await new Promise((r) => setTimeout(r, 1500)); // six report rounds
        assert((await a.statusOf(conv, seq2)) === "sent", `'two' is ${await a.statusOf(conv, seq2)} with bob's devices closed`);
        assert((await a.steps(two)).length === 0, "a step for 'two' with bob's devices closed");
        // bob's first device comes back (a fresh memory store: it stores the whole log again).
        const b1again = await PageClient.open(pageB1, c, bob, "web-1", { hashes });
        await b1again.message(conv, "two");
        await waitFor("'two' delivered", async () => ((await a.steps(two)).includes("delivered") ? true : undefined));
        await new Promise((r) => setTimeout(r, 1000));
        // Each step once, in order, never backwards: the replay of bob's log moved no mark back.
        assert(JSON.stringify(await a.steps(one)) === JSON.stringify(["delivered", "read"]), `'one' went ${JSON.stringify(await a.steps(one))}`);
        assert(JSON.stringify(await a.steps(two)) === JSON.stringify(["delivered"]), `'two' went ${JSON.stringify(await a.steps(two))}`);
        // The marks were stored with the entries: after a reload the statuses are there at once,
        // and nothing is told again.
        await pageA.reload();
        await pageA.waitForFunction(() => "kit" in window, { timeout: 15_000 });
        a = await PageClient.open(pageA, c, alice, "web", { store, hashes });
        assert((await a.statusOf(conv, seq1)) === "read" && (await a.statusOf(conv, seq2)) === "delivered",
          `after the reload: ${await a.statusOf(conv, seq1)}, ${await a.statusOf(conv, seq2)}`);
        await waitFor("alice's synced event", async () => ((await a.events("synced")).length > 0 ? true : undefined));
        await new Promise((r) => setTimeout(r, 1000));
        assert((await a.events("messageStatus")).length === 0, `told again after the reload: ${JSON.stringify(await a.events("messageStatus"))}`);
      } catch (e) {
        await a.dump(ctx, "alice");
        await b1.dump(ctx, "bob web-1").catch(() => undefined);
        throw e;
      }
      for (const p of [pageA, pageB1, pageB2]) if (!p.isClosed()) await p.close();
    },
  },
  {
    name: "a large group followed as a source: each message once, in order; a reload resumes from the stored source cursor; the user's receipt from another device shows as read (IndexedDB)",
    firefox: true,
    needsIndexedDB: true,
    async run(ctx) {
      // A group with more than 3 members is large: its entries are not copied into the members'
      // logs, each member's device follows the group's conversation log as a source (PROTOCOL §6).
      const c = await ctx.cluster(1, ["-large-group-threshold", "3"]);
      const hashes = await c.certHashes();
      const owner = `owner-${ctx.tag}`, alice = `alice-${ctx.tag}`, bob = `bob-${ctx.tag}`, carol = `carol-${ctx.tag}`;
      const group = `g:big-${ctx.tag}`;
      const store = `idb:syncd-source-${ctx.tag}`;
      type EntryEvent = { entry: { seq: number; kind: number; convSeq: number; conv: string; body: string; upTo: number; source: boolean }; sub: number; source: string; duplicate: boolean };
      const entryEvents = async (pc: PageClient): Promise<EntryEvent[]> => (await pc.events("entry")).map((e) => JSON.parse(e.detail) as EntryEvent);
      const ownerSend = async (body: string): Promise<number> => (JSON.parse(await c.syncctl(owner, "go", ["send", "-conv", group, "-body", body])) as { conv_seq: number }).conv_seq;
      const page = await ctx.browser.open(ctx.pageUrl);
      let web = await PageClient.open(page, c, alice, "web", { store, hashes });
      try {
        assert((await web.transport()) === ctx.transport, "alice's transport");
        // Three members: a group like any other, copied into alice's log.
        await c.syncctl(owner, "go", ["group", "create", "-conv", group, "-members", `${alice},${bob}`]);
        await ownerSend("while small");
        await web.message(group, "while small");
        // The fourth member makes it large: the member_add that did (source: true) is in every member's log.
        await c.syncctl(owner, "go", ["group", "add", "-conv", group, "-members", carol]);
        const large = await waitFor("the member_add that made the group large, in alice's log", async () =>
          (await entryEvents(web)).find((e) => e.entry.conv === group && e.entry.kind === 5 && e.entry.source));
        assert(large.source === "", `the following's start came from ${JSON.stringify(large.source)}, not the user log`);
        const sent: number[] = [];
        for (const b of ["big 1", "big 2", "big 3"]) sent.push(await ownerSend(b));
        await web.message(group, "big 3");
        const before = (await entryEvents(web)).filter((e) => e.source === group);
        const seqs = before.map((e) => e.entry.seq);
        assert(before.length > 0 && before.every((e) => e.sub === 0 && e.entry.seq === e.entry.convSeq), `source entries ${JSON.stringify(seqs)}`);
        assert(seqs.every((s, i) => i === 0 || s === seqs[i - 1]! + 1), `the source's entries are not contiguous: ${JSON.stringify(seqs)}`);
        const bodiesBefore = before.filter((e) => e.entry.kind === 1).map((e) => e.entry.body);
        assert(JSON.stringify(bodiesBefore) === JSON.stringify(["big 1", "big 2", "big 3"]), `from the source: ${JSON.stringify(bodiesBefore)}`);
        assert(JSON.stringify(before.filter((e) => e.entry.kind === 1).map((e) => e.entry.convSeq)) === JSON.stringify(sent), `conv_seqs ${JSON.stringify(seqs)}, sent ${JSON.stringify(sent)}`);
        assert(!(await entryEvents(web)).some((e) => e.source === "" && e.entry.kind === 1 && e.entry.body.startsWith("big")), "a large group's message came in the user log");
        // The stored source cursor is the last conv_seq stored: the page reloads, the group goes on meanwhile.
        const cursor = seqs.at(-1)!;
        await page.reload();
        await page.waitForFunction(() => "kit" in window, { timeout: 15_000 });
        for (const b of ["big 4", "big 5"]) sent.push(await ownerSend(b));
        web = await PageClient.open(page, c, alice, "web", { store, hashes });
        await web.message(group, "big 5");
        // Caught up: the user log and the source (whose heartbeats say its head) both.
        await waitFor("alice's synced event after the reload", async () => ((await web.events("synced")).length > 0 ? true : undefined));
        const started = (await web.logs()).find((l) => l.includes("sync stream started"));
        assert(started?.includes(`${group}@`) && started.includes(`:${cursor}`), `the first SyncStart after the reload: ${started ?? "not logged"}; want the source's cursor at ${cursor}`);
        const after = (await entryEvents(web)).filter((e) => e.source === group);
        assert(after[0]?.entry.seq === cursor + 1, `after the reload the source resumed at ${after[0]?.entry.seq}, want ${cursor + 1}`);
        const bodiesAfter = after.filter((e) => e.entry.kind === 1).map((e) => e.entry.body);
        assert(JSON.stringify(bodiesAfter) === JSON.stringify(["big 4", "big 5"]), `after the reload, from the source: ${JSON.stringify(bodiesAfter)}`);
        assert(after.every((e) => !e.duplicate), "an entry came twice");
        assert((await web.events("gap")).length === 0 && (await web.events("rebase")).length === 0, `gaps or rebases: ${JSON.stringify([...await web.events("gap"), ...await web.events("rebase")])}`);
        const shown = (await web.messages(group)).map((m) => m.body);
        const want = ["while small", "big 1", "big 2", "big 3", "big 4", "big 5"];
        assert(JSON.stringify(shown) === JSON.stringify(want), `alice's copy of the group: ${JSON.stringify(shown)}`);
        // Alice reads the group on another device: her receipt (no conv_seq in a large group) comes in her log.
        const last = sent.at(-1)!;
        await c.syncctl(alice, "go", ["read", "-conv", group, "-up-to", String(last)]);
        await waitFor("alice's read mark from her other device", async () =>
          ((await page.evaluate((id, g, u) => window.kit.readMark(id, g, u), web.id, group, alice)) === last ? true : undefined));
        const receipt = (await entryEvents(web)).find((e) => e.entry.kind === 2 && e.entry.conv === group);
        assert(receipt?.source === "" && receipt.entry.convSeq === 0 && receipt.entry.upTo === last, `the receipt: ${JSON.stringify(receipt)}`);
      } catch (e) {
        await web.dump(ctx, "alice");
        throw e;
      }
      await page.close();
    },
  },
];
