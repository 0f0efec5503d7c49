// The routing cost of a 20-node cluster in coordinator and in direct routing (docs/protocol.md §8.8), counted by the
// node simulator: `npm run sim:routing-cost`. Prints a table and writes bench/results/sim-routing-cost.json. Counts,
// not timings: the same on every host (the simulator is seeded). About 15 s of CPU.
import { mkdirSync, writeFileSync } from "node:fs";
import { measureRoutingCost, type RoutingWindow } from "../test/sim/routing-cost.ts";

const options = { nodes: 20, shards: 60, messages: 3_000, windows: 3, seed: 1 };
const runs = [false, true].map((direct) => measureRoutingCost({ ...options, direct }));
const row = (mode: string, window: string, w: RoutingWindow) => ({
  mode,
  window,
  delivered: `${w.delivered}/${w.messages}`,
  "network / msg": w.networkPerMessage.toFixed(3),
  "envelopes / msg": w.envelopesPerMessage.toFixed(3),
  "coordinator / msg": w.coordinatorPerMessage.toFixed(3),
  "busiest other / msg": w.busiestOtherPerMessage.toFixed(3),
});
console.log(
  `${options.nodes} simulated nodes, ${options.shards} shards, ${options.windows} windows of ${options.messages} client messages (one a virtual ms, random caller and entity); routing messages only`,
);
console.table(
  runs.flatMap((r) => {
    const mode = r.direct ? "direct" : "coordinator";
    return [row(mode, "first", r.first), row(mode, "last", r.last)];
  }),
);
const ratio = runs[1]!.last.coordinatorPerMessage / runs[0]!.last.coordinatorPerMessage;
console.log(`coordinator work, direct / coordinator routing (last window): ${ratio.toFixed(3)}`);
mkdirSync("bench/results", { recursive: true });
writeFileSync("bench/results/sim-routing-cost.json", `${JSON.stringify({ options, runs }, null, 2)}\n`);
