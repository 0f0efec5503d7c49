// GET /metrics over real HTTP on two loopback nodes with an ordinary type, a type whose name needs escaping, and a
// persistent type on the real PostgreSQL (leases, group commit): the text is checked by Prometheus' own linter
// (`promtool check metrics`, Debian's prometheus package, which .ci/run installs) and parsed back by
// parse-prometheus-text-format, and the values are the nodes' own counters.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, test } from "node:test";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { type ManagementServer, startManagement } from "../../src/management/index.ts";
import {
  Database,
  Effect,
  EventSourcedBehavior,
  EventSourcing,
  OperationId,
  outboxMessageId,
  Projections,
} from "../../src/persistence/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";
import { initEventSourced } from "../../src/sharding/persistent/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore } from "../persistence/pg-fixture.ts";
import { DeliverOrder, OrderBehavior, OrderCommand } from "../sharding/fixtures/order.ts";
import { type ShardingNode, settled, startShardingNodes, terminateAll } from "../sharding/fixtures/tcp-nodes.ts";
import { rawGet } from "./fixtures/raw-http.ts";

abstract class TallyCommand {}
class Added {
  constructor(readonly n: number) {}
}
class Tally extends EventSourcedBehavior<TallyCommand, Added, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  applyEvent(state: { n: number }, event: Added) {
    return { n: state.n + event.n };
  }
  handleCommand(_state: { n: number }, command: TallyCommand) {
    return Effect.persist<Added, { n: number }>(new Added(1), (command as AddOne).op);
  }
}
class AddOne extends TallyCommand {
  constructor(readonly op: string) {
    super();
  }
}
MessageRegistry.register(AddOne);

const weird = 'we"ird\\type\nname{x="1"} 9';
let nodes: ShardingNode[] = [];
let server: ManagementServer;
const pg = await freshPostgresStore("management_metrics");

before(async () => {
  nodes = await startShardingNodes(2);
  for (const n of nodes) {
    n.sharding.init("Order", OrderCommand, { shardCount: 8 }, (id) => new OrderBehavior(id));
    n.sharding.init(weird, OrderCommand, { shardCount: 4 }, (id) => new OrderBehavior(id));
    const database = Database.get(n.system);
    await database.use(pg.store);
    database.codec.register(Added);
    const tallies = EventSourcing.get(n.system).registerEntity(Tally, TallyCommand, () => new Tally(), {
      name: "Tally",
    });
    initEventSourced(n.sharding, tallies, { shardCount: 4, leaseDuration: 3_000, leaseRenewInterval: 1_000 });
  }
  await eventually(() => nodes.every((n) => settled(n, 2)), { what: "2 nodes Up and converged" });
  await eventually(
    () => nodes.every((n) => n.sharding.allocations("Order").size === 8 && n.sharding.allocations("Tally").size === 4),
    {
      what: "plans everywhere",
    },
  );
  for (let i = 0; i < 20; i++) nodes[0]!.sharding.entityRefFor("Order", `o-${i}`).tell(new DeliverOrder("p"));
  for (let i = 0; i < 8; i++) nodes[0]!.sharding.entityRefFor("Tally", `t-${i}`).tell(new AddOne(`op-${i}`));
  await eventually(() => nodes.some((n) => n.sharding.stats.leaseAcquisitions > 0), { what: "a lease acquired" });
  await eventually(() => pg.store.groupCommitStats.statements > 0, {
    what: "an append",
    describe: () => ({ stats: nodes.map((n) => n.sharding.stats), gc: pg.store.groupCommitStats }),
  });
  // A projection on node 0, and an outbox with one pending and one parked message.
  await pg.store.appendEvents({
    persistenceId: "Mailer:m1",
    expectedRevision: 0,
    operationId: OperationId.random(),
    events: [{ manifest: "Sent", payload: "{}" }],
    outbox: [0, 1].map((k) => ({
      messageId: outboxMessageId("Mailer:m1", "op", k),
      destination: { kind: "handler" as const, handler: "smtp" },
      manifest: "json",
      payload: "{}",
    })),
  });
  const [poison] = (await pg.store.claimOutbox({ owner: "metrics-test", limit: 1, leaseMs: 60_000 })).rows;
  await pg.store.failOutbox("metrics-test", [{ offset: poison!.offset, error: "bad", retryAfterMs: 0, park: true }]);
  const model = Projections.get(nodes[0]!.system).start({
    name: "metrics-model",
    mode: "at-least-once",
    pollIntervalMs: 50,
    handler: () => {},
  });
  const latest = await pg.store.latestOffset();
  await eventually(() => model.stats.checkpoint >= latest, {
    what: "the projection caught up",
    describe: () => model.stats,
  });
  server = await startManagement(nodes[0]!.system, { port: 0 });
});
after(async () => {
  await server?.close();
  await terminateAll(nodes);
  await pg.dispose();
});

