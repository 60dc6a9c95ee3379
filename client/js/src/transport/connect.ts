// Choosing the transport of a connection (§2.3, §2.4): WebTransport first, WebSocket after a head
// start, keep the winner — and never for good.
//
// Why this shape (shared/research/browser-feasibility.md, browser-clients.md §8):
// * A silently dropped UDP port (a corporate firewall) makes WebTransport's `ready` hang for
//   seconds, so waiting for it to fail before trying WebSocket costs that long; racing with a head
//   start costs a UDP-blocked user only the head start.
// * Chromium throttles failed WebTransport handshakes (exponential, per page, minutes of
//   penalty that also delays good handshakes), so a failure is remembered per endpoint for a
//   while (`webTransportRetryMs`) and WebTransport is not tried again before it has passed.
// * The memory expires: a client that fell back once (a flaky network, a server restart) comes
//   back to WebTransport at its next connection after the TTL (centrifuge-js kept the loser until
//   the page reloaded, its issue #432).

import { dialWebSocket, type WebSocketDialOptions } from "./websocket.js";
import { dialWebTransport, webTransportAvailable, type WebTransportDialOptions } from "./webtransport.js";
import type { Connection, TransportKind } from "./types.js";

/** Where a node is reached: its WebTransport and WebSocket URLs (either may be absent). */
export interface Endpoint {
  /** `https://host:port/syncd/1` (§2.3). */
  webTransportUrl?: string;
  /** `wss://host:port/syncd/1`, or `ws://` for a node on a loopback address (§2.4). */
  webSocketUrl?: string;
  /** SHA-256 hashes to pin for WebTransport (§2.3), of every certificate the node may present. */
  certificateHashes?: readonly (Uint8Array | string)[];
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * The endpoint of a node from its client address `host:port` (the same number serves UDP for
 * WebTransport and TCP for WebSocket): `https://host:port/syncd/1` and `wss://…`, or `ws://…` when
 * the host is a loopback address, which is what such a node serves (§2.4).
 */
export function endpointOf(addr: string, certificateHashes?: readonly (Uint8Array | string)[]): Endpoint {
  const host = addr.replace(/:\d+$/, "");
  const ws = isLoopback(host) ? "ws" : "wss";
  const ep: Endpoint = { webTransportUrl: `https://${addr}/syncd/1`, webSocketUrl: `${ws}://${addr}/syncd/1` };
  if (certificateHashes) ep.certificateHashes = certificateHashes;
  return ep;
}

/**
 * Why a transport was chosen (reported as the client's `transport` event):
 * * `webtransport`: WebTransport was ready first.
 * * `websocket-won`: WebSocket opened first (WebTransport slow or failing: UDP blocked?).
 * * `webtransport-failed`: WebTransport failed; WebSocket carried the connection.
 * * `webtransport-missing`: this browser has no WebTransport, or the endpoint has no WebTransport URL.
 * * `webtransport-failed-recently`: WebTransport failed to this endpoint less than the TTL ago; not tried.
 */
export type ChoiceReason = "webtransport" | "websocket-won" | "webtransport-failed" | "webtransport-missing" | "webtransport-failed-recently";

/** The transport a connection uses, and why. */
export interface TransportChoice {
  kind: TransportKind;
  reason: ChoiceReason;
  /** The URL connected to. */
  url: string;
  /** What went wrong with WebTransport, when it did. */
  detail?: string;
}

/** Options of a {@link Connector}. */
export interface ConnectorOptions {
  /** How long WebTransport may take before WebSocket is started too. Default 400 ms. */
  headStartMs?: number;
  /** How long a WebTransport failure keeps an endpoint on WebSocket. Default 10 minutes. */
  webTransportRetryMs?: number;
  /** Gives up on a connection attempt after this long. Default 10 s. */
  connectTimeoutMs?: number;
  /**
   * How long WebTransport may still take once WebSocket has failed to the same node. Default 2 s.
   * A WebSocket that fails means the node's TCP port did not take it (the node is down, most
   * often); a WebTransport handshake to a dead node's UDP port is never refused (Firefox waits
   * for the whole connect timeout), so waiting longer only delays the next attempt.
   */
  afterWebSocketFailedMs?: number;
  /** Dials WebTransport (default {@link dialWebTransport}; tests inject one). Return null when unavailable. */
  dialWebTransport?: ((url: string, opts: WebTransportDialOptions) => Promise<Connection>) | null;
  /** Dials WebSocket (default {@link dialWebSocket}). */
  dialWebSocket?: (url: string, opts: WebSocketDialOptions) => Promise<Connection>;
  /** The clock (default Date.now). */
  now?: () => number;
}

/**
 * Makes connections to endpoints with the transport choice above, and remembers WebTransport
 * failures per endpoint. One Connector per client: the memory is what makes the choice improve.
 */
export class Connector {
  private readonly headStartMs: number;
  private readonly retryMs: number;
  private readonly timeoutMs: number;
  private readonly graceMs: number;
  private readonly dialWT: ((url: string, opts: WebTransportDialOptions) => Promise<Connection>) | null;
  private readonly dialWS: (url: string, opts: WebSocketDialOptions) => Promise<Connection>;
  private readonly now: () => number;
  /** WebTransport URL → when WebTransport last failed (or lost the race) there. */
  private readonly failedAt = new Map<string, number>();

