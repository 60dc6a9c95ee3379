// The IndexedDB store (§8.1 in a browser): the same Store contract as MemoryStore, durable.
//
// Why it is built this way (shared/research/browser-clients.md §8, items 7–11):
// * A Batch is one readwrite transaction over the entries, the view and the cursor: the cursor
//   can never be ahead of the entries it stands for, and applyBatch resolves only on the
//   transaction's `complete`, which is when the client may send CursorAck (§8.4 step 5). Its
//   durability is "relaxed": a batch lost in a crash is lost with its cursor, and the server's
//   log refills it.
// * The outbox is written with durability "strict" before the client tells the app "queued" or
//   sends anything (§8.3.1): a queued message survives a crash of the browser right after.
// * Browsers evict a site's storage under pressure (unless `navigator.storage.persist()` was
//   granted) and users clear it. A missing or recreated database, or a cursor ahead of the
//   entries it claims, is detected and answered by an explicit resync from the server (the
//   cursor goes back to the start; the view's dedup by msg_id merges what is still there),
//   reported to the app — never a silently half-empty view. What a check against the server finds
//   wrong afterwards (§8.7: a digest mismatch) is refetched by rewinding the cursor (`rewind`).
// * A handle that dies under us ("connection is closing", a forced close when the user clears
//   site data, another tab's upgrade) is dropped and reopened on the next operation.
// * Where IndexedDB cannot be used at all (private modes, disabled storage), `open` falls back
//   to memory and says so (`info().persistent` false): the app shows "not saved on this device".
// * Schema versions: 1 (the first); 2 adds delivered marks and each conversation's peaks
//   (§8.8). Opening a version-1 database upgrades it in the upgrade transaction, from what it
//   holds: every read mark is a delivered mark too, and the delivered entries (kind 8) a version-1
//   SDK stored as an unknown kind are read again; then the peaks are computed from the marks.
//   3 adds sources (revision 6, §6 "Sources: large groups"): `sourceCursors` (conv → {epoch,
//   pos}, written in the transaction of the source's entries), `sourceEntries` (keyed [conv,
//   conv_seq], as received) and `follows` (keyed [conv, conv_seq] → kind: the user-log entries
//   with `source` set, where a following started or ended). The upgrade from 1 or 2 only creates
//   them, empty, and keeps everything else: an SDK of revision 5 or less never stored a source,
//   and its decoder dropped the `source` key of the entries it stored (a server refuses to sync
//   such a client's user once it follows a large group, so none was stored for one anyway).
//   4 adds `earlyEffects` (revision 7: msg_id → the edits and reactions of a message not stored
//   yet, applied when it comes, as `earlyRecalls` are recalls). The upgrade from 1–3 only
//   creates it, empty: an SDK of revision 6 or less announced no revision 7, so the server never
//   sent it an edit or a reaction (nor would its view have applied one), and a view row without
//   the new fields is a message never edited and without reactions.
//   A tab still open on the old version closes its handle on `versionchange` and reopens.

import type { Entry, SourceCursor, SubCursor } from "./frames.js";
import { Kind } from "./frames.js";
import {
  applyEntry, followStarts, isFollowMark, MarkBook, MemoryStore, NotContiguousError, raiseMarksIn, raisePeak, sourceEntriesOf, sourceStart, zeroPeaks,
  toMessage, type ConvPeaks, type DeliveryState, type FollowMarks, type MarksChange, type Message, type MsgEffects, type OutboxItem, type Store, type StoreInfo,
  type StoreSnapshot, type StoredMsg, type StoredRange, type UserMarks, type ViewTx,
} from "./store.js";

/** The database schema version (see the header: 2 adds deliveredMarks and peaks; 3 sourceCursors, sourceEntries and follows; 4 earlyEffects). */
const VERSION = 4;
const STORES = [
  "entries", "cursors", "msgRefs", "view", "readMarks", "deliveredMarks", "peaks", "members", "incomplete", "earlyRecalls", "convs", "outbox", "meta",
  "sourceCursors", "sourceEntries", "follows", "earlyEffects",
] as const;
type StoreName = (typeof STORES)[number];
/** The object stores a batch (or history) touches. */
const VIEW_STORES: StoreName[] = [
  "entries", "cursors", "msgRefs", "view", "readMarks", "deliveredMarks", "peaks", "members", "incomplete", "earlyRecalls", "convs", "meta", "follows", "earlyEffects",
];
/** The object stores a source's batch touches. */
const SOURCE_STORES: StoreName[] = [...VIEW_STORES, "sourceCursors", "sourceEntries"];
/** The object stores a resync clears. */
const CURSOR_STORES: StoreName[] = ["cursors", "entries", "sourceCursors", "sourceEntries", "follows"];
/** The object stores of marks. */
const MARK_STORES: StoreName[] = ["readMarks", "deliveredMarks", "peaks"];
/** The most sub-logs a user may have (frames.ts Limits.maxSubLogs). */
const MAX_SUBS = 16;