test("promtool check metrics accepts the exposition text (format and naming conventions)", async () => {
  const res = await rawGet(server.address.port, "/metrics");
  assert.equal(res.status, 200);
  const check = spawnSync("promtool", ["check", "metrics"], { input: res.body, encoding: "utf8" });
  assert.equal(check.error, undefined, "promtool is missing: apt-get install -y --no-install-recommends prometheus");
  assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`);
  assert.equal(`${check.stdout}${check.stderr}`.trim(), "", "promtool printed lint problems");
});

test("a broken exposition is refused by the same check (the check can fail)", () => {
  const check = spawnSync("promtool", ["check", "metrics"], {
    input: '# HELP a_total x\n# TYPE a_total counter\na_total{l="v} 3\n',
    encoding: "utf8",
  });
  assert.notEqual(check.status, 0);
});

test("parsed back, every family has help and a type, and the values are the node's counters", async () => {
  const res = await rawGet(server.address.port, "/metrics");
  const families = parsePrometheusTextFormat(res.body);
  const byName = new Map(families.map((f) => [f.name, f]));
  for (const f of families) {
    assert.ok(f.help.length > 0, `${f.name} has help`);
    assert.ok(f.type === "COUNTER" || f.type === "GAUGE" || f.type === "HISTOGRAM", `${f.name} is ${f.type}`);
    if (f.type === "COUNTER") assert.match(f.name, /_total$/);
    // Histograms carry their unit last (Prometheus conventions); their samples are checked by promtool above and
    // below by name (this parser folds a labelled histogram family into one).
    if (f.type === "HISTOGRAM") {
      assert.match(f.name, /_(seconds|size)$/);
      continue;
    }
    for (const m of f.metrics) assert.ok(Number.isFinite(Number(m.value)), `${f.name} value ${m.value}`);
  }
  const value = (name: string, labels: Record<string, string> = {}): number => {
    const f = byName.get(name);
    assert.ok(f !== undefined, `${name} present`);
    const m = f.metrics.find((x) => Object.entries(labels).every(([k, v]) => x.labels?.[k] === v));
    assert.ok(m !== undefined, `${name} ${JSON.stringify(labels)} present`);
    return Number(m.value);
  };
  const node = nodes[0]!;
  // Sharding: every counter of ShardingStats, plus per-type gauges (the weird name round-trips through escaping).
  for (const key of Object.keys(node.sharding.stats)) {
    if (key === "malformedEnvelopes") continue;
    const name = `movie_sharding_${key.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase()}_total`;
    assert.ok(byName.has(name), `${name} present`);
  }
  assert.ok(value("movie_sharding_routes_total") >= 28);
  assert.equal(value("movie_sharding_shards", { type: weird }), 4);
  assert.equal(value("movie_sharding_shards", { type: "Order" }), 8);
  assert.equal(value("movie_sharding_allocated_shards", { type: "Tally" }), 4);
  // Leases change while the node runs (acquired on first use, released, re-acquired): compare the gauge with the
  // inspection around a scrape during which the count held still.
  const held = () => (node.sharding.inspect("Tally").leases ?? []).filter((l) => l.phase === "held").length;
  let seen: { before: number; scraped: number; after: number } | null = null;
  await eventually(
    async () => {
      const before = held();
      const scrape = parsePrometheusTextFormat((await rawGet(server.address.port, "/metrics")).body);
      const family = scrape.find((f) => f.name === "movie_sharding_leases_held");
      const metric = family?.metrics.find((m) => m.labels?.type === "Tally");
      seen = { before, scraped: Number(metric?.value), after: held() };
      return seen.before === seen.after;
    },
    { what: "a scrape while the Tally lease count held still", describe: () => seen },
  );
  const still = seen as unknown as { before: number; scraped: number };
  assert.equal(still.scraped, still.before, "movie_sharding_leases_held is the node's count of held leases");
  assert.equal(value("movie_sharding_malformed_envelopes_total", { reason: "payload" }), 0);
  // Remoting, cluster, persistence.
  assert.ok(value("movie_remote_frames_received_total") > 0);
  assert.ok(value("movie_remote_sent_bytes_total") > 0);
  assert.equal(value("movie_remote_rejected_total", { reason: "oversize" }), 0);
  assert.equal(value("movie_cluster_members", { status: "Up" }), 2);
  assert.equal(value("movie_cluster_members", { status: "Leaving" }), 0);
  assert.equal(value("movie_cluster_converged"), 1);
  assert.equal(value("movie_cluster_unreachable_members"), 0);
  assert.ok(value("movie_persistence_group_commit_statements_total") > 0);
  assert.ok(value("movie_persistence_attempts_total") > 0);
  // Projections running on the node, and the database's outbox.
  const model = { projection: "metrics-model" };
  assert.ok(value("movie_projection_checkpoint_offset", model) > 0);
  assert.ok(value("movie_projection_latest_offset", model) >= value("movie_projection_checkpoint_offset", model));
  assert.ok(value("movie_projection_lag_events", model) >= 0);
  assert.ok(value("movie_projection_processed_events_total", model) > 0);
  assert.equal(value("movie_projection_failures_total", model), 0);
  assert.equal(value("movie_projection_paused", model), 0);
  assert.equal(value("movie_outbox_messages", { state: "parked" }), 1);
  assert.equal(value("movie_outbox_messages", { state: "pending" }), 1);
  assert.equal(value("movie_outbox_messages", { state: "claimed" }), 0);
  assert.ok(value("movie_outbox_oldest_pending_age_seconds") >= 0);
});
