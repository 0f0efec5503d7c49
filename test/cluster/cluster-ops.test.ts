// Operations of the cluster extension over real loopback TCP: departure guards, the leader leaving, leaving another
// node, timeouts, and inbound messages that must be refused.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterAwaitTimeoutError, ClusterConfigurationError, ClusterGossip } from "../../src/cluster/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import {
  allUp,
  type ClusterNode,
  describe,
  startClusterNode,
  startClusterNodes,
  terminateAll,
} from "./fixtures/nodes.ts";

class NotClusterProtocol {
  constructor(readonly text: string) {}
}
MessageRegistry.register(NotClusterProtocol, { name: "movie.test.cluster.not-protocol" });

function leaderOf(nodes: ClusterNode[]): ClusterNode {
  return nodes.find((n) => n.cluster.isLeader)!;
}

test("a departure guard on the leader holds a leaving member in Leaving until it passes", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 Up", describe: describe(nodes) });
    const leader = leaderOf(nodes);
    const leaver = nodes.find((n) => n !== leader)!;
    let ready = false;
    const asked: string[] = [];
    // Every node registers the guard (as sharding does): whichever node leads applies it.
    for (const n of nodes) {
      n.cluster.registerDepartureGuard("test", (member) => {
        asked.push(member.status);
        return ready;
      });
      n.cluster.registerDepartureGuard("throws", () => {
        if (!ready) throw new Error("not yet");
        return true;
      });
    }
    const leaving = leaver.cluster.leave();
    await eventually(() => leader.cluster.snapshot().members.some((m) => m.status === "Leaving"), { what: "Leaving" });
    await eventually(() => asked.length >= 3, { what: "the guard was consulted on several rounds" });
    assert.ok(asked.every((s) => s === "Leaving"));
    assert.equal(leaver.cluster.snapshot().selfStatus, "Leaving");
    ready = true;
    await leaving;
    for (const n of nodes) {
      n.cluster.unregisterDepartureGuard("test");
      n.cluster.unregisterDepartureGuard("throws");
    }
    await eventually(() => nodes.filter((n) => n !== leaver).every((n) => allUp(n, 2)), { what: "2 left" });
  } finally {
    await terminateAll(nodes);
  }
});

test("the leader leaves gracefully and the next lowest address takes over", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 Up", describe: describe(nodes) });
    const leader = leaderOf(nodes);
    const rest = nodes.filter((n) => n !== leader);
    await leader.cluster.leave();
    await eventually(() => rest.every((n) => allUp(n, 2)), { what: "2 left", describe: describe(nodes) });
    const expected = rest.map((n) => n.cluster.selfAddress).sort((a, b) => (String(a) < String(b) ? -1 : 1))[0]!;
    assert.ok(rest.every((n) => n.cluster.snapshot().leader?.equals(expected)));
    assert.ok(rest[0]!.events.some((e) => e.type === "LeaderChanged" && e.leader?.equals(expected)));
  } finally {
    await terminateAll(nodes);
  }
});

test("the leader can make another node leave; a non-leader without a secret cannot", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 Up", describe: describe(nodes) });
    const leader = leaderOf(nodes);
    const [other, target] = nodes.filter((n) => n !== leader) as [ClusterNode, ClusterNode];
    await assert.rejects(other.cluster.leave(target.cluster.selfAddress), ClusterConfigurationError);
    await leader.cluster.leave(target.cluster.selfAddress.toString());
    await eventually(() => target.cluster.snapshot().selfStatus === "Removed", { what: "target removed" });
  } finally {
    await terminateAll(nodes);
  }
});

test("awaitUp rejects with ClusterAwaitTimeoutError when no seed answers", async () => {
  const lonely = await startClusterNode([1]);
  try {
    await assert.rejects(lonely.cluster.awaitUp(150), (e: Error) => {
      assert.ok(e instanceof ClusterAwaitTimeoutError);
      assert.equal(e.name, "ClusterAwaitTimeoutError");
      assert.equal(e.currentStatus, "Joining");
      return /did not become Up within 150 ms/.test(e.message);
    });
    assert.ok(lonely.cluster.stats.joinAttempts >= 1);
  } finally {
    await terminateAll([lonely]);
  }
});

test("forged senders and foreign messages at /system/cluster are refused and counted; listeners that throw stay", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 Up", describe: describe(nodes) });
    const [a, b, c] = nodes as [ClusterNode, ClusterNode, ClusterNode];
    let calls = 0;
    a.cluster.subscribe(() => {
      calls++;
      throw new Error("listener bug");
    });
    const before = a.cluster.stats.protocolRejections;
    const daemonOfA = b.system.actorSelection(`${a.system.address}/system/cluster`);
    // b claims to be c: the transport says b, so a refuses it.
    const forged = new ClusterGossip(
      "movie-cluster",
      String(c.cluster.selfAddress),
      String(a.cluster.selfAddress),
      1,
      "0".repeat(64),
      [],
    );
    daemonOfA.tell(forged, b.system.actorSelection(`${b.system.address}/system/cluster`));
    daemonOfA.tell(new NotClusterProtocol("hello"));
    await eventually(() => a.cluster.stats.protocolRejections >= before + 2, { what: "two rejections" });
    assert.equal(a.cluster.snapshot().members.length, 3);
    // Local (unauthenticated) delivery is refused too.
    a.system.actorSelection(`${a.system.address}/system/cluster`).tell(forged);
    await eventually(() => a.cluster.stats.protocolRejections >= before + 3, { what: "local message refused" });
    assert.equal(calls, 1, "the throwing listener got the current state");
    await b.cluster.leave();
    await eventually(() => calls > 1, { what: "the throwing listener still gets events" });
  } finally {
    await terminateAll(nodes);
  }
});
