// The client (§8): opens from its store with no connection (stored messages readable, sends
// queued), keeps a connection up with the stepped backoff across the cluster's nodes, runs the
// outbox and the sync stream on it, keeps the token fresh, checks the head, and checks what it
// stored against the server (digests, §8.7).

import { Code, ProtoError } from "./codes.js";
import { Checker } from "./check.js";
import { ConvKind, FrameType, Kind, Limits, PROTO_VERSION, REVISION_RECEIPTS, ReportKind, type ConvInfo, type HistoryResult, type Member, type PartialOf, type Query, type ReceiptCount, type Response, type SourceCursor, type SubCursor } from "./frames.js";
import { realClock, sleep, type Clock, type TimerHandle } from "./clock.js";
import { Emitter, messageChangeOf, type ClientEventName, type ClientEvents } from "./events.js";
import { DEFAULT_RETRY_MS, Outbox } from "./outbox.js";
import { CLOSE_GRACE_MS, Session, closeError, type Logger } from "./session.js";
import { SyncRunner, type SyncEnd } from "./sync.js";
import { hasSources, peakExcept, statusFrom, zeroPeaks, type ConvPeaks, type DeliveryState, type MarksChange, type Message, type MessageStatus, type OutboxItem, type Store, type StoreInfo, type UserMarks } from "./store.js";
import { Tabs, tabsAvailable, type TabMessage } from "./tabs.js";
import { Connector, type Endpoint } from "./transport/connect.js";
import { validId, validReaction } from "./ids.js";

/** How a Client is set up. Only `endpoints`, `device`, `store` and a token (or tokenProvider) are required. */
export interface ClientConfig {
  /** The cluster's nodes, tried in turn (failover, §8.6); see {@link endpointOf}. */
  endpoints: readonly Endpoint[];
  /** This device's id; the token must name it. */
  device: string;
  /** The device's token (§2.2), opaque. Needed unless tokenProvider is set. */
  token?: string;
  /**
   * Gets a fresh token from the app's backend: before the first connection when `token` is
   * empty, ahead of each expiry the server announces (then presented with Refresh, so the session
   * outlives its token), and before reconnecting when the token was refused or runs out.
   */
  tokenProvider?: () => Promise<string>;
  /** Local storage (entries, cursor, outbox). */
  store: Store;
  /** Free text for the server's logs (≤ 128 printable ASCII). Default "syncd-js/0.1". */
  clientVersion?: string;
  /** Waits before each retry of a mutation (+0–50 % jitter); after the last, the item fails. Default 1 s, 3 s, 7 s, 15 s, 30 s. */
  retryScheduleMs?: readonly number[];
  /** Bounds one request, and Hello. Default 10 s. */
  requestTimeoutMs?: number;
  /** Head check period (§8.5; ±20 %); at least twice per request_idle_ms. Default 2 min. */
  headCheckMs?: number;
  /** How long a Stale node is kept before moving to another endpoint (with several). Default 5 s; ≤ 0 never. */
  staleFailoverMs?: number;
  /** SyncStart.ceiling: rebase instead of replaying more than this many entries. Default 0 (always replay). */
  ceiling?: number;
  /** Chooses and dials transports (shares its WebTransport failure memory across reconnects). */
  connector?: Connector;
  /** Time and jitter (tests use a fake one). */
  clock?: Clock;
  /** Where the SDK logs what it handled by itself. Default: nothing below warn, to the console. */
  logger?: Logger;
  /** Start connecting at open. Default true. */
  autoConnect?: boolean;
  /**
   * Listen to the page's lifecycle (default true where `window` exists): `online` reconnects at
   * once and forgets WebTransport failures (a new network), `offline` and `visibilitychange` /
   * `pageshow` check the connection at once (a laptop that slept, a tab that was frozen).
   */
  lifecycle?: boolean;
  /** How long a liveness probe may go unanswered before the connection is declared dead. Default 5 s. */
  probeTimeoutMs?: number;
  /**
   * Coordinate with the other tabs of this device that use the same store (default true where
   * it can work: a shared store — IndexedDB — and Web Locks and BroadcastChannel): one tab, the
   * leader, holds the connection; the others follow through the store (`role` event). False:
   * every client connects on its own (two tabs then supersede each other's sync stream).
   */
  tabs?: boolean;
}

/** Thrown by queries while the client has no connection. */
export class OfflineError extends Error {
  constructor() {
    super("syncd: not connected; retry when the connection is back");
    this.name = "OfflineError";
  }
}

const defaultLogger: Logger = (level, msg, data) => {
  if (level === "warn") console.warn(`syncd: ${msg}`, data ?? "");
  if (level === "error") console.error(`syncd: ${msg}`, data ?? "");
};

/** Failed attempts in a row without sync progress after which `failed` is emitted (as the Go SDK). */
export const SYNC_FAILURE_THRESHOLD = 3;
/** The widest range of conv_seqs read from the store at once to tell statuses. */
const STATUS_PAGE = 1000;

/** A page of {@link Client.readers}. */
export interface ReadersPage {
  /** Members with the entry in the state asked, ascending. */
  users: string[];
  /** The `after` of the next page: the last member id the server looked at. */
  next: string;
  /** Whether members remain to be looked at (a page may be empty while more is true). */
  more: boolean;
}

/** The Readers.state of each delivery state: the kind of entry that moves its mark. */
const readerKinds: Record<DeliveryState, number> = { delivered: Kind.Delivered, read: Kind.Receipt };

/** A connection up this long resets the reconnect backoff (§8.6). */
const STABLE_AFTER_MS = 10_000;
/** Unavailable answers in a row that make the client leave a node (§8.3.4). */
const UNAVAILABLE_MOVE_ON = 2;
/** The longest wait before refreshing a token ahead of its expiry. */
const MAX_REFRESH_LEAD_MS = 5 * 60_000;


