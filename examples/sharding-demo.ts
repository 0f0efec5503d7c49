// The main job (`npm start`): the seed's persistent Order example on three real nodes over loopback TCP.
// A frontend node (no entities) streams parcels to event-sourced orders on two backend nodes through cluster
// sharding, every write fenced by a PostgreSQL shard lease; then one backend leaves gracefully and the summary shows
// its shards moving to the other with their epochs advancing by one, and every order's persisted state intact.
// Each parcel also reserves one item in a second entity type, Stock, through the fenced outbox (a dispatcher per
// node delivers through sharding): after the leave every parcel must be reserved exactly once.
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { NodeProcess } from "./support/node-process.ts";
import { chooseDemoPostgres } from "./support/postgres.ts";

interface Status {
  type: "status";
  node: string;
  label: string;
  role: string;
  coordinator: string | null;
  members: string[];
  converged: boolean;
  shardsPerNode: Record<string, number>;
  entities: number;
  stats: {
    routes: number;
    localDeliveries: number;
    remoteRoutes: number;
    forwards: number;
    handoffShards: number;
    leaseAcquisitions: number;
    leaseRenewals: number;
    leaseLosses: number;
  };
  handoffWaits: number;
  stream: { delivered: number; retries: number } | null;
}

const nodeScript = fileURLToPath(new URL("./sharding/node.ts", import.meta.url));
const started = Date.now();
const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s`;
const say = (text: string): void => console.log(`${elapsed()}  ${text}`);

/** A demo node process, with the last status it reported. */
class DemoNode extends NodeProcess<{ node: string; hostPort: string; managementUrl: string }> {
  last: Status | null = null;

  constructor(name: string, role: string, seed: string) {
    super(name, nodeScript, [name, role, seed], {
      execArgv: ["--import", "tsx"],
      env: { MOVIE_DEMO_PG_URL: database.url, MOVIE_DEMO_PG_SCHEMA: schema },
    });
  }

  async status(): Promise<Status> {
    this.last = await this.request<Status>({ type: "status" });
    return this.last;
  }
}

async function until(what: string, condition: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`demo: timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const labels = new Map<string, string>();
function short(node: string): string {
  return labels.get(node) ?? node;
}

function printSummary(nodes: DemoNode[]): void {
  const plan = nodes.find((n) => n.last !== null && Object.keys(n.last.shardsPerNode).length > 0)?.last?.shardsPerNode;
  const shards =
    plan === undefined
      ? "no plan yet"
      : Object.entries(plan)
          .map(([n, c]) => `${short(n)}=${c}`)
          .join(" ");
  const rows = nodes
    .filter((n) => n.last !== null && !n.exited)
    .map((n) => {
      const s = n.last!;
      const leases =
        s.role === "backend"
          ? ` leases acquired=${s.stats.leaseAcquisitions} renewed=${s.stats.leaseRenewals} lost=${s.stats.leaseLosses}`
          : "";
      const sent = s.stream === null ? "" : ` acked=${s.stream.delivered}`;
      return `${n.name}: entities=${s.entities}${sent} routed=${s.stats.routes}${leases}`;
    });
  say(`shards: ${shards} | ${rows.join(" | ")}`);
}

interface LeaseRow {
  shard: number;
  owner: string;
  epoch: number;
  live: boolean;
}

/** The demo's own view of the shard_lease table: who holds each Order shard, under which epoch. */
async function leaseRows(): Promise<Map<number, LeaseRow>> {
  const result = await admin.query<{ shard_id: string; owner: string; epoch: string; live: boolean }>(
    `SELECT shard_id, owner, epoch, lease_until_epoch_ms > ${schema}.movie_now_ms() AS live FROM ${schema}.shard_lease
      WHERE entity_type = 'Order' ORDER BY shard_id`,
  );
  return new Map(
    result.rows.map((r) => [
      Number(r.shard_id),
      { shard: Number(r.shard_id), owner: r.owner, epoch: Number(r.epoch), live: r.live },
    ]),
  );
}

