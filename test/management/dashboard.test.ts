// The dashboard in a real browser: Debian's headless Chromium (installed by .ci/run) driven by playwright-core, on
// the management endpoint of one of three node processes. The page loads without console errors, shows the three
// nodes and a shard grid, shows the projections-and-outbox panel with the leader's running projection and the
// outbox's delivered and parked messages (the nodes use the real PostgreSQL), and redraws the grid after a member
// leaves. MOVIE_DASHBOARD_SCREENSHOT=path saves a screenshot (docs/operations-dashboard.png was made that way).
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, test } from "node:test";
import { type Browser, chromium, type Page } from "playwright-core";
import { eventually } from "../fixtures/eventually.ts";
import { dropSchema, postgresTestUrl, uniqueSchema } from "../persistence/pg-fixture.ts";
import { type OpsNode, startOpsCluster, stopOpsCluster } from "./fixtures/ops-cluster.ts";

const token = "dashboard-test-token-0123456789";
const executablePath = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
let nodes: OpsNode[] = [];
let browser: Browser;
let page: Page;
/** The node whose dashboard the browser shows: the leader, so that the leave it carries out is listed there too. */
let leader: OpsNode;
const problems: string[] = [];
const schema = uniqueSchema("dashboard");
let pgUrl = "";

before(async () => {
  assert.ok(executablePath !== undefined, "Chromium is missing: apt-get install -y chromium (.ci/run does)");
  pgUrl = await postgresTestUrl();
  nodes = await startOpsCluster(3, { MOVIE_OPS_TOKEN: token, MOVIE_OPS_PG_URL: pgUrl, MOVIE_OPS_PG_SCHEMA: schema });
  await eventually(
    async () => {
      const r = await Promise.all(nodes.map((n) => fetch(`${n.ready.url}health/ready`)));
      return r.every((x) => x.status === 200);
    },
    { what: "every node ready", timeoutMs: 30_000, intervalMs: 100 },
  );
  const leaderAddress = ((await (await fetch(`${nodes[0]!.ready.url}cluster/members`)).json()) as { leader: string })
    .leader;
  leader = nodes.find((n) => n.ready.address === leaderAddress)!;
  await nodes[0]!.process.request({ type: "traffic" });
  browser = await chromium.launch({ executablePath: executablePath!, args: ["--no-sandbox", "--disable-gpu"] });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("requestfailed", (r) => {
    // The event stream is cut when the page closes; anything else failing is a problem.
    if (!r.url().endsWith("/events")) problems.push(`requestfailed: ${r.url()}`);
  });
});
after(async () => {
  await browser?.close();
  await stopOpsCluster(nodes);
  if (pgUrl !== "") await dropSchema(pgUrl, schema);
});

const memberRows = (): Promise<string[]> =>
  page.$$eval("tr[data-member]", (rows) =>
    rows.map((r) => `${r.getAttribute("data-member")} ${r.getAttribute("data-status")}`),
  );
const shardOwners = (): Promise<string[]> =>
  page.$$eval("[data-type='Order'] .shard", (cells) => cells.map((c) => c.getAttribute("data-owner") ?? ""));

test("the dashboard loads with no console errors and shows the three nodes and the shard grid", async () => {
  const response = await page.goto(leader.ready.url);
  assert.equal(response?.status(), 200);
  await eventually(async () => (await memberRows()).length === 3, { what: "three member rows", describe: memberRows });
  assert.deepEqual(
    (await memberRows()).map((r) => r.split(" ")[1]),
    ["Up", "Up", "Up"],
  );
  for (const n of nodes) assert.ok((await memberRows()).some((r) => r.startsWith(n.ready.hostPort)));
  const owners = await shardOwners();
  assert.equal(owners.length, 16);
  assert.equal(new Set(owners).size, 3, `three owners: ${owners.join(",")}`);
  assert.equal(await page.textContent("#self"), leader.ready.address);
  // The rates chart needs two snapshots: wait for the third update.
  await eventually(async () => Number(await page.getAttribute("body", "data-updates")) >= 3, { what: "three updates" });
  assert.deepEqual(problems, []);
});

