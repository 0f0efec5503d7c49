// The soak's node processes: fixed slots (a port each, kept across restarts so that the proxies between every pair
// of nodes stay valid), each running one incarnation at a time of scripts/soak/node.ts, and the proxies themselves.
import { fileURLToPath } from "node:url";
import { NodeProcess } from "../../examples/support/node-process.ts";
import { freePort } from "../../test/fixtures/private-postgres.ts";
import { TcpProxy } from "./proxy.ts";

export interface NodeStatus {
  readonly self: string;
  readonly selfStatus: string;
  readonly members: readonly { address: string; status: string }[];
  readonly unreachable: readonly string[];
  readonly leader: string | null;
  readonly converged: boolean;
}

const nodeScript = fileURLToPath(new URL("./node.ts", import.meta.url));

export class Slot {
  proc: NodeProcess<{ node: string; hostPort: string }> | null = null;
  incarnation = -1;
  /** The running incarnation's unique address (movie.tcp://soak@127.0.0.1:port#uid). */
  address: string | null = null;
  /** True between SIGSTOP and SIGCONT. */
  stopped = false;

  constructor(
    readonly index: number,
    readonly name: string,
    readonly role: "frontend" | "backend",
    readonly port: number,
  ) {}

  get hostPort(): string {
    return `127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.proc !== null && !this.proc.exited;
  }
}

export interface ClusterEnv {
  readonly dir: string;
  readonly schema: string;
  /** The URL the nodes use: the database proxy's. */
  readonly pgUrl: string;
  readonly origin: string;
}

export class SoakCluster {
  readonly slots: Slot[] = [];
  /** `${from}->${to}` -> the proxy `from` dials `to` through. */
  readonly links = new Map<string, TcpProxy>();

  private constructor(private readonly env: ClusterEnv) {}

  /** Slot 0 is the frontend; the others are backends. Creates every pair's proxies. */
  static async create(env: ClusterEnv, nodes: number): Promise<SoakCluster> {
    const cluster = new SoakCluster(env);
    for (let i = 0; i < nodes; i++) {
      cluster.slots.push(new Slot(i, `n${i}`, i === 0 ? "frontend" : "backend", await freePort()));
    }
    for (const from of cluster.slots) {
      for (const to of cluster.slots) {
        if (from === to) continue;
        const proxy = new TcpProxy(`${from.name}->${to.name}`, "127.0.0.1", to.port);
        await proxy.listen();
        cluster.links.set(`${from.index}->${to.index}`, proxy);
      }
    }
    return cluster;
  }

  live(): Slot[] {
    return this.slots.filter((s) => s.running);
  }

  /** Starts a new incarnation of `slot`; the first node of a fresh cluster seeds itself, every other joins the rest. */
  async start(slot: Slot, firstOfCluster = false): Promise<void> {
    slot.incarnation++;
    slot.stopped = false;
    const dialMap: Record<string, number> = {};
    for (const to of this.slots)
      if (to !== slot) dialMap[to.hostPort] = this.links.get(`${slot.index}->${to.index}`)!.port;
    const seeds = firstOfCluster
      ? "self"
      : this.slots
          .filter((s) => s !== slot)
          .map((s) => s.hostPort)
          .join(",");
    const proc = new NodeProcess<{ node: string; hostPort: string }>(
      `${slot.name}.${slot.incarnation}`,
      nodeScript,
      [slot.name, String(slot.incarnation), slot.role, String(slot.port), seeds],
      {
        execArgv: ["--import", "tsx"],
        requestTimeoutMs: 60_000,
        env: {
          MOVIE_SOAK_DIR: this.env.dir,
          MOVIE_SOAK_SCHEMA: this.env.schema,
          MOVIE_SOAK_PG_URL: this.env.pgUrl,
          MOVIE_SOAK_T0: this.env.origin,
          MOVIE_SOAK_DIAL_MAP: JSON.stringify(dialMap),
        },
      },
    );
    slot.proc = proc;
    const ready = await proc.ready;
    slot.address = ready.node;
  }

  async status(slot: Slot): Promise<NodeStatus | null> {
    if (!slot.running || slot.stopped) return null;
    return slot.proc!.request<NodeStatus>({ type: "status" }, 5_000).catch(() => null);
  }

  /** Every running node sees every running node Up, nothing unreachable, and has converged. */
  async healthy(): Promise<boolean> {
    const live = this.live();
    const expected = new Set(live.map((s) => s.address));
    for (const slot of live) {
      const s = await this.status(slot);
      if (s === null || !s.converged || s.unreachable.length > 0) return false;
      const up = s.members.filter((m) => m.status === "Up").map((m) => m.address);
      if (up.length !== expected.size || !up.every((a) => expected.has(a))) return false;
    }
    return true;
  }

  /** Downs `address` through the leader of the surviving nodes (the node that sees itself leading). */
  async downThroughLeader(address: string): Promise<void> {
    for (const slot of this.live()) {
      if (slot.address === address) continue;
      const s = await this.status(slot);
      if (s === null || s.leader !== s.self || !s.unreachable.includes(address)) continue;
      const reply = await slot.proc!.request<{ accepted: boolean }>({ type: "down", address }, 5_000);
      if (reply.accepted) return;
    }
    throw new Error(`no surviving leader that sees ${address} unreachable yet`);
  }

  /** No running node lists `address` as a member any more. */
  async removedEverywhere(address: string): Promise<boolean> {
    for (const slot of this.live()) {
      if (slot.address === address) continue;
      const s = await this.status(slot);
      if (s === null || s.members.some((m) => m.address === address)) return false;
    }
    return true;
  }

  /** Cuts (or heals) every link between `slot` and the other nodes, both directions. */
  isolate(slot: Slot, cut: boolean): void {
    for (const other of this.slots) {
      if (other === slot) continue;
      for (const key of [`${slot.index}->${other.index}`, `${other.index}->${slot.index}`]) {
        this.links.get(key)!.set(cut ? "cut" : "open");
      }
    }
  }

  async closeLinks(): Promise<void> {
    await Promise.all([...this.links.values()].map((p) => p.close()));
  }
}

/** Polls `condition` every 250 ms until it holds; false when `timeoutMs` passes first. */
export async function until(condition: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
