// The events an app binds to its UI. They come in the order things happened.

import { Kind, type Entry } from "./frames.js";
import type { DeliveryState, OutboxItem, StoreInfo } from "./store.js";
import type { TransportChoice } from "./transport/connect.js";

/** Every event, by name, with its payload. */
export interface ClientEvents {
  /**
   * An entry of the user's log was stored (a message, receipt, recall or membership change, from
   * this device or another). `duplicate`: its msg_id was already stored (an Ack's entry arriving
   * through sync, a replay after an epoch change): it created nothing new — while a range is
   * refetched after a `mismatch`, it replaced the stored copy, which may have been wrong (reload
   * what is shown once `synced` follows). `sub` is the sub-log (0 unless an operator split the
   * user's stream). `source` (revision 6), when not empty, says the entry came instead from a
   * source of the sync stream: the conversation log of that large group, which the device
   * follows directly rather than through the user's log (§6 "Sources"); `entry.seq` is then its
   * conv_seq and `sub` is 0. A large group's entries come from its source, in conversation
   * order, except those about the user's own membership (`entry.source` set: where the following
   * starts and ends) and the user's own receipts there (`entry.convSeq` 0), which come in the
   * user's log.
   */
  entry: { entry: Entry; sub: number; source: string; duplicate: boolean };
  /**
   * A stored message may show differently (revision 7 edits and reactions, and recalls): the
   * entry `entry` (kind 3 recall, 9 edit or 10 reaction) was stored and applied to the message
   * `msgId` of `conv` — reload it ({@link Client.messages}) and re-render. Follows the `entry`
   * event of that entry, once per new entry (not for duplicates, nor for folded entries, which
   * are not applied). A reaction that repeats the state changes nothing shown but is told too;
   * an edit or a reaction of a message not stored yet is remembered, and the message shows it
   * when it comes (no event then: the message is new).
   */
  messageChanged: { conv: string; msgId: string; cause: "recall" | "edit" | "reaction"; entry: Entry };
  /** An outbox item changed status: `sent` (with the server's Ack), `failed` (with why), or `sending` again after {@link Client.retry}. */
  status: { item: OutboxItem; error: Error | null };
  /**
   * Another member's mark moved forward in a conversation (§8.8): `user`'s devices have stored
   * it up to `upTo` (`delivered`: its delivered entries, kind 8), or `user` has read up to
   * `upTo` (`read`: its receipts, kind 2, which move its delivered mark too: `delivered` comes
   * first then). From the entries of the user's log and the server's ConvInfo after a rebase.
   * Marks only move forward: once per move, never backwards. The user's own marks are not told.
   */
  delivery: { conv: string; user: string; state: DeliveryState; upTo: number };
  /**
   * A message this user sent (from any of its devices) moved forward, past `sent`: `delivered`
   * (a device of another member has stored it) or `read` (another member has read it). In a
   * group, as soon as ONE other member's mark covers it (exact numbers: {@link Client.receipts}).
   * Once per step per message, in order, never backwards: a message read before it was reported
   * delivered gets `delivered` then `read`. Only for messages this device has stored (the others'
   * status is {@link Client.statusOf}'s answer). `convSeq` and `msgId` are the message's.
   */
  messageStatus: { conv: string; convSeq: number; msgId: string; status: DeliveryState };
  /** The device has stored the user's log up to the head a Heartbeat or Batch proved: caught up. Once per catch-up. */
  synced: { epoch: bigint; head: number };
  /**
   * The serving node cannot prove the head (§6 Stale): show "connecting…", not "up to date". Once
   * per episode. `source`: the large group whose replica said it first ("" for the user's log).
   */
  stale: { epoch: bigint; head: number; unheardMs: number; source: string };
  /**
   * A batch did not continue the cursor; nothing was stored and the stream restarted from the
   * cursor (nothing skipped). Reported to the server once per incident (§8.7). `source`: the
   * large group whose batch it was (`at` is then a conv_seq), "" for the user's log; a
   * SourceEnd beyond the source's cursor is a gap too.
   */
  gap: { sub: number; at: number; source: string };
  /**
   * What the device stored of sub-log `sub` over positions `from`..`to` differs from the
   * server's log (a digest check, §8.7: a storage bug, a database restored from a backup).
   * `refetching` true: the SDK reported it to the server, dropped its copy from `from` on and
   * is fetching it again — entries re-arrive as `entry` events (`duplicate` for msg_ids already
   * stored, their stored copy replaced): reload what is shown once `synced` follows. false: it
   * still differed after a refetch; the SDK keeps what the server sent and does not try again
   * (a bug of the store or the server: worth telling its developers).
   */
  mismatch: { sub: number; epoch: bigint; from: number; to: number; refetching: boolean };
  /**
   * The cursor was too old or too far behind: the SDK loaded the conversations' state and recent
   * history and jumped to the head. With `source` set, it was that large group's cursor alone
   * (its state and recent history loaded, its cursor moved to the conversation's head).
   */
  rebase: { sub: number; epoch: bigint; head: number; source: string };
  /**
   * The user's log was re-created (restored from a backup): resynced from the new epoch, local
   * messages kept. With `source` set, it was that large group's conversation log.
   */
  epoch: { sub: number; epoch: bigint; source: string };
  /**
   * Revision 6: the device no longer follows large group `source` (§6 SourceEnd): the user was
   * removed from it (its last entry for the user is `last`), and its cursor was dropped. If the
   * user is added again, the group's entries come again from its source.
   */
  sourceEnd: { source: string; last: number };
  /** Another sync stream of this device (another tab?) took over; this client stopped syncing on this connection. */
  superseded: Record<string, never>;
  /**
   * Syncing failed `failures` times in a row (3 or more) without progress, most recently with
   * `error`. The SDK keeps trying with backoff; a `synced` event says it works again. Worth
   * showing when it lasts: a refused token (a ProtoError with code 10 or 11), an unreachable
   * server, a failing store.
   */
  failed: { error: Error; failures: number };
  /** A connection was made with this transport (and why this one). */
  transport: TransportChoice & { endpoint: number };
  /**
   * What the store is, at open and when it changes: `persistent` false means nothing survives a
   * reload (memory, or IndexedDB unavailable: private browsing) — show "not saved on this
   * device"; `persisted` is the browser's answer to `navigator.storage.persist()`.
   */
  storage: StoreInfo;
  /**
   * The local copy was found lost or inconsistent (the database evicted or deleted, a cursor
   * ahead of its entries): the SDK resyncs the user's log from the server. Reload what is shown
   * once `synced` follows. Outbox items queued before a loss that the store no longer held are gone.
   */
  resync: { reason: string };
  /**
   * This tab's part among the tabs of the device (same store, same device): `leader` holds the
   * connection; a `follower` reads the shared store, gets the leader's news, and its sends go
   * through the shared outbox (the leader sends them). `single`: no coordination (a memory
   * store, or a browser without Web Locks / BroadcastChannel). A follower becomes leader when
   * the leader's tab closes.
   */
  role: { role: "leader" | "follower" | "single" };
  /** The page's network status changed (`online`/`offline` events): the SDK reconnects at once when it comes back. */
  network: { online: boolean };
  /** The connection's state changed. `retryInMs`: when disconnected, the wait before the next attempt. */
  connection: { state: "connecting" | "connected" | "disconnected" | "closed"; error?: Error; retryInMs?: number };
}