const nodes: DemoNode[] = [];
let ticker: ReturnType<typeof setInterval> | undefined;
let schemaCreated = false;
/** Stops every node and removes this run's schema, whatever happened (a throwaway server stops on exit). */
async function cleanUp(): Promise<void> {
  clearInterval(ticker);
  for (const node of nodes) if (!node.exited) node.process.kill("SIGTERM");
  await Promise.all(nodes.map((n) => n.whenExited()));
  if (schemaCreated) await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
  await admin.end().catch(() => undefined);
  await database.stop();
}

say("starting: a frontend node and two backend nodes, each its own OS process, talking over loopback TCP");
const database = await chooseDemoPostgres({ log: (line) => say(line) });
// A fresh schema per run, so runs never see each other's orders or leases; dropped at the end.
const schema = `movie_demo_${randomBytes(4).toString("hex")}`;
const admin = new pg.Client({ connectionString: database.url });
admin.on("error", () => undefined);
await admin.connect();
// Create the tables once here rather than racing three nodes for the migration lock.
await (await PostgresStore.connect({ connectionUri: database.url, schema })).close();
schemaCreated = true;
say(`orders are event-sourced: their events and the shard leases live in schema ${schema} (dropped at the end)`);

try {
  process.exitCode = (await runDemo()) ? 0 : 1;
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  await cleanUp();
}

