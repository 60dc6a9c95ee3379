// Real syncd processes for the browser tests: a cluster of n nodes on loopback, each with its
// own ports, sharing one token key, one admin token and the cluster CA (made with syncctl cert),
// killed and restarted at will. The binaries come from SYNCD_BIN and SYNCCTL_BIN, or are built
// from the repository once.

import { spawn, execFile, type ChildProcess } from "node:child_process";
import { createHmac, createHash, randomBytes } from "node:crypto";
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync, openSync } from "node:fs";
import { createServer } from "node:net";
import { createSocket } from "node:dgram";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The repository's root (client/js/e2e → ../../..). */
export const repo = resolve(import.meta.dirname, "../../../..");

/** Paths of the syncd and syncctl binaries, built once per run unless given. */
export async function binaries(): Promise<{ syncd: string; syncctl: string }> {
  if (process.env.SYNCD_BIN && process.env.SYNCCTL_BIN) {
    return { syncd: process.env.SYNCD_BIN, syncctl: process.env.SYNCCTL_BIN };
  }
  const dir = mkdtempSync(join(tmpdir(), "syncd-e2e-bin-"));
  const syncd = join(dir, "syncd");
  const syncctl = join(dir, "syncctl");
  await run("go", ["build", "-o", syncd, "./cmd/syncd"], { cwd: repo });
  await run("go", ["build", "-o", syncctl, "./cmd/syncctl"], { cwd: repo });
  return { syncd, syncctl };
}

/** Ports handed out by this process, so two nodes never get the same one before either binds it. */
const handedOut = new Set<number>();

/** The lowest port freePort hands out: below it live well-known and registered services. */
const portFloor = 10000;

/** The first port of the kernel's ephemeral range, or 0 if it cannot be read. */
function ephemeralLow(): number {
  try {
    const lo = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(lo) ? lo : 0;
  } catch {
    return 0;
  }
}

async function tcpFree(port: number): Promise<boolean> {
  return new Promise<boolean>((ok) => {
    const s = createServer();
    s.once("error", () => ok(false));
    s.listen(port, "127.0.0.1", () => s.close(() => ok(true)));
  });
}

async function udpFree(port: number): Promise<boolean> {
  return new Promise<boolean>((ok) => {
    const u = createSocket("udp4");
    u.once("error", () => ok(false));
    u.bind(port, "127.0.0.1", () => u.close(() => ok(true)));
  });
}

/**
 * A loopback port free for both TCP and UDP (WebSocket and WebTransport share the number), below
 * the kernel's ephemeral range. A port from that range (what listening on 0 gives) can be taken
 * by any outgoing connection — a browser's QUIC socket, a test's dial — between the moment it is
 * picked and the moment a node binds it, or while a killed node is down; the node then fails
 * with "address already in use". Ports below the range are taken only by an explicit bind (the
 * Go side's testkit.FreeAddr makes the same choice).
 */
