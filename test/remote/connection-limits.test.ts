import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { InboundLimits } from "../../src/remote/inbound-limits.ts";
import { resolveRemotingSettings } from "../../src/remote/settings.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

/** A plain TCP socket to `node` from `localAddress` (any 127.x address is loopback on Linux), once connected. */
async function tcp(node: Node, localAddress = "127.0.0.1"): Promise<{ socket: Socket; closed: () => boolean }> {
  const { host, port } = node.remoting.selfAddress.address;
  const socket = connect({ host: host!, port: port!, localAddress });
  let closed = false;
  socket.on("close", () => {
    closed = true;
  });
  socket.on("error", () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("close", () => reject(new Error("closed before connecting")));
  });
  return { socket, closed: () => closed };
}

test("inbound limits (pure): totals and per-IP counts of unauthenticated sockets; authenticated ones count only in the total", () => {
  const limits = new InboundLimits({
    maxInboundConnections: 4,
    maxUnauthenticatedConnections: 3,
    maxUnauthenticatedPerIp: 2,
  });
  assert.equal(limits.accept("a:1", "a"), null);
  assert.equal(limits.accept("a:2", "a"), null);
  assert.equal(limits.accept("a:3", "a"), "maxUnauthenticatedPerIp");
  assert.equal(limits.accept("b:1", "b"), null);
  assert.equal(limits.accept("c:1", "c"), "maxUnauthenticatedConnections");
  limits.authenticated("a:1");
  limits.authenticated("a:1");
  assert.equal(limits.accept("a:3", "a"), null);
  assert.equal(limits.accept("c:1", "c"), "maxInboundConnections");
  limits.closed("b:1");
  limits.closed("b:1");
  assert.equal(limits.size, 3);
  assert.equal(limits.accept("c:1", "c"), null);
  for (const key of ["a:1", "a:2", "a:3", "c:1"]) limits.closed(key);
  assert.equal(limits.size, 0);
  // Everything was given back: the full per-IP allowance is there again.
  assert.equal(limits.accept("a:9", "a"), null);
  assert.equal(limits.accept("a:8", "a"), null);
});

test("inbound limits: a seeded random walk of accepts, handshakes and closes always matches a simple model", () => {
  const settings = { maxInboundConnections: 12, maxUnauthenticatedConnections: 7, maxUnauthenticatedPerIp: 3 };
  let seed = 15;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const limits = new InboundLimits(settings);
  const model = new Map<string, { ip: string; authenticated: boolean }>();
  for (let step = 0; step < 5000; step++) {
    const ip = `10.0.0.${random(4)}`;
    const key = `${ip}:${random(8)}`;
    const op = random(3);
    if (op === 0) {
      if (model.has(key)) continue;
      const unauthenticated = [...model.values()].filter((c) => !c.authenticated);
      const expected =
        model.size >= settings.maxInboundConnections
          ? "maxInboundConnections"
          : unauthenticated.length >= settings.maxUnauthenticatedConnections
            ? "maxUnauthenticatedConnections"
            : unauthenticated.filter((c) => c.ip === ip).length >= settings.maxUnauthenticatedPerIp
              ? "maxUnauthenticatedPerIp"
              : null;
      assert.equal(limits.accept(key, ip), expected, `step ${step}`);
      if (expected === null) model.set(key, { ip, authenticated: false });
    } else if (op === 1) {
      limits.authenticated(key);
      const entry = model.get(key);
      if (entry !== undefined) entry.authenticated = true;
    } else {
      limits.closed(key);
      model.delete(key);
    }
    assert.equal(limits.size, model.size, `step ${step}`);
  }
});

test("settings: the limits must be positive integers", () => {
  for (const field of [
    "maxInboundConnections",
    "maxUnauthenticatedConnections",
    "maxUnauthenticatedPerIp",
    "associationIdleTimeout",
    "maxAssociations",
    "maxConnectAttempts",
    "maxInboundBacklog",
  ]) {
    for (const bad of [0, -1, 1.5, Number.NaN, "3", { valueOf: () => 3 }]) {
      assert.throws(
        () => resolveRemotingSettings({ host: "127.0.0.1", port: 0, [field]: bad }),
        (e: unknown) => e instanceof Error && e.name === "InvalidArgumentError" && e.message.includes(field),
        `${field} = ${typeof bad === "object" ? "object" : String(bad)}`,
      );
    }
  }
  const resolved = resolveRemotingSettings({ host: "127.0.0.1", port: 0 });
  assert.equal(resolved.maxInboundConnections, 1024);
  assert.equal(resolved.maxUnauthenticatedConnections, 128);
  assert.equal(resolved.maxUnauthenticatedPerIp, 16);
});

