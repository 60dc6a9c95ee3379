// The outbox (§8.3): every mutation is written to the store before it goes to the network, sent
// with its cmid until acknowledged, retried on a bounded schedule, and failed after it.
//
// Ordering: one item in flight per conversation (a message sent after another one's Ack is
// ordered after it; two in flight together may land in either order, §8.3.7), conversations in
// parallel. An item waiting for its retry holds back the later items of its conversation only.
// This is finer than the Go SDK, which sends the whole outbox one item at a time.

import { Code, ProtoError, retryable } from "./codes.js";
import { FrameType, Kind, type Ack, type Mutation, type PartialOf, type Response, type WireLimits } from "./frames.js";
import type { Clock, TimerHandle } from "./clock.js";
import type { OutboxItem, Store } from "./store.js";
import type { Logger, Session } from "./session.js";

/** The default retry schedule: 1 s, 3 s, 7 s, 15 s, 30 s, each plus 0–50 % jitter (§8.3.4). */
export const DEFAULT_RETRY_MS: readonly number[] = [1000, 3000, 7000, 15000, 30000];

/** What the outbox tells the client. */
export interface OutboxHooks {
  /** An item changed status (sent, failed, or sending again after a manual retry). */
  status(item: OutboxItem, error: Error | null): void;
  /** The node answered `unavailable` to `count` attempts in a row (§8.3.4: move on after two). */
  unavailable(count: number): void;
  /** An item was written to (or removed from) the store: other tabs of the device reload it. */
  changed?(cmid: string): void;
}

/** The request frame of an item. */
export function itemFrame(it: OutboxItem, id: number): PartialOf<Mutation> {
  const head = { id, conv: it.conv, cmid: it.cmid };
  switch (it.kind) {
    case Kind.Receipt:
      return { type: FrameType.MarkRead, ...head, upTo: it.upTo };
    case Kind.Recall:
      return { type: FrameType.Recall, ...head, target: it.target };
    case Kind.GroupCreate:
      return { type: FrameType.CreateGroup, ...head, members: it.members };
    case Kind.MemberAdd:
      return { type: FrameType.AddMembers, ...head, members: it.members };
    case Kind.MemberRemove:
      return { type: FrameType.RemoveMembers, ...head, members: it.members };
    case Kind.RoleChange:
      return { type: FrameType.SetRole, ...head, members: it.members, role: it.role };
    case Kind.Edit:
      return { type: FrameType.Edit, ...head, target: it.target, body: it.body };
    case Kind.Reaction:
      return { type: FrameType.React, ...head, target: it.target, reaction: it.reaction ?? "", remove: it.remove ?? false };
  }
  return { type: FrameType.Send, ...head, body: it.body, peer: it.peer };
}

/**
 * A token bucket of the server's own shape (send_rate_per_s sustained, send_burst at once), one
 * mutation smaller than the server's, as the Go SDK: the server counts arrivals, which the
 * network spaces less evenly than the sends. It lives across connections, as the server's bucket
 * is the device's.
 */
class Pacer {
  private tokens = 0;
  private last = 0;
  private primed = false;

  /** How long to wait before the next mutation may go (0: now, and a token is taken). */
  take(l: WireLimits, now: number): number {
    const rate = l.sendRatePerS;
    if (rate === 0) return 0;
    const burst = Math.max((l.sendBurst || rate) - 1, 1);
    if (!this.primed) {
      this.tokens = burst;
      this.last = now;
      this.primed = true;
    }
    this.tokens = Math.min(burst, this.tokens + ((now - this.last) / 1000) * rate);
    this.last = now;
    if (this.tokens < 1) return Math.ceil(((1 - this.tokens) / rate) * 1000);
    this.tokens -= 1;
    return 0;
  }
}