async function runDemo(): Promise<boolean> {
  const frontend = new DemoNode("frontend", "frontend", "self");
  nodes.push(frontend);
  const ready = await frontend.ready.catch(() => null);
  if (ready === null) throw new Error("frontend did not start");
  labels.set(ready.node, "frontend");
  say(`frontend is up at ${ready.node} (the seed node; role frontend, so it hosts no entities)`);
  say(`dashboard: ${ready.managementUrl} (members, the shard grid, rates; watch the leave below move the shards)`);
  const backends = [
    new DemoNode("backend-1", "backend", ready.hostPort),
    new DemoNode("backend-2", "backend", ready.hostPort),
  ];
  nodes.push(...backends);
  for (const backend of backends) {
    const up = await backend.ready;
    labels.set(up.node, backend.name);
    say(`${backend.name} is up at ${up.node} (role backend)`);
  }
  say("waiting for membership to converge and the plan to cover all 64 shards");

  await until("three Up members and a full plan", async () => {
    const statuses = await Promise.all(nodes.map((n) => n.status()));
    const planned = Object.values(statuses[0]!.shardsPerNode).reduce((a, b) => a + b, 0);
    return (
      statuses.every((s) => s.converged && s.members.filter((m) => m.endsWith(":Up")).length === 3) && planned === 64
    );
  });
  printSummary(nodes);
  const coordinator = frontend.last?.coordinator ?? "";
  say(`sharding coordinator (lowest Up address): ${short(coordinator)}`);
  // The backend that leaves is one that is not the coordinator, so routing never pauses for a coordinator change and
  // every accepted delivery must arrive (a coordinator change is allowed to reject in-flight traffic: at-most-once).
  const leaving = backends[1]!.last?.node === coordinator ? backends[0]! : backends[1]!;
  const staying = backends.find((b) => b !== leaving)!;

  say("frontend streams parcels to 50 orders: each order sends parcel n+1 once parcel n is acknowledged");
  frontend.tell({ type: "stream", orders: 50, pauseMs: 40 });
  ticker = setInterval(async () => {
    await Promise.all(nodes.filter((n) => !n.exited).map((n) => n.status().catch(() => null)));
    printSummary(nodes);
  }, 1_000);

  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const leasesBefore = await leaseRows();
  const leavingAddress = leaving.last?.node ?? "";
  const held = [...leasesBefore.values()].filter((r) => r.owner === leavingAddress && r.live);
  say(
    `${leaving.name} holds ${held.length} shard leases in PostgreSQL (epochs: ${held
      .slice(0, 4)
      .map((r) => `shard ${r.shard}@${r.epoch}`)
      .join(", ")}${held.length > 4 ? ", ..." : ""})`,
  );
  say(
    `${leaving.name} leaves the cluster gracefully: its shards hand off to ${staying.name}, which takes each lease ` +
      "under the next epoch (a lease the leaving node could not release frees up within the 3 s leaseDuration)",
  );
  const leaveStarted = Date.now();
  // The node shuts down gracefully (system.shutdown(): leave, hand off, wait until removed, terminate) and exits.
  const left = await leaving.request<{ stats: Status["stats"]; removed: boolean }>({ type: "leave" }, 40_000);
  say(
    `${leaving.name} ${left.removed ? "was removed after handing off" : "was NOT removed before its shutdown deadline"}, ` +
      `${((Date.now() - leaveStarted) / 1000).toFixed(1)} s after it started ` +
      `leaving (its leases: acquired=${left.stats.leaseAcquisitions} ` +
      `renewed=${left.stats.leaseRenewals} lost=${left.stats.leaseLosses})`,
  );
  await leaving.whenExited();

  await until(`every shard on ${staying.name}`, async () => {
    const s = await frontend.status();
    const owners = Object.keys(s.shardsPerNode);
    return owners.length === 1 && short(owners[0]!) === staying.name;
  });
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  say("stopping the stream: each order finishes its parcel in flight");
  const stopped = await frontend.request<{
    delivered: number;
    retries: number;
    acked: Record<string, number>;
    unresolved: string[];
  }>({ type: "stop-stream" }, 30_000);
  clearInterval(ticker);
  await Promise.all([frontend, staying].map((n) => n.status()));
  printSummary(nodes);

  // Each moved shard must now be held by the staying node under a higher epoch: that is the fence that makes any late
  // write of the old owner fail with StaleShardOwnerError. One transfer is one epoch; a shard the staying node also
  // lost and re-took while membership changed shows one epoch per acquisition.
  const leasesAfter = await leaseRows();
  const stayingAddress = staying.last?.node ?? "";
  let movedOk = 0;
  let movedTwice = 0;
  const movedBad: string[] = [];
  for (const before of held) {
    const after = leasesAfter.get(before.shard);
    if (after === undefined || after.owner !== stayingAddress) continue; // not used again since the move
    if (after.epoch === before.epoch + 1) movedOk++;
    else if (after.epoch > before.epoch + 1) movedTwice++;
    else movedBad.push(`shard ${before.shard}: ${before.epoch} -> ${after.epoch}`);
  }
  const examples = held
    .map((b) => [b, leasesAfter.get(b.shard)] as const)
    .filter(([, a]) => a !== undefined && a.owner === stayingAddress)
    .slice(0, 4)
    .map(([b, a]) => `shard ${b.shard}: ${b.epoch} -> ${a!.epoch}`)
    .join(", ");
  say(
    `epochs of the moved shards, now held by ${staying.name}: ${examples || "none re-acquired"}; ` +
      `${movedOk} advanced by exactly one` +
      (movedTwice > 0 ? `, ${movedTwice} by more (${staying.name} re-took them after a lease loss)` : "") +
      (movedBad.length > 0 ? `, ${movedBad.length} did NOT advance (${movedBad.join(", ")})` : ""),
  );
  const waits = nodes.reduce((sum, n) => sum + (n.last?.handoffWaits ?? 0), 0);
  say(`handoff steps retried (waiting for a lease to free up or for the coordinator): ${waits}`);
  say(
    "  (leases 'lost' are ones a node stopped using while membership was changing: it never writes under them again " +
      "and lets them expire rather than hand them to a possibly partitioned peer; the next owner takes epoch + 1)",
  );
  const rows = [...leasesAfter.values()];
  say(
    `shard_lease table: ${rows.length} rows, epochs ${Math.min(...rows.map((r) => r.epoch))}..${Math.max(
      ...rows.map((r) => r.epoch),
    )}, ${rows.filter((r) => r.owner === leavingAddress && r.live).length} still live for ${leaving.name}`,
  );

  // Every order's persisted state, read through its sharded ref after the move, must be exactly parcels 1..n in order,
  // where n is what the frontend saw acknowledged (or one more, when the last attempt's outcome stayed unknown).
  const verified = await frontend.request<{
    parcels: Record<string, string[]>;
    failed: string[];
    errors: string[];
    retried: number;
    reservations: Record<string, string[]>;
    outbox: { pending: number; parked: number; delivered: number };
    dispatcher: { delivered: number; retried: number; parked: number; lastError: string | null };
  }>({ type: "verify" }, 90_000);
  const unresolved = new Set(stopped.unresolved);
  let lost = 0;
  let wrong = 0;
  const problems: string[] = [];
  for (const [orderId, acked] of Object.entries(stopped.acked)) {
    const parcels = verified.parcels[orderId];
    if (parcels === undefined) continue;
    const inOrder = parcels.every((p, i) => p === `parcel-${i + 1}`);
    const sizeOk = parcels.length === acked || (unresolved.has(orderId) && parcels.length === acked + 1);
    if (parcels.length < acked) lost += acked - parcels.length;
    if (!inOrder || !sizeOk) {
      wrong++;
      if (problems.length < 3) problems.push(`${orderId}: acked ${acked}, state [${parcels.join(",")}]`);
    }
  }
  say(
    `${stopped.delivered} parcels acknowledged (${stopped.retries} deliveries retried while routing failed closed or ` +
      `a shard was handing off; a retry carries the same OperationId, so it is never applied twice)`,
  );
  say(
    `asked all ${Object.keys(stopped.acked).length} orders for their persisted parcels through the sharded ref: ` +
      `${verified.failed.length} failed to answer, ${wrong} not exactly parcels 1..n in order, ${lost} acknowledged parcels missing` +
      (verified.retried > 0 ? ` (${verified.retried} asks repeated after a refusal or timeout)` : ""),
  );
  // Every persisted parcel reserved its item once through the outbox: no reservation missing, none twice, none for a
  // parcel that is not in its order's state.
  const expected = new Set<string>();
  for (const [orderId, parcels] of Object.entries(verified.parcels)) {
    for (let seq = 1; seq <= parcels.length; seq++) expected.add(`${orderId}:${seq}`);
  }
  const reserved = new Map<string, number>();
  for (const list of Object.values(verified.reservations)) {
    for (const r of list) reserved.set(r, (reserved.get(r) ?? 0) + 1);
  }
  const twice = [...reserved.values()].filter((n) => n > 1).length;
  const missing = [...expected].filter((r) => !reserved.has(r)).length;
  const unexpected = [...reserved.keys()].filter((r) => !expected.has(r)).length;
  say(
    `stock reserved through the outbox: ${reserved.size} reservations over ${Object.keys(verified.reservations).length} ` +
      `SKUs for ${expected.size} persisted parcels; ${missing} missing, ${twice} reserved twice, ${unexpected} ` +
      `without a parcel (outbox: ${verified.outbox.pending} pending, ${verified.outbox.parked} parked; this node's ` +
      `dispatcher retried ${verified.dispatcher.retried} deliveries)`,
  );
  for (const problem of problems) say(`  mismatch: ${problem}`);
  for (const error of verified.errors.slice(0, 3)) say(`  no answer: ${error}`);
  const stockOk =
    missing === 0 && twice === 0 && unexpected === 0 && verified.outbox.pending === 0 && verified.outbox.parked === 0;
  const ok =
    verified.failed.length === 0 && wrong === 0 && lost === 0 && movedBad.length === 0 && left.removed && stockOk;
  say(
    ok
      ? "OK: every order's event-sourced state survived the move intact, every moved shard's epoch advanced, and " +
          "every parcel reserved its stock exactly once"
      : "MISMATCH: see the counts above",
  );
  await Promise.all([frontend, staying].map((n) => n.shutdown()));
  return ok;
}