/**
 * A cursor as stored: `last` is the seq of the last entry stored under it (0: none, after a
 * rebase or an epoch change). `base` is the first position of the run of entries that ends at
 * the cursor (StoredRange.base); a record written before the SDK kept it has none, and its run
 * counts from its next batch (see baseOf). `repairTo`, after a rewind, is the highest position
 * whose re-arriving entry replaces the stored copy of its msg_id (absent: none).
 */
interface StoredCursor {
  epoch: bigint;
  pos: number;
  last: number;
  base?: number;
  repairTo?: number;
}

/**
 * The base of a stored cursor's run. A record of an older SDK has none: what it stored may have
 * holes a rebase left, which a check would take for damage, so its run is taken to start after
 * its cursor — its older entries go unchecked rather than be refetched for nothing.
 */
function baseOf(c: StoredCursor | undefined): number {
  return c?.base ?? (c ? c.pos + 1 : 1);
}

/** The store's identity, written when the database is created. */
interface Identity {
  id: string;
  createdAt: number;
}

/** Options of {@link IndexedDBStore.open}. */
export interface IndexedDBStoreOptions {
  /**
   * Ask the browser to keep this site's storage (`navigator.storage.persist()`) at open, waiting
   * 300 ms at most for the answer (`info().persisted` and the client's `storage` event carry it).
   * Default true. Firefox may show a prompt: an app that prefers to ask after a user gesture passes
   * false and calls {@link IndexedDBStore.requestPersistence} then.
   */
  requestPersistence?: boolean;
  /** The IndexedDB factory (default `globalThis.indexedDB`; tests pass fake-indexeddb's). */
  indexedDB?: IDBFactory;
  /** Where the store remembers that its database existed (default `globalThis.localStorage`, when usable). */
  marker?: Pick<Storage, "getItem" | "setItem"> | null;
}

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => {
      resolve(r.result);
    };
    r.onerror = () => {
      reject(r.error ?? new Error("IndexedDB request failed"));
    };
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => {
      resolve();
    };
    tx.onabort = () => {
      reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    };
    tx.onerror = () => undefined; // the abort that follows says it
  });
}

/** Whether an error means the handle is unusable and a new one may work (closing, forced close, lost backing store). */
function handleLost(e: unknown): boolean {
  if (e instanceof NotContiguousError) return false; // a check's answer, whatever ids its message names
  const name = e instanceof Error || (typeof DOMException !== "undefined" && e instanceof DOMException) ? (e as Error).name : "";
  const msg = e instanceof Error ? e.message : String(e);
  return name === "InvalidStateError" || name === "UnknownError" || /closing|closed|connection.*lost/i.test(msg);
}

