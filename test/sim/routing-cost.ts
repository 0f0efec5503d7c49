// What one routed message costs a cluster, counted by the node simulator (test/sim/node-sim.ts) rather than timed: the
// messages put on the network per message a client sends, and those the coordinator receives per client message (its
// share of the routing work), in coordinator and in direct routing (docs/protocol.md §8.8). No faults: the cluster
// forms, the plan settles (no handoff for 2 virtual seconds), then clients on random nodes send to random entities, one
// message a virtual ms, in windows. The first window pays the direct route's probes and grants (one per caller and
// shard); the last is the steady state. Run by scripts/sim-routing-cost.ts; the table is in docs/performance.md.
import { LeastLoadedAllocation, RateLimitedRebalance, ShardingSettings } from "../../src/sharding/index.ts";
import { NodeSim } from "./node-sim.ts";

export interface RoutingCostOptions {
  readonly nodes: number;
  /** Shards of the type (the histories' 6 would leave most of 20 nodes without a shard). */
  readonly shards: number;
  /** Client messages per window. */
  readonly messages: number;
  /** Windows measured one after the other (at least 1): the first and the last are reported. */
  readonly windows: number;
  readonly direct: boolean;
  readonly seed: number;
}

export interface RoutingWindow {
  readonly messages: number;
  readonly delivered: number;
  /** Routing messages between nodes (envelopes; probes, grants, refusals) per client message. */
  readonly networkPerMessage: number;
  /** Of those, envelopes (hop 0 to the coordinator, hop 1 to the owner, direct) per client message. */
  readonly envelopesPerMessage: number;
  /** Routing messages the coordinator received and sent, per client message. */
  readonly coordinatorPerMessage: number;
  /** The most routing messages any other node received and sent, per client message. */
  readonly busiestOtherPerMessage: number;
  /** Every counted kind (membership and plan traffic too), totals of the window. */
  readonly kinds: Readonly<Record<string, number>>;
}

export interface RoutingCost {
  readonly nodes: number;
  readonly shards: number;
  readonly direct: boolean;
  /** Virtual ms until the plan was complete, agreed and unchanged for 2 s, with every member Up and converged. */
  readonly settledAtMs: number;
  readonly first: RoutingWindow;
  readonly last: RoutingWindow;
}

/** One measurement; throws when the cluster does not settle within 60 virtual seconds. */
export function measureRoutingCost(options: RoutingCostOptions): RoutingCost {
  const settings = ShardingSettings.create({
    shardCount: options.shards,
    allocation: new LeastLoadedAllocation(),
    rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
    routing: options.direct ? "direct" : "coordinator",
  });
  const sim = new NodeSim(options.seed, {}, false, settings);
  const ports = Array.from({ length: options.nodes }, (_, i) => 2551 + i);
  for (const p of ports) sim.start(p, [2551]);
  /** The agreed plan generation when the cluster looks settled, else null. */
  const settledGeneration = (): number | null => {
    const nodes = sim.alive;
    if (nodes.length !== options.nodes) return null;
    const types = nodes.map((n) => [...n.core.types.values()][0]);
    const first = types[0]?.plan;
    if (first === undefined || first.allocations.size !== options.shards) return null;
    if (!types.every((t) => t !== undefined && t.plan.generation === first.generation && t.handoffs.size === 0)) {
      return null;
    }
    const membersSettled = nodes.every(
      (n) =>
        n.view.converged &&
        n.view.unreachable.length === 0 &&
        n.view.members.length === options.nodes &&
        n.view.members.every((m) => m.status === "Up"),
    );
    return membersSettled ? first.generation : null;
  };
  for (;;) {
    if (sim.now > 60_000) throw new Error(`${options.nodes} simulated nodes did not settle in 60 virtual seconds`);
    const generation = settledGeneration();
    sim.runUntil(sim.now + (generation === null ? 100 : 2_000));
    if (generation !== null && settledGeneration() === generation) break;
  }
  const settledAtMs = sim.now;
  const coordinatorPort = 2551;
  const entities = Array.from({ length: 10 * options.shards }, (_, i) => `e${i}`);
  const window = (): RoutingWindow => {
    const kindsBefore = new Map(sim.wireCounts);
    const arrivalsBefore = new Map(sim.routingArrivals);
    const departuresBefore = new Map(sim.routingDepartures);
    const deliveredBefore = sim.result().delivered;
    for (let i = 0; i < options.messages; i++) {
      sim.at(i, () => {
        const nodes = sim.alive;
        sim.tell(nodes[sim.rand.int(nodes.length)]!, entities[sim.rand.int(entities.length)]!);
      });
    }
    sim.runUntil(sim.now + options.messages + 2_000);
    const kinds: Record<string, number> = {};
    for (const [k, v] of sim.wireCounts) {
      const n = v - (kindsBefore.get(k) ?? 0);
      if (n > 0) kinds[k] = n;
    }
    const arrivals = (port: number) =>
      (sim.routingArrivals.get(port) ?? 0) -
      (arrivalsBefore.get(port) ?? 0) +
      (sim.routingDepartures.get(port) ?? 0) -
      (departuresBefore.get(port) ?? 0);
    const routing = Object.entries(kinds).filter(
      ([k]) => k.startsWith("envelope") || k.startsWith("control Direct") || k === "control HandoffAnnounce",
    );
    const per = (n: number) => n / options.messages;
    return {
      messages: options.messages,
      delivered: sim.result().delivered - deliveredBefore,
      networkPerMessage: per(routing.reduce((sum, [, v]) => sum + v, 0)),
      envelopesPerMessage: per(routing.filter(([k]) => k.startsWith("envelope")).reduce((sum, [, v]) => sum + v, 0)),
      coordinatorPerMessage: per(arrivals(coordinatorPort)),
      busiestOtherPerMessage: per(Math.max(...ports.filter((p) => p !== coordinatorPort).map(arrivals))),
      kinds,
    };
  };
  const first = window();
  let last = first;
  for (let i = 1; i < options.windows; i++) last = window();
  return { nodes: options.nodes, shards: options.shards, direct: options.direct, settledAtMs, first, last };
}