const projectionRows = (): Promise<string[]> =>
  page.$$eval("#projections tr", (rows) =>
    rows.map(
      (r) =>
        `${r.getAttribute("data-projection")} ${r.getAttribute("data-status")} ${r.getAttribute("data-checkpoint")} ${r.getAttribute("data-lag")}`,
    ),
  );
const outboxCounts = (): Promise<Record<string, number>> =>
  page.$$eval("#outbox [data-state]", (spans) =>
    Object.fromEntries(spans.map((s) => [s.getAttribute("data-state"), Number(s.getAttribute("data-count"))])),
  );
const parkedRows = (): Promise<string[]> => page.$$eval("#parked tr", (rows) => rows.map((r) => r.textContent ?? ""));

test("the projections-and-outbox panel shows the leader's projection and the outbox's delivered and parked messages", async () => {
  const count = 7;
  const { latestOffset } = await leader.process.request<{ latestOffset: number }>({ type: "operations", count });
  // The node's own views are the reference: the dispatcher delivers the "audit" messages and parks the "archive" ones.
  const outboxView = async () =>
    (await (await fetch(`${leader.ready.url}outbox`)).json()) as { counts: Record<string, number | null> };
  let seen: unknown = null;
  await eventually(
    async () => {
      const view = await outboxView();
      seen = view;
      return view.counts.parked === count && view.counts.delivered === count && view.counts.pending === 0;
    },
    { what: "every audit message delivered and every archive message parked", timeoutMs: 20_000, describe: () => seen },
  );
  const expectedRow = `audit-log running ${latestOffset} 0`;
  let rows: string[] = [];
  await eventually(async () => (rows = await projectionRows()).includes(expectedRow), {
    what: `the panel's row ${expectedRow}`,
    describe: () => rows,
    timeoutMs: 20_000,
  });
  let counts: Record<string, number> = {};
  await eventually(
    async () => {
      const c = (counts = await outboxCounts());
      return c.parked === count && c.delivered === count && c.pending === 0 && c.claimed === 0 && c.retrying === 0;
    },
    { what: "the panel's outbox counts", describe: () => counts, timeoutMs: 20_000 },
  );
  // The five oldest parked messages, each with the sender and the dispatcher's error.
  const parked = await parkedRows();
  assert.equal(parked.length, 5, parked.join("\n"));
  for (const [i, text] of parked.entries()) {
    assert.ok(text.includes(`Audit:a-${i}`), text);
    assert.ok(text.includes('this dispatcher has no handlers["archive"]'), text);
  }
  const slices = (
    (await (await fetch(`${leader.ready.url}projections`)).json()) as {
      slices: { name: string; eventsPerSecond: number }[];
    }
  ).slices;
  const rate = slices.find((s) => s.name === "audit-log")?.eventsPerSecond;
  assert.equal(typeof rate, "number", JSON.stringify(slices));
  assert.deepEqual(problems, []);
});

test("after a member leaves, the grid shows its shards on the others and the action is listed", async () => {
  const leaderAddress = ((await (await fetch(`${nodes[0]!.ready.url}cluster/members`)).json()) as { leader: string })
    .leader;
  const leader = nodes.find((n) => n.ready.address === leaderAddress)!;
  const victim = nodes.find((n, i) => i !== 0 && n !== leader)!;
  const res = await fetch(`${leader.ready.url}cluster/members/${victim.ready.hostPort}/leave`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
  });
  assert.equal(res.status, 202);
  await eventually(
    async () => {
      const owners = await shardOwners();
      return owners.length === 16 && !owners.includes(victim.ready.hostPort) && !owners.includes("");
    },
    { what: "the grid without the victim", describe: shardOwners, timeoutMs: 30_000, intervalMs: 100 },
  );
  await eventually(async () => (await memberRows()).length === 2, {
    what: "two member rows",
    describe: memberRows,
    timeoutMs: 20_000,
  });
  await eventually(async () => ((await page.textContent("[data-testid=actions]")) ?? "").includes("leave"), {
    what: "the leave listed under operator actions",
  });
  const screenshot = process.env.MOVIE_DASHBOARD_SCREENSHOT;
  if (screenshot !== undefined) await page.screenshot({ path: screenshot, fullPage: true });
  assert.deepEqual(problems, []);
});