test("unauthenticated sockets past the per-IP limit are closed at accept and counted; other IPs and authenticated peers are unaffected", async () => {
  const node = await startNode("limits-ip", { maxUnauthenticatedPerIp: 2, handshakeTimeout: 20_000 });
  node.system.spawn(new EchoBehavior(), "echo");
  const sockets: Socket[] = [];
  let other: Node | null = null;
  try {
    const first = await tcp(node);
    const second = await tcp(node);
    sockets.push(first.socket, second.socket);
    // The node accepts in connection order, so the third from 127.0.0.1 is the one over the limit.
    const third = await tcp(node);
    sockets.push(third.socket);
    await eventually(() => third.closed(), { what: "the third unauthenticated socket from 127.0.0.1 closed" });
    assert.equal(node.remoting.stats.rejected.connectionLimit, 1);
    assert.equal(first.closed() || second.closed(), false);
    // Another source address has its own allowance.
    const elsewhere = await tcp(node, "127.0.0.2");
    sockets.push(elsewhere.socket);
    // A real node on 127.0.0.1 is refused while the two idle sockets hold the slots, and gets in once one goes.
    other = await startNode("limits-ip-peer");
    const echo = other.system.actorSelection(`${node.system.address}/user/echo`);
    first.socket.destroy();
    await eventually(
      async () => {
        const reply = await echo.ask(new Ping(1), Pong, 500).catch(() => null);
        return reply?.n === 1;
      },
      { what: "the real peer through once a slot is free", describe: () => node.remoting.stats.rejected },
    );
    assert.equal(elsewhere.closed(), false);
    // Authenticated, the real peer's connection no longer counts: one more unauthenticated socket fits, then no more.
    const fourth = await tcp(node);
    const fifth = await tcp(node);
    sockets.push(fourth.socket, fifth.socket);
    const refused = node.remoting.stats.rejected.connectionLimit;
    await eventually(() => fifth.closed(), { what: "the fifth socket closed" });
    assert.equal(fourth.closed(), false);
    assert.ok(node.remoting.stats.rejected.connectionLimit >= refused);
  } finally {
    for (const socket of sockets) socket.destroy();
    await other?.system.terminate();
    await node.system.terminate();
  }
});

test("the total of unauthenticated sockets and the total of inbound connections are bounded", async () => {
  const node = await startNode("limits-total", {
    maxUnauthenticatedConnections: 2,
    maxInboundConnections: 3,
    handshakeTimeout: 20_000,
  });
  const sockets: Socket[] = [];
  const raws: RawPeer[] = [];
  try {
    const a = await tcp(node, "127.0.0.3");
    const b = await tcp(node, "127.0.0.4");
    const c = await tcp(node, "127.0.0.5");
    sockets.push(a.socket, b.socket, c.socket);
    await eventually(() => c.closed(), { what: "the third unauthenticated socket closed (total limit)" });
    assert.equal(a.closed() || b.closed(), false);
    assert.equal(node.remoting.stats.rejected.connectionLimit, 1);
    a.socket.destroy();
    b.socket.destroy();
    // Three authenticated peers fill maxInboundConnections; a fourth socket is refused even before its handshake.
    await eventually(
      async () => {
        const raw = await rawPeer(node, { handshake: true, port: 41 + raws.length }).catch(() => null);
        if (raw !== null) raws.push(raw);
        return raws.length === 3;
      },
      { what: "three authenticated raw peers", describe: () => node.remoting.stats },
    );
    const d = await tcp(node, "127.0.0.6");
    sockets.push(d.socket);
    await eventually(() => d.closed(), { what: "a socket past maxInboundConnections closed" });
    assert.equal(
      raws.some((r) => r.isClosed()),
      false,
    );
  } finally {
    for (const socket of sockets) socket.destroy();
    for (const raw of raws) raw.socket.destroy();
    await node.system.terminate();
  }
});