  constructor(opts: ConnectorOptions = {}) {
    this.headStartMs = opts.headStartMs ?? 400;
    this.retryMs = opts.webTransportRetryMs ?? 10 * 60_000;
    this.timeoutMs = opts.connectTimeoutMs ?? 10_000;
    this.graceMs = opts.afterWebSocketFailedMs ?? 2000;
    this.dialWT = opts.dialWebTransport !== undefined ? opts.dialWebTransport : webTransportAvailable() ? dialWebTransport : null;
    this.dialWS = opts.dialWebSocket ?? dialWebSocket;
    this.now = opts.now ?? Date.now;
  }

  /** Forgets every remembered WebTransport failure (e.g. on a network change: `online`). */
  forgetFailures(): void {
    this.failedAt.clear();
  }

  /** Connects to ep; rejects when no transport could connect within the timeout. */
  connect(ep: Endpoint): Promise<{ conn: Connection; choice: TransportChoice }> {
    const wtUrl = ep.webTransportUrl;
    const wsUrl = ep.webSocketUrl;
    let skipReason: ChoiceReason | null = null;
    if (!wtUrl || !this.dialWT) {
      skipReason = "webtransport-missing";
    } else {
      const at = this.failedAt.get(wtUrl);
      if (at !== undefined && this.now() - at < this.retryMs) skipReason = "webtransport-failed-recently";
    }
    if (skipReason !== null && !wsUrl) {
      return Promise.reject(new Error(`no transport to try: ${skipReason}, and no WebSocket URL`));
    }

    return new Promise((resolve, reject) => {
      const ctl = new AbortController();
      let settled = false;
      let wtError: string | undefined;
      let wsError: string | undefined;
      let wtState: "idle" | "running" | "failed" = "idle";
      let wsState: "idle" | "running" | "failed" = "idle";
      let wsTimer: ReturnType<typeof setTimeout> | undefined;
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      const timeout = setTimeout(() => {
        fail(`no transport connected within ${this.timeoutMs} ms`);
      }, this.timeoutMs);

      const done = (): void => {
        settled = true;
        clearTimeout(timeout);
        clearTimeout(wsTimer);
        clearTimeout(graceTimer);
        ctl.abort(); // the loser's attempt, if still running
      };
      const fail = (why: string, blameWebTransport = true): void => {
        if (settled) return;
        if (blameWebTransport && wtState === "running" && wtUrl) this.failedAt.set(wtUrl, this.now());
        done();
        reject(new Error(`cannot connect: ${why}${wtError ? `; WebTransport: ${wtError}` : ""}${wsError ? `; WebSocket: ${wsError}` : ""}`));
      };
      const win = (conn: Connection, choice: TransportChoice): void => {
        if (settled) {
          conn.close(); // lost the race after all
          return;
        }
        done();
        resolve({ conn, choice });
      };
      const startWS = (): void => {
        if (wsState !== "idle" || settled || !wsUrl) return;
        wsState = "running";
        clearTimeout(wsTimer);
        this.dialWS(wsUrl, { signal: ctl.signal }).then(
          (conn) => {
            let reason: ChoiceReason;
            if (skipReason !== null) reason = skipReason;
            else if (wtError !== undefined) reason = "webtransport-failed";
            else {
              reason = "websocket-won";
              // WebTransport was not ready after its head start and WebSocket's open: count it as
              // a failure, so the next connections do not pay the head start again for a while.
              if (wtUrl && !settled) this.failedAt.set(wtUrl, this.now());
            }
            const choice: TransportChoice = { kind: "websocket", reason, url: wsUrl };
            if (wtError !== undefined) choice.detail = wtError;
            win(conn, choice);
          },
          (e: unknown) => {
            wsState = "failed";
            wsError = e instanceof Error ? e.message : String(e);
            if (wtState !== "running") fail("every transport failed");
            else {
              // The node is likely down: give WebTransport a moment, then try again later
              // (WebTransport is not blamed: the node, not the path, was the problem).
              graceTimer = setTimeout(() => {
                fail(`WebSocket failed and WebTransport was not ready ${this.graceMs} ms later`, false);
              }, this.graceMs);
            }
          },
        );
      };

      if (skipReason === null && wtUrl && this.dialWT) {
        wtState = "running";
        const opts: WebTransportDialOptions = { signal: ctl.signal };
        if (ep.certificateHashes) opts.certificateHashes = ep.certificateHashes;
        this.dialWT(wtUrl, opts).then(
          (conn) => {
            this.failedAt.delete(wtUrl);
            win(conn, { kind: "webtransport", reason: "webtransport", url: wtUrl });
          },
          (e: unknown) => {
            wtState = "failed";
            wtError = e instanceof Error ? e.message : String(e);
            if (!settled) this.failedAt.set(wtUrl, this.now());
            if (!wsUrl) fail("WebTransport failed and there is no WebSocket URL");
            else if (wsState === "idle") startWS(); // no need to wait for the head start any more
            else if (wsState === "failed") fail("every transport failed");
          },
        );
        if (wsUrl) wsTimer = setTimeout(startWS, this.headStartMs);
      } else {
        startWS();
      }
    });
  }
}
