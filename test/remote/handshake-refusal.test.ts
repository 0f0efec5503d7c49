// Handshake refusals over real TCP: a node refuses a peer of another cluster (nothing is delivered, the association
// never comes up), and a client refuses a server that answers with another protocol version or cluster name.
import assert from "node:assert/strict";
import { connect, createServer, type Socket } from "node:net";
import { test } from "node:test";
import { ActorSystem, Address, UniqueAddress } from "../../src/actor/index.ts";
import { encodeControlFrame, FrameKind, readControlFrame } from "../../src/remote/envelope.ts";
import { HandshakeError } from "../../src/remote/errors.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { answerChallenge, makeHello, protocolVersion } from "../../src/remote/handshake.ts";
import type { AssociationEvent, Remoting } from "../../src/remote/index.ts";
import { CapturingLogger } from "../actor/support.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping } from "./fixtures/messages.ts";
import { Collector } from "./fixtures/nodes.ts";

interface LoggedNode {
  system: ActorSystem;
  remoting: Remoting;
  logger: CapturingLogger;
  events: AssociationEvent[];
}

async function startLoggedNode(name: string, clusterName: string): Promise<LoggedNode> {
  const logger = new CapturingLogger();
  const system = ActorSystem.create(name, { logger });
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, clusterName });
  const events: AssociationEvent[] = [];
  remoting.subscribe((event) => events.push(event));
  return { system, remoting, logger, events };
}

/** The handshake failures `node` logged, as "role:reason". */
function handshakeFailures(node: LoggedNode): string[] {
  return node.logger.records
    .filter((r) => r.message === "remoting handshake failed")
    .map((r) => {
      const { role, error } = r.context as { role?: string; error?: unknown };
      return `${role}:${error instanceof HandshakeError ? error.reason : "?"}`;
    });
}

/** The handshake errors `node` logged, as "role:reason:byPeer:message". */
function handshakeErrorTexts(node: LoggedNode): string[] {
  return node.logger.records
    .filter((r) => r.message === "remoting handshake failed")
    .map((r) => {
      const { role, error } = r.context as { role?: string; error?: unknown };
      return error instanceof HandshakeError ? `${role}:${error.reason}:${error.byPeer}:${error.message}` : `${role}:?`;
    });
}

/** A raw TCP client of `node` that records every control frame the node sends back until it closes. */
function rawControlClient(node: LoggedNode): {
  socket: Socket;
  closed: Promise<void>;
  replies: Record<string, unknown>[];
} {
  const { host, port } = node.remoting.selfAddress.address;
  const socket = connect({ host: host!, port: port! });
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
  const replies: Record<string, unknown>[] = [];
  const decoder = new FrameDecoder();
  socket.on("data", (chunk: Buffer) => {
    for (const frame of decoder.push(chunk)) replies.push(readControlFrame(frame));
  });
  return { socket, closed, replies };
}

/**
 * A hand-written handshake server on loopback: `respond` sees every control frame of every connection (numbered
 * from 1) and answers on the socket as the test wants. `self` is the identity it claims in its challenges.
 */
