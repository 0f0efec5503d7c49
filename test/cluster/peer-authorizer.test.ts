// The cluster installs remoting's peer authorizer (remote never imports cluster): the predicate remoting asks before
// applying a remote system message to a user actor says "a member here, not Down or Removed". Real loopback TCP.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem, UniqueAddress } from "../../src/actor/index.ts";
import type { Cluster } from "../../src/cluster/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { fastSettings } from "./fixtures/nodes.ts";

type Authorizer = ((peer: UniqueAddress) => boolean) | null;

/** A node whose remoting records what the cluster installs through `setPeerAuthorizer`. */
async function start(seedPort: number | null, onDowned: "leave" | "terminate" = "leave") {
  const system = ActorSystem.create("movie");
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  const installed: Authorizer[] = [];
  Object.defineProperty(remoting, "setPeerAuthorizer", { value: (a: Authorizer) => installed.push(a) });
  const gone: string[] = [];
  Object.defineProperty(remoting, "markIncarnationGone", { value: (p: UniqueAddress) => gone.push(p.toString()) });
  const port = remoting.selfAddress.address.port!;
  const cluster: Cluster = await system.enableCluster({
    ...fastSettings,
    seedNodes: [`127.0.0.1:${seedPort ?? port}`],
    onDowned,
  });
  return { system, cluster, installed, gone, port };
}

test("members (not Down or Removed) are authorized peers; a downed incarnation is not, and is marked gone", async () => {
  const a = await start(null);
  const [b, c] = await Promise.all([start(a.port), start(a.port)]);
  const nodes = [a, b, c];
  try {
    await eventually(
      () => nodes.every((n) => n.cluster.snapshot().members.filter((m) => m.status === "Up").length === 3),
      {
        what: "3 Up",
      },
    );
    const authorizer = a.installed.at(-1)!;
    assert.ok(authorizer !== null && authorizer !== undefined, "installed when the cluster started");
    assert.equal(authorizer(b.cluster.selfAddress), true, "an Up member");
    assert.equal(authorizer(a.cluster.selfAddress), false, "not itself");
    assert.equal(authorizer(new UniqueAddress(b.cluster.selfAddress.address, "another-uid")), false, "another uid");
    assert.equal(authorizer(UniqueAddress.parse("movie.tcp://movie@127.0.0.1:1#x")), false, "a stranger");
    const leader = nodes.find((n) => n.cluster.isLeader)!;
    const victim = nodes.find((n) => n !== leader)!;
    const witness = nodes.find((n) => n !== leader && n !== victim)!;
    assert.equal(leader.cluster.down(victim.cluster.selfAddress), true);
    await eventually(() => !witness.installed.at(-1)!(victim.cluster.selfAddress), {
      what: "the victim de-authorized",
    });
    await eventually(() => victim.cluster.stats.selfDowned === 1, { what: "the victim learned it was downed" });
    // Membership's Down is what lets remoting retire that incarnation (a successor uid may then take its host:port).
    assert.ok(witness.gone.includes(victim.cluster.selfAddress.toString()), "marked gone on the witness");
    assert.ok(leader.gone.includes(victim.cluster.selfAddress.toString()), "marked gone on the leader");
    assert.ok(!witness.gone.includes(leader.cluster.selfAddress.toString()), "a live member never is");
    assert.equal(victim.installed.at(-1)!(witness.cluster.selfAddress), false, "a downed node trusts nobody");
    await leader.system.terminate();
    assert.equal(leader.installed.at(-1), null, "removed when the cluster stops");
  } finally {
    await Promise.all(nodes.map((n) => n.system.terminate()));
  }
});
