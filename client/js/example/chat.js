// @ts-check
// The example chat: sign in, pick or start a direct conversation, send; every message shows its
// status (sending, sent, failed) and arrives on every device of both users, in order, once. The
// SDK keeps the messages and the outbox in IndexedDB where it can, so a reload or a tab opened
// offline shows what was stored and queues what is sent.

import * as syncd from "@syncd/client";

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const enc = new TextEncoder();
const dec = new TextDecoder();

/** @type {syncd.Client | null} */
let client = null;
let me = "";
let current = "";

/** The store: IndexedDB when this SDK build has it (messages survive a reload), else memory. */
async function openStore(/** @type {string} */ name) {
  const idb = /** @type {any} */ (syncd).IndexedDBStore;
  return idb ? idb.open(name) : new syncd.MemoryStore();
}

$("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const user = /** @type {HTMLInputElement} */ ($("user")).value.trim();
  let device = localStorage.getItem(`device:${user}`);
  if (!device) {
    device = `browser-${crypto.randomUUID().slice(0, 8)}`;
    localStorage.setItem(`device:${user}`, device);
  }
  const r = await fetch(`/session?user=${encodeURIComponent(user)}&device=${device}`);
  if (!r.ok) {
    $("state").textContent = `sign-in failed: ${await r.text()}`;
    return;
  }
  /** @type {{token: string, web: string, certHashes: string[]}} */
  const s = await r.json();
  me = user;
  client = await syncd.Client.open({
    endpoints: [syncd.endpointOf(s.web, s.certHashes)],
    device, token: s.token,
    // The token lasts a day; a real app fetches a new one from its backend here.
    tokenProvider: async () => (await (await fetch(`/session?user=${encodeURIComponent(user)}&device=${device}`)).json()).token,
    store: await openStore(`syncd-example-${user}-${device}`),
  });
  client.on("connection", (e) => { $("state").textContent = e.state + (e.retryInMs ? ` (retry in ${Math.round(e.retryInMs / 1000)} s)` : ""); });
  client.on("transport", (e) => { $("state").textContent = `connected over ${e.kind}`; });
  client.on("synced", () => { void render(); });
  client.on("entry", () => { void render(); });
  client.on("status", () => { void render(); });
  $("me").textContent = `${user} (${device})`;
  $("login").hidden = true;
  $("app").hidden = false;
  await render();
});

$("new").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const peer = /** @type {HTMLInputElement} */ ($("peer")).value.trim();
  if (!peer || peer === me) return;
  current = await syncd.directConv(me, peer);
  peers.set(current, peer);
  /** @type {HTMLInputElement} */ ($("peer")).value = "";
  await render();
});

/** The other user of each direct conversation this page started (the first send names them). */
const peers = new Map();

$("compose").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = /** @type {HTMLInputElement} */ ($("text"));
  if (!client || !current || !input.value) return;
  const peer = peers.get(current);
  await client.send(current, enc.encode(input.value), peer ? { peer } : {});
  input.value = "";
  await render();
});

async function render() {
  if (!client) return;
  const convs = new Set(await client.localConversations());
  if (current) convs.add(current);
  const nav = $("convs");
  nav.replaceChildren(...[...convs].sort().map((c) => {
    const b = document.createElement("button");
    b.textContent = c;
    b.className = c === current ? "on" : "";
    b.onclick = () => { current = c; void render(); };
    return b;
  }));
  const log = $("log");
  if (!current) {
    log.textContent = "Start a chat with another user id (open this page in another browser, or use syncctl).";
    return;
  }
  const msgs = await client.messages(current);
  const pending = client.outboxItems().filter((it) => it.conv === current && it.kind === 1 && it.status !== "sent");
  const rows = msgs.map((m) => row(m.sender === me, dec.decode(m.body), m.recalled ? "recalled" : m.sender === me ? "✓ sent" : m.sender));
  for (const it of pending) {
    rows.push(row(true, dec.decode(it.body), it.status === "failed" ? `✗ failed: ${it.lastError}` : "… sending"));
  }
  log.replaceChildren(...rows);
  log.scrollTop = log.scrollHeight;
}

/** One message bubble. */
function row(/** @type {boolean} */ mine, /** @type {string} */ text, /** @type {string} */ meta) {
  const d = document.createElement("div");
  d.className = `msg${mine ? " mine" : ""}${meta === "recalled" ? " recalled" : ""}`;
  const t = document.createElement("div");
  t.className = "text";
  t.textContent = text;
  const m = document.createElement("div");
  m.className = "meta";
  m.textContent = meta;
  d.append(t, m);
  return d;
}