async function fakeHandshakeServer(
  uid: string,
  respond: (connection: number, doc: Record<string, unknown>, socket: Socket, self: UniqueAddress) => void,
): Promise<{ self: UniqueAddress; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  let connections = 0;
  let self: UniqueAddress | null = null;
  const server = createServer((socket) => {
    const connection = ++connections;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) respond(connection, readControlFrame(frame), socket, self!);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const port = (server.address() as { port: number }).port;
  self = new UniqueAddress(Address.tcp("fake", "127.0.0.1", port), uid);
  return {
    self,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A valid challenge from `self` (version `version`, cluster `cluster`). */
function challengeFrom(self: UniqueAddress, version = protocolVersion, cluster = ""): Buffer {
  return encodeControlFrame(FrameKind.handshake, {
    step: "challenge",
    version,
    system: "fake",
    cluster,
    from: self.toString(),
    nonce: "00ff",
    proof: "",
  });
}

test("a peer of another cluster is refused by the server over TCP: nothing is delivered, no association comes up", async () => {
  const blue = await startLoggedNode("cluster-blue", "blue");
  const green = await startLoggedNode("cluster-green", "green");
  try {
    const got: unknown[] = [];
    green.system.spawn(new Collector(got), "inbox");
    blue.system.actorSelection(`${green.system.address}/user/inbox`).tell(new Ping(1));
    // Two refusals on the refusing side: the first attempt and a reconnect after backoff were both turned away.
    await eventually(() => green.remoting.stats.handshakesFailed >= 2 && blue.remoting.stats.handshakesFailed >= 2, {
      what: "two refused handshakes on each side",
      timeoutMs: 5000,
      describe: () => ({ blue: blue.remoting.stats, green: green.remoting.stats }),
    });
    blue.system.actorSelection(`${green.system.address}/user/inbox`).tell(new Ping(2));
    assert.ok(handshakeFailures(green).includes("server:clusterName"), `green logged ${handshakeFailures(green)}`);
    assert.ok(handshakeFailures(blue).includes("client:clusterName"), `blue logged ${handshakeFailures(blue)}`);
    // The server refused on its own account; the client logs that the peer refused it, and why.
    assert.ok(
      handshakeErrorTexts(green).every((t) => t.startsWith("server:clusterName:false:")),
      `green logged ${handshakeErrorTexts(green)}`,
    );
    assert.ok(
      handshakeErrorTexts(blue).every((t) =>
        t.startsWith(
          "client:clusterName:true:Remoting handshake failed (peer refused: clusterName): peer is in cluster",
        ),
      ),
      `blue logged ${handshakeErrorTexts(blue)}`,
    );
    assert.equal(green.remoting.stats.handshakesOk, 0);
    assert.equal(blue.remoting.stats.handshakesOk, 0);
    assert.equal(green.remoting.stats.delivered, 0);
    assert.equal(got.length, 0);
    assert.notEqual(blue.remoting.peerInfo(green.remoting.selfAddress)?.state, "up");
    assert.equal(green.remoting.peerInfo(blue.remoting.selfAddress), null);
    assert.deepEqual([...blue.events, ...green.events], []);
    // Both pings were dropped and counted: the first was buffered for a connection that never came, the second
    // found the association in backoff.
    assert.equal(blue.remoting.stats.droppedWhileDisconnected, 2);
  } finally {
    await Promise.all([blue.system.terminate(), green.system.terminate()]);
  }
});

test("a client refuses a server that answers with another protocol version or cluster name", async () => {
  // A hand-written server: the first connection answers the hello with protocol 99, the second with cluster
  // "other", the third correctly (the control: this client does confirm a valid challenge); later ones are cut.
  const received: { connection: number; doc: Record<string, unknown> }[] = [];
  const { self, close } = await fakeHandshakeServer("00000000000000aa", (connection, doc, socket, self) => {
    received.push({ connection, doc });
    if (doc.step !== "hello") return;
    if (connection > 3) {
      socket.destroy();
      return;
    }
    socket.write(challengeFrom(self, connection === 1 ? 99 : protocolVersion, connection === 2 ? "other" : ""));
  });
  const client = await startLoggedNode("picky-client", "");
  try {
    client.system.actorSelection(`${self.address}/user/anyone`).tell(new Ping(1));
    await eventually(() => received.some((r) => r.connection === 3 && r.doc.step === "confirm"), {
      what: "the client to answer the first two challenges and confirm the third",
      describe: () => received,
    });
    const answers = received.filter((r) => r.doc.step !== "hello" && r.connection <= 3);
    assert.deepEqual(
      answers.map((r) => [r.connection, r.doc.step, r.doc.reason]),
      [
        [1, "reject", "version"],
        [2, "reject", "clusterName"],
        [3, "confirm", undefined],
      ],
    );
    const failures = handshakeFailures(client);
    assert.deepEqual(failures.slice(0, 2), ["client:version", "client:clusterName"]);
    assert.equal(client.remoting.stats.handshakesOk, 0);
    assert.deepEqual(client.events, []);
  } finally {
    await client.system.terminate();
    await close();
  }
});

test("a client speaking another protocol version is refused by the server over TCP and told why", async () => {
  const node = await startLoggedNode("version-server", "");
  try {
    const got: unknown[] = [];
    node.system.spawn(new Collector(got), "inbox");
    const { socket, closed, replies } = rawControlClient(node);
    const identity = {
      system: "old",
      cluster: "",
      uniqueAddress: new UniqueAddress(Address.tcp("old", "127.0.0.1", 1), "00000000000000bb"),
    };
    const hello = { ...makeHello(identity, node.system.name, "aabb"), version: protocolVersion + 1 };
    socket.write(encodeControlFrame(FrameKind.handshake, hello));
    await closed;
    assert.deepEqual(
      replies.map((r) => [r.step, r.reason]),
      [["reject", "version"]],
    );
    assert.equal(node.remoting.stats.handshakesFailed, 1);
    assert.equal(node.remoting.stats.handshakesOk, 0);
    assert.deepEqual(handshakeFailures(node), ["server:version"]);
    assert.equal(got.length, 0);
  } finally {
    await node.system.terminate();
  }
});

test("a server logs the reason a client gave for refusing its challenge, and does not answer the refusal", async () => {
  const node = await startLoggedNode("refused-server", "");
  try {
    const { socket, closed, replies } = rawControlClient(node);
    const uniqueAddress = new UniqueAddress(Address.tcp("picky", "127.0.0.1", 1), "00000000000000cc");
    // The hello claims the server's (empty) cluster name; the client then judges the challenge as a node of cluster
    // "other", so the real handshake code refuses it with clusterName.
    const hello = makeHello({ system: "picky", cluster: "", uniqueAddress }, node.system.name, "aabb");
    socket.write(encodeControlFrame(FrameKind.handshake, hello));
    await eventually(() => replies.length >= 1, { what: "the challenge", describe: () => replies });
    const refusal = answerChallenge(
      { system: "picky", cluster: "other", uniqueAddress },
      null,
      node.system.name,
      hello,
      replies[0],
    );
    assert.ok(!refusal.ok && refusal.reply !== null);
    assert.equal(refusal.reply.reason, "clusterName");
    socket.write(encodeControlFrame(FrameKind.handshake, refusal.reply));
    await closed;
    assert.equal(node.remoting.stats.handshakesFailed, 1);
    assert.equal(node.remoting.stats.handshakesOk, 0);
    assert.deepEqual(handshakeFailures(node), ["server:clusterName"]);
    const [text] = handshakeErrorTexts(node);
    assert.ok(
      text?.startsWith("server:clusterName:true:Remoting handshake failed (peer refused: clusterName): peer is in"),
      text,
    );
    // A refusal is not answered with another one: the challenge was the server's last word.
    assert.deepEqual(
      replies.map((r) => r.step),
      ["challenge"],
    );
    assert.deepEqual(node.events, []);
  } finally {
    await node.system.terminate();
  }
});

test("a server logs a client's refusal of its proof (another secret) as the client's reason", async () => {
  const logger = new CapturingLogger();
  const serverSystem = ActorSystem.create("secret-server", { logger });
  const remoting = await serverSystem.enableRemoting({ host: "127.0.0.1", port: 0, secret: "one" });
  const server: LoggedNode = { system: serverSystem, remoting, logger, events: [] };
  const clientLogger = new CapturingLogger();
  const clientSystem = ActorSystem.create("secret-client", { logger: clientLogger });
  const clientRemoting = await clientSystem.enableRemoting({ host: "127.0.0.1", port: 0, secret: "two" });
  const client: LoggedNode = { system: clientSystem, remoting: clientRemoting, logger: clientLogger, events: [] };
  try {
    clientSystem.actorSelection(`${serverSystem.address}/user/anyone`).tell(new Ping(1));
    await eventually(() => remoting.stats.handshakesFailed >= 1 && clientRemoting.stats.handshakesFailed >= 1, {
      what: "a refused handshake on each side",
      describe: () => ({ server: remoting.stats, client: clientRemoting.stats }),
    });
    // The client found the server's proof wrong and said so; the server logs that, not "expected a confirm".
    assert.ok(
      handshakeErrorTexts(client).every((t) => t.startsWith("client:authentication:false:")),
      `client logged ${handshakeErrorTexts(client)}`,
    );
    const serverTexts = handshakeErrorTexts(server);
    assert.ok(
      serverTexts.length >= 1 &&
        serverTexts.every((t) =>
          t.startsWith("server:authentication:true:Remoting handshake failed (peer refused: authentication)"),
        ),
      `server logged ${serverTexts}`,
    );
    assert.equal(remoting.stats.handshakesOk, 0);
    assert.equal(clientRemoting.stats.handshakesOk, 0);
  } finally {
    await Promise.all([serverSystem.terminate(), clientSystem.terminate()]);
  }
});

test("a client logs the reason a server gave for refusing its confirm", async () => {
  // A hand-written server: it answers every hello with a valid challenge, then refuses the confirm, the first
  // connection with reason clusterName, the second with closed; later connections are cut.
  const refusals = ["clusterName", "closed"];
  const received: { connection: number; step: unknown }[] = [];
  const { self, close } = await fakeHandshakeServer("00000000000000dd", (connection, doc, socket, self) => {
    received.push({ connection, step: doc.step });
    if (connection > refusals.length) {
      socket.destroy();
      return;
    }
    if (doc.step === "hello") {
      socket.write(challengeFrom(self));
    } else if (doc.step === "confirm") {
      const reason = refusals[connection - 1];
      socket.end(encodeControlFrame(FrameKind.handshake, { step: "reject", reason, detail: `no (${reason})` }));
    }
  });
  const client = await startLoggedNode("refused-client", "");
  try {
    client.system.actorSelection(`${self.address}/user/anyone`).tell(new Ping(1));
    await eventually(() => client.remoting.stats.handshakesFailed >= 2, {
      what: "two refused confirms",
      describe: () => ({ received, stats: client.remoting.stats }),
    });
    assert.deepEqual(
      received.filter((r) => r.connection <= 2),
      [
        { connection: 1, step: "hello" },
        { connection: 1, step: "confirm" },
        { connection: 2, step: "hello" },
        { connection: 2, step: "confirm" },
      ],
    );
    assert.deepEqual(handshakeFailures(client).slice(0, 2), ["client:clusterName", "client:closed"]);
    assert.deepEqual(handshakeErrorTexts(client).slice(0, 2), [
      "client:clusterName:true:Remoting handshake failed (peer refused: clusterName): no (clusterName)",
      "client:closed:true:Remoting handshake failed (peer refused: closed): no (closed)",
    ]);
    assert.equal(client.remoting.stats.handshakesOk, 0);
    assert.deepEqual(client.events, []);
  } finally {
    await client.system.terminate();
    await close();
  }
});
