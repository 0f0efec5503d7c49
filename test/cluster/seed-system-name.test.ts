// Nodes of one cluster share one actor-system name: a "host:port" seed means a node named like this one. A seed that
// runs another system name refuses the handshake, and enableCluster fails with an error that says so (before, the
// node stayed Joining forever while enableCluster resolved, with repeated handshake warnings as the only sign).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import { ClusterConfigurationError } from "../../src/cluster/index.ts";

const systems: ActorSystem[] = [];
after(() => Promise.all(systems.map((s) => s.terminate())));

async function node(name: string) {
  const system = ActorSystem.create(name);
  systems.push(system);
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  return { system, port: remoting.selfAddress.address.port };
}

test("a seed of another actor-system name fails enableCluster, naming the rule and the fix", async () => {
  const seed = await node("shop");
  await seed.system.enableCluster({});
  const stranger = await node("warehouse");
  await assert.rejects(stranger.system.enableCluster({ seedNodes: [`127.0.0.1:${seed.port}`] }), (e: unknown) => {
    assert.ok(e instanceof ClusterConfigurationError, `expected ClusterConfigurationError, got ${String(e)}`);
    assert.equal(e.setting, "seedNodes");
    assert.match(e.message, new RegExp(`seed 127\\.0\\.0\\.1:${seed.port} refused to join`));
    assert.match(e.message, /nodes of one cluster share one actor-system name/);
    assert.match(e.message, /ActorSystem\.create\("warehouse"\)/);
    return true;
  });
});

test("a node of the same name joins, and a seed that is not up yet does not hold enableCluster", async () => {
  const seed = await node("shop");
  await seed.system.enableCluster({});
  const member = await node("shop");
  const cluster = await member.system.enableCluster({ seedNodes: [`127.0.0.1:${seed.port}`], joinRetryInterval: 50 });
  await cluster.awaitUp(10_000);
  // Nothing listens on the port of a terminated node: the refused dial settles the wait at once.
  const gone = await node("shop");
  await gone.system.terminate();
  const lonely = await node("shop");
  const started = lonely.system.scheduler.now();
  await lonely.system.enableCluster({ seedNodes: [`127.0.0.1:${gone.port}`] });
  assert.ok(lonely.system.scheduler.now() - started < 2_000, "a refused connection does not wait out the timeout");
});
