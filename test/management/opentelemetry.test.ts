// The metrics on an OpenTelemetry Meter: the SDK's MeterProvider with an in-memory exporter collects the same
// instruments as /metrics (counters and gauges, labels as attributes), with the nodes' own values.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from "@opentelemetry/sdk-metrics";
import { otelName, registerOpenTelemetryMetrics } from "../../src/management/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { DeliverOrder, OrderBehavior, OrderCommand } from "../sharding/fixtures/order.ts";
import { type ShardingNode, settled, startShardingNodes, terminateAll } from "../sharding/fixtures/tcp-nodes.ts";

let nodes: ShardingNode[] = [];
before(async () => {
  nodes = await startShardingNodes(2);
  for (const n of nodes) n.sharding.init("Order", OrderCommand, { shardCount: 8 }, (id) => new OrderBehavior(id));
  await eventually(() => nodes.every((n) => settled(n, 2) && n.sharding.allocations("Order").size === 8), {
    what: "2 nodes with a plan",
  });
});
after(() => terminateAll(nodes));

test("otelName turns Prometheus names into OpenTelemetry's dotted names", () => {
  assert.equal(otelName("movie_sharding_routes_total"), "movie.sharding.routes");
  assert.equal(otelName("movie_cluster_members"), "movie.cluster.members");
});

test("an SDK MeterProvider with an in-memory exporter collects the instruments with the nodes' values", async () => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
  const provider = new MeterProvider({ readers: [reader] });
  const unregister = registerOpenTelemetryMetrics(nodes[0]!.system, provider.getMeter("movie"));
  for (let i = 0; i < 10; i++) nodes[0]!.sharding.entityRefFor("Order", `o-${i}`).tell(new DeliverOrder("p"));
  await reader.forceFlush();
  const metrics = exporter.getMetrics().flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics));
  const find = (name: string) => metrics.find((m) => m.descriptor.name === name);
  const routes = find("movie.sharding.routes");
  assert.ok(routes !== undefined, `movie.sharding.routes among ${metrics.map((m) => m.descriptor.name).join(",")}`);
  assert.equal(routes.dataPoints[0]!.value, nodes[0]!.sharding.stats.routes);
  assert.ok((routes.dataPoints[0]!.value as number) >= 10);
  const members = find("movie.cluster.members")!;
  const up = members.dataPoints.find((p) => p.attributes.status === "Up");
  assert.equal(up?.value, 2);
  const shards = find("movie.sharding.shards")!;
  assert.deepEqual(
    shards.dataPoints.map((p) => [p.attributes.type, p.value]),
    [["Order", 8]],
  );
  assert.ok(find("movie.remote.frames.received") !== undefined);
  unregister();
  await provider.shutdown();
});
