// The main job (`npm start`): the seed's Order example on three real nodes over loopback TCP.
// A frontend node (no entities) streams orders to two backend nodes through cluster sharding; then one backend
// leaves gracefully and the summary shows its shards moving to the other without losing an accepted order.
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";

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
  stats: { routes: number; localDeliveries: number; remoteRoutes: number; forwards: number; handoffShards: number };
  delivered: number;
  stream: { delivered: number; retries: number } | null;
}
type Reply = Status | { type: string; [key: string]: unknown };

const nodeScript = fileURLToPath(new URL("./sharding/node.ts", import.meta.url));
const started = Date.now();
const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s`;
const say = (text: string): void => console.log(`${elapsed()}  ${text}`);

class DemoNode {
  readonly process: ChildProcess;
  private waiters: { type: string; resolve: (reply: Reply) => void }[] = [];
  last: Status | null = null;
  exited = false;
  /** Resolves with the node's first message, sent once it has joined (registered at fork: it may come early). */
  readonly ready: Promise<{ node: string; hostPort: string }>;

  constructor(
    readonly name: string,
    role: string,
    seed: string,
  ) {
    this.process = fork(nodeScript, [name, role, seed], {
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    this.process.on("message", (reply: Reply) => {
      if (reply.type === "status") this.last = reply as Status;
      const index = this.waiters.findIndex((w) => w.type === reply.type);
      if (index >= 0) this.waiters.splice(index, 1)[0]!.resolve(reply);
    });
    this.process.on("exit", () => {
      this.exited = true;
    });
    this.ready = this.request<{ node: string; hostPort: string }>({ type: "noop" }, "ready");
  }

  request<T = Reply>(command: object & { type: string }, replyType: string, timeoutMs = 15_000): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name} did not answer ${command.type}`)), timeoutMs);
      this.waiters.push({
        type: replyType,
        resolve: (reply) => {
          clearTimeout(timer);
          resolve(reply as unknown as T);
        },
      });
      this.process.send(command);
    });
  }

  status(): Promise<Status> {
    return this.request<Status>({ type: "status" }, "status");
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
      return `${n.name}[${s.role}] entities=${s.entities} delivered=${s.delivered} routed=${s.stats.routes} forwarded=${s.stats.forwards}`;
    });
  say(`shards: ${shards} | ${rows.join(" | ")}`);
}

const frontend = new DemoNode("frontend", "frontend", "self");
const ready = await frontend.ready.catch(() => null);
if (ready === null) throw new Error("frontend did not start");
labels.set(ready.node, "frontend");
say(`frontend is up at ${ready.node} (the seed node; role frontend, so it hosts no entities)`);
const backends = [
  new DemoNode("backend-1", "backend", ready.hostPort),
  new DemoNode("backend-2", "backend", ready.hostPort),
];
const nodes = [frontend, ...backends];
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
frontend.process.send({ type: "stream", orders: 50, pauseMs: 40 });
const ticker = setInterval(async () => {
  await Promise.all(nodes.filter((n) => !n.exited).map((n) => n.status().catch(() => null)));
  printSummary(nodes);
}, 1_000);

await new Promise((resolve) => setTimeout(resolve, 3_000));
say(`${leaving.name} leaves the cluster gracefully: its shards hand off to ${staying.name}`);
type Ledger = Record<string, number[]>;
const left = await leaving.request<{ delivered: number; ledger: Ledger }>({ type: "leave" }, "left", 30_000);
say(`${leaving.name} was removed after handing off; it had delivered ${left.delivered} messages`);
leaving.process.send({ type: "shutdown" });

await until(`every shard on ${staying.name}`, async () => {
  const s = await frontend.status();
  const owners = Object.keys(s.shardsPerNode);
  return owners.length === 1 && short(owners[0]!) === staying.name;
});
await new Promise((resolve) => setTimeout(resolve, 2_000));
const stopped = await frontend.request<{ delivered: number; retries: number; acked: Record<string, number> }>(
  { type: "stop-stream" },
  "stream-stopped",
);
clearInterval(ticker);
await Promise.all([frontend, staying].map((n) => n.status()));
printSummary(nodes);

// Every acknowledged parcel must have been applied exactly once, and in order on each node that hosted the order.
const stayed = await staying.request<{ ledger: Ledger }>({ type: "ledger" }, "ledger");
let lost = 0;
let duplicated = 0;
let reordered = 0;
for (const [orderId, ackedMax] of Object.entries(stopped.acked)) {
  const perNode = [left.ledger[orderId] ?? [], stayed.ledger[orderId] ?? []];
  for (const seqs of perNode) for (let i = 1; i < seqs.length; i++) if (seqs[i]! <= seqs[i - 1]!) reordered++;
  const all = perNode.flat();
  duplicated += all.length - new Set(all).size;
  const applied = new Set(all);
  for (let seq = 1; seq <= ackedMax; seq++) if (!applied.has(seq)) lost++;
}
const verified = await frontend.request<{ asked: number; failed: number }>({ type: "verify" }, "verified");
say(
  `${stopped.delivered} parcels acknowledged (${stopped.retries} deliveries retried while routing failed closed); ` +
    `lost ${lost}, applied twice ${duplicated}, out of order ${reordered}`,
);
say(`asked all ${verified.asked} orders through their sharded refs after the move: ${verified.failed} failed`);
const ok = lost === 0 && reordered === 0 && verified.failed === 0;
say(ok ? "OK: no acknowledged parcel was lost or reordered across the handoff" : "MISMATCH: see the counts above");

for (const node of [frontend, staying]) node.process.send({ type: "shutdown" });
process.exitCode = ok ? 0 : 1;
