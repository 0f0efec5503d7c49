// Cluster membership over real loopback TCP, several actor systems in one process.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import { Cluster, ClusterConfigurationError, ClusterNotEnabledError } from "../../src/cluster/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import {
  allUp,
  type ClusterNode,
  describe,
  startClusterNode,
  startClusterNodes,
  terminateAll,
} from "./fixtures/nodes.ts";

test("three nodes join through the seed, converge Up, agree on the leader and publish events", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const leaders = new Set(nodes.map((n) => String(n.cluster.snapshot().leader)));
    assert.equal(leaders.size, 1);
    const sorted = nodes.map((n) => n.cluster.selfAddress).sort((a, b) => (String(a) < String(b) ? -1 : 1));
    assert.equal([...leaders][0], String(sorted[0]), "the lowest unique address leads");
    await Promise.all(nodes.map((n) => n.cluster.awaitUp(1_000)));
    const events = nodes[1]!.events;
    assert.equal(events[0]?.type, "CurrentClusterState", "the current state comes first");
    assert.ok(
      events.some((e) => e.type === "MemberUp" && e.member.uniqueAddress.equals(nodes[2]!.cluster.selfAddress)),
    );
    assert.ok(events.some((e) => e.type === "LeaderChanged"));
    assert.ok(events.some((e) => e.type === "ConvergenceChanged" && e.converged));
    // A late subscriber misses nothing: its first event carries the whole current state.
    const late: string[] = [];
    const unsubscribe = nodes[0]!.cluster.subscribe((e) => late.push(e.type));
    assert.deepEqual(late, ["CurrentClusterState"]);
    assert.equal(nodes[0]!.cluster.stats.subscribers, 2);
    unsubscribe();
    assert.ok(nodes[0]!.cluster.stats.gossipSent > 0 && nodes[0]!.cluster.stats.heartbeatsReceived > 0);
    assert.equal(await nodes[0]!.system.enableCluster(), nodes[0]!.cluster, "enableCluster is idempotent");
    assert.equal(Cluster.get(nodes[0]!.system), nodes[0]!.cluster);
  } finally {
    await terminateAll(nodes);
  }
});

test("five nodes join and converge", async () => {
  const nodes = await startClusterNodes(5);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 5)), { what: "5 nodes Up", describe: describe(nodes) });
    const upNumbers = nodes[0]!.cluster.snapshot().members.map((m) => m.upNumber);
    assert.equal(new Set(upNumbers).size, 5);
  } finally {
    await terminateAll(nodes);
  }
});

test("graceful leave resolves once the node is Removed, and every survivor drops it", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const leaver = nodes[2]!;
    await leaver.cluster.leave();
    assert.equal(leaver.cluster.snapshot().selfStatus, "Removed");
    const survivors = nodes.slice(0, 2);
    await eventually(() => survivors.every((n) => allUp(n, 2)), { what: "2 survivors", describe: describe(nodes) });
    const seen = survivors[0]!.events.map((e) =>
      "member" in e && e.member.uniqueAddress.equals(leaver.cluster.selfAddress) ? e.type : null,
    );
    for (const type of ["MemberLeft", "MemberExited", "MemberRemoved"])
      assert.ok(seen.includes(type as never), `${type} published`);
  } finally {
    await terminateAll(nodes);
  }
});

test("a terminated node is unreachable with status unchanged; down through the leader removes it everywhere", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const leaderAddress = nodes[0]!.cluster.snapshot().leader!;
    const leader = nodes.find((n) => n.cluster.selfAddress.equals(leaderAddress))!;
    const victim = nodes.find((n) => n !== leader)!;
    const survivors = nodes.filter((n) => n !== victim);
    const victimAddress = victim.cluster.selfAddress;
    await victim.system.terminate();
    await eventually(
      () => survivors.every((n) => n.cluster.snapshot().unreachable.some((u) => u.equals(victimAddress))),
      {
        what: "victim unreachable on every survivor",
        describe: describe(survivors),
      },
    );
    for (const n of survivors) {
      const record = n.cluster.snapshot().members.find((m) => m.uniqueAddress.equals(victimAddress));
      assert.equal(record?.status, "Up", "reachability never changes a status");
      assert.ok(n.events.some((e) => e.type === "UnreachableMember" && e.member.uniqueAddress.equals(victimAddress)));
    }
    const other = survivors.find((n) => n !== leader)!;
    assert.throws(
      () => other.cluster.down(victimAddress),
      (e: Error) => e instanceof ClusterConfigurationError && /shared secret/.test(e.message),
    );
    assert.equal(leader.cluster.down(leader.cluster.selfAddress), false, "a node never downs itself");
    assert.equal(leader.cluster.down(victimAddress), true);
    await eventually(() => survivors.every((n) => allUp(n, 2)), {
      what: "victim removed",
      describe: describe(survivors),
    });
    for (const n of survivors) {
      assert.ok(n.events.some((e) => e.type === "MemberDowned" && e.member.uniqueAddress.equals(victimAddress)));
      assert.ok(n.events.some((e) => e.type === "MemberRemoved" && e.member.uniqueAddress.equals(victimAddress)));
      assert.equal(n.cluster.snapshot().unreachable.length, 0);
    }
  } finally {
    await terminateAll(nodes);
  }
});