/** The messageChanged event an entry gives once stored as new, or null (another kind, folded, no target). */
export function messageChangeOf(entry: Entry): ClientEvents["messageChanged"] | null {
  if (entry.folded || entry.target === "" || entry.conv === "") return null;
  const cause = entry.kind === Kind.Recall ? "recall" : entry.kind === Kind.Edit ? "edit" : entry.kind === Kind.Reaction ? "reaction" : null;
  return cause && { conv: entry.conv, msgId: entry.target, cause, entry };
}

/** An event name. */
export type ClientEventName = keyof ClientEvents;

/** A minimal typed event emitter. */
export class Emitter {
  private readonly listeners = new Map<ClientEventName, Set<(e: never) => void>>();

  constructor(private readonly onListenerError: (err: unknown) => void) {}

  /** Calls fn for every event of this name; returns the function that removes it. */
  on<K extends ClientEventName>(name: K, fn: (e: ClientEvents[K]) => void): () => void {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
    };
  }

  /** Delivers an event; a throwing listener is reported and does not stop the others (or the SDK). */
  emit<K extends ClientEventName>(name: K, e: ClientEvents[K]): void {
    for (const fn of this.listeners.get(name) ?? []) {
      try {
        (fn as (e: ClientEvents[K]) => void)(e);
      } catch (err) {
        this.onListenerError(err);
      }
    }
  }
}
