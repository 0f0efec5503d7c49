// Seed discovery through DNS, against a DNS server on loopback UDP: A/AAAA and SRV answers become seeds, a bad name
// is refused, the lowest discovered node forms the cluster while the others join it, and a node still Joining
// re-resolves and joins once the records name a live seed.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ActorSystem, silentLogger } from "../../src/actor/index.ts";
import {
  ClusterConfigurationError,
  DnsSeedDiscovery,
  enableClusterWithDiscovery,
  StaticSeedDiscovery,
  seedsFor,
} from "../../src/cluster/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { type DnsServer, startDnsServer } from "./fixtures/dns-server.ts";

let dns: DnsServer;
const systems: ActorSystem[] = [];
before(async () => {
  dns = await startDnsServer();
});
after(async () => {
  await Promise.all(systems.map((s) => s.terminate()));
  await dns.close();
});

const fast = {
  joinRetryInterval: 50,
  gossipInterval: 30,
  failureDetector: { heartbeatInterval: 50, heartbeatTimeout: 1_500 },
};
const servers = (): string[] => [`127.0.0.1:${dns.port}`];

async function node(): Promise<{ system: ActorSystem; hostPort: string }> {
  const system = ActorSystem.create("disc", { logger: silentLogger });
  systems.push(system);
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  return { system, hostPort: remoting.selfAddress.address.hostPort };
}

test("A, AAAA and SRV records resolve to seeds; an unknown name rejects", async () => {
  dns.records.set("seeds.test", { a: ["127.0.0.2", "127.0.0.1"], aaaa: ["::1"] });
  dns.records.set("_movie._tcp.seeds.test", {
    srv: [
      { target: "pod-b.seeds.test", port: 2552 },
      { target: "pod-a.seeds.test", port: 2551 },
    ],
  });
  dns.records.set("pod-a.seeds.test", { a: ["10.0.0.1"] });
  dns.records.set("pod-b.seeds.test", { a: ["10.0.0.2"] });
  const a = new DnsSeedDiscovery({ name: "seeds.test", records: "a", port: 2551, servers: servers() });
  assert.deepEqual(await a.resolve(), ["127.0.0.1:2551", "127.0.0.2:2551"]);
  const both = new DnsSeedDiscovery({ name: "seeds.test", port: 2551, servers: servers() });
  assert.deepEqual(await both.resolve(), ["127.0.0.1:2551", "127.0.0.2:2551", "[::1]:2551"]);
  const srv = new DnsSeedDiscovery({ name: "_movie._tcp.seeds.test", records: "srv", servers: servers() });
  assert.deepEqual(await srv.resolve(), ["10.0.0.1:2551", "10.0.0.2:2552"]);
  const missing = new DnsSeedDiscovery({ name: "nope.test", records: "a", port: 1, servers: servers() });
  await assert.rejects(missing.resolve(), /ENOTFOUND|queryA/);
  assert.throws(
    () => new DnsSeedDiscovery({ name: "seeds.test", records: "a", servers: servers() }),
    ClusterConfigurationError,
  );
  assert.throws(() => new DnsSeedDiscovery({ name: "", records: "srv" }), ClusterConfigurationError);
});

test("seedsFor: the lowest node keeps itself (it forms the cluster), the others join through the rest", () => {
  const found = ["127.0.0.1:3000", "127.0.0.1:900", "127.0.0.2:1"];
  assert.deepEqual(seedsFor("127.0.0.1:900", found), ["127.0.0.1:900", "127.0.0.1:3000", "127.0.0.2:1"]);
  assert.deepEqual(seedsFor("127.0.0.1:3000", found), ["127.0.0.1:900", "127.0.0.2:1"]);
  assert.deepEqual(seedsFor("127.0.0.9:1", []), []);
});

test("three nodes that discover each other through SRV form one cluster", async () => {
  const nodes = await Promise.all([node(), node(), node()]);
  dns.records.set("_movie._tcp.three.test", {
    srv: nodes.map((n) => ({ target: "127.0.0.1", port: Number(n.hostPort.split(":")[1]) })),
  });
  const clusters = await Promise.all(
    nodes.map((n) =>
      enableClusterWithDiscovery(n.system, {
        ...fast,
        discovery: new DnsSeedDiscovery({ name: "_movie._tcp.three.test", records: "srv", servers: servers() }),
        minSeeds: 3,
      }),
    ),
  );
  await eventually(() => clusters.every((c) => c.snapshot().members.filter((m) => m.status === "Up").length === 3), {
    what: "one cluster of three",
    describe: () => clusters.map((c) => c.snapshot().members.map((m) => `${m.uniqueAddress} ${m.status}`)),
  });
});

test("a Joining node re-resolves and joins once the records name a live seed", async () => {
  const formed = await node();
  const cluster = await formed.system.enableCluster({ ...fast, seedNodes: [formed.hostPort] });
  const joiner = await node();
  // At first the records name only a seed nobody listens on (and the joiner itself): it keeps trying.
  dns.records.set("late.test", {
    srv: [
      { target: "127.0.0.1", port: 1 },
      { target: "127.0.0.1", port: Number(joiner.hostPort.split(":")[1]) },
    ],
  });
  const joining = await enableClusterWithDiscovery(joiner.system, {
    ...fast,
    discovery: new DnsSeedDiscovery({ name: "late.test", records: "srv", servers: servers() }),
  });
  const queries = dns.queries;
  await eventually(() => joining.stats.joinAttempts >= 4 && dns.queries >= queries + 3, {
    what: "several joins and lookups while Joining",
    describe: () => ({ attempts: joining.stats.joinAttempts, queries: dns.queries }),
  });
  assert.equal(joining.selfStatus, "Joining");
  dns.records.set("late.test", {
    srv: [formed.hostPort, joiner.hostPort].map((hp) => ({ target: "127.0.0.1", port: Number(hp.split(":")[1]) })),
  });
  await eventually(() => joining.selfStatus === "Up" && cluster.snapshot().members.length === 2, {
    what: "the joiner Up in the formed cluster",
    describe: () => ({ joiner: joining.selfStatus, members: cluster.snapshot().members.length }),
  });
});

test("discovery that never answers enough seeds gives up with a ClusterConfigurationError naming why", async () => {
  const lonely = await node();
  await assert.rejects(
    enableClusterWithDiscovery(lonely.system, {
      ...fast,
      discovery: new StaticSeedDiscovery([]),
      discoveryTimeout: 200,
    }),
    (error: unknown) => error instanceof ClusterConfigurationError && /0 seeds found, 1 needed/.test(error.message),
  );
  await assert.rejects(
    enableClusterWithDiscovery(lonely.system, {
      ...fast,
      discovery: { resolve: () => Promise.resolve([{ toString: 1 }] as unknown as string[]) },
      discoveryTimeout: 200,
    }),
    /other than an array of strings/,
  );
});