test("after the handshake, a silent peer and a peer that sent half a frame are closed after heartbeatTimeout and counted; a real peer stays", async () => {
  // A timeout well above any event-loop stall of a loaded machine: both nodes share this process, and a 300 ms timeout
  // once closed the real peer's connection too (a fresh-clone CI run beside other work: 3 idle timeouts, not 2).
  const settings = { heartbeatInterval: 100, heartbeatTimeout: 1_000 };
  const node = await startNode("idle-node", settings);
  node.system.spawn(new EchoBehavior(), "echo");
  const peer = await startNode("idle-peer", settings);
  const raws: RawPeer[] = [];
  try {
    const echo = peer.system.actorSelection(`${node.system.address}/user/echo`);
    assert.equal((await echo.ask(new Ping(1), Pong, 3000)).n, 1);
    const silent = await rawPeer(node, { handshake: true, port: 51 });
    const half = await rawPeer(node, { handshake: true, port: 52 });
    raws.push(silent, half);
    // A frame announced as 4,000 bytes, of which 6 arrive; then the bytes trickle on (one per 5 ms poll, a few hundred
    // before the timeout) but the frame never completes.
    half.socket.write(Buffer.from([0, 0, 0x0f, 0xa0, 1, 2, 3, 4, 5, 6]));
    // Each poll trickles one more byte of it: bytes keep coming, yet no frame completes.
    await eventually(
      () => {
        if (!half.isClosed()) half.socket.write(Buffer.from([7]));
        return silent.isClosed() && half.isClosed();
      },
      { what: "both idle connections closed", describe: () => node.remoting.stats },
    );
    assert.equal(node.remoting.stats.idleTimeouts, 2);
    // The real peer's association heartbeats: its inbound connection at the node survived the same timeouts.
    assert.equal((await echo.ask(new Ping(2), Pong, 3000)).n, 2);
    assert.equal(peer.remoting.stats.reconnects, 0);
    assert.equal(peer.remoting.stats.heartbeatTimeouts, 0);
  } finally {
    for (const raw of raws) raw.socket.destroy();
    await Promise.all([peer.system.terminate(), node.system.terminate()]);
  }
});

/** A throwaway self-signed key and certificate (enough to listen with TLS), or null without openssl. */
function selfSigned(): { key: Buffer; cert: Buffer } | null {
  const dir = mkdtempSync(join(tmpdir(), "movie-limits-"));
  try {
    execFileSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
        ...["-keyout", "node.key", "-out", "node.crt", "-days", "1", "-subj", "/CN=127.0.0.1"],
      ],
      { cwd: dir, stdio: "ignore" },
    );
    return { key: readFileSync(join(dir, "node.key")), cert: readFileSync(join(dir, "node.crt")) };
  } catch {
    return null;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const tls = selfSigned();

test("with TLS, sockets still in the TLS handshake count as unauthenticated and time out after handshakeTimeout", {
  skip: tls === null,
}, async () => {
  const node = await startNode("limits-tls", { tls: tls!, maxUnauthenticatedPerIp: 1, handshakeTimeout: 300 });
  const sockets: Socket[] = [];
  try {
    // Plain TCP to a TLS listener, never starting TLS: a stalled handshake.
    const first = await tcp(node, "127.0.0.7");
    const second = await tcp(node, "127.0.0.7");
    sockets.push(first.socket, second.socket);
    await eventually(() => second.closed(), { what: "the second stalled socket from 127.0.0.7 refused" });
    assert.equal(node.remoting.stats.rejected.connectionLimit, 1);
    // Node's TLS default would hold it for 120 s; handshakeTimeout applies.
    await eventually(() => first.closed(), { what: "the stalled TLS handshake timed out", timeoutMs: 5000 });
    // Its slot is free again.
    await eventually(
      async () => {
        const next = await tcp(node, "127.0.0.7");
        sockets.push(next.socket);
        await new Promise((resolve) => setImmediate(resolve));
        return !next.closed() && node.remoting.stats.rejected.connectionLimit <= 2;
      },
      { what: "a new socket from 127.0.0.7 admitted", describe: () => node.remoting.stats.rejected },
    );
  } finally {
    for (const socket of sockets) socket.destroy();
    await node.system.terminate();
  }
});
