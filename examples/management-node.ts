// One cluster node with the management endpoint and graceful SIGTERM handling: what docs/operations.md runs.
// Usage: node --import tsx examples/management-node.ts <remotingPort> <managementPort> [seed host:port]
// MOVIE_MANAGEMENT_TOKEN enables the write endpoints (down, leave). Stop it with SIGTERM (kill, Ctrl-C sends SIGINT:
// use kill -TERM) to see it leave and hand its shards off first.

import { handleSigterm } from "../src/cluster/index.ts";
import { AbstractBehavior, ActorSystem, ConsoleLogger } from "../src/index.ts";
import { startManagement } from "../src/management/index.ts";
import { ClusterSharding } from "../src/sharding/index.ts";

abstract class CounterCommand {}
class Counter extends AbstractBehavior<CounterCommand> {
  receive(): void {}
}

const [remotingPort = "2551", managementPort = "8558", seed] = process.argv.slice(2);
const system = ActorSystem.create("shop", { logger: new ConsoleLogger("info") });
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: Number(remotingPort) });
await system.enableCluster({ seedNodes: [seed ?? remoting.selfAddress.address.hostPort] });
ClusterSharding.get(system).init("Counter", CounterCommand, { shardCount: 32 }, () => new Counter());
const token = process.env.MOVIE_MANAGEMENT_TOKEN;
const management = await startManagement(system, {
  port: Number(managementPort),
  ...(token === undefined ? {} : { token }),
});
handleSigterm(system, { deadline: 20_000 });
console.log(`node ${remoting.selfAddress}: dashboard ${management.url}`);