/** The outbox: a mirror of the store's items, and the scheduler that sends them. */
export class Outbox {
  private readonly items = new Map<string, OutboxItem>();
  private readonly inFlight = new Set<string>(); // conversations with an item in flight
  private session: Session | null = null;
  private timer: TimerHandle | null = null;
  private timerAt = 0;
  private unavailableRun = 0;
  private nextSeq = 1;
  private closed = false;
  private readonly pacer = new Pacer();

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly retryMs: readonly number[],
    private readonly hooks: OutboxHooks,
    private readonly log: Logger,
  ) {}

  /** Takes the items loaded from the store (an app restart: `sending` items resume, §8.3.6). */
  load(items: readonly OutboxItem[]): void {
    for (const it of items) {
      this.items.set(it.cmid, it);
      this.nextSeq = Math.max(this.nextSeq, it.seq + 1);
    }
  }

  /**
   * Takes an item as another tab of the device wrote it to the shared store (undefined: it was
   * removed). A status change is reported as this tab's own would be; a `sending` item is sent
   * if this tab holds the connection.
   */
  adopt(cmid: string, stored: OutboxItem | undefined): void {
    if (this.closed) return;
    const had = this.items.get(cmid);
    if (!stored) {
      this.items.delete(cmid);
      return;
    }
    this.items.set(cmid, stored);
    this.nextSeq = Math.max(this.nextSeq, stored.seq + 1);
    if (had && had.status !== stored.status) {
      this.hooks.status(structuredClone(stored), stored.status === "failed" ? new Error(stored.lastError || "failed") : null);
    }
    this.pump();
  }

  /** Writes every item to the store again (after the store was found lost: nothing queued is dropped). */
  async rewrite(): Promise<void> {
    for (const it of this.items.values()) await this.store.putOutbox(it);
  }

  /** Every item, in queueing order. */
  list(): OutboxItem[] {
    return [...this.items.values()].sort((a, b) => a.seq - b.seq).map((it) => structuredClone(it));
  }

  /** One item by cmid. */
  get(cmid: string): OutboxItem | undefined {
    const it = this.items.get(cmid);
    return it && structuredClone(it);
  }

  /** Queues an item: durable in the store before this resolves, and before any attempt (§8.3.1). */
  async add(fields: Pick<OutboxItem, "kind" | "conv"> & Partial<OutboxItem>, cmid: string): Promise<OutboxItem> {
    if (this.items.has(cmid)) throw new Error(`syncd: cmid ${cmid} is already in the outbox`);
    const it: OutboxItem = {
      peer: "", body: new Uint8Array(0), upTo: 0, target: "", members: [], role: 0,
      ...fields,
      // The order of queueing across the device's tabs too: the clock (µs) when it is ahead.
      cmid, seq: this.takeSeq(), status: "sending", attempts: 0, nextAttemptAt: 0, ack: null, lastError: "", errorCode: 0, createdAt: this.clock.now(),
    };
    await this.store.putOutbox(it);
    this.items.set(cmid, it);
    this.hooks.changed?.(cmid);
    this.pump();
    return structuredClone(it);
  }

  private takeSeq(): number {
    const seq = Math.max(this.nextSeq, this.clock.now() * 1000);
    this.nextSeq = seq + 1;
    return seq;
  }

  /** A failed item goes back to sending, with the same cmid and a fresh schedule (a user's retry). */
  async retry(cmid: string): Promise<void> {
    const it = this.items.get(cmid);
    if (!it) throw new Error(`syncd: no outbox item ${cmid}`);
    if (it.status !== "failed") return;
    const next = { ...it, status: "sending" as const, attempts: 0, nextAttemptAt: 0, lastError: "", errorCode: 0 };
    await this.store.putOutbox(next);
    this.items.set(cmid, next);
    this.hooks.changed?.(cmid);
    this.hooks.status(structuredClone(next), null);
    this.pump();
  }

  /** Removes an item that is sent or failed. */
  async remove(cmid: string): Promise<void> {
    const it = this.items.get(cmid);
    if (!it) return;
    if (it.status === "sending") throw new Error("syncd: an item still sending cannot be removed");
    await this.store.deleteOutbox(cmid);
    this.items.delete(cmid);
    this.hooks.changed?.(cmid);
  }

  /** The connection to send on (null while offline): pending items go out on the new one (§8.6). */
  setSession(s: Session | null): void {
    this.session = s;
    this.unavailableRun = 0;
    this.pump();
  }

  /** Stops everything (the client closes): nothing in flight counts as an attempt. */
  close(): void {
    this.closed = true;
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
  }

  /** Starts every item that is due, and sets a timer for the next one. */
  pump(): void {
    if (this.closed) return;
    const now = this.clock.now();
    const heads = new Map<string, OutboxItem>(); // the oldest sending item of each conversation
    for (const it of [...this.items.values()].sort((a, b) => a.seq - b.seq)) {
      if (it.status === "sending" && !heads.has(it.conv)) heads.set(it.conv, it);
    }
    let next = Infinity;
    const s = this.session;
    for (const it of heads.values()) {
      if (this.inFlight.has(it.conv)) continue;
      if (it.nextAttemptAt > now) {
        next = Math.min(next, it.nextAttemptAt);
        continue;
      }
      if (!s || s.isEnded) continue; // offline: setSession pumps again
      const wait = this.pacer.take(s.limits, now);
      if (wait > 0) {
        next = Math.min(next, now + wait);
        break; // the bucket is empty for every conversation
      }
      this.inFlight.add(it.conv);
      void this.attempt(s, it).finally(() => {
        this.inFlight.delete(it.conv);
        this.pump();
      });
    }
    this.schedule(next);
  }

  private schedule(at: number): void {
    if (this.timer !== null && this.timerAt === at) return;
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
    if (at === Infinity) return;
    this.timerAt = at;
    this.timer = this.clock.setTimeout(() => {
      this.timer = null;
      this.pump();
    }, at - this.clock.now());
  }

  /** One attempt at an item, and its outcome recorded. */
  private async attempt(s: Session, it: OutboxItem): Promise<void> {
    this.log("debug", "outbox: sending", { cmid: it.cmid, attempt: it.attempts + 1 });
    let answer: Response | null = null;
    let error: Error | null = null;
    try {
      answer = await s.request((id) => itemFrame(it, id));
    } catch (e) {
      error = e instanceof Error ? e : new Error(String(e));
    }
    if (this.closed) return; // closing: not an attempt
    if (answer?.type === FrameType.Error) {
      error = new ProtoError(answer.code, answer.message, answer.retryAfterMs, answer.id);
      this.unavailableRun = answer.code === Code.Unavailable ? this.unavailableRun + 1 : 0;
      if (answer.code === Code.Unavailable) this.hooks.unavailable(this.unavailableRun);
    } else if (answer) {
      this.unavailableRun = 0;
    }
    try {
      if (answer && answer.type === FrameType.Ack) {
        await this.finish(it, "sent", answer, null);
      } else if (answer && answer.type !== FrameType.Error) {
        await this.finish(it, "failed", null, new Error(`syncd: unexpected answer ${answer.type} to a mutation`));
      } else if (error instanceof ProtoError && !retryable(error.code) && (answer || error.code === Code.TooLarge)) {
        // A refusal: final. already_recalled means the recall is done (§8.3.5) — an edit or a
        // reaction refused so failed; conflict is a client bug (a cmid reused with another
        // payload): never "fixed" by a new cmid.
        if (error.code === Code.AlreadyRecalled && it.kind === Kind.Recall) await this.finish(it, "sent", null, null);
        else {
          if (error.code === Code.Conflict) this.log("error", "conflict: a cmid was reused with a different payload (client bug)", { cmid: it.cmid });
          await this.finish(it, "failed", null, error);
        }
      } else {
        // Retryable: a retryable code, no answer in time, or the stream/connection lost while in
        // flight (outcome unknown: the resend with the same cmid is deduplicated).
        await this.retryLater(it, error ?? new Error("no answer"));
      }
    } catch (e) {
      this.log("error", "outbox: cannot store an outcome", { cmid: it.cmid, err: String(e) });
    }
  }

  private async retryLater(it: OutboxItem, err: Error): Promise<void> {
    const attempts = it.attempts + 1;
    if (attempts > this.retryMs.length) {
      await this.finish({ ...it, attempts: attempts - 1 }, "failed", null, new Error(`syncd: gave up after ${attempts} attempts: ${err.message}`, { cause: err }), err);
      return;
    }
    const base = this.retryMs[attempts - 1] ?? 0;
    const wait = base + Math.floor(this.clock.random() * (base / 2 + 1)); // + 0–50 % jitter
    const retryAfter = err instanceof ProtoError ? err.retryAfterMs : 0;
    const next: OutboxItem = { ...it, attempts, nextAttemptAt: this.clock.now() + Math.max(wait, retryAfter), lastError: err.message, errorCode: err instanceof ProtoError ? err.code : 0 };
    this.log("debug", "outbox: an attempt failed; retrying", { cmid: it.cmid, attempts, err: err.message, inMs: next.nextAttemptAt - this.clock.now() });
    await this.store.putOutbox(next);
    this.items.set(it.cmid, next);
    this.hooks.changed?.(it.cmid);
  }

  private async finish(it: OutboxItem, status: "sent" | "failed", ack: Ack | null, err: Error | null, codeFrom: Error | null = err): Promise<void> {
    const next: OutboxItem = {
      ...it,
      status,
      ack,
      attempts: it.attempts + 1,
      nextAttemptAt: 0,
      lastError: err ? err.message : "",
      errorCode: codeFrom instanceof ProtoError ? codeFrom.code : 0,
    };
    await this.store.putOutbox(next);
    this.items.set(it.cmid, next);
    this.hooks.changed?.(it.cmid);
    this.hooks.status(structuredClone(next), err);
  }
}
