// The WebSocket mux of §2.4 against a scripted peer, and the transport choice.

import { test } from "node:test";
import assert from "node:assert/strict";

import { WebSocketConnection, RecordKind, INITIAL_WINDOW, MAX_DATA, type WebSocketLike } from "../src/transport/websocket.js";
import { Connector, endpointOf } from "../src/transport/connect.js";
import { StreamError, type CloseInfo, type Connection } from "../src/transport/types.js";
import { codeError, hashBytes, WebTransportConnection } from "../src/transport/webtransport.js";

interface Rec { id: number; kind: number; payload: Uint8Array; n?: number }

/** An in-memory WebSocket: what the client sends is recorded; the test plays the server. */
class FakeSocket implements WebSocketLike {
  binaryType = "blob";
  readyState = 1;
  sent: Rec[] = [];
  closedWith: { code?: number; reason?: string } | null = null;
  onopen: ((ev: Event) => unknown) | null = null;
  onmessage: ((ev: MessageEvent) => unknown) | null = null;
  onclose: ((ev: CloseEvent) => unknown) | null = null;
  onerror: ((ev: Event) => unknown) | null = null;

  send(data: Uint8Array): void {
    const v = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const payload = data.slice(5);
    const r: Rec = { id: v.getUint32(0), kind: data[4]!, payload };
    if (payload.length === 4 && r.kind !== RecordKind.Data) r.n = new DataView(payload.buffer).getUint32(0);
    this.sent.push(r);
  }
  close(code?: number, reason?: string): void {
    this.closedWith = { code, reason };
    this.readyState = 3;
  }
  closeCode(): number | undefined {
    return this.closedWith?.code;
  }
  /** The server sends a record. */
  deliver(id: number, kind: number, payload?: Uint8Array | number): void {
    const n = payload === undefined ? 0 : typeof payload === "number" ? 4 : payload.length;
    const b = new Uint8Array(5 + n);
    const v = new DataView(b.buffer);
    v.setUint32(0, id);
    b[4] = kind;
    if (typeof payload === "number") v.setUint32(5, payload);
    else if (payload) b.set(payload, 5);
    this.onmessage?.({ data: b.buffer } as MessageEvent);
  }
  deliverRaw(data: unknown): void {
    this.onmessage?.({ data } as MessageEvent);
  }
  serverClose(code: number, reason: string): void {
    this.readyState = 3;
    this.onclose?.({ code, reason } as CloseEvent);
  }
  take(): Rec[] {
    const out = this.sent;
    this.sent = [];
    return out;
  }
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

test("mux: stream ids increase from 1; DATA is cut at 65,536 bytes; FIN", async () => {
  const ws = new FakeSocket();
  const c = new WebSocketConnection(ws);
  assert.equal(ws.binaryType, "arraybuffer");
  const a = await c.openStream();
  const b = await c.openStream();
  await a.write(new Uint8Array(MAX_DATA + 10).fill(1));
  await b.write(Uint8Array.of(9));
  await a.end();
  const recs = ws.take();
  assert.deepEqual(recs.map((r) => [r.id, r.kind, r.payload.length]), [
    [1, RecordKind.Data, MAX_DATA],
    [1, RecordKind.Data, 10],
    [2, RecordKind.Data, 1],
    [1, RecordKind.Fin, 0],
  ]);
  await assert.rejects(a.write(Uint8Array.of(1)), StreamError);
  // Ids go by first record, not by creation: the server ignores a record below the highest id.
  const x = await c.openStream();
  const y = await c.openStream();
  await y.write(Uint8Array.of(1));
  await x.write(Uint8Array.of(2));
  x.stop(0); // a stream that sent nothing more is stopped on the wire
  const z = await c.openStream();
  z.stop(0); // one that never sent does not exist on the server: nothing goes out
  z.reset(0);
  assert.deepEqual(ws.take().map((r) => [r.id, r.kind]), [[3, RecordKind.Data], [4, RecordKind.Data], [4, RecordKind.Stop]]);
});

test("mux: a sender waits for credit beyond 262,144 bytes and goes on with CREDIT", async () => {
  const ws = new FakeSocket();
  const c = new WebSocketConnection(ws);
  const s = await c.openStream();
  let done = false;
  const w = s.write(new Uint8Array(INITIAL_WINDOW + 1000)).then(() => (done = true));
  await tick();
  const sent = ws.take().reduce((n, r) => n + r.payload.length, 0);
  assert.equal(sent, INITIAL_WINDOW);
  assert.equal(done, false);
  ws.deliver(1, RecordKind.Credit, 600);
  await tick();
  assert.equal(ws.take().reduce((n, r) => n + r.payload.length, 0), 600);
  assert.equal(done, false);
  ws.deliver(1, RecordKind.Credit, 10_000);
  await w;
  assert.equal(ws.take().reduce((n, r) => n + r.payload.length, 0), 400);
});

test("mux: CREDIT is granted once half the window is read; data beyond credit is a violation", async () => {
  const ws = new FakeSocket();
  const c = new WebSocketConnection(ws);
  const s = await c.openStream();
  await s.write(Uint8Array.of(1)); // opens the stream
  ws.take();
  const chunk = new Uint8Array(MAX_DATA);
  for (let i = 0; i < 4; i++) ws.deliver(1, RecordKind.Data, chunk); // the whole window
  assert.deepEqual(ws.take(), []); // nothing read yet: no credit
  await s.read();
  await s.read();
  const credit = ws.take();
  assert.deepEqual(credit.map((r) => [r.id, r.kind, r.n]), [[1, RecordKind.Credit, 2 * MAX_DATA]]);
  await s.read();
  await s.read();
  ws.take();
  // The window is now 262,144 + 131,072 + 131,072; send exactly that much more, then one byte too many.
  for (let i = 0; i < 4; i++) ws.deliver(1, RecordKind.Data, chunk);
  assert.equal(ws.closedWith, null);
  ws.deliver(1, RecordKind.Data, Uint8Array.of(1));
  assert.equal(ws.closeCode(), 4001);
  const info = await c.closed;
  assert.deepEqual([info.how, info.code], ["local", 1]);
});

test("mux: FIN ends reads after the queued bytes; RESET discards them with its code", async () => {
  const ws = new FakeSocket();
  const c = new WebSocketConnection(ws);
  const a = await c.openStream();
  const b = await c.openStream();
  await a.write(Uint8Array.of(1));
  await b.write(Uint8Array.of(1));
  const pending = a.read();
  ws.deliver(1, RecordKind.Data, Uint8Array.of(7, 8));
  assert.deepEqual(await pending, Uint8Array.of(7, 8));
  ws.deliver(1, RecordKind.Data, Uint8Array.of(9));
  ws.deliver(1, RecordKind.Fin);
  assert.deepEqual(await a.read(), Uint8Array.of(9));
  assert.equal(await a.read(), null);
  ws.deliver(2, RecordKind.Data, Uint8Array.of(5));
  ws.deliver(2, RecordKind.Reset, 46);
  await assert.rejects(b.read(), (e: unknown) => e instanceof StreamError && e.kind === "reset" && e.code === 46);
  // DATA after FIN breaks the protocol.
  ws.deliver(1, RecordKind.Data, Uint8Array.of(1));
  assert.equal(ws.closeCode(), 4001);
});

test("mux: STOP is answered by RESET with its code and fails writes; our STOP discards what follows", async () => {
  const ws = new FakeSocket();
  const c = new WebSocketConnection(ws);
  const s = await c.openStream();
  await s.write(Uint8Array.of(1));
  ws.take();
  ws.deliver(1, RecordKind.Stop, 5);
  assert.deepEqual(ws.take().map((r) => [r.id, r.kind, r.n]), [[1, RecordKind.Reset, 5]]);
  await assert.rejects(s.write(Uint8Array.of(1)), (e: unknown) => e instanceof StreamError && e.kind === "stop" && e.code === 5);
  // Our side: STOP, then the server's bytes in flight and its RESET are taken quietly.
  const t = await c.openStream();
  await t.write(Uint8Array.of(1));
  ws.take();
  t.stop(0);
  assert.deepEqual(ws.take().map((r) => [r.id, r.kind, r.n]), [[2, RecordKind.Stop, 0]]);
  await assert.rejects(t.read(), StreamError);
  ws.deliver(2, RecordKind.Data, Uint8Array.of(1));
  ws.deliver(2, RecordKind.Reset, 0);
  assert.equal(ws.closedWith, null);
  // A record for a stream no longer open is ignored (it crossed the stream's end) …
  await t.end();
  ws.deliver(2, RecordKind.Data, Uint8Array.of(1));
  assert.equal(ws.closedWith, null);
  // … but one for a stream never opened (the server opens none) breaks the protocol.
  ws.deliver(9, RecordKind.Data, Uint8Array.of(1));
  assert.equal(ws.closeCode(), 4001);
});

test("mux: malformed records close the connection", () => {
  const bad: [string, (ws: FakeSocket) => void][] = [
    ["text", (ws) => { ws.deliverRaw("hello"); }],
    ["short", (ws) => { ws.deliverRaw(new Uint8Array(4).buffer); }],
    ["id 0", (ws) => { ws.deliver(0, RecordKind.Fin); }],
    ["unknown kind", (ws) => { ws.deliver(1, 9); }],
    ["FIN with payload", (ws) => { ws.deliver(1, RecordKind.Fin, Uint8Array.of(1)); }],
    ["empty DATA", (ws) => { ws.deliver(1, RecordKind.Data, new Uint8Array(0)); }],
    ["DATA too long", (ws) => { ws.deliver(1, RecordKind.Data, new Uint8Array(MAX_DATA + 1)); }],
    ["CREDIT 0", (ws) => { ws.deliver(1, RecordKind.Credit, 0); }],
    ["RESET short", (ws) => { ws.deliver(1, RecordKind.Reset, Uint8Array.of(1, 2)); }],
  ];
  for (const [what, f] of bad) {
    const ws = new FakeSocket();
    const c = new WebSocketConnection(ws);
    void c.openStream();
    f(ws);
    assert.equal(ws.closeCode(), 4001, what);
  }
});

test("mux: close statuses: 4000 + code with §2's reason, 1000 normal, others lost", async () => {
  const cases: [number, string, Partial<CloseInfo>][] = [
    [4041, "retry_after_ms=1000; server overloaded", { how: "error", code: 41, retryAfterMs: 1000, reason: "server overloaded" }],
    [4011, "token expired", { how: "error", code: 11, retryAfterMs: 0, reason: "token expired" }],
    [1000, "", { how: "normal", code: 0 }],
    [1006, "", { how: "lost", code: 0 }],
  ];
  for (const [status, reason, want] of cases) {
    const ws = new FakeSocket();
    const c = new WebSocketConnection(ws);
    const s = await c.openStream();
    const r = s.read();
    ws.serverClose(status, reason);
    const info = await c.closed;
    for (const [k, v] of Object.entries(want)) assert.equal(info[k as keyof CloseInfo], v, `${status} ${k}`);
    await assert.rejects(r, StreamError);
    await assert.rejects(c.openStream(), StreamError);
  }
});

// --- the transport choice ---

class FakeConn implements Connection {
  closedByUs = false;
  readonly closed = new Promise<CloseInfo>(() => undefined);
  constructor(readonly kind: "webtransport" | "websocket") {}
  openStream(): Promise<never> {
    return Promise.reject(new Error("fake"));
  }
  close(): void {
    this.closedByUs = true;
  }
}

function dialer(kind: "webtransport" | "websocket", behaviour: { delayMs: number; fail?: boolean }, log: string[]) {
  return (url: string, opts: { signal?: AbortSignal }): Promise<Connection> =>
    new Promise((resolve, reject) => {
      log.push(`${kind} ${url}`);
      const t = setTimeout(() => {
        if (behaviour.fail) reject(new Error(`${kind} refused`));
        else resolve(new FakeConn(kind));
      }, behaviour.delayMs);
      opts.signal?.addEventListener("abort", () => {
        clearTimeout(t);
        reject(new Error("aborted"));
      });
    });
}

test("connect: WebTransport ready within its head start wins; WebSocket is never started", async () => {
  const log: string[] = [];
  const c = new Connector({ headStartMs: 50, dialWebTransport: dialer("webtransport", { delayMs: 5 }, log), dialWebSocket: dialer("websocket", { delayMs: 1 }, log) });
  const { conn, choice } = await c.connect(endpointOf("node1:4433"));
  assert.equal(conn.kind, "webtransport");
  assert.deepEqual(choice, { kind: "webtransport", reason: "webtransport", url: "https://node1:4433/syncd/1" });
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(log, ["webtransport https://node1:4433/syncd/1"]);
});

test("connect: a slow WebTransport loses to WebSocket, is remembered, and is probed again after the TTL", async () => {
  let now = 1_000_000;
  const log: string[] = [];
  const c = new Connector({
    headStartMs: 10,
    webTransportRetryMs: 60_000,
    now: () => now,
    dialWebTransport: dialer("webtransport", { delayMs: 200 }, log),
    dialWebSocket: dialer("websocket", { delayMs: 1 }, log),
  });
  const ep = endpointOf("localhost:4433");
  const first = await c.connect(ep);
  assert.deepEqual([first.conn.kind, first.choice.reason, first.choice.url], ["websocket", "websocket-won", "ws://localhost:4433/syncd/1"]);
  const second = await c.connect(ep);
  assert.equal(second.choice.reason, "webtransport-failed-recently");
  assert.deepEqual(log.filter((l) => l.startsWith("webtransport")).length, 1, "WebTransport not retried within the TTL");
  now += 60_001;
  await c.connect(ep);
  assert.equal(log.filter((l) => l.startsWith("webtransport")).length, 2, "WebTransport probed again after the TTL");
});

test("connect: a failing WebTransport starts WebSocket at once; WebTransport missing goes straight to WebSocket", async () => {
  const log: string[] = [];
  const c = new Connector({ headStartMs: 10_000, dialWebTransport: dialer("webtransport", { delayMs: 1, fail: true }, log), dialWebSocket: dialer("websocket", { delayMs: 1 }, log) });
  const t0 = Date.now();
  const { choice } = await c.connect(endpointOf("n:1"));
  assert.ok(Date.now() - t0 < 1000, "did not wait for the head start");
  assert.equal(choice.reason, "webtransport-failed");
  assert.match(choice.detail ?? "", /refused/);
  const none = new Connector({ dialWebTransport: null, dialWebSocket: dialer("websocket", { delayMs: 1 }, log) });
  assert.equal((await none.connect(endpointOf("n:1"))).choice.reason, "webtransport-missing");
  const bothFail = new Connector({ headStartMs: 1, dialWebTransport: dialer("webtransport", { delayMs: 5, fail: true }, log), dialWebSocket: dialer("websocket", { delayMs: 1, fail: true }, log) });
  await assert.rejects(bothFail.connect(endpointOf("n:1")), /WebTransport: webtransport refused; WebSocket: websocket refused/);
});

test("endpoints and certificate hashes", () => {
  assert.deepEqual(endpointOf("10.0.0.1:4433"), { webTransportUrl: "https://10.0.0.1:4433/syncd/1", webSocketUrl: "wss://10.0.0.1:4433/syncd/1" });
  assert.equal(endpointOf("127.0.0.1:4433").webSocketUrl, "ws://127.0.0.1:4433/syncd/1");
  assert.equal(endpointOf("[::1]:4433").webSocketUrl, "ws://[::1]:4433/syncd/1");
  const hex = "ab".repeat(32);
  assert.deepEqual(hashBytes(hex), new Uint8Array(32).fill(0xab));
  assert.deepEqual(hashBytes(Array(32).fill("AB").join(":")), new Uint8Array(32).fill(0xab));
  assert.throws(() => hashBytes("abc"), RangeError);
});

// --- WebTransport wrapper, against a fake session built from Node's WHATWG streams ---

function fakeWebTransport(closed: Promise<WebTransportCloseInfo>) {
  const aborted: unknown[] = [];
  const cancelled: unknown[] = [];
  let readCtl!: ReadableStreamDefaultController<Uint8Array>;
  const written: Uint8Array[] = [];
  const readable = new ReadableStream<Uint8Array>({
    start: (c) => {
      readCtl = c;
    },
    cancel: (reason) => {
      cancelled.push(reason);
    },
  });
  const writable = new WritableStream<Uint8Array>({
    write: (chunk) => {
      written.push(chunk);
    },
    abort: (reason) => {
      aborted.push(reason);
    },
  });
  const wt = {
    closed,
    closedWith: null as WebTransportCloseInfo | null,
    createBidirectionalStream: () => Promise.resolve({ readable, writable }),
    close(info: WebTransportCloseInfo) {
      this.closedWith = info;
    },
  };
  return { wt, readCtl: () => readCtl, written, aborted, cancelled };
}

test("webtransport: session close code and reason (§2 grammar); a lost session; stream codes both ways", async () => {
  const f = fakeWebTransport(Promise.resolve({ closeCode: 41, reason: "retry_after_ms=1000; overloaded" }));
  const c = new WebTransportConnection(f.wt as unknown as WebTransport);
  assert.deepEqual(await c.closed, { how: "error", code: 41, reason: "overloaded", retryAfterMs: 1000 });
  const lost = new WebTransportConnection(fakeWebTransport(Promise.reject(new Error("network"))).wt as unknown as WebTransport);
  assert.equal((await lost.closed).how, "lost");
  const normal = new WebTransportConnection(fakeWebTransport(Promise.resolve({ closeCode: 0, reason: "" })).wt as unknown as WebTransport);
  assert.equal((await normal.closed).how, "normal");

  const g = fakeWebTransport(new Promise(() => undefined));
  const conn = new WebTransportConnection(g.wt as unknown as WebTransport);
  const s = await conn.openStream();
  await s.write(Uint8Array.of(1, 2));
  assert.deepEqual(g.written, [Uint8Array.of(1, 2)]);
  g.readCtl().enqueue(Uint8Array.of(3));
  assert.deepEqual(await s.read(), Uint8Array.of(3));
  // The server resets its side with a code: the read fails with it.
  g.readCtl().error({ streamErrorCode: 46 });
  await assert.rejects(s.read(), (e: unknown) => e instanceof StreamError && e.kind === "reset" && e.code === 46);
  s.reset(45);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(g.aborted, [{ streamErrorCode: 45 }]);
  conn.close(0, "bye");
  assert.deepEqual((g.wt as { closedWith: unknown }).closedWith, { closeCode: 0, reason: "bye" });
});

test("webtransport: stream codes are built in whichever WebTransportError form the browser takes, and never throw", () => {
  const g = globalThis as { WebTransportError?: unknown };
  const saved = g.WebTransportError;
  try {
    // Chromium 148 and Firefox 140: one dictionary; a string first argument throws.
    g.WebTransportError = class {
      streamErrorCode: number | null;
      constructor(init: unknown) {
        if (typeof init !== "object" || init === null) throw new TypeError("not of type 'WebTransportErrorInit'");
        this.streamErrorCode = (init as { streamErrorCode?: number }).streamErrorCode ?? null;
      }
    };
    assert.equal((codeError(300 + 42) as { streamErrorCode: number }).streamErrorCode, 42 + 300 - 256);
    // The spec's form: (message, {source, streamErrorCode}).
    g.WebTransportError = class {
      streamErrorCode: number | null;
      constructor(message: unknown, opts?: { streamErrorCode?: number }) {
        if (typeof message !== "string") throw new TypeError("message must be a string");
        this.streamErrorCode = opts?.streamErrorCode ?? null;
      }
    };
    assert.equal((codeError(5) as { streamErrorCode: number }).streamErrorCode, 5);
    // A constructor that refuses everything: a plain reason, no exception.
    g.WebTransportError = function refuse(): never {
      throw new TypeError("nope");
    };
    assert.deepEqual(codeError(9), { streamErrorCode: 9 });
  } finally {
    g.WebTransportError = saved;
  }
});

test("connect: WebTransport hanging after WebSocket failed (a node down) ends the attempt after the grace, without blaming WebTransport", async () => {
  const log: string[] = [];
  let wtHangs = true;
  const c = new Connector({
    headStartMs: 10, connectTimeoutMs: 5000, afterWebSocketFailedMs: 100,
    dialWebTransport: (url, opts) => (wtHangs ? dialer("webtransport", { delayMs: 60_000 }, log)(url, opts) : dialer("webtransport", { delayMs: 1 }, log)(url, opts)),
    dialWebSocket: dialer("websocket", { delayMs: 1, fail: true }, log),
  });
  const t0 = Date.now();
  await assert.rejects(c.connect(endpointOf("n:1")), /WebSocket failed and WebTransport was not ready 100 ms later/);
  assert.ok(Date.now() - t0 < 1000, `gave up after ${Date.now() - t0} ms, not at the 5 s connect timeout`);
  // The node is back: WebTransport is tried again at once (not remembered as failed).
  wtHangs = false;
  assert.equal((await c.connect(endpointOf("n:1"))).choice.reason, "webtransport");
});