function randomId(): string {
  const b = globalThis.crypto.getRandomValues(new Uint8Array(12));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** The range of compound keys [first, …] whose first part is `first`. */
function prefix(first: string | number): IDBKeyRange {
  return IDBKeyRange.bound([first], [first, []]);
}

/** ViewTx over one IndexedDB transaction: writes are issued without waiting (the transaction orders them; a failure aborts it), reads see them through a cache. */
class IdbTx implements ViewTx, FollowMarks {
  private readonly cache = new Map<string, unknown>();
  /** The marks this transaction moved (told to the listener after commit). */
  readonly book = new MarkBook();
  constructor(readonly tx: IDBTransaction) {}

  private async get<T>(store: StoreName, key: IDBValidKey): Promise<T | undefined> {
    const ck = `${store}\u0000${JSON.stringify(key)}`;
    if (this.cache.has(ck)) return this.cache.get(ck) as T | undefined;
    const v = (await req(this.tx.objectStore(store).get(key))) as T | undefined;
    if (!this.cache.has(ck)) this.cache.set(ck, v);
    return this.cache.get(ck) as T | undefined;
  }
  put(store: StoreName, key: IDBValidKey, v: unknown): void {
    this.cache.set(`${store}\u0000${JSON.stringify(key)}`, v);
    this.tx.objectStore(store).put(v, key);
  }
  del(store: StoreName, key: IDBValidKey): void {
    this.cache.set(`${store}\u0000${JSON.stringify(key)}`, undefined);
    this.tx.objectStore(store).delete(key);
  }
  cursor(sub: number): Promise<StoredCursor | undefined> {
    return this.get<StoredCursor>("cursors", sub);
  }

  getMsgRef(msgId: string): Promise<{ conv: string; convSeq: number } | undefined> {
    return this.get("msgRefs", msgId);
  }
  putMsgRef(msgId: string, ref: { conv: string; convSeq: number }): Promise<void> {
    this.put("msgRefs", msgId, ref);
    return Promise.resolve();
  }
  getView(conv: string, convSeq: number): Promise<StoredMsg | undefined> {
    return this.get("view", [conv, convSeq]);
  }
  putView(conv: string, convSeq: number, m: StoredMsg): Promise<void> {
    this.put("view", [conv, convSeq], { ...m, conv, convSeq });
    return Promise.resolve();
  }
  delView(conv: string, convSeq: number): Promise<void> {
    this.del("view", [conv, convSeq]);
    return Promise.resolve();
  }
  async getReadMark(conv: string, user: string): Promise<number> {
    return (await this.get<number>("readMarks", [conv, user])) ?? 0;
  }
  putReadMark(conv: string, user: string, upTo: number): Promise<void> {
    return this.raise("readMarks", "read", conv, user, upTo);
  }
  async getDeliveredMark(conv: string, user: string): Promise<number> {
    return (await this.get<number>("deliveredMarks", [conv, user])) ?? 0;
  }
  putDeliveredMark(conv: string, user: string, upTo: number): Promise<void> {
    return this.raise("deliveredMarks", "delivered", conv, user, upTo);
  }
  /** Raises a mark and the conversation's peaks with it, noting the move. */
  private async raise(store: StoreName, state: DeliveryState, conv: string, user: string, upTo: number): Promise<void> {
    const from = (await this.get<number>(store, [conv, user])) ?? 0;
    if (upTo <= from) return;
    this.put(store, [conv, user], upTo);
    this.put("peaks", conv, await this.book.moved(conv, { user, state, from, to: upTo }, () => this.get<ConvPeaks>("peaks", conv)));
  }
  addMember(conv: string, user: string): Promise<void> {
    this.put("members", [conv, user], true);
    return Promise.resolve();
  }
  removeMember(conv: string, user: string): Promise<void> {
    this.del("members", [conv, user]);
    return Promise.resolve();
  }
  markMembersIncomplete(conv: string): Promise<void> {
    this.put("incomplete", conv, true);
    return Promise.resolve();
  }
  async takeEarlyRecall(msgId: string): Promise<boolean> {
    const had = (await this.get("earlyRecalls", msgId)) !== undefined;
    if (had) this.del("earlyRecalls", msgId);
    return had;
  }
  putEarlyRecall(msgId: string): Promise<void> {
    this.put("earlyRecalls", msgId, true);
    return Promise.resolve();
  }
  getEarlyEffects(msgId: string): Promise<MsgEffects | undefined> {
    return this.get<MsgEffects>("earlyEffects", msgId);
  }
  putEarlyEffects(msgId: string, fx: MsgEffects | undefined): Promise<void> {
    if (fx) this.put("earlyEffects", msgId, fx);
    else this.del("earlyEffects", msgId);
    return Promise.resolve();
  }
  putConv(conv: string): Promise<void> {
    this.put("convs", conv, true);
    return Promise.resolve();
  }
  sourceCursor(conv: string): Promise<SubCursor | undefined> {
    return this.get<SubCursor>("sourceCursors", conv);
  }
  followAt(conv: string, convSeq: number): Promise<number | undefined> {
    return this.get<number>("follows", [conv, convSeq]);
  }
  lastFollowBefore(conv: string, before: number): Promise<{ convSeq: number; kind: number } | undefined> {
    return lastFollow(this.tx.objectStore("follows"), conv, before);
  }
}

/** The follow mark of conv with the highest conv_seq below `before` in `follows` (the transaction's own writes included). */
async function lastFollow(follows: IDBObjectStore, conv: string, before: number): Promise<{ convSeq: number; kind: number } | undefined> {
  if (before <= 0) return undefined;
  const c = await req(follows.openCursor(IDBKeyRange.bound([conv, 0], [conv, before], false, true), "prev"));
  return c ? { convSeq: (c.key as [string, number])[1], kind: c.value as number } : undefined;
}

/**
 * A {@link Store} in IndexedDB: one database per name (use one per user and device, e.g.
 * `syncd:alice:web-3f2a`). Open it with {@link IndexedDBStore.open}; several tabs of one device
 * share it (see the client's tab coordination).
 */
export class IndexedDBStore implements Store {
  private db: IDBDatabase | null = null;
  private opening: Promise<IDBDatabase> | null = null;
  private identity: Identity | null = null;
  private persisted: boolean | null = null;
  private resetHandler: ((reason: string) => void) | null = null;
  private marksHandler: ((changes: MarksChange[]) => void) | null = null;
  private pendingReset: string | null = null;
  private closed = false;
  private metaLost = false;

  private constructor(
    /** The database's name. */
    readonly name: string,
    private readonly factory: IDBFactory,
    private readonly marker: Pick<Storage, "getItem" | "setItem"> | null,
  ) {}

  /**
   * Opens (or creates) the database `name`. Where IndexedDB is unavailable or refuses to open
   * (private browsing, storage disabled), resolves with a MemoryStore instead, whose `info()`
   * says `persistent: false` and why: the app keeps working, and shows that nothing is saved.
   */
  static async open(name: string, opts: IndexedDBStoreOptions = {}): Promise<Store> {
    const factory = opts.indexedDB ?? (globalThis as { indexedDB?: IDBFactory }).indexedDB;
    if (!factory) return memoryFallback("IndexedDB is not available in this browser");
    let marker: Pick<Storage, "getItem" | "setItem"> | null;
    try {
      marker = opts.marker !== undefined ? opts.marker : (globalThis as { localStorage?: Storage }).localStorage ?? null;
    } catch {
      marker = null; // localStorage throws where storage is blocked
    }
    const s = new IndexedDBStore(name, factory, marker);
    try {
      await s.handle();
    } catch (e) {
      return memoryFallback(`IndexedDB refused to open: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (opts.requestPersistence ?? true) {
      // Chromium answers at once; Firefox may ask the user, so the answer is awaited briefly
      // only (the client's `storage` event carries it if it came, `info()` always has the latest).
      const asked = s.requestPersistence();
      await Promise.race([asked, new Promise((r) => setTimeout(r, 300))]);
    }
    return s;
  }

  /**
   * Asks the browser to keep this site's data under storage pressure (`navigator.storage.persist()`),
   * unless it already does. Resolves with the answer (false where the API is missing).
   */
  async requestPersistence(): Promise<boolean> {
    const st = (globalThis as { navigator?: { storage?: Partial<StorageManager> } }).navigator?.storage;
    try {
      if (st?.persisted && (await st.persisted())) this.persisted = true;
      else if (st?.persist) this.persisted = await st.persist();
      else this.persisted = false;
    } catch {
      this.persisted = false;
    }
    return this.persisted;
  }

  /** What this store is (see {@link StoreInfo}). */
  info(): StoreInfo {
    return { kind: "indexeddb", persistent: true, persisted: this.persisted, name: this.name };
  }

  /** Called when the database was found lost or inconsistent after the client loaded it: the client resyncs. */
  onReset(fn: (reason: string) => void): void {
    this.resetHandler = fn;
    if (this.pendingReset !== null) {
      const r = this.pendingReset;
      this.pendingReset = null;
      fn(r);
    }
  }

  onMarks(fn: (changes: MarksChange[]) => void): void {
    this.marksHandler = fn;
  }

  /** Tells the listener what a committed transaction moved. */
  private told(book: MarkBook): void {
    const changes = book.list();
    if (changes.length > 0) this.marksHandler?.(changes);
  }

  /** The live handle, reopened when it was lost. */
  private handle(): Promise<IDBDatabase> {
    if (this.closed) return Promise.reject(new Error("syncd: the store is closed"));
    if (this.db) return Promise.resolve(this.db);
    this.opening ??= this.openDb().finally(() => {
      this.opening = null;
    });
    return this.opening;
  }

  private async openDb(): Promise<IDBDatabase> {
    let created = false;
    const r = this.factory.open(this.name, VERSION);
    r.onupgradeneeded = (ev) => {
      const db = r.result;
      if (ev.oldVersion === 0) created = true;
      for (const n of STORES) if (!db.objectStoreNames.contains(n)) db.createObjectStore(n);
      const tx = r.transaction;
      if (ev.oldVersion === 1 && tx) {
        // A failed migration aborts the upgrade: the open fails and nothing of it is kept.
        upgradeMarks(tx).catch(() => {
          try {
            tx.abort();
          } catch {
            // already finished
          }
        });
      }
    };
    const db = await new Promise<IDBDatabase>((resolve, reject) => {
      r.onsuccess = () => {
        resolve(r.result);
      };
      r.onerror = () => {
        reject(r.error ?? new Error("IndexedDB open failed"));
      };
      r.onblocked = () => undefined; // another tab holds an older version: it closes on versionchange
    });
    db.onversionchange = () => {
      // Another tab upgrades or deletes the database: let it (a later operation reopens).
      db.close();
      if (this.db === db) this.db = null;
    };
    db.onclose = () => {
      // Closed by the browser (the user cleared site data, the backing store failed).
      if (this.db === db) this.db = null;
    };
    // The identity: written at creation, read at every open. A database that is new while this
    // page (or the marker of an earlier visit) knew one means it was deleted or evicted.
    const tx = db.transaction(["meta"], "readwrite");
    const meta = tx.objectStore("meta");
    let id = (await req(meta.get("identity"))) as Identity | undefined;
    let metaLost = false;
    if (!id) {
      // No identity in a database that was not just created: part of it is gone.
      metaLost = !created;
      id = { id: randomId(), createdAt: Date.now() };
      meta.put(id, "identity");
      created = true;
    }
    await done(tx);
    if (metaLost) this.metaLost = true;
    const known = this.identity?.id ?? this.readMarker();
    if (known !== null && known !== id.id && created) {
      const why = this.identity ? "the database was deleted while the app ran (site data cleared?)" : "the database was evicted or deleted since the last visit";
      if (this.identity) this.reset(why);
      else this.pendingReset = why; // told at load (the client listens from open)
    }
    this.identity = id;
    this.writeMarker(id.id);
    this.db = db;
    return db;
  }

  private readMarker(): string | null {
    try {
      return this.marker?.getItem(`syncd-idb:${this.name}`) ?? null;
    } catch {
      return null;
    }
  }

  private writeMarker(id: string): void {
    try {
      this.marker?.setItem(`syncd-idb:${this.name}`, id);
    } catch {
      // Storage full or blocked: the marker is a hint only.
    }
  }

  private reset(why: string): void {
    if (this.resetHandler) this.resetHandler(why);
    else this.pendingReset = why;
  }

  /** Runs fn with a live handle; a handle found lost is dropped, reopened and fn run once more. */
  private async run<T>(fn: (db: IDBDatabase) => Promise<T>): Promise<T> {
    const db = await this.handle();
    try {
      return await fn(db);
    } catch (e) {
      if (!handleLost(e) || this.closed) throw e;
      if (this.db === db) this.db = null;
      try {
        db.close();
      } catch {
        // already closed
      }
      return fn(await this.handle());
    }
  }

  async load(): Promise<StoreSnapshot> {
    const snap = await this.run(async (db) => {
      const tx = db.transaction(["cursors", "outbox", "entries", "sourceCursors"], "readonly");
      const srcCurs = (await req(tx.objectStore("sourceCursors").getAll())) as SubCursor[];
      const srcKeys = (await req(tx.objectStore("sourceCursors").getAllKeys())) as string[];
      const sources: SourceCursor[] = srcKeys.map((conv, i) => ({ conv, epoch: (srcCurs[i] as SubCursor).epoch, pos: (srcCurs[i] as SubCursor).pos }));
      const curs = (await req(tx.objectStore("cursors").getAll(IDBKeyRange.bound(0, MAX_SUBS - 1)))) as StoredCursor[];
      const keys = (await req(tx.objectStore("cursors").getAllKeys(IDBKeyRange.bound(0, MAX_SUBS - 1)))) as number[];
      const outbox = (await req(tx.objectStore("outbox").getAll())) as OutboxItem[];
      // A cursor that claims entries the database does not hold (a partial loss) is not trusted.
      let inconsistent: string | null = null;
      for (let i = 0; i < curs.length; i++) {
        const c = curs[i] as StoredCursor;
        if (c.last > 0 && (await req(tx.objectStore("entries").count([keys[i] as number, c.last]))) === 0) {
          inconsistent = `the cursor of sub-log ${keys[i]} is at ${c.pos} but entry ${c.last} is not stored`;
        }
      }
      const cursors: SubCursor[] = [];
      keys.forEach((k, i) => {
        while (cursors.length <= k) cursors.push({ epoch: 0n, pos: 0 });
        const c = curs[i] as StoredCursor;
        cursors[k] = { epoch: c.epoch, pos: c.pos };
      });
      return { cursors, sources, outbox: outbox.sort((a, b) => a.seq - b.seq), inconsistent };
    });
    if (this.metaLost) {
      snap.inconsistent ??= "the database lost its identity record";
      this.metaLost = false;
    }
    if (snap.inconsistent !== null) {
      await this.resetCursors();
      this.pendingReset = `${snap.inconsistent}: resyncing from the server`;
      snap.cursors = [];
      snap.sources = [];
    }
    if (snap.cursors.length === 0) snap.cursors.push({ epoch: 0n, pos: 0 });
    const out: StoreSnapshot = { cursors: snap.cursors, outbox: snap.outbox, sources: snap.sources };
    if (this.pendingReset !== null) {
      out.reset = this.pendingReset;
      this.pendingReset = null;
    }
    return out;
  }

  /** Drops every cursor and stored entry, the sources' too (the view stays: a replay merges into it by msg_id). */
  async resetCursors(): Promise<void> {
    await this.run(async (db) => {
      const tx = db.transaction(CURSOR_STORES, "readwrite", { durability: "strict" });
      for (const n of CURSOR_STORES) tx.objectStore(n).clear();
      await done(tx);
    });
  }

  applyBatch(sub: number, epoch: bigint, entries: readonly Entry[]): Promise<Entry[]> {
    return this.run(async (db) => {
      // Relaxed: entries the server can refill, written atomically with their cursor.
      const tx = new IdbTx(db.transaction(VIEW_STORES, "readwrite", { durability: "relaxed" }));
      const committed = done(tx.tx);
      committed.catch(() => undefined);
      let fresh: Entry[];
      try {
        const cur = (await tx.cursor(sub)) ?? { epoch: 0n, pos: 0, last: 0 };
        if (epoch === 0n) throw new NotContiguousError("batch without an epoch");
        if (cur.epoch !== 0n && epoch !== cur.epoch) throw new NotContiguousError(`batch of epoch ${epoch}, stored epoch ${cur.epoch}`);
        if (cur.epoch === 0n && cur.pos !== 0) throw new NotContiguousError(`stored cursor (0, ${cur.pos}) has no epoch`);
        entries.forEach((e, i) => {
          if (e.seq !== cur.pos + 1 + i) throw new NotContiguousError(`entry ${i} has seq ${e.seq}, want ${cur.pos + 1 + i}`);
        });
        fresh = [];
        const repairTo = cur.repairTo ?? 0;
        for (const e of entries) {
          tx.put("entries", [sub, e.seq], e);
          // Before the dedup: only the user log says where a following started or ended.
          if (isFollowMark(e)) tx.put("follows", [e.conv, e.convSeq], e.kind);
          if (await applyEntry(tx, e, e.seq <= repairTo)) fresh.push(e);
        }
        const last = entries[entries.length - 1];
        if (last) {
          const next: StoredCursor = { epoch, pos: last.seq, last: last.seq, base: baseOf(cur) };
          if (last.seq < repairTo) next.repairTo = repairTo;
          tx.put("cursors", sub, next);
        }
      } catch (e) {
        try {
          tx.tx.abort();
        } catch {
          // already finished
        }
        throw e;
      }
      await committed; // the storage ack may go only now (§8.4 step 5)
      this.told(tx.book);
      return fresh;
    });
  }

  setCursor(sub: number, cursor: SubCursor, dropEntries: boolean): Promise<void> {
    return this.run(async (db) => {
      const tx = db.transaction(["cursors", "entries"], "readwrite", { durability: "strict" });
      const prev = (await req(tx.objectStore("cursors").get(sub))) as StoredCursor | undefined;
      if (dropEntries) tx.objectStore("entries").delete(IDBKeyRange.bound([sub], [sub, []]));
      // A cursor that moves without entries starts a new run after it; one that stays keeps its run,
      // in another epoch too (an EpochChanged that continues: its positions name the same entries).
      const stays = !dropEntries && prev !== undefined && prev.pos === cursor.pos;
      const stored: StoredCursor = { epoch: cursor.epoch, pos: cursor.pos, last: dropEntries ? 0 : (prev?.last ?? 0), base: stays ? baseOf(prev) : cursor.pos + 1 };
      tx.objectStore("cursors").put(stored, sub);
      await done(tx);
    });
  }

  readEntries(sub: number, from: number, to: number): Promise<StoredRange> {
    return this.run(async (db) => {
      const tx = db.transaction(["cursors", "entries"], "readonly");
      const [cur, entries] = await Promise.all([
        req(tx.objectStore("cursors").get(sub)) as Promise<StoredCursor | undefined>,
        from <= to ? (req(tx.objectStore("entries").getAll(IDBKeyRange.bound([sub, Math.max(from, 1)], [sub, to]))) as Promise<Entry[]>) : Promise.resolve([]),
      ]);
      return { cursor: { epoch: cur?.epoch ?? 0n, pos: cur?.pos ?? 0 }, base: baseOf(cur), entries };
    });
  }

  rewind(sub: number, epoch: bigint, from: number): Promise<boolean> {
    return this.run(async (db) => {
      // Strict: the cursor goes back; if that were lost the wrong copy would stay, and the next
      // check would have to find it again.
      const tx = db.transaction(["cursors", "entries"], "readwrite", { durability: "strict" });
      const committed = done(tx);
      committed.catch(() => undefined);
      const cursors = tx.objectStore("cursors");
      const entries = tx.objectStore("entries");
      const [cur, below] = await Promise.all([
        req(cursors.get(sub)) as Promise<StoredCursor | undefined>,
        from > 1 ? req(entries.count([sub, from - 1])) : Promise.resolve(0),
      ]);
      const base = baseOf(cur);
      if (!cur || cur.epoch !== epoch || epoch === 0n || from < base || from > cur.pos) {
        await committed;
        return false;
      }
      entries.delete(IDBKeyRange.bound([sub, from], [sub, []]));
      // `last` names an entry load() expects to find: from − 1 when it is stored, else none.
      const next: StoredCursor = { epoch, pos: from - 1, last: below > 0 ? from - 1 : 0, base, repairTo: Math.max(cur.repairTo ?? 0, cur.pos) };
      cursors.put(next, sub);
      await committed;
      return true;
    });
  }

  applyHistory(entries: readonly Entry[]): Promise<Entry[]> {
    return this.run(async (db) => {
      const tx = new IdbTx(db.transaction(VIEW_STORES, "readwrite", { durability: "relaxed" }));
      const committed = done(tx.tx);
      committed.catch(() => undefined);
      const fresh: Entry[] = [];
      for (const e of entries) {
        // A HistoryResult's seq is the conv_seq (§6).
        if (await applyEntry(tx, { ...e, convSeq: e.convSeq || e.seq })) fresh.push(e);
      }
      await committed;
      this.told(tx.book);
      return fresh;
    });
  }

  putOutbox(item: OutboxItem): Promise<void> {
    return this.run(async (db) => {
      // Strict: on disk before the app is told "queued" and before the first attempt (§8.3.1).
      const tx = db.transaction(["outbox"], "readwrite", { durability: "strict" });
      tx.objectStore("outbox").put(item, item.cmid);
      await done(tx);
    });
  }

  deleteOutbox(cmid: string): Promise<void> {
    return this.run(async (db) => {
      const tx = db.transaction(["outbox"], "readwrite", { durability: "strict" });
      tx.objectStore("outbox").delete(cmid);
      await done(tx);
    });
  }

  /** One outbox item as stored (other tabs' writes included). */
  getOutbox(cmid: string): Promise<OutboxItem | undefined> {
    return this.run(async (db) => (await req(db.transaction(["outbox"], "readonly").objectStore("outbox").get(cmid))) as OutboxItem | undefined);
  }

  messages(conv: string): Promise<Message[]> {
    return this.run(async (db) => {
      const rows = (await req(db.transaction(["view"], "readonly").objectStore("view").getAll(prefix(conv)))) as (StoredMsg & { conv: string; convSeq: number })[];
      return rows.filter((m) => m.kind === Kind.Message).map((m) => toMessage(conv, m.convSeq, m));
    });
  }

  readMark(conv: string, user: string): Promise<number> {
    return this.run(async (db) => ((await req(db.transaction(["readMarks"], "readonly").objectStore("readMarks").get([conv, user]))) as number | undefined) ?? 0);
  }

  deliveredMark(conv: string, user: string): Promise<number> {
    return this.run(async (db) => ((await req(db.transaction(["deliveredMarks"], "readonly").objectStore("deliveredMarks").get([conv, user]))) as number | undefined) ?? 0);
  }

  peaks(conv: string): Promise<ConvPeaks> {
    return this.run(async (db) => ((await req(db.transaction(["peaks"], "readonly").objectStore("peaks").get(conv))) as ConvPeaks | undefined) ?? zeroPeaks());
  }

  raiseMarks(conv: string, marks: readonly UserMarks[]): Promise<void> {
    return this.run(async (db) => {
      // Relaxed, as a batch: the server has these marks and gives them again.
      const tx = new IdbTx(db.transaction(MARK_STORES, "readwrite", { durability: "relaxed" }));
      const committed = done(tx.tx);
      committed.catch(() => undefined);
      await raiseMarksIn(tx, conv, marks);
      await committed;
      this.told(tx.book);
    });
  }

  messageRange(conv: string, from: number, to: number): Promise<Message[]> {
    return this.run(async (db) => {
      if (from > to) return [];
      const range = IDBKeyRange.bound([conv, Math.max(from, 0)], [conv, to]);
      const rows = (await req(db.transaction(["view"], "readonly").objectStore("view").getAll(range))) as (StoredMsg & { convSeq: number })[];
      return rows.filter((m) => m.kind === Kind.Message).map((m) => toMessage(conv, m.convSeq, m));
    });
  }

  members(conv: string): Promise<{ members: string[]; complete: boolean }> {
    return this.run(async (db) => {
      const tx = db.transaction(["members", "incomplete"], "readonly");
      const keys = (await req(tx.objectStore("members").getAllKeys(prefix(conv)))) as [string, string][];
      const incomplete = (await req(tx.objectStore("incomplete").count(conv))) > 0;
      return { members: keys.map((k) => k[1]).sort(), complete: !incomplete };
    });
  }

  setMembers(conv: string, users: readonly string[]): Promise<void> {
    return this.run(async (db) => {
      const tx = db.transaction(["members", "incomplete"], "readwrite");
      tx.objectStore("members").delete(prefix(conv));
      for (const u of users) tx.objectStore("members").put(true, [conv, u]);
      tx.objectStore("incomplete").delete(conv);
      await done(tx);
    });
  }

  convHead(conv: string): Promise<number> {
    return this.run(async (db) => {
      const c = await req(db.transaction(["view"], "readonly").objectStore("view").openKeyCursor(prefix(conv), "prev"));
      return c ? ((c.key as [string, number])[1]) : 0;
    });
  }

  conversations(): Promise<string[]> {
    return this.run(async (db) => ((await req(db.transaction(["convs"], "readonly").objectStore("convs").getAllKeys())) as string[]).sort());
  }

  // --- sources (revision 6) ---

  applySource(conv: string, epoch: bigint, after: number, entries: readonly Entry[]): Promise<Entry[]> {
    return this.run(async (db) => {
      // Relaxed, as a sub-log's batch: the entries are written atomically with their cursor.
      const tx = new IdbTx(db.transaction(SOURCE_STORES, "readwrite", { durability: "relaxed" }));
      const committed = done(tx.tx);
      committed.catch(() => undefined);
      const fresh: Entry[] = [];
      try {
        const from = await sourceStart(tx, conv, await tx.sourceCursor(conv), epoch, after);
        const own = sourceEntriesOf(conv, entries, from);
        for (const [i, e] of own.entries()) {
          tx.put("sourceEntries", [conv, e.seq], e);
          if (await applyEntry(tx, e)) fresh.push(entries[i] as Entry);
        }
        const last = own[own.length - 1];
        if (last) tx.put("sourceCursors", conv, { epoch, pos: last.seq } satisfies SubCursor);
      } catch (e) {
        try {
          tx.tx.abort();
        } catch {
          // already finished
        }
        throw e;
      }
      await committed; // the storage ack may go only now (§8.4 step 5)
      this.told(tx.book);
      return fresh;
    });
  }

  endSource(conv: string, last: number): Promise<void> {
    return this.run(async (db) => {
      const tx = db.transaction(["sourceCursors"], "readwrite", { durability: "strict" });
      const committed = done(tx);
      committed.catch(() => undefined);
      const cur = (await req(tx.objectStore("sourceCursors").get(conv))) as SubCursor | undefined;
      if (cur && cur.pos < last) {
        tx.abort();
        throw new NotContiguousError(`source ${conv} ends at ${last}, stored up to ${cur.pos}`);
      }
      if (cur) tx.objectStore("sourceCursors").delete(conv);
      await committed;
    });
  }

  dropSource(conv: string): Promise<void> {
    return this.run(async (db) => {
      const tx = db.transaction(["sourceCursors"], "readwrite", { durability: "strict" });
      tx.objectStore("sourceCursors").delete(conv);
      await done(tx);
    });
  }

  rebaseSource(conv: string, epoch: bigint, head: number): Promise<void> {
    if (epoch === 0n) return Promise.reject(new Error(`syncd: rebase of source ${conv} to epoch 0`));
    return this.run(async (db) => {
      const tx = db.transaction(["sourceCursors", "sourceEntries"], "readwrite", { durability: "strict" });
      const committed = done(tx);
      committed.catch(() => undefined);
      const cur = (await req(tx.objectStore("sourceCursors").get(conv))) as SubCursor | undefined;
      if (!(cur?.epoch === epoch && head <= cur.pos)) { // never back within an epoch
        if (cur && cur.epoch !== epoch) tx.objectStore("sourceEntries").delete(IDBKeyRange.bound([conv], [conv, []]));
        tx.objectStore("sourceCursors").put({ epoch, pos: head } satisfies SubCursor, conv);
      }
      await committed;
    });
  }

  resetSourceForEpoch(conv: string, epoch: bigint, pos: number): Promise<void> {
    if (epoch === 0n) return Promise.reject(new Error(`syncd: reset of source ${conv} to epoch 0`));
    return this.run(async (db) => {
      const tx = db.transaction(["sourceCursors", "sourceEntries"], "readwrite", { durability: "strict" });
      tx.objectStore("sourceEntries").delete(IDBKeyRange.bound([conv], [conv, []]));
      tx.objectStore("sourceCursors").put({ epoch, pos } satisfies SubCursor, conv);
      await done(tx);
    });
  }

  sourceCursors(): Promise<SourceCursor[]> {
    return this.run(async (db) => {
      const st = db.transaction(["sourceCursors"], "readonly").objectStore("sourceCursors");
      const [keys, vals] = await Promise.all([req(st.getAllKeys()), req(st.getAll())]) as [string[], SubCursor[]];
      return keys.map((conv, i) => ({ conv, epoch: (vals[i] as SubCursor).epoch, pos: (vals[i] as SubCursor).pos }));
    });
  }

  followStart(conv: string): Promise<number | null> {
    return this.run(async (db) => {
      const m = await lastFollow(db.transaction(["follows"], "readonly").objectStore("follows"), conv, Number.MAX_SAFE_INTEGER);
      return m && followStarts(m.kind) ? m.convSeq : null;
    });
  }

  sourceEntries(conv: string, from: number, to: number): Promise<Entry[]> {
    return this.run(async (db) => {
      if (from > to) return [];
      return (await req(db.transaction(["sourceEntries"], "readonly").objectStore("sourceEntries").getAll(IDBKeyRange.bound([conv, Math.max(from, 0)], [conv, to])))) as Entry[];
    });
  }

  close(): Promise<void> {
    this.closed = true;
    this.db?.close();
    this.db = null;
    return Promise.resolve();
  }
}

/**
 * The upgrade from schema 1 to 2, in the upgrade transaction: delivered marks from what the
 * database holds — a read mark is a delivered mark too (read implies delivered, §8.8), and a
 * delivered entry (kind 8) a version-1 SDK stored as an unknown kind raises its sender's — and
 * each conversation's peaks from the marks. Entries dropped by a rebase or an epoch change are
 * not there to read: the server's later entries and ConvInfo raise those marks again.
 */
async function upgradeMarks(tx: IDBTransaction): Promise<void> {
  const read = new Map<string, [string, string, number]>();
  const delivered = new Map<string, [string, string, number]>();
  const key = (conv: string, user: string): string => JSON.stringify([conv, user]);
  const readStore = tx.objectStore("readMarks");
  const [rkeys, rvals] = await Promise.all([req(readStore.getAllKeys()), req(readStore.getAll())]) as [[string, string][], number[]];
  rkeys.forEach(([conv, user], i) => {
    const v = rvals[i] ?? 0;
    read.set(key(conv, user), [conv, user, v]);
    delivered.set(key(conv, user), [conv, user, v]);
  });
  await new Promise<void>((ok, fail) => {
    const cur = tx.objectStore("entries").openCursor();
    cur.onerror = () => {
      fail(cur.error ?? new Error("IndexedDB cursor failed"));
    };
    cur.onsuccess = () => {
      const c = cur.result;
      if (!c) {
        ok();
        return;
      }
      const e = c.value as Entry;
      if (e.kind === Kind.Delivered && e.conv !== "" && e.sender !== "") {
        const k = key(e.conv, e.sender);
        if (e.upTo > (delivered.get(k)?.[2] ?? 0)) delivered.set(k, [e.conv, e.sender, e.upTo]);
      }
      c.continue();
    };
  });
  const peaks = new Map<string, ConvPeaks>();
  const raise = (marks: Map<string, [string, string, number]>, state: DeliveryState): void => {
    for (const [conv, user, v] of marks.values()) {
      const p = peaks.get(conv) ?? zeroPeaks();
      peaks.set(conv, { ...p, [state]: raisePeak(p[state], user, v) });
    }
  };
  raise(read, "read");
  raise(delivered, "delivered");
  const dm = tx.objectStore("deliveredMarks");
  for (const [conv, user, v] of delivered.values()) if (v > 0) dm.put(v, [conv, user]);
  const ps = tx.objectStore("peaks");
  for (const [conv, p] of peaks) ps.put(p, conv);
}

/** The memory store an IndexedDB store falls back to, saying why. */
function memoryFallback(reason: string): Store {
  const m = new MemoryStore();
  m.notPersistedReason = reason;
  return m;
}
