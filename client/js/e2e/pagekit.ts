// Runs in the test page (served as /kit/pagekit.js): opens clients of the SDK, records their
// events, and answers the harness in plain values (no bigint, no Uint8Array) that survive
// puppeteer's serialization.

import * as syncd from "@syncd/client";

/** What the harness passes to open a client. */
export interface OpenArgs {
  device: string;
  token: string;
  /** One per node: its web address (host:port) and the hashes to pin. */
  nodes: { web: string; hashes: string[] }[];
  /** "memory", or "idb:<name>" for an IndexedDB store of that name (when the SDK has one). */
  store: string;
  /** Re-fetches a token from the harness (exposed function) for Refresh and reconnects. */
  refreshTokens?: boolean;
}

/** A sender of {@link kit.flood}: its client's arguments, its user and the peer it writes to. */
export interface FloodArgs {
  senders: { args: OpenArgs; user: string }[];
  peer: string;
  perSender: number;
}

/** A message as the harness sees it. */
export interface PlainMessage {
  convSeq: number;
  msgId: string;
  sender: string;
  body: string;
  recalled: boolean;
}

interface Handle {
  client: syncd.Client;
  events: { name: string; detail: string }[];
  bodies: string[]; // bodies of message entries as they arrived (duplicates included, flagged)
  logs: string[]; // what the SDK logged (debug included), for the harness's failure reports
  initialCursor: { epoch: string; pos: number }[]; // the stored cursor the client opened with
}

const clients = new Map<string, Handle>();
let next = 0;
const enc = new TextEncoder();
const dec = new TextDecoder();