function newCmid(): string {
  const c = globalThis.crypto;
  if (typeof c.randomUUID === "function") return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/**
 * The reconnect schedule of §8.6: after the n-th failure in a row, min(30 s, 500 ms × 2^n) plus
 * 0–50 % jitter, never less than the server's retry-after; it starts over once a connection has
 * stayed up for 10 s.
 */
export class Backoff {
  private backoff = 0;
  constructor(private readonly random: () => number) {}

  /** A failed attempt: the wait before the next one. */
  failed(retryAfterMs: number): number {
    this.backoff = Math.min(Math.max(2 * this.backoff, 500), 30_000);
    this.backoff = Math.max(this.backoff, retryAfterMs);
    return this.backoff + Math.floor(this.random() * (this.backoff / 2));
  }

  /** Starts over (a new network, the user came back): the next wait is the shortest. */
  reset(): void {
    this.backoff = 0;
  }

  /** A connection that was up for upMs ended: after a stable one only the retry-after is waited. */
  ended(upMs: number, retryAfterMs: number): number {
    if (upMs >= STABLE_AFTER_MS) {
      this.backoff = 0;
      return retryAfterMs;
    }
    return this.failed(retryAfterMs);
  }
}

/**
 * A device's client: durable outbox with bounded retries, gap-free sync of the user's log into
 * the store, reconnects by itself. Open it with {@link Client.open}.
 */
export class Client {
  private readonly emitter: Emitter;
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly connector: Connector;
  private readonly outbox: Outbox;
  private readonly checker: Checker;
  /** Per sub-log ("sub:N") or source ("source:conv"), the gap last reported ("epoch:from"): one Report per incident, not per retry (§8.7). */
  private readonly gapsReported = new Map<string, string>();
  private readonly closing = new AbortController();
  private cursors: SubCursor[] = [{ epoch: 0n, pos: 0 }];
  /** The mirror of the store's source cursors (revision 6), by conversation id: updated by the sync runner after each commit. */
  private readonly sources = new Map<string, SubCursor>();
  private session: Session | null = null;
  private runner: SyncRunner | null = null;
  private loop: Promise<void> | null = null;
  private tokenCur: string;
  private tokenExpires = 0; // ms; 0 = unknown
  private tokenRefused = false;
  private maxBody: number = Limits.maxBody;
  private userId = "";
  private readonly backoff: Backoff;
  /** Cuts the current wait between connection attempts short (set while waiting). */
  private wake: (() => void) | null = null;
  private notBefore = 0; // the server's retry-after: no wake-up dials before it
  private unlisten: (() => void) | null = null;
  private tabs: Tabs | null = null;
  private roleNow: "leader" | "follower" | "single" = "single";

  private constructor(private readonly cfg: ClientConfig) {
    if (cfg.endpoints.length === 0) throw new Error("syncd: ClientConfig.endpoints is empty");
    if (!validId(cfg.device)) throw new Error("syncd: ClientConfig.device is not a valid id");
    if (!cfg.token && !cfg.tokenProvider) throw new Error("syncd: ClientConfig needs token or tokenProvider");
    this.clock = cfg.clock ?? realClock;
    this.log = cfg.logger ?? defaultLogger;
    this.emitter = new Emitter((err) => {
      this.log("error", "an event listener threw", { err: String(err) });
    });
    this.connector = cfg.connector ?? new Connector();
    this.backoff = new Backoff(() => this.clock.random());
    this.tokenCur = cfg.token ?? "";
    this.checker = new Checker(cfg.store, () => this.cursors, {
      mismatch: (r) => {
        this.emitter.emit("mismatch", r);
      },
      rewound: () => {
        this.postCursors();
      },
    }, this.log);
    this.outbox = new Outbox(cfg.store, this.clock, cfg.retryScheduleMs ?? DEFAULT_RETRY_MS, {
      status: (item, error) => {
        this.emitter.emit("status", { item, error });
      },
      unavailable: (count) => {
        if (count >= UNAVAILABLE_MOVE_ON && this.cfg.endpoints.length > 1) this.moveOn?.("the node answered unavailable twice in a row");
      },
      changed: (cmid) => {
        this.tabs?.post({ t: "outbox", cmid });
      },
    }, this.log);
  }

  /**
   * Opens a client from its store: stored messages are readable and sends are queued at once,
   * with no connection (offline start). Connects in the background unless `autoConnect` is false.
   */
  static async open(cfg: ClientConfig): Promise<Client> {
    const c = new Client(cfg);
    const snap = await cfg.store.load();
    c.cursors = snap.cursors.length > 0 ? snap.cursors : [{ epoch: 0n, pos: 0 }];
    c.setSources(snap.sources ?? []);
    c.outbox.load(snap.outbox);
    cfg.store.onReset?.((reason) => {
      void c.storeLost(reason);
    });
    cfg.store.onMarks?.((changes) => {
      c.marksMoved(changes);
    });
    // Told after open resolves, so that listeners bound right after `await Client.open` hear it.
    c.clock.setTimeout(() => {
      if (c.isClosing()) return;
      c.emitter.emit("storage", c.storage);
      if (snap.reset !== undefined) c.emitter.emit("resync", { reason: snap.reset });
      c.announced = true;
      c.emitRole();
    }, 0);
    const info = cfg.store.info?.();
    if ((cfg.tabs ?? true) && info?.kind === "indexeddb" && tabsAvailable()) {
      c.tabs = new Tabs(`syncd:${info.name ?? ""}:${cfg.device}`, (m) => {
        c.fromTab(m);
      });
      c.roleNow = "follower"; // until the lock says otherwise
    }
    if (cfg.lifecycle ?? true) c.listenToPage();
    if (cfg.autoConnect ?? true) c.start();
    return c;
  }

  /** What the store is (see {@link StoreInfo}): `persistent` false means nothing survives a reload. */
  get storage(): StoreInfo {
    return this.cfg.store.info?.() ?? { kind: "indexeddb", persistent: true, persisted: null };
  }

  /** This tab's part among the device's tabs (see the `role` event). */
  get role(): "leader" | "follower" | "single" {
    return this.roleNow;
  }

  /** The store found its database lost while the client ran: resync from the server, keep the outbox. */
  private async storeLost(reason: string): Promise<void> {
    if (this.isClosing()) return;
    this.log("warn", "the local store was lost: resyncing from the server", { reason });
    this.emitter.emit("resync", { reason });
    try {
      const snap = await this.cfg.store.load();
      // In place: the running sync stream holds this array.
      this.cursors.splice(0, this.cursors.length, ...(snap.cursors.length > 0 ? snap.cursors : [{ epoch: 0n, pos: 0 }]));
      this.setSources(snap.sources ?? []);
      await this.outbox.rewrite();
    } catch (e) {
      this.log("error", "cannot reload the store after a loss", { err: String(e) });
    }
    this.runner?.restart("the local store was reset");
    this.postCursors();
  }

  /** Replaces the mirror of the sources' cursors (in place: the running sync stream holds it). */
  private setSources(sources: readonly SourceCursor[]): void {
    this.sources.clear();
    for (const c of sources) this.sources.set(c.conv, { epoch: c.epoch, pos: c.pos });
  }

  /** Tells the other tabs that the cursors moved without entries. */
  private postCursors(): void {
    this.tabs?.post({ t: "cursor", cursors: this.cursor(), sources: this.sourceCursors() });
  }

  /** Becomes the tab that holds the connection: from the stored cursor and outbox, which the previous leader kept. */
  private async lead(): Promise<void> {
    if (this.isClosing()) return;
    const wasFollowing = this.followed;
    this.roleNow = "leader";
    this.emitRole();
    if (wasFollowing) {
      // The previous leader kept the store: its cursor and outbox are where this tab starts.
      try {
        const snap = await this.cfg.store.load();
        this.cursors.splice(0, this.cursors.length, ...(snap.cursors.length > 0 ? snap.cursors : [{ epoch: 0n, pos: 0 }]));
        this.setSources(snap.sources ?? []);
        for (const it of snap.outbox) this.outbox.adopt(it.cmid, it);
      } catch (e) {
        this.log("error", "cannot reload the store to lead", { err: String(e) });
      }
    }
    if (this.isClosing()) return;
    this.tabs?.post({ t: "leader" });
    this.loop ??= this.run();
  }

  /** News from another tab of the device. */
  private fromTab(m: TabMessage): void {
    if (this.isClosing()) return;
    switch (m.t) {
      case "outbox": {
        const store = this.cfg.store;
        if (!store.getOutbox) return;
        void store.getOutbox(m.cmid).then((it) => {
          this.outbox.adopt(m.cmid, it);
        }, (e: unknown) => {
          this.log("warn", "cannot read an outbox item another tab wrote", { err: String(e) });
        });
        return;
      }
      case "entries": {
        if (this.roleNow === "leader") return;
        const last = m.entries[m.entries.length - 1];
        if (last && m.source !== "") {
          this.sources.set(m.source, { epoch: m.epoch, pos: last.seq });
        } else if (last) {
          while (this.cursors.length <= m.sub) this.cursors.push({ epoch: 0n, pos: 0 });
          this.cursors[m.sub] = { epoch: m.epoch, pos: last.seq };
        }
        const fresh = new Set(m.fresh);
        m.entries.forEach((e, i) => {
          this.emitter.emit("entry", { entry: e, sub: m.sub, source: m.source, duplicate: !fresh.has(i) });
          const change = fresh.has(i) ? messageChangeOf(e) : null;
          if (change) this.emitter.emit("messageChanged", change);
        });
        return;
      }
      case "cursor":
        if (this.roleNow !== "leader") {
          this.cursors.splice(0, this.cursors.length, ...m.cursors);
          this.setSources(m.sources);
        }
        return;
      case "sourceEnd":
        if (this.roleNow !== "leader") {
          this.sources.delete(m.source);
          this.emitter.emit("sourceEnd", { source: m.source, last: m.last });
        }
        return;
      case "synced":
        if (this.roleNow !== "leader") this.emitter.emit("synced", { epoch: m.epoch, head: m.head });
        return;
      case "state":
        if (this.roleNow !== "leader") this.emitter.emit("connection", { state: m.connected ? "connected" : "disconnected" });
        return;
      case "marks":
        for (const e of m.delivery) this.emitter.emit("delivery", e);
        for (const e of m.statuses) this.emitter.emit("messageStatus", e);
        return;
      case "leader":
        return;
    }
  }

  /** Mark moves the store committed, told in the order they committed (one at a time). */
  private marksQueue: Promise<void> = Promise.resolve();

  private marksMoved(changes: MarksChange[]): void {
    this.marksQueue = this.marksQueue.then(() => this.announceMarks(changes)).catch((e: unknown) => {
      this.log("warn", "cannot tell the message statuses of a mark move", { err: String(e) });
    });
  }

  /**
   * Turns what a committed transaction moved into events: a `delivery` per move of another
   * user's mark, and a `messageStatus` per step of each of this user's messages that the move
   * took past a status. The steps come from the conversation's peaks before and after that one
   * transaction, so each is told once, even when transactions follow each other quickly.
   */
  private async announceMarks(changes: MarksChange[]): Promise<void> {
    const me = this.userId;
    const delivery: ClientEvents["delivery"][] = [];
    const statuses: ClientEvents["messageStatus"][] = [];
    for (const c of changes) {
      for (const m of c.moves) if (m.user !== me) delivery.push({ conv: c.conv, user: m.user, state: m.state, upTo: m.to });
      // Without the user (a tab that never connected), whose messages they are is unknown.
      if (me !== "") statuses.push(...(await this.steps(c, me)));
    }
    for (const e of delivery) this.emitter.emit("delivery", e);
    for (const e of statuses) this.emitter.emit("messageStatus", e);
    if (delivery.length + statuses.length > 0) this.tabs?.post({ t: "marks", delivery, statuses });
  }

  /** The status steps of me's stored messages of one change. */
  private async steps(c: MarksChange, me: string): Promise<ClientEvents["messageStatus"][]> {
    const range = this.cfg.store.messageRange?.bind(this.cfg.store);
    if (!range) return [];
    const delivered = (p: ConvPeaks): number => Math.max(peakExcept(p.delivered, me), peakExcept(p.read, me));
    // The conv_seqs whose status changed: newly delivered, newly read.
    const spans = [[delivered(c.before), delivered(c.after)], [peakExcept(c.before.read, me), peakExcept(c.after.read, me)]]
      .filter(([lo, hi]) => (hi as number) > (lo as number)) as [number, number][];
    spans.sort((a, b) => a[0] - b[0]);
    const merged: [number, number][] = [];
    for (const s of spans) {
      const last = merged[merged.length - 1];
      if (last && s[0] <= last[1]) last[1] = Math.max(last[1], s[1]);
      else merged.push([...s]);
    }
    const out: ClientEvents["messageStatus"][] = [];
    for (const [lo, hi] of merged) {
      for (let from = lo + 1; from <= hi; from += STATUS_PAGE) {
        for (const m of await range(c.conv, from, Math.min(hi, from + STATUS_PAGE - 1))) {
          if (m.sender !== me) continue;
          const was = statusFrom(c.before, me, m.convSeq);
          const now = statusFrom(c.after, me, m.convSeq);
          if (was === "sent" && now !== "sent") out.push({ conv: c.conv, convSeq: m.convSeq, msgId: m.msgId, status: "delivered" });
          if (was !== "read" && now === "read") out.push({ conv: c.conv, convSeq: m.convSeq, msgId: m.msgId, status: "read" });
        }
      }
    }
    return out;
  }

  /** Binds the page's lifecycle events (see {@link ClientConfig.lifecycle}). */
  private listenToPage(): void {
    const w = globalThis as Partial<Pick<Window, "addEventListener" | "removeEventListener">> & { document?: Document };
    if (typeof w.addEventListener !== "function" || typeof w.removeEventListener !== "function") return;
    const online = (): void => {
      this.networkChanged(true);
    };
    const offline = (): void => {
      this.networkChanged(false);
    };
    const visible = (): void => {
      if (w.document?.visibilityState !== "hidden") this.checkConnection("the page is visible again");
    };
    const shown = (e: Event): void => {
      // Restored from the back/forward cache: every timer was frozen, the connection may be long dead.
      if ((e as PageTransitionEvent).persisted) this.checkConnection("the page was restored from the back/forward cache");
    };
    w.addEventListener("online", online);
    w.addEventListener("offline", offline);
    w.addEventListener("pageshow", shown);
    w.document?.addEventListener("visibilitychange", visible);
    this.unlisten = () => {
      w.removeEventListener?.("online", online);
      w.removeEventListener?.("offline", offline);
      w.removeEventListener?.("pageshow", shown);
      w.document?.removeEventListener("visibilitychange", visible);
    };
  }

  /**
   * Checks the connection now: with one, a liveness probe (closed and redialed if unanswered);
   * without, the wait before the next attempt is cut short (never before a server's retry-after).
   * Called on `visibilitychange`/`pageshow`; apps may call it when they know better (a user
   * pressed "retry").
   */
  checkConnection(why = "asked by the app"): void {
    if (this.isClosing()) return;
    const s = this.session;
    if (s && !s.isEnded) void s.checkAlive(why);
    else this.dialNow();
  }

  /**
   * The network changed (`online` / `offline`). Online: WebTransport failures are forgotten (a
   * new network may pass UDP), the backoff starts over and a waiting client dials at once; a
   * connected one checks its connection (the old path may be gone). Offline: the connection is
   * checked (it likely died with the network); attempts go on with the backoff, because
   * `navigator.onLine` is only a hint.
   */
  networkChanged(online: boolean): void {
    if (this.isClosing()) return;
    this.emitter.emit("network", { online });
    if (online) {
      this.connector.forgetFailures();
      this.backoff.reset();
    }
    this.checkConnection(online ? "the network came back" : "the network went away");
  }

  private dialNow(): void {
    const w = this.wake;
    if (w && this.clock.now() >= this.notBefore) w();
  }

  /** The wait between attempts, cut short by {@link dialNow} or close. */
  private pause(ms: number, retryAfterMs: number): Promise<void> {
    this.notBefore = this.clock.now() + retryAfterMs;
    return new Promise<void>((resolve) => {
      const stop = new AbortController();
      const done = (): void => {
        this.wake = null;
        stop.abort();
        resolve();
      };
      this.wake = done;
      this.closing.signal.addEventListener("abort", done, { once: true, signal: stop.signal });
      void sleep(this.clock, ms, stop.signal).then(done);
    });
  }

  /** Subscribes to an event; returns the unsubscribe function. */
  on<K extends ClientEventName>(name: K, fn: (e: ClientEvents[K]) => void): () => void {
    return this.emitter.on(name, fn);
  }

  /** Starts connecting (when opened with autoConnect false). */
  start(): void {
    if (this.loop || this.closing.signal.aborted || this.electing) return;
    const tabs = this.tabs;
    if (!tabs) {
      this.loop = this.run();
      return;
    }
    this.electing = true;
    void tabs.elect(() => {
      void this.lead();
    }).then((leads) => {
      if (!leads && !this.isClosing()) {
        this.followed = true;
        this.log("info", "another tab of this device holds the connection: following it", {});
        this.emitRole();
      }
    });
  }

  private electing = false;
  private followed = false; // this tab followed another before it leads (reload the store then)
  private roleTold: string | null = null;
  private announced = false; // the first events go out after open resolved (listeners are bound by then)

  /** Tells the app this tab's role, once per change. */
  private emitRole(): void {
    if (!this.announced || this.roleTold === this.roleNow) return;
    this.roleTold = this.roleNow;
    this.emitter.emit("role", { role: this.roleNow });
  }

  /** The user the server authenticated (empty before the first Welcome). */
  get user(): string {
    return this.userId;
  }

  /** Whether this tab has a connection up (a follower tab has none: its leader does). */
  get connected(): boolean {
    return this.session !== null && !this.session.isEnded;
  }

  /** Stops: closes the connection; queued items stay queued in the store for the next open. */
  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort();
    this.unlisten?.();
    this.outbox.close();
    this.runner?.stop();
    this.session?.close();
    await this.loop;
    // After the connection is down: the next tab's connection does not overlap this one.
    this.tabs?.post({ t: "state", connected: false });
    this.tabs?.close();
    this.emitter.emit("connection", { state: "closed" });
  }

  // --- mutations (outbox) ---

  private checkConv(conv: string): void {
    if (!validId(conv)) throw new ProtoError(Code.InvalidArgument, `bad conversation id ${JSON.stringify(conv)}`);
  }

  private async queue(fields: Pick<OutboxItem, "kind" | "conv"> & Partial<OutboxItem>, cmid?: string): Promise<OutboxItem> {
    if (this.isClosing()) throw new Error("syncd: client closed");
    this.checkConv(fields.conv);
    const id = cmid ?? newCmid();
    if (!validId(id)) throw new ProtoError(Code.InvalidArgument, "bad cmid");
    return this.outbox.add(fields, id);
  }

  /**
   * Queues a message; resolves once it is in the store (status `sending`), with its cmid. `peer`
   * names the other user of a direct conversation that may not exist yet. A body over max_body is
   * refused at once (ProtoError too_large) and not queued.
   */
  send(conv: string, body: Uint8Array, opts: { peer?: string; cmid?: string } = {}): Promise<OutboxItem> {
    if (body.length > this.maxBody) {
      return Promise.reject(new ProtoError(Code.TooLarge, `body of ${body.length} bytes, the server accepts at most ${this.maxBody} (max_body)`));
    }
    if (opts.peer !== undefined && !validId(opts.peer)) return Promise.reject(new ProtoError(Code.InvalidArgument, "bad peer id"));
    return this.queue({ kind: Kind.Message, conv, body: body.slice(), peer: opts.peer ?? "" }, opts.cmid);
  }

  /** Queues a read receipt: this user has read conv up to convSeq. */
  markRead(conv: string, convSeq: number): Promise<OutboxItem> {
    if (!Number.isSafeInteger(convSeq) || convSeq < 1) return Promise.reject(new ProtoError(Code.InvalidArgument, "up_to must be 1 or more"));
    return this.queue({ kind: Kind.Receipt, conv, upTo: convSeq });
  }

  /** Queues the recall of this user's message target in conv. */
  recall(conv: string, target: string): Promise<OutboxItem> {
    return this.queue({ kind: Kind.Recall, conv, target });
  }

  /**
   * Queues an edit (revision 7): replaces the body of this user's message `target` (its msg_id)
   * in conv with `body`, for every member. Through the outbox like {@link send}: resolves once
   * it is in the store. A body over max_body is refused at once (ProtoError too_large). The
   * server refuses another user's message (`not_sender`), a recalled one (`already_recalled`) or
   * one it no longer has (`no_message`): the item fails. Stored messages show their latest
   * edit's body (`Message.edited`) once the edit comes back through sync.
   */
  edit(conv: string, target: string, body: Uint8Array, opts: { cmid?: string } = {}): Promise<OutboxItem> {
    if (body.length > this.maxBody) {
      return Promise.reject(new ProtoError(Code.TooLarge, `body of ${body.length} bytes, the server accepts at most ${this.maxBody} (max_body)`));
    }
    if (!validId(target)) return Promise.reject(new ProtoError(Code.InvalidArgument, "bad target msg_id"));
    return this.queue({ kind: Kind.Edit, conv, target, body: body.slice() }, opts.cmid);
  }

  /**
   * Queues a reaction (revision 7): puts `reaction` (an emoji, or a name the app defines: 1–64
   * bytes of UTF-8, no control characters, no white space, not only invisible format
   * characters) on the message `target` of conv, or takes it off (`remove`). Any member may
   * react to any message. An invalid reaction is refused at once (ProtoError invalid_argument)
   * and not queued. Stored messages show it in `Message.reactions` once it comes back through sync.
   */
  react(conv: string, target: string, reaction: string, remove = false, opts: { cmid?: string } = {}): Promise<OutboxItem> {
    if (!validReaction(reaction)) {
      return Promise.reject(new ProtoError(Code.InvalidArgument, `bad reaction ${JSON.stringify(reaction)}: 1 to 64 bytes of printable UTF-8, no spaces`));
    }
    if (!validId(target)) return Promise.reject(new ProtoError(Code.InvalidArgument, "bad target msg_id"));
    return this.queue({ kind: Kind.Reaction, conv, target, reaction, remove }, opts.cmid);
  }

  /** Queues the creation of group conv with members (this user is always a member). */
  createGroup(conv: string, members: readonly string[]): Promise<OutboxItem> {
    return this.queue({ kind: Kind.GroupCreate, conv, members: [...members] });
  }

  /** Queues adding members to group conv. */
  addMembers(conv: string, members: readonly string[]): Promise<OutboxItem> {
    return this.queue({ kind: Kind.MemberAdd, conv, members: [...members] });
  }

  /** Queues removing members from group conv (naming only this user: leaving it). */
  removeMembers(conv: string, members: readonly string[]): Promise<OutboxItem> {
    return this.queue({ kind: Kind.MemberRemove, conv, members: [...members] });
  }

  /** Queues giving members a role in group conv (the owner only; role 3 hands the group over). */
  setRole(conv: string, members: readonly string[], role: number): Promise<OutboxItem> {
    return this.queue({ kind: Kind.RoleChange, conv, members: [...members], role });
  }

  /** Sends a failed item again, with the same cmid (the user's retry, §8.3.4). */
  retry(cmid: string): Promise<void> {
    return this.outbox.retry(cmid);
  }

  /** Removes a sent or failed item from the outbox. */
  dismiss(cmid: string): Promise<void> {
    return this.outbox.remove(cmid);
  }

  /** Every outbox item, in queueing order: what the UI shows as sending, sent or failed. */
  outboxItems(): OutboxItem[] {
    return this.outbox.list();
  }

  /** One outbox item by cmid. */
  outboxItem(cmid: string): OutboxItem | undefined {
    return this.outbox.get(cmid);
  }

  // --- local reads ---

  /** The stored messages of a conversation, in conv_seq order (works offline). */
  messages(conv: string): Promise<Message[]> {
    return this.cfg.store.messages(conv);
  }

  /** How far user has read conv, as stored. */
  readMark(conv: string, user: string): Promise<number> {
    return this.cfg.store.readMark(conv, user);
  }

  /** How far user's devices have stored conv, as this device knows (§8.8; 0 with a store that keeps no delivered marks). */
  async deliveredMark(conv: string, user: string): Promise<number> {
    return (await this.cfg.store.deliveredMark?.(conv, user)) ?? 0;
  }

  /**
   * The status of message `convSeq` of conv, as stored (works offline): `read` when a member
   * other than its sender has read it, else `delivered` when a device of another member has stored
   * it, else `sent` (§8.8). Meant for the user's own messages (for a cmid: its `ack.convSeq`);
   * in a group, one other member is enough (exact counts: {@link receipts}). A message this
   * device has not stored is judged as the user's. It only moves forward.
   */
  async statusOf(conv: string, convSeq: number): Promise<MessageStatus> {
    const s = this.cfg.store;
    if (!s.peaks) return "sent";
    const [p, row] = await Promise.all([s.peaks(conv), s.messageRange?.(conv, convSeq, convSeq)]);
    return statusFrom(p, row?.[0]?.sender ?? this.userId, convSeq);
  }

  /**
   * The highest marks of the members of conv other than this user, as stored: the user's
   * messages up to `delivered` are delivered, up to `read` read (in a direct conversation, the
   * peer's marks). Before the first connection the user is unknown and the user's own marks count.
   */
  async peerMarks(conv: string): Promise<{ delivered: number; read: number }> {
    const p = (await this.cfg.store.peaks?.(conv)) ?? zeroPeaks();
    const read = peakExcept(p.read, this.userId);
    return { delivered: Math.max(peakExcept(p.delivered, this.userId), read), read };
  }

  /** The stored members of a group; `complete` false: fetch them with {@link fetchMembers}. */
  members(conv: string): Promise<{ members: string[]; complete: boolean }> {
    return this.cfg.store.members(conv);
  }

  /** The conversations stored on this device. */
  localConversations(): Promise<string[]> {
    return this.cfg.store.conversations();
  }

  /** The stored vector cursor (one per sub-log). */
  cursor(): SubCursor[] {
    return this.cursors.map((c) => ({ ...c }));
  }

  /**
   * The stored cursor of every source the device follows (revision 6: a large group's
   * conversation log, §6 "Sources"), in conversation id order: what the next SyncStart names.
   */
  sourceCursors(): SourceCursor[] {
    return [...this.sources].map(([conv, c]) => ({ conv, epoch: c.epoch, pos: c.pos })).sort((a, b) => (a.conv < b.conv ? -1 : a.conv > b.conv ? 1 : 0));
  }

  // --- queries (online) ---

  private async query(build: (id: number) => PartialOf<Query>): Promise<Response> {
    const s = this.session;
    if (!s || s.isEnded) throw new OfflineError();
    const r = await s.request(build);
    if (r.type === FrameType.Error) throw new ProtoError(r.code, r.message, r.retryAfterMs, r.id);
    return r;
  }

  /** A page of the user's conversations from the server (ascending ids after `after`), and whether more follow. Their marks are stored (§8.8). */
  async conversations(after = "", limit = 0): Promise<{ convs: ConvInfo[]; more: boolean }> {
    const r = await this.query((id) => ({ type: FrameType.ConvList, id, after, limit }));
    if (r.type !== FrameType.ConvListResult) throw new Error(`syncd: unexpected answer ${r.type}`);
    for (const c of r.convs) await this.noteMarks(c);
    return { convs: r.convs, more: r.more };
  }

  /**
   * Stores the marks a ConvInfo carries (revision 5): the user's own, and in a direct
   * conversation the peer's — how a device that did not keep the entries (after a rebase) learns
   * where the statuses are (§8.8). Marks only rise: an older answer changes nothing.
   */
  private async noteMarks(c: ConvInfo): Promise<void> {
    const me = this.userId;
    if (!this.cfg.store.raiseMarks || me === "") return;
    const marks: UserMarks[] = [];
    if (c.deliveredMark > 0 || c.readMark > 0) marks.push({ user: me, delivered: c.deliveredMark, read: c.readMark });
    const peer = c.kind === ConvKind.Direct ? c.members.find((u) => u !== me) : undefined;
    if (peer !== undefined && (c.peerDelivered > 0 || c.peerRead > 0)) marks.push({ user: peer, delivered: c.peerDelivered, read: c.peerRead });
    if (marks.length > 0) await this.cfg.store.raiseMarks(c.conv, marks);
  }

  /** Throws when the connection runs a revision older than `revision` (the server would answer unknown_frame). */
  private needsRevision(revision: number, what: string): void {
    const s = this.session;
    if (s && !s.isEnded && s.revision < revision) {
      throw new ProtoError(Code.UnknownFrame, `syncd: ${what} needs protocol revision ${revision}, the server speaks ${s.revision}`);
    }
  }

  /**
   * How many members of conv had each of `seqs` (1 to 100 conv_seqs, each ≥ 1) to receive, and
   * how many of them have it delivered and read (§8.8), in the order asked. The counts include
   * the message's sender (leave it out for "read by n of m others"); a conv_seq outside the
   * retained history answers zeros. Online (OfflineError), revision 5 (a ProtoError
   * unknown_frame from an older server); not_member, no_conversation as ProtoErrors.
   */
  async receipts(conv: string, seqs: readonly number[]): Promise<ReceiptCount[]> {
    this.checkConv(conv);
    if (seqs.length === 0 || seqs.length > Limits.maxReceiptSeqs) {
      throw new ProtoError(Code.InvalidArgument, `receipts of ${seqs.length} conv_seqs: ask for 1 to ${Limits.maxReceiptSeqs}`);
    }
    if (!seqs.every((n) => Number.isSafeInteger(n) && n >= 1)) throw new ProtoError(Code.InvalidArgument, "a conv_seq must be 1 or more");
    this.needsRevision(REVISION_RECEIPTS, "Receipts");
    const r = await this.query((id) => ({ type: FrameType.Receipts, id, conv, seqs: [...seqs] }));
    if (r.type !== FrameType.ReceiptsResult) throw new Error(`syncd: unexpected answer ${r.type}`);
    return r.counts;
  }

  /**
   * A page of the members of conv who have message `convSeq` in `state` (`delivered`: readers
   * included; `read`), ids ascending above `after` ("" = from the start), at most `limit`
   * (0 = the server's 1,000). The server looks at 10,000 member records per request at most: a
   * page may be short, even empty, while `more` is true — page with `after` = `next` until `more`
   * is false. Online and revision 5, as {@link receipts}.
   */
  async readers(conv: string, convSeq: number, state: DeliveryState, opts: { after?: string; limit?: number } = {}): Promise<ReadersPage> {
    this.checkConv(conv);
    if (!Number.isSafeInteger(convSeq) || convSeq < 1) throw new ProtoError(Code.InvalidArgument, "conv_seq must be 1 or more");
    // Checked at run time too: a caller outside TypeScript may pass anything.
    if (!Object.hasOwn(readerKinds, state)) throw new ProtoError(Code.InvalidArgument, `state ${JSON.stringify(state)}: want "delivered" or "read"`);
    const kind = readerKinds[state];
    const after = opts.after ?? "";
    if (after !== "" && !validId(after)) throw new ProtoError(Code.InvalidArgument, "bad after id");
    const limit = opts.limit ?? 0;
    if (!Number.isSafeInteger(limit) || limit < 0 || limit > 0xffff_ffff) throw new ProtoError(Code.InvalidArgument, "limit must be a uint32");
    this.needsRevision(REVISION_RECEIPTS, "Readers");
    const r = await this.query((id) => ({ type: FrameType.Readers, id, conv, convSeq, state: kind, after, limit }));
    if (r.type !== FrameType.ReadersResult) throw new Error(`syncd: unexpected answer ${r.type}`);
    return { users: r.users, next: r.next, more: r.more };
  }

  /** Entries of conv before conv_seq `before` (0 = the latest), ascending: "load earlier messages". Stored too (dedup by msg_id). */
  async history(conv: string, before = 0, limit = 0): Promise<HistoryResult> {
    const r = await this.query((id) => ({ type: FrameType.History, id, conv, before, limit }));
    if (r.type !== FrameType.HistoryResult) throw new Error(`syncd: unexpected answer ${r.type}`);
    await this.cfg.store.applyHistory(r.entries);
    return r;
  }

  /** Pages conv's current members and roles from the server and stores the list. */
  async fetchMembers(conv: string): Promise<Member[]> {
    const all: Member[] = [];
    for (let after = ""; ; ) {
      const r = await this.query((id) => ({ type: FrameType.Members, id, conv, after }));
      if (r.type !== FrameType.MembersResult) throw new Error(`syncd: unexpected answer ${r.type}`);
      all.push(...r.members);
      const last = r.members[r.members.length - 1];
      if (!r.more || !last) break;
      after = last.user;
    }
    await this.cfg.store.setMembers(conv, all.map((m) => m.user));
    return all;
  }

  // --- the connection loop ---

  private moveOn: ((why: string) => void) | null = null;

  /** Whether close() was called (a method, so that checks after an await are not narrowed away). */
  private isClosing(): boolean {
    return this.closing.signal.aborted;
  }

  private async tokenForDial(): Promise<string> {
    const p = this.cfg.tokenProvider;
    // A token that expires before a request could time out is of no use for a new session.
    const runningOut = this.tokenExpires > 0 && this.tokenExpires - this.clock.now() < (this.cfg.requestTimeoutMs ?? 10_000);
    if (!p || (this.tokenCur !== "" && !this.tokenRefused && !runningOut)) return this.tokenCur;
    this.tokenCur = await p();
    this.tokenExpires = 0;
    this.tokenRefused = false;
    return this.tokenCur;
  }

  private refusedIf(err: unknown): void {
    if (err instanceof ProtoError && (err.code === Code.Unauthenticated || err.code === Code.TokenExpired)) this.tokenRefused = true;
  }

  private async run(): Promise<void> {
    const backoff = this.backoff;
    const signal = this.closing.signal;
    let idx = 0;
    let failures = 0;
    const n = this.cfg.endpoints.length;
    const failed = async (err: Error, retryAfterMs: number, nextNode: boolean, upMs: number | null): Promise<void> => {
      if (nextNode) idx = (idx + 1) % n;
      failures++;
      if (failures >= SYNC_FAILURE_THRESHOLD) this.emitter.emit("failed", { error: err, failures });
      const wait = upMs === null ? backoff.failed(retryAfterMs) : backoff.ended(upMs, retryAfterMs);
      this.emitter.emit("connection", { state: "disconnected", error: err, retryInMs: wait });
      this.log("debug", "reconnecting", { err: err.message, wait });
      await this.pause(wait, retryAfterMs);
    };
    while (!signal.aborted) {
      this.emitter.emit("connection", { state: "connecting" });
      let session: Session;
      try {
        const token = await this.tokenForDial();
        const ep = this.cfg.endpoints[idx] as Endpoint;
        const { conn, choice } = await this.connector.connect(ep);
        if (this.isClosing()) {
          conn.close();
          break;
        }
        this.emitter.emit("transport", { ...choice, endpoint: idx });
        session = await Session.hello(conn, token, {
          device: this.cfg.device,
          clientVersion: this.cfg.clientVersion ?? "syncd-js/0.1",
          requestTimeoutMs: this.cfg.requestTimeoutMs ?? 10_000,
          clock: this.clock,
          log: this.log,
          probeTimeoutMs: this.cfg.probeTimeoutMs ?? 5000,
          // Revision 6 only with a store that keeps sources: a client announcing it gets a large
          // group's entries only from its source, and would miss them otherwise.
          protoVersion: hasSources(this.cfg.store) ? PROTO_VERSION : REVISION_RECEIPTS,
        });
        this.tokenRefused = false;
        if (session.welcome.tokenExpires > 0n) this.tokenExpires = Number(session.welcome.tokenExpires / 1_000_000n);
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e));
        this.refusedIf(err);
        if (err instanceof ProtoError && err.code === Code.UnsupportedVersion) {
          this.log("error", "the server does not speak this revision: upgrade the SDK", { err: err.message });
        }
        // A dial that failed tries the next node; a refusal by a node that answered (a bad
        // token, overloaded) tries it again after the backoff, as the Go SDK does.
        await failed(err, err instanceof ProtoError ? err.retryAfterMs : 0, !(err instanceof ProtoError), null);
        continue;
      }
      const up = this.clock.now();
      const end = await this.serve(session);
      if (this.isClosing()) break;
      if (end.progressed) failures = 0;
      else failures++;
      if (!end.progressed && failures >= SYNC_FAILURE_THRESHOLD) this.emitter.emit("failed", { error: end.error, failures });
      if (end.moveOn) idx = (idx + 1) % n;
      const retryAfter = end.error instanceof ProtoError ? end.error.retryAfterMs : 0;
      const wait = backoff.ended(this.clock.now() - up, retryAfter);
      this.emitter.emit("connection", { state: "disconnected", error: end.error, retryInMs: wait });
      this.log("debug", "connection ended", { err: end.error.message, wait });
      await this.pause(wait, retryAfter);
    }
  }

  /** Runs outbox, sync, head checks and token refresh on a session until it ends. */
  private async serve(session: Session): Promise<{ error: Error; progressed: boolean; moveOn: boolean }> {
    this.session = session;
    this.userId = session.welcome.user;
    this.maxBody = session.limits.maxBody;
    this.emitter.emit("connection", { state: "connected" });
    this.tabs?.post({ t: "state", connected: true });
    this.outbox.setSession(session);
    this.checker.newSession();
    const timers = new Set<TimerHandle>();
    const later = (ms: number, fn: () => void): void => {
      const t = this.clock.setTimeout(() => {
        timers.delete(t);
        fn();
      }, ms);
      timers.add(t);
    };
    const move: { why: string | null } = { why: null };
    const movedOn = new Promise<void>((resolve) => {
      this.moveOn = (why) => {
        move.why ??= why;
        resolve();
      };
    });

    const runner = new SyncRunner(session, this.cfg.store, this.cursors, this.sources, this.clock, {
      ceiling: this.cfg.ceiling ?? 0,
      staleFailoverMs: this.cfg.staleFailoverMs ?? 5000,
      canMove: this.cfg.endpoints.length > 1,
    }, {
      entries: (entries, fresh, sub, source) => {
        for (const e of entries) {
          this.emitter.emit("entry", { entry: e, sub, source, duplicate: !fresh.has(e) });
          const change = fresh.has(e) ? messageChangeOf(e) : null;
          if (change) this.emitter.emit("messageChanged", change);
        }
        if (this.tabs && entries.length > 0) {
          const f: number[] = [];
          entries.forEach((e, i) => {
            if (fresh.has(e)) f.push(i);
          });
          const epoch = (source !== "" ? this.sources.get(source)?.epoch : this.cursors[sub]?.epoch) ?? 0n;
          this.tabs.post({ t: "entries", sub, source, epoch, entries: [...entries], fresh: f });
        }
      },
      synced: (epoch, head) => {
        this.emitter.emit("synced", { epoch, head });
        this.tabs?.post({ t: "synced", epoch, head });
      },
      stale: (epoch, head, unheardMs, source) => {
        this.emitter.emit("stale", { epoch, head, unheardMs, source });
      },
      gap: (sub, epoch, at, got, source) => {
        this.emitter.emit("gap", { sub, at, source });
        // Reported once per incident (§8.7): a gap that comes back at the same stored position
        // is the same one, retried. A source's gap is about its conversation's history (`conv`).
        const log = source !== "" ? `source:${source}` : `sub:${sub}`;
        const key = `${epoch}:${at}`;
        if (this.gapsReported.get(log) !== key) {
          this.gapsReported.set(log, key);
          void session.report({ kind: ReportKind.Gap, conv: source, sub, epoch, from: Math.max(at, 1), to: got });
        }
      },
      firstHeartbeat: (sub) => {
        // A resume has caught up: check the newest entries stored (§8.7).
        void this.checker.check(session, runner, sub, "recent");
      },
      rebase: (sub, epoch, head, source) => {
        this.emitter.emit("rebase", { sub, epoch, head, source });
        this.postCursors();
      },
      epoch: (sub, epoch, source) => {
        this.emitter.emit("epoch", { sub, epoch, source });
        this.postCursors();
      },
      continued: () => {
        this.postCursors();
      },
      sourceEnd: (source, last) => {
        this.emitter.emit("sourceEnd", { source, last });
        this.tabs?.post({ t: "sourceEnd", source, last });
      },
      superseded: () => {
        this.emitter.emit("superseded", {});
      },
      loadForRebase: (s) => this.loadForRebase(s),
      loadSource: (s, conv) => this.loadSource(s, conv),
    }, this.log);
    this.runner = runner;
    // A node killed outright sends no close: the heartbeats' absence tells (§8.4 liveness).
    session.watchHeartbeats(() => runner.syncing);

    // Head check (§8.5): every headCheckMs ± 20 %, at least twice per request_idle_ms.
    const every = Math.max(1, Math.min(this.cfg.headCheckMs ?? 120_000, session.limits.requestIdleMs > 0 ? session.limits.requestIdleMs / 2 : Infinity));
    const headCheck = (): void => {
      later(every * (0.8 + 0.4 * this.clock.random()), () => {
        void this.headCheck(session, runner, later).finally(headCheck);
      });
    };
    headCheck();
    this.keepToken(session, later);

    const syncEnd: Promise<SyncEnd> = runner.run();
    // Syncing that stopped on purpose (superseded) leaves the session up for the outbox.
    const syncFatal = syncEnd.then((e) => (e.error || e.moveOn ? e : new Promise<never>(() => undefined)));
    const first = await Promise.race([syncFatal, session.ended, movedOn, new Promise<null>((r) => {
      this.closing.signal.addEventListener("abort", () => {
        r(null);
      }, { once: true });
    })]);
    this.moveOn = null;
    for (const t of timers) this.clock.clearTimeout(t);
    this.outbox.setSession(null);
    this.session = null;
    this.tabs?.post({ t: "state", connected: false });
    this.runner = null;
    runner.stop();
    if (first && "progressed" in first && first.error && !first.moveOn) {
      // The sync stream failed, most likely because the server closed the connection: over
      // WebTransport the streams fail before the session's close arrives. Wait for the close
      // (its error and retry-after, §2) rather than replace it with a local one.
      await session.closedWithin(CLOSE_GRACE_MS);
    }
    session.close();
    const info = await session.ended;
    const end = await syncEnd;
    let error: Error;
    if (first && "progressed" in first && first.error) error = first.error;
    else if (move.why !== null) error = new Error(`syncd: moving to another node: ${move.why}`);
    else error = closeError(info);
    // The close carries the server's error whole (§2): prefer it when the sync saw only its effect
    // — or the Error frame that came before it, when the close itself came as a lost connection.
    if (!(error instanceof ProtoError) && info.how === "error") error = closeError(info);
    if (!(error instanceof ProtoError) && session.serverError) error = session.serverError;
    this.refusedIf(error);
    return { error, progressed: end.progressed || runner.hasProgressed, moveOn: end.moveOn || move.why !== null };
  }

  private async headCheck(session: Session, runner: SyncRunner, later: (ms: number, fn: () => void) => void): Promise<void> {
    if (session.isEnded) return;
    let r: Response;
    try {
      r = await session.request((id) => ({ type: FrameType.HeadCheck, id }));
    } catch (e) {
      if (e instanceof ProtoError && e.code === Code.Timeout) {
        this.log("info", "no answer to a head check: the connection is half-dead", {});
        session.close(); // reconnect (§8.5)
      }
      return;
    }
    if (r.type !== FrameType.Head) return; // unavailable: the node is cut off; Stale will tell
    const heads = r.subs.length > 0 ? r.subs : [{ epoch: r.epoch, head: r.head, first: r.first }];
    heads.forEach((h, sub) => {
      if (h.epoch !== 0n) this.checker.noteFirst(sub, h.epoch, h.first);
      // With the head check, the next window of the walk through what is stored (§8.7).
      if (sub < this.cursors.length) void this.checker.check(session, runner, sub, "walk");
      const c = this.cursors[sub] ?? { epoch: 0n, pos: 0 };
      if (c.epoch !== 0n && h.epoch !== 0n && h.epoch !== c.epoch) {
        runner.restart(`head check: epoch ${h.epoch}, stored ${c.epoch}`);
      } else if (h.head > c.pos) {
        // The cursor must reach that head within two heartbeat intervals, or the stream is stalled.
        later(2 * session.limits.heartbeatMs, () => {
          const now = this.cursors[sub] ?? { epoch: 0n, pos: 0 };
          if (now.pos < h.head && !session.isEnded) runner.restart(`head check: head ${h.head}, cursor still at ${now.pos}`);
        });
      }
    });
  }

  /** Refreshes the session's token ahead of each expiry (a quarter of the validity left, at most 5 min before). */
  private keepToken(session: Session, later: (ms: number, fn: () => void) => void): void {
    const provider = this.cfg.tokenProvider;
    if (!provider || session.welcome.tokenExpires <= 0n) return;
    const plan = (expiresMs: number): void => {
      const remaining = expiresMs - this.clock.now();
      later(Math.max(remaining - Math.min(remaining / 4, MAX_REFRESH_LEAD_MS), 0), () => {
        void (async () => {
          try {
            const tok = await provider();
            const exp = Number((await session.refresh(tok)) / 1_000_000n);
            this.tokenCur = tok;
            this.tokenExpires = exp;
            plan(exp);
          } catch (e) {
            if (session.isEnded) return;
            this.log("info", "token refresh failed", { err: String(e) });
            // Try again in half the time left; past the expiry the server closes and we redial.
            later(Math.max((expiresMs - this.clock.now()) / 2, 1000), () => {
              plan(expiresMs);
            });
          }
        })();
      });
    };
    plan(this.tokenExpires);
  }

  /**
   * A rebase's loading (§8.4 TooOld): page ConvList; for each conversation store its members (when
   * listed) and load the latest History page where the local copy is behind its head. Older
   * history stays loadable on demand ({@link history}).
   */
  private async loadForRebase(session: Session): Promise<void> {
    const store = this.cfg.store;
    for (let after = ""; ; ) {
      const r = await ask(session, (id) => ({ type: FrameType.ConvList, id, after }));
      if (r.type !== FrameType.ConvListResult) throw new Error("syncd: unexpected answer to ConvList");
      for (const c of r.convs) {
        await this.loadConv(session, c);
        // A large group the device follows as a source jumps too, to the head just loaded: the
        // user-log entries the rebase jumps over may be the ones that said where its following
        // ended and started again, which a later Batch.after of the source is checked against
        // (never back: a source's cursor ahead of this head stays).
        if (c.source && c.epoch !== 0n && hasSources(store)) {
          await store.rebaseSource(c.conv, c.epoch, c.head);
          const stored = this.sources.get(c.conv);
          if (!(stored?.epoch === c.epoch && stored.pos > c.head)) this.sources.set(c.conv, { epoch: c.epoch, pos: c.head });
        }
      }
      const last = r.convs[r.convs.length - 1];
      if (!r.more || !last) break;
      after = last.conv;
    }
  }

  /**
   * Stores one conversation's state for a rebase: its members (when listed), the marks its
   * ConvInfo carries, and its latest History page where the local copy is behind its head. Older
   * history stays loadable on demand ({@link history}).
   */
  private async loadConv(session: Session, c: ConvInfo): Promise<void> {
    if (c.members.length > 0 && c.members.length === c.memberCount) await this.cfg.store.setMembers(c.conv, c.members);
    // The entries that carried the marks are jumped over: the server's marks stand for them.
    await this.noteMarks(c);
    if (c.head > (await this.cfg.store.convHead(c.conv))) {
      const h = await ask(session, (id) => ({ type: FrameType.History, id, conv: c.conv }));
      // Stored, not announced entry by entry: the `rebase` event that follows tells the app
      // to reload what it shows.
      if (h.type === FrameType.HistoryResult) await this.cfg.store.applyHistory(h.entries);
    }
  }

  /**
   * A rebase of source `conv` alone (its TooOld or Rebase, §8.4): its state from ConvState and
   * its recent History, stored as a rebase of the user log stores each conversation's; resolves
   * with the cursor to move to, (epoch, head) of that state — or null when the user is no longer
   * a member (not_member, no_conversation: the removal is in the user's log), its cursor to drop.
   */
  private async loadSource(session: Session, conv: string): Promise<SubCursor | null> {
    const r = await session.request((id) => ({ type: FrameType.ConvState, id, conv }));
    if (r.type === FrameType.Error) {
      if (r.code === Code.NotMember || r.code === Code.NoConversation) {
        this.log("debug", "rebase of a source: no longer a member; dropping its cursor", { source: conv });
        return null;
      }
      throw new ProtoError(r.code, r.message, r.retryAfterMs);
    }
    if (r.type !== FrameType.ConvStateResult) throw new Error("syncd: unexpected answer to ConvState");
    const info = r.conv;
    if (info.conv !== conv || info.epoch === 0n) throw new Error(`syncd: rebase of source ${conv}: the server answered the state of ${JSON.stringify(info.conv)} in epoch ${info.epoch}`);
    await this.loadConv(session, info);
    this.log("debug", "rebased a source", { source: conv, epoch: String(info.epoch), head: info.head });
    return { epoch: info.epoch, pos: info.head };
  }
}

/** A query of a rebase on session: its answer, or its Error thrown as a ProtoError. */
async function ask(session: Session, build: (id: number) => PartialOf<Query>): Promise<Response> {
  const r = await session.request(build);
  if (r.type === FrameType.Error) throw new ProtoError(r.code, r.message, r.retryAfterMs);
  return r;
}
