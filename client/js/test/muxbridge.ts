// The server side of the §2.4 WebSocket mux, for tests: the client's WebSocketConnection talks
// records to it; it turns them into the in-memory streams the FakeNode serves, with the window and
// CREDIT rules of §2.4 in the server → client direction.

import { RecordKind, INITIAL_WINDOW, MAX_DATA, WebSocketConnection, type WebSocketLike } from "../src/transport/websocket.js";
import { StreamError, type Connection } from "../src/transport/types.js";
import { MemStream, Pipe, ServerStream, type FakeNode } from "./fakeserver.js";

function rec(id: number, kind: number, payload?: Uint8Array | number): ArrayBuffer {
  const n = payload === undefined ? 0 : typeof payload === "number" ? 4 : payload.length;
  const b = new Uint8Array(5 + n);
  const v = new DataView(b.buffer);
  v.setUint32(0, id);
  b[4] = kind;
  if (typeof payload === "number") v.setUint32(5, payload);
  else if (payload) b.set(payload, 5);
  return b.buffer;
}

/** What the bridge saw, for assertions. */
export interface BridgeStats {
  creditsFromClient: number;
  dataRecordsToClient: number;
}

/** Dials the node through a WebSocket mux: returns the client's WebSocketConnection. */
export function dialThroughMux(node: FakeNode, stats: BridgeStats): Promise<Connection> {
  const sc = node.accept();
  const c2s = new Map<number, Pipe>();
  const s2c = new Map<number, { pipe: Pipe; credit: number; wake: (() => void) | null }>();
  let open = true;
  let highest = 0; // as the server (syncd/transport/websocket.go): the highest stream id the client used
  const ws: WebSocketLike = {
    binaryType: "arraybuffer",
    readyState: 1,
    onopen: null,
    onmessage: null,
    onclose: null,
    onerror: null,
    send(data: Uint8Array) {
      const v = new DataView(data.buffer, data.byteOffset, data.byteLength);
      const id = v.getUint32(0);
      const kind = data[4]!;
      const payload = data.slice(5);
      let inbound = c2s.get(id);
      if (!inbound) {
        // §2.4: a record for a lower id that is not open is ignored (it crossed the stream's end).
        if (id <= highest) return;
        highest = id;
        inbound = new Pipe();
        const outbound = new Pipe();
        c2s.set(id, inbound);
        const out = { pipe: outbound, credit: INITIAL_WINDOW, wake: null as (() => void) | null };
        s2c.set(id, out);
        const server = new ServerStream(new MemStream(inbound, outbound));
        sc.streams.push(server);
        sc.onStream?.(server, sc.streams.length - 1);
        void pumpOut(id, out);
      }
      switch (kind) {
        case RecordKind.Data:
          inbound.chunks.push(payload);
          inbound.wake();
          // The server reads at once: grant the bytes back.
          deliver(rec(id, RecordKind.Credit, payload.length));
          break;
        case RecordKind.Fin:
          inbound.end = null;
          inbound.wake();
          break;
        case RecordKind.Reset:
          inbound.end = new StreamError("reset", v.getUint32(5));
          inbound.wake();
          break;
        case RecordKind.Stop: {
          const o = s2c.get(id)!;
          o.pipe.stopped = new StreamError("stop", v.getUint32(5));
          if (o.pipe.end === undefined) {
            o.pipe.end = o.pipe.stopped;
            deliver(rec(id, RecordKind.Reset, v.getUint32(5)));
          }
          break;
        }
        case RecordKind.Credit: {
          stats.creditsFromClient++;
          const o = s2c.get(id)!;
          o.credit += v.getUint32(5);
          o.wake?.();
          break;
        }
      }
    },
    close(_code?: number, reason?: string) {
      if (!open) return;
      open = false;
      endAll();
      sc.close(0, reason ?? "");
    },
  };
  /** The connection is gone: the server's streams end (their readers and writers fail). */
  const endAll = (): void => {
    const err = new StreamError("closed", 0, "connection closed");
    for (const p of c2s.values()) {
      if (p.end === undefined) p.end = err;
      p.wake();
    }
    for (const o of s2c.values()) {
      o.pipe.stopped ??= err;
      if (o.pipe.end === undefined) o.pipe.end = err;
      o.wake?.();
    }
  };
  const deliver = (b: ArrayBuffer): void => {
    if (open) ws.onmessage?.({ data: b } as MessageEvent);
  };
  const pumpOut = async (id: number, o: { pipe: Pipe; credit: number; wake: (() => void) | null }): Promise<void> => {
    for (;;) {
      const chunk = o.pipe.chunks[0];
      if (chunk && o.credit > 0) {
        const n = Math.min(chunk.length, MAX_DATA, o.credit);
        o.credit -= n;
        deliver(rec(id, RecordKind.Data, chunk.subarray(0, n)));
        stats.dataRecordsToClient++;
        if (n === chunk.length) o.pipe.chunks.shift();
        else o.pipe.chunks[0] = chunk.subarray(n);
        continue;
      }
      if (!chunk && o.pipe.end !== undefined) {
        if (o.pipe.end === null) deliver(rec(id, RecordKind.Fin));
        else if (o.pipe.end.kind === "reset") deliver(rec(id, RecordKind.Reset, o.pipe.end.code));
        return;
      }
      await new Promise<void>((r) => {
        o.wake = r;
        o.pipe.waiter = r;
      });
    }
  };
  const conn = new WebSocketConnection(ws);
  sc.resolveClosed = () => {
    // The server's close: status 4000 + code (1000 for 0) and the reason phrase (§2.4).
    const raw = sc.rawClose;
    if (!raw || !open) return;
    open = false;
    endAll();
    ws.onclose?.({ code: raw.code === 0 ? 1000 : 4000 + raw.code, reason: raw.reason } as CloseEvent);
  };
  return Promise.resolve(conn);
}