test("down from a non-leader is forwarded to the leader when remoting has a shared secret", async () => {
  const nodes = await startClusterNodes(3, { secret: "s3cret" });
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const leaderAddress = nodes[0]!.cluster.snapshot().leader!;
    const others = nodes.filter((n) => !n.cluster.selfAddress.equals(leaderAddress));
    const [asker, victim] = others as [ClusterNode, ClusterNode];
    const victimAddress = victim.cluster.selfAddress;
    await victim.system.terminate();
    await eventually(() => asker.cluster.snapshot().unreachable.length === 1, { what: "unreachable" });
    assert.equal(asker.cluster.down(victimAddress), true);
    const survivors = nodes.filter((n) => n !== victim);
    await eventually(() => survivors.every((n) => allUp(n, 2)), {
      what: "victim removed",
      describe: describe(survivors),
    });
  } finally {
    await terminateAll(nodes);
  }
});

test("a blackholed peer becomes unreachable, then reachable again, with no status change", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const [a, b, c] = nodes as [ClusterNode, ClusterNode, ClusterNode];
    const before = JSON.stringify(a.cluster.snapshot().members);
    a.remoting.blackhole(c.remoting.selfAddress);
    b.remoting.blackhole(c.remoting.selfAddress);
    c.remoting.blackhole(a.remoting.selfAddress);
    c.remoting.blackhole(b.remoting.selfAddress);
    await eventually(
      () => a.cluster.snapshot().unreachable.length === 1 && b.cluster.snapshot().unreachable.length === 1,
      {
        what: "c unreachable on a and b",
        describe: describe(nodes),
      },
    );
    assert.equal(JSON.stringify(a.cluster.snapshot().members), before, "no status changed while unreachable");
    for (const n of nodes) {
      n.remoting.unblackhole(a.remoting.selfAddress);
      n.remoting.unblackhole(b.remoting.selfAddress);
      n.remoting.unblackhole(c.remoting.selfAddress);
    }
    await eventually(() => nodes.every((n) => allUp(n, 3) && n.cluster.snapshot().unreachable.length === 0), {
      what: "reachable again",
      describe: describe(nodes),
    });
    assert.equal(JSON.stringify(a.cluster.snapshot().members), before, "no record changed at all");
    assert.ok(a.events.some((e) => e.type === "ReachableMember"));
    assert.ok(a.cluster.stats.reachabilityRestorations >= 1);
  } finally {
    await terminateAll(nodes);
  }
});

test("a node restarted on the same port joins with a new uid once its old incarnation is downed", async () => {
  const nodes = await startClusterNodes(3);
  const all: ClusterNode[] = [...nodes];
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    // Restart a node that is neither the seed nor the leader, so the others keep a leader throughout.
    const a = nodes[0]!;
    const c = nodes.slice(1).find((n) => !n.cluster.isLeader)!;
    const b = nodes.find((n) => n !== a && n !== c)!;
    const oldAddress = c.cluster.selfAddress;
    await c.system.terminate();
    const c2 = await startClusterNode([a], { port: c.port });
    all.push(c2);
    assert.notEqual(c2.cluster.selfAddress.uid, oldAddress.uid);
    assert.ok(c2.cluster.selfAddress.address.equals(oldAddress.address));
    const leader = [a, b].find((n) => n.cluster.isLeader)!;
    await eventually(() => leader.cluster.stats.joinRejections > 0, {
      what: "join deferred while old incarnation is a member",
    });
    assert.equal(c2.cluster.snapshot().selfStatus, "Joining");
    assert.equal(leader.cluster.down(oldAddress), true);
    await eventually(() => [a, b, c2].every((n) => allUp(n, 3)), {
      what: "new incarnation Up",
      describe: describe([a, b, c2]),
    });
    assert.ok(a.cluster.snapshot().members.some((m) => m.uniqueAddress.equals(c2.cluster.selfAddress)));
    assert.ok(!a.cluster.snapshot().members.some((m) => m.uniqueAddress.equals(oldAddress)));
  } finally {
    await terminateAll(all.filter((n) => !n.system.isTerminated));
  }
});

