// Several tabs of one device without lock-out (shared/research/browser-clients.md §8 item 12).
//
// One connection per device: the server supersedes the older sync stream of a device when a
// newer one starts (§7 superseded), so two tabs that each connect would take the stream from each
// other. Instead the tabs elect a leader with a Web Lock named after the store and the device:
// the tab that holds it connects; the others follow. They share the IndexedDB store, so a
// follower reads every stored message itself; the leader tells them over a BroadcastChannel of
// the same name what it stored (entries, keyed by sub-log and position) and when outbox items
// change, and followers tell the leader about the items they queued. When the leader's tab
// closes, the browser releases its lock and the next waiting tab takes over from the stored
// cursor. No tab is ever locked out: a follower reads, sends and shows status like the leader.

import type { Entry, SourceCursor, SubCursor } from "./frames.js";
import type { ClientEvents } from "./events.js";

/** What the tabs of a device tell each other. */
export type TabMessage =
  /** Leader → followers: entries of a sub-log (or of a source, revision 6: `source` not empty) stored (in order), and which of them were new. */
  | { t: "entries"; sub: number; source: string; epoch: bigint; entries: Entry[]; fresh: number[] }
  /**
   * The tab that stored mark moves (the leader: it holds the connection) → the others: the
   * `delivery` and `messageStatus` events it emitted, in order, for them to emit too.
   */
  | { t: "marks"; delivery: ClientEvents["delivery"][]; statuses: ClientEvents["messageStatus"][] }
  /** Any tab → the others: an outbox item changed in the store (queued, sent, failed, retried, dismissed). */
  | { t: "outbox"; cmid: string }
  /** Leader → followers: the cursor moved without entries (rebase, epoch change, resync, a source's end); with every source's cursor. */
  | { t: "cursor"; cursors: SubCursor[]; sources: SourceCursor[] }
  /** Leader → followers: the device no longer follows a source (SourceEnd). */
  | { t: "sourceEnd"; source: string; last: number }
  /** Leader → followers: the leader's connection state, and sync news. */
  | { t: "state"; connected: boolean }
  | { t: "synced"; epoch: bigint; head: number }
  /** A new leader (followers re-announce nothing: the store has it all). */
  | { t: "leader" };

/** What a page offers for coordination. */
interface LockManagerLike {
  request(name: string, opts: { ifAvailable?: boolean }, cb: (lock: unknown) => Promise<void> | void): Promise<unknown>;
}

/** Whether this page can coordinate tabs (Web Locks and BroadcastChannel). */
export function tabsAvailable(): boolean {
  const nav = (globalThis as { navigator?: { locks?: unknown } }).navigator;
  return typeof nav?.locks === "object" && nav.locks !== null && typeof BroadcastChannel !== "undefined";
}

/**
 * The leader election and the channel of one device's tabs. `onLeader` runs when this tab
 * becomes the leader (at once, or when the leader's tab goes); the lock is held until
 * {@link close}.
 */
export class Tabs {
  private readonly channel: BroadcastChannel;
  private release: (() => void) | null = null;
  private closed = false;
  private leader = false;

  constructor(
    /** The name of the lock and of the channel: per store and device. */
    readonly name: string,
    private readonly onMessage: (m: TabMessage) => void,
  ) {
    this.channel = new BroadcastChannel(name);
    this.channel.onmessage = (ev: MessageEvent) => {
      if (!this.closed) this.onMessage(ev.data as TabMessage);
    };
  }

  /** Whether this tab holds the lock. */
  get isLeader(): boolean {
    return this.leader;
  }

  /**
   * Tries to become the leader: resolves true at once if the lock was free (this tab leads), false
   * if another tab holds it — then `onLeader` is called later, when this tab's turn comes.
   */
  async elect(onLeader: () => void): Promise<boolean> {
    const locks = (globalThis as unknown as { navigator: { locks: LockManagerLike } }).navigator.locks;
    const hold = (): Promise<void> =>
      new Promise<void>((resolve) => {
        this.leader = true;
        this.release = resolve;
      });
    // request() resolves only when the lock is released again: the answer comes from the callback.
    const got = await new Promise<boolean>((decided) => {
      locks.request(this.name, { ifAvailable: true }, (lock) => {
        if (lock === null || this.closed) {
          decided(false);
          return;
        }
        decided(true);
        const held = hold();
        onLeader();
        return held;
      }).catch(() => {
        decided(false);
      });
    });
    if (!got && !this.closed) {
      // Wait in line: the callback runs when the leader's tab releases the lock (closes).
      locks.request(this.name, {}, () => {
        if (this.closed) return;
        const held = hold();
        onLeader();
        return held;
      }).catch(() => undefined);
    }
    return got;
  }

  /** Tells the other tabs. */
  post(m: TabMessage): void {
    if (this.closed) return;
    try {
      this.channel.postMessage(m);
    } catch {
      // A value the channel cannot clone, or the channel closed: the store still has it.
    }
  }

  /** Leaves: releases the lock (the next tab takes over) and closes the channel. */
  close(): void {
    this.closed = true;
    this.leader = false;
    this.release?.();
    this.release = null;
    this.channel.close();
  }
}