export async function freePort(): Promise<number> {
  const lo = ephemeralLow();
  if (lo < portFloor + 1000) throw new Error(`the ephemeral port range starts at ${lo}: too low to pick ports below it`);
  const span = lo - portFloor;
  const start = Math.floor(Math.random() * span);
  for (let i = 0; i < span; i++) {
    const port = portFloor + ((start + i) % span);
    if (handedOut.has(port)) continue;
    if ((await tcpFree(port)) && (await udpFree(port))) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error("no free loopback port below the ephemeral range");
}

/** One syncd process of a cluster. */
export interface SyncdNode {
  id: string;
  dir: string;
  /** syncd/1 (QUIC), for syncctl. */
  client: string;
  /** WebTransport (UDP) and WebSocket (TCP). */
  web: string;
  admin: string;
  raft: string;
  proc?: ChildProcess;
}

/** The last lines of a node's log, for an error that says why it did not start. */
function logTail(node: SyncdNode, lines = 20): string {
  try {
    return readFileSync(join(node.dir, "syncd.log"), "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch (e) {
    return `(no log: ${String(e)})`;
  }
}

/** A cluster of syncd processes. */
export class Cluster {
  readonly nodes: SyncdNode[] = [];
  private constructor(
    readonly root: string,
    readonly bins: { syncd: string; syncctl: string },
    private readonly secret: Buffer,
    readonly adminToken: string,
    private readonly extra: string[],
  ) {}

  /** Starts n nodes (extra flags for every one) and waits until each is ready. */
  static async start(n: number, extra: string[] = []): Promise<Cluster> {
    const bins = await binaries();
    const root = mkdtempSync(join(tmpdir(), "syncd-e2e-"));
    const secret = randomBytes(32);
    writeFileSync(join(root, "token.key"), secret.toString("hex") + "\n", { mode: 0o600 });
    const adminToken = randomBytes(32).toString("hex");
    writeFileSync(join(root, "admin.token"), adminToken + "\n", { mode: 0o600 });
    const c = new Cluster(root, bins, secret, adminToken, extra);
    await run(bins.syncctl, ["cert", "create-ca", "-dir", join(root, "ca")]);
    for (let i = 0; i < n; i++) {
      const node: SyncdNode = {
        id: `n${i + 1}`, dir: join(root, `n${i + 1}`),
        client: `127.0.0.1:${await freePort()}`, web: `127.0.0.1:${await freePort()}`,
        admin: `127.0.0.1:${await freePort()}`, raft: `127.0.0.1:${await freePort()}`,
      };
      mkdirSync(node.dir, { recursive: true });
      await run(bins.syncctl, ["cert", "create-node", "-dir", node.dir, "-ca", join(root, "ca", "ca.crt"),
        "-ca-key", join(root, "ca", "ca.key"), "-node-id", node.id]);
      c.nodes.push(node);
    }
    await Promise.all(c.nodes.map((_, i) => c.startNode(i)));
    return c;
  }

  private args(node: SyncdNode): string[] {
    const peers = this.nodes.length > 1 ? ["-peers", this.nodes.map((n) => `${n.id}=${n.raft}`).join(",")] : [];
    return ["-data-dir", node.dir, "-node-id", node.id, "-listen", node.client, "-web-listen", node.web,
      "-admin", node.admin, "-raft-addr", node.raft, "-shards", "4", ...peers,
      "-token-secret-file", join(this.root, "token.key"), "-admin-token-file", join(this.root, "admin.token"),
      "-log-level", "warn", ...this.extra];
  }

  /** Starts node i (again) and waits for its /readyz. */
  async startNode(i: number): Promise<void> {
    const node = this.nodes[i]!;
    const log = openSync(join(node.dir, "syncd.log"), "a");
    node.proc = spawn(this.bins.syncd, this.args(node), { stdio: ["ignore", log, log] });
    await this.waitReady(i);
  }

  /** Kills node i at once (SIGKILL, as a crash). */
  kill(i: number): void {
    this.nodes[i]!.proc?.kill("SIGKILL");
    this.nodes[i]!.proc = undefined;
  }

  async waitReady(i: number, timeoutMs = 60_000): Promise<void> {
    const node = this.nodes[i]!;
    const until = Date.now() + timeoutMs;
    for (;;) {
      try {
        const r = await fetch(`http://${node.admin}/readyz`);
        if (r.ok) return;
      } catch {
        // not listening yet
      }
      if (node.proc && node.proc.exitCode !== null) {
        throw new Error(`${node.id} exited (code ${node.proc.exitCode}) before it was ready; its log ends:\n${logTail(node)}`);
      }
      if (Date.now() > until) throw new Error(`${node.id} not ready after ${timeoutMs} ms; its log ends:\n${logTail(node)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Every node's published browser certificate hashes (GET /v1/webtransport/certs). */
  async certHashes(): Promise<string[]> {
    const out: string[] = [];
    for (const n of this.nodes) {
      const r = await fetch(`http://${n.admin}/v1/webtransport/certs`, { headers: { authorization: `Bearer ${this.adminToken}` } });
      if (!r.ok) throw new Error(`${n.id} certs: HTTP ${r.status}`);
      const body = (await r.json()) as { certs: { sha256: string }[] };
      out.push(...body.certs.map((c) => c.sha256));
    }
    return out;
  }

  /** A device token (PROTOCOL §2.2), signed with the cluster's key. */
  token(user: string, device: string, ttlSeconds = 3600, issuedAgoSeconds = 0): string {
    return mintToken(this.secret, user, device, ttlSeconds, issuedAgoSeconds);
  }

  /** Runs syncctl as a Go device of user (its own store under the cluster's directory). */
  async syncctl(user: string, device: string, args: string[]): Promise<string> {
    const store = join(this.root, "syncctl", user, device);
    const { stdout } = await run(this.bins.syncctl, [...args, "-addr", this.nodes.map((n) => n.client).join(","),
      "-data-dir", this.nodes[0]!.dir, "-token", this.token(user, device), "-store", store], { timeout: 60_000 });
    return stdout;
  }

  /** Runs an operator command of syncctl (admin HTTP) against node i. */
  async admin(args: string[], i = 0): Promise<string> {
    const { stdout } = await run(this.bins.syncctl, [...args, "-admin", this.nodes[i]!.admin,
      "-admin-token-file", join(this.root, "admin.token")], { timeout: 60_000 });
    return stdout;
  }

  /** Stops every node and removes the cluster's files. */
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => new Promise<void>((ok) => {
      if (!n.proc || n.proc.exitCode !== null) return ok();
      n.proc.once("exit", () => ok());
      n.proc.kill("SIGTERM");
    })));
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** mintToken signs a v1 token (PROTOCOL §2.2) the way an app's backend would. */
export function mintToken(secret: Buffer, user: string, device: string, ttlSeconds: number, issuedAgoSeconds = 0): string {
  const iat = Math.floor(Date.now() / 1000) - issuedAgoSeconds;
  const kid = createHash("sha256").update(secret).digest("hex").slice(0, 8);
  const payload = JSON.stringify({ u: user, d: device, exp: iat + ttlSeconds, iat, kid });
  const signed = "v1." + Buffer.from(payload).toString("base64url");
  return signed + "." + createHmac("sha256", secret).update(signed).digest("base64url");
}

/** The secret of PROTOCOL §2.2's test vector, and the token it gives (checked by the harness at start). */
export function checkTokenVector(): void {
  const secret = Buffer.from("0123456789abcdef0123456789abcdef");
  const want = "v1.eyJ1IjoiYWxpY2UiLCJkIjoicGhvbmUtMSIsImV4cCI6MTcwMDA4NjQwMCwiaWF0IjoxNzAwMDAwMDAwLCJraWQiOiIzZWIxYmQ0MyJ9.jOXDVu-MkyqlxRWpg2fDdMKWiKlkXeL31e7wU40jFv0";
  const kid = createHash("sha256").update(secret).digest("hex").slice(0, 8);
  const signed = "v1." + Buffer.from(JSON.stringify({ u: "alice", d: "phone-1", exp: 1700086400, iat: 1700000000, kid })).toString("base64url");
  const got = signed + "." + createHmac("sha256", secret).update(signed).digest("base64url");
  if (got !== want) throw new Error(`the harness's token minting differs from PROTOCOL §2.2's vector: ${got}`);
}

/** Reads a file of the cluster's (tests that look at what a node wrote). */
export function readText(path: string): string {
  return readFileSync(path, "utf8");
}