function hexBytes(h: string): Uint8Array {
  const b = new Uint8Array(h.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(h.slice(2 * i, 2 * i + 2), 16);
  return b;
}

async function makeStore(spec: string): Promise<syncd.Store> {
  if (spec === "memory") return new syncd.MemoryStore();
  if (spec.startsWith("idb:")) return syncd.IndexedDBStore.open(spec.slice(4));
  throw new Error(`store ${spec} is not available in this SDK build`);
}

declare global {
  interface Window {
    kit: typeof kit;
    bench: typeof bench;
    harnessToken?: (device: string) => Promise<string>;
  }
}

const kit = {
  /** Opens a client; returns its handle id. */
  async open(a: OpenArgs): Promise<string> {
    const id = `c${++next}`;
    const endpoints = a.nodes.map((n) => syncd.endpointOf(n.web, n.hashes.map(hexBytes)));
    const logs: string[] = [];
    const logger: syncd.Logger = (level, msg, data) => {
      logs.push(`${new Date().toISOString().slice(11, 23)} ${level} ${msg}${data ? ` ${JSON.stringify(data)}` : ""}`);
      if (logs.length > 500) logs.shift();
    };
    const cfg: syncd.ClientConfig = { endpoints, device: a.device, token: a.token, store: await makeStore(a.store), logger };
    if (a.refreshTokens) {
      cfg.tokenProvider = () => window.harnessToken!(a.device);
    }
    const client = await syncd.Client.open(cfg);
    const h: Handle = { client, events: [], bodies: [], logs, initialCursor: client.cursor().map((c) => ({ epoch: c.epoch.toString(), pos: c.pos })) };
    const names: syncd.ClientEventName[] = ["entry", "status", "delivery", "messageStatus", "synced", "stale", "gap", "mismatch", "rebase", "epoch", "superseded", "failed", "transport", "connection", "storage", "resync", "role", "network"];
    for (const name of names) {
      client.on(name, (e: unknown) => {
        h.events.push({ name, detail: JSON.stringify(e, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v instanceof Uint8Array ? dec.decode(v) : v)) });
        if (name === "entry") {
          const ev = e as syncd.ClientEvents["entry"];
          if (ev.entry.kind === 1) h.bodies.push((ev.duplicate ? "dup:" : "") + dec.decode(ev.entry.body ?? new Uint8Array()));
        }
      });
    }
    clients.set(id, h);
    return id;
  },

  /** Sends a message; resolves with its cmid once queued (the outbox holds it). */
  async send(id: string, conv: string, body: string, peer?: string): Promise<string> {
    const item = await clients.get(id)!.client.send(conv, enc.encode(body), peer ? { peer } : {});
    return item.cmid;
  },

  async markRead(id: string, conv: string, convSeq: number): Promise<string> {
    return (await clients.get(id)!.client.markRead(conv, convSeq)).cmid;
  },

  async recall(id: string, conv: string, msgId: string): Promise<string> {
    return (await clients.get(id)!.client.recall(conv, msgId)).cmid;
  },

  /** The status of an outbox item ("sending", "sent", "failed", or "gone"), and its msg_id. */
  status(id: string, cmid: string): { status: string; msgId: string } {
    const it = clients.get(id)!.client.outboxItem(cmid);
    return it ? { status: it.status, msgId: it.ack?.msgId ?? "" } : { status: "gone", msgId: "" };
  },

  /** The stored messages of a conversation. */
  async messages(id: string, conv: string): Promise<PlainMessage[]> {
    return (await clients.get(id)!.client.messages(conv)).map((m) => ({
      convSeq: m.convSeq, msgId: m.msgId, sender: m.sender, body: dec.decode(m.body), recalled: m.recalled,
    }));
  },

  async readMark(id: string, conv: string, user: string): Promise<number> {
    return clients.get(id)!.client.readMark(conv, user);
  },

  /** The stored status of message convSeq of conv ("sent", "delivered", "read"). */
  async statusOf(id: string, conv: string, convSeq: number): Promise<string> {
    return clients.get(id)!.client.statusOf(conv, convSeq);
  },

  /** The highest marks of the other members of conv, as stored. */
  async peerMarks(id: string, conv: string): Promise<{ delivered: number; read: number }> {
    return clients.get(id)!.client.peerMarks(conv);
  },

  /** The server's delivered and read counts of seqs of conv (Receipts). */
  async receipts(id: string, conv: string, seqs: number[]): Promise<syncd.ReceiptCount[]> {
    return clients.get(id)!.client.receipts(conv, seqs);
  },

  /** Every member with message convSeq of conv in state (Readers, all pages). */
  async readers(id: string, conv: string, convSeq: number, state: "delivered" | "read"): Promise<string[]> {
    const c = clients.get(id)!.client;
    const users: string[] = [];
    for (let after = "", more = true; more; ) {
      const p = await c.readers(conv, convSeq, state, { after });
      users.push(...p.users);
      ({ next: after, more } = p);
    }
    return users;
  },

  /** Events of the client so far, optionally of one name. */
  events(id: string, name?: string): { name: string; detail: string }[] {
    return clients.get(id)!.events.filter((e) => !name || e.name === name);
  },

  /** Message bodies in the order their entries arrived ("dup:" marks a duplicate the SDK dropped). */
  bodies(id: string): string[] {
    return clients.get(id)!.bodies;
  },

  /** What the SDK logged, oldest first (the last 500 lines). */
  logs(id: string): string[] {
    return clients.get(id)!.logs;
  },

  /** The stored cursor the client opened with (before any sync). */
  initialCursor(id: string): { epoch: string; pos: number }[] {
    return clients.get(id)!.initialCursor;
  },

  /** The tab's role among the device's tabs ("leader", "follower", "single"). */
  role(id: string): string {
    return clients.get(id)!.client.role;
  },

  /** What the store is (kind, persistent, persisted). */
  storage(id: string): syncd.StoreInfo {
    return clients.get(id)!.client.storage;
  },

  /**
   * Makes a backlog: each sender (a client of its own user, memory store) sends perSender
   * messages "<user> <i>" to peer, one conversation per sender; resolves once every one is sent.
   */
  async flood(a: FloodArgs): Promise<number> {
    let sent = 0;
    await Promise.all(a.senders.map(async ({ args, user }) => {
      const c = await syncd.Client.open({ endpoints: args.nodes.map((n) => syncd.endpointOf(n.web, n.hashes.map(hexBytes))), device: args.device, token: args.token, store: new syncd.MemoryStore(), logger: () => undefined });
      const conv = await syncd.directConv(user, a.peer);
      const items: string[] = [];
      for (let i = 1; i <= a.perSender; i++) items.push((await c.send(conv, enc.encode(`${user} ${i}`), { peer: a.peer })).cmid);
      await new Promise<void>((ok, fail) => {
        const check = (): void => {
          const left = items.filter((cmid) => c.outboxItem(cmid)?.status !== "sent");
          if (items.some((cmid) => c.outboxItem(cmid)?.status === "failed")) fail(new Error(`${user}: a flood message failed`));
          else if (left.length === 0) ok();
          else setTimeout(check, 50);
        };
        check();
      });
      sent += items.length;
      await c.close();
    }));
    return sent;
  },

  /**
   * Damages the IndexedDB database `name` of an SDK store behind the SDK's back, as a storage bug
   * or a bad backup would (close the client using it first): the stored entries of the user log
   * whose message body is one of `remove` are deleted; those whose body is a key of `tamper` get
   * the body it maps to, in the stored entry and in the message view alike. Knows the store's
   * layout (src/idbstore.ts: `entries` keyed [sub, seq], `view` keyed [conv, conv_seq]).
   * Resolves with the positions changed.
   */
  async damage(name: string, remove: string[], tamper: Record<string, string>): Promise<{ removed: number[]; tampered: number[] }> {
    const db = await new Promise<IDBDatabase>((ok, fail) => {
      const r = indexedDB.open(name);
      r.onsuccess = () => ok(r.result);
      r.onerror = () => fail(r.error ?? new Error("open"));
    });
    const out = { removed: [] as number[], tampered: [] as number[] };
    try {
      const tx = db.transaction(["entries", "view"], "readwrite");
      const committed = new Promise<void>((ok, fail) => {
        tx.oncomplete = () => ok();
        tx.onabort = () => fail(tx.error ?? new Error("aborted"));
      });
      const entries = tx.objectStore("entries");
      const view = tx.objectStore("view");
      await new Promise<void>((ok, fail) => {
        const cur = entries.openCursor();
        cur.onerror = () => fail(cur.error ?? new Error("cursor"));
        cur.onsuccess = () => {
          const c = cur.result;
          if (!c) return ok();
          const e = c.value as syncd.Entry;
          const text = dec.decode(e.body);
          if (e.kind === 1 && remove.includes(text)) {
            c.delete();
            out.removed.push(e.seq);
          } else if (e.kind === 1 && text in tamper) {
            const body = enc.encode(tamper[text]!);
            c.update({ ...e, body });
            const row = view.get([e.conv, e.convSeq]);
            row.onsuccess = () => {
              const m = row.result as { msgId: string; body: Uint8Array } | undefined;
              if (m?.msgId === e.msgId) view.put({ ...m, body }, [e.conv, e.convSeq]);
            };
            out.tampered.push(e.seq);
          }
          c.continue();
        };
      });
      await committed;
    } finally {
      db.close();
    }
    return out;
  },

  /** The client's vector cursor as strings. */
  cursor(id: string): { epoch: string; pos: number }[] {
    return clients.get(id)!.client.cursor().map((c) => ({ epoch: c.epoch.toString(), pos: c.pos }));
  },

  async close(id: string): Promise<void> {
    await clients.get(id)?.client.close();
    clients.delete(id);
  },
};