test("a joining node reaches a seed that restarted on the same port with a new uid", async () => {
  // The first process on the seed port belongs to another cluster, so it refuses the join; the joiner keeps retrying.
  const wrongSeed = await startClusterNode([], { settings: { clusterName: "other-cluster" } });
  const seedPort = wrongSeed.port;
  const joiner = await startClusterNode([seedPort]);
  const all: ClusterNode[] = [wrongSeed, joiner];
  try {
    await eventually(() => wrongSeed.cluster.stats.protocolRejections > 0, { what: "first join refused" });
    await wrongSeed.system.terminate();
    const seed = await startClusterNode([], { port: seedPort });
    all.push(seed);
    // Join retries must not stay bound to the refused incarnation: they reach whoever listens at the seed address.
    await eventually(() => allUp(seed, 2) && allUp(joiner, 2), {
      what: "joiner Up through the restarted seed",
      describe: describe([seed, joiner]),
    });
  } finally {
    await terminateAll(all.filter((n) => !n.system.isTerminated));
  }
});

test("a node of another cluster name is refused and counted", async () => {
  const a = await startClusterNode([]);
  const stranger = await startClusterNode([a], { settings: { clusterName: "other-cluster" } });
  try {
    await eventually(() => a.cluster.stats.protocolRejections > 0, { what: "rejection counted" });
    assert.equal(a.cluster.snapshot().members.length, 1);
    assert.equal(stranger.cluster.snapshot().selfStatus, "Joining");
  } finally {
    await terminateAll([a, stranger]);
  }
});

test("settings are validated with ClusterConfigurationError, and cluster needs remoting", async () => {
  const plain = ActorSystem.create("plain");
  try {
    await assert.rejects(
      plain.enableCluster({}),
      (e: Error) => e.name === "ClusterConfigurationError" && /requires remoting/.test(e.message),
    );
    assert.throws(() => Cluster.get(plain), ClusterNotEnabledError);
    await plain.enableRemoting({ host: "127.0.0.1", port: 0 });
    const bad: [object, RegExp][] = [
      [{ seedNodes: ["nope"] }, /seedNodes/],
      [{ seedNodes: ["127.0.0.1:0"] }, /port 0/],
      [{ roles: [""] }, /roles/],
      // NUL is not whitespace, but every peer refuses a member record with it (memberFromJSON): it could never join.
      [{ roles: ["a\u0000b"] }, /roles.*NUL/],
      [{ appVersion: "1.0\u0000" }, /appVersion/],
      [{ clusterName: "bad name" }, /clusterName/],
      [{ gossipInterval: 0 }, /gossipInterval/],
      [{ joinRetryInterval: Number.NaN }, /joinRetryInterval/],
      [{ gossipFanout: 0 }, /gossipFanout/],
      [{ maxMembers: 1.5 }, /maxMembers/],
      [{ failureDetector: { heartbeatInterval: 100, heartbeatTimeout: 100 } }, /greater than heartbeatInterval/],
    ];
    for (const [settings, pattern] of bad) {
      await assert.rejects(
        plain.enableCluster(settings),
        (e: Error) => e instanceof ClusterConfigurationError && pattern.test(e.message),
        JSON.stringify(settings),
      );
    }
  } finally {
    await plain.terminate();
  }
});

test("a downed member is quarantined: its associations close and it is refused from then on", async () => {
  const nodes = await startClusterNodes(3);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const leader = nodes.find((n) => n.cluster.isLeader)!;
    const [other, victim] = nodes.filter((n) => n !== leader) as [ClusterNode, ClusterNode];
    const lost: string[] = [];
    for (const n of [leader, other]) {
      n.remoting.onAssociationLost((peer, reason) => lost.push(`${n.port}:${peer}:${reason}`));
    }
    assert.equal(leader.cluster.down(victim.cluster.selfAddress), true);
    const victimKey = String(victim.cluster.selfAddress);
    await eventually(() => [leader, other].every((n) => lost.includes(`${n.port}:${victimKey}:quarantined`)), {
      what: "the victim quarantined on the leader and the other survivor",
      describe: () => lost,
    });
    await eventually(() => [leader, other].every((n) => allUp(n, 2)), {
      what: "victim removed",
      describe: describe(nodes),
    });
    // The leader told the victim before quarantining it: it knows it is out, and (default onDowned) terminated.
    await eventually(() => victim.system.isTerminated, {
      what: "the downed victim terminated",
      describe: describe([victim]),
    });
    assert.equal(victim.cluster.stats.selfDowned, 1);
    assert.equal(victim.cluster.snapshot().selfStatus !== "Up", true);
    assert.equal(
      [leader, other].every((n) =>
        n.cluster.snapshot().members.every((m) => !m.uniqueAddress.equals(victim.cluster.selfAddress)),
      ),
      true,
    );
  } finally {
    await terminateAll(nodes);
  }
});
