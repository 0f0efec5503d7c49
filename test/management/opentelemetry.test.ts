// The metrics on an OpenTelemetry Meter: the SDK's MeterProvider with an in-memory exporter collects the same
// instruments as /metrics (counters and gauges, labels as attributes), with the nodes' own values.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  AggregationTemporality,
  DataPointType,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from "@opentelemetry/sdk-metrics";
import { latencyBucketsSeconds } from "../../src/actor/index.ts";
import { otelName, registerOpenTelemetryMetrics } from "../../src/management/index.ts";
import { Database } from "../../src/persistence/index.ts";
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

test("histograms become OpenTelemetry histograms with the same bounds and unit, recording later observations", async () => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
  const provider = new MeterProvider({ readers: [reader] });
  const system = nodes[1]!.system;
  const latency = Database.get(system).writeLatency;
  latency.append.observe(7); // before registration: not recorded (OpenTelemetry has no observable histogram)
  const unregister = registerOpenTelemetryMetrics(system, provider.getMeter("movie"));
  latency.append.observe(0.02);
  latency.append.observe(0.3);
  await reader.forceFlush();
  const metrics = exporter.getMetrics().flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics));
  const append = metrics.find((m) => m.descriptor.name === "movie.persistence.append.duration");
  assert.ok(append !== undefined, `among ${metrics.map((m) => m.descriptor.name).join(",")}`);
  assert.equal(append.descriptor.unit, "s");
  assert.equal(append.dataPointType, DataPointType.HISTOGRAM);
  const point = append.dataPoints[0]!.value as Histogram;
  assert.deepEqual(point.buckets.boundaries, [...latencyBucketsSeconds]);
  assert.equal(point.count, 2);
  assert.equal(point.sum, 0.32);
  // The handoff histogram is registered too, but the SDK exports an instrument only once it recorded something.
  unregister();
  latency.append.observe(0.05); // after unregistering: the bridge no longer listens
  await reader.forceFlush();
  const last = exporter
    .getMetrics()
    .at(-1)!
    .scopeMetrics.flatMap((s) => s.metrics);
  const after = last.find((m) => m.descriptor.name === "movie.persistence.append.duration");
  assert.equal((after?.dataPoints[0]?.value as Histogram | undefined)?.count ?? 2, 2);
  await provider.shutdown();
});