/** The page's clock in Unix nanoseconds, sub-millisecond where the browser allows. */
function nowNs(): number {
  return (performance.timeOrigin + performance.now()) * 1e6;
}

/** The pairs of {@link bench.push}: sender k sends to receiverUsers[k]. */
export interface PushArgs {
  senders: OpenArgs[];
  senderUsers: string[];
  receivers: OpenArgs[];
  receiverUsers: string[];
  intervalMs: number;
  durationMs: number;
}

/** Measurements for e2e/bench.ts (docs/BENCHMARKS.md, "Browsers"). */
const bench = {
  /** Opens a client of a user whose log holds head entries and times its catch-up (memory store). */
  async catchUp(a: OpenArgs, head: number): Promise<{ ms: number; entries: number; transport: string }> {
    const start = performance.now();
    const endpoints = a.nodes.map((n) => syncd.endpointOf(n.web, n.hashes.map(hexBytes)));
    let transport = "";
    let entries = 0;
    const client = await syncd.Client.open({ endpoints, device: a.device, token: a.token, store: new syncd.MemoryStore() });
    client.on("transport", (e) => { transport = e.kind; });
    client.on("entry", () => { entries++; });
    await new Promise<void>((ok) => {
      const off = client.on("synced", (e) => {
        if (e.head >= head) {
          off();
          ok();
        }
      });
    });
    const ms = performance.now() - start;
    benchClients.push(client); // kept open: the harness reads the heap with the log in memory
    return { ms, entries, transport };
  },

  /**
   * Live push: pairs of clients (sender k → receiver k) in this page; each sender sends every
   * intervalMs for durationMs; returns the append→arrival latencies in ms of the receivers' entries
   * (server append time to the page's clock: one host).
   */
  async push(p: PushArgs): Promise<{ latencies: number[]; sent: number }> {
    const { senders, receivers, senderUsers, receiverUsers: peers, intervalMs, durationMs } = p;
    const open = (a: OpenArgs) => syncd.Client.open({ endpoints: a.nodes.map((n) => syncd.endpointOf(n.web, n.hashes.map(hexBytes))),
      device: a.device, token: a.token, store: new syncd.MemoryStore() });
    const latencies: number[] = [];
    const rcv = await Promise.all(receivers.map(open));
    const snd = await Promise.all(senders.map(open));
    await Promise.all(rcv.map((c) => new Promise<void>((ok) => { const off = c.on("synced", () => { off(); ok(); }); })));
    let measuring = false;
    for (const c of rcv) {
      c.on("entry", (e) => {
        if (measuring && !e.duplicate && e.entry.kind === 1) latencies.push((nowNs() - Number(e.entry.time)) / 1e6);
      });
    }
    // Each sender's first send creates its conversation: sent and settled before timing starts.
    const convs = await Promise.all(snd.map((_, k) => syncd.directConv(senderUsers[k]!, peers[k]!)));
    await Promise.all(snd.map((c, k) => c.send(convs[k]!, enc.encode("hello"), { peer: peers[k]! })));
    await new Promise((r) => setTimeout(r, 1000));
    measuring = true;
    let sent = 0;
    const until = performance.now() + durationMs;
    await Promise.all(snd.map(async (c, k) => {
      for (let next = performance.now(); next < until; next += intervalMs) {
        await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
        await c.send(convs[k]!, enc.encode("x".repeat(256)));
        sent++;
      }
    }));
    await new Promise((r) => setTimeout(r, 2000));
    measuring = false;
    await Promise.all([...snd, ...rcv].map((c) => c.close()));
    return { latencies, sent };
  },

  async closeAll(): Promise<void> {
    await Promise.all(benchClients.splice(0).map((c) => c.close()));
  },
};
const benchClients: syncd.Client[] = [];

window.kit = kit;
window.bench = bench;
window.dispatchEvent(new Event("kit-ready"));
