// Performs one planned fault (schedule.ts) on the running soak and returns its log record. Each procedure is the one
// an operator would follow; none depends on wall clocks agreeing between processes (the lease waits run on the
// harness's monotonic clock and are compared with nothing else).
import pg from "pg";
import { type Slot, type SoakCluster, until } from "./cluster.ts";
import type { SoakPostgres } from "./postgres.ts";
import type { TcpProxy } from "./proxy.ts";
import type { PlannedFault } from "./schedule.ts";

/** One line of faults.jsonl (docs/soak.md). */
export interface FaultRecord {
  readonly kind: string;
  /** The node slot (n0, n1, ...), "postgres", or "cluster". */
  readonly target: string;
  /** Monotonic ms (the history's time base) when the fault began and when its procedure finished. */
  readonly start: number;
  readonly end: number;
  /** When every running node again saw every other Up and converged (null: not within the recovery timeout). */
  readonly recovered: number | null;
  readonly wallStart: string;
  readonly detail: string;
  /**
   * For a node downed while paused or cut off: whether it exited by itself once resumed or healed (onDowned
   * "terminate"); false when the harness had to kill it after `downedExitWaitMs`; null for other faults.
   */
  readonly selfExited: boolean | null;
  /** For those faults: the downed incarnation (`n2.3`) and when the leader accepted the down (monotonic ms). */
  readonly downed?: { readonly node: string; readonly at: number };
}

export interface FaultContext {
  readonly cluster: SoakCluster;
  readonly pgProxy: TcpProxy;
  readonly postgres: SoakPostgres;
  readonly leaseDurationMs: number;
  /** How long a downed node that was resumed or healed gets to exit by itself before it is killed (ms). */
  readonly downedExitWaitMs: number;
  readonly now: () => number;
  /** Starts client load on a (re)started node. */
  readonly startLoad: (slot: Slot) => Promise<void>;
  readonly say: (line: string) => void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const recoveryTimeoutMs = 90_000;

/** The operator procedure for a node that is gone: down it through the leader, wait out its leases, restart it. */
export async function replaceDeadNode(ctx: FaultContext, slot: Slot, address: string): Promise<string> {
  const { cluster } = ctx;
  const downed = await until(async () => {
    if (await cluster.removedEverywhere(address)) return true;
    try {
      await cluster.downThroughLeader(address);
      return true;
    } catch {
      return false;
    }
  }, 60_000);
  const removed = downed && (await until(() => cluster.removedEverywhere(address), 60_000));
  // Its shard leases must expire on the database clock before another owner can take them; the restarted node is a
  // new uid (a new lease owner) either way.
  await sleep(ctx.leaseDurationMs + 500);
  await cluster.start(slot);
  await ctx.startLoad(slot);
  return `downed=${downed} removed=${removed} restarted as ${slot.name}.${slot.incarnation}`;
}

/**
 * The seed's procedure for an owner that is paused or cut off: down it through the leader of the others, wait until no
 * other node lists it and its leases expired (other nodes then take its shards under higher epochs and write), then
 * let it go on (`release`): it may still hold writes under its old epoch, which the fence must refuse. It learns it
 * was downed and exits (onDowned "terminate"); it is then restarted with a new uid.
 */
async function downWhileAway(
  ctx: FaultContext,
  slot: Slot,
  release: () => void,
): Promise<{ detail: string; selfExited: boolean; downed: { node: string; at: number } }> {
  const { cluster } = ctx;
  const address = slot.address!;
  const node = `${slot.name}.${slot.incarnation}`;
  const downed = await until(async () => {
    try {
      await cluster.downThroughLeader(address);
      return true;
    } catch {
      return false;
    }
  }, 60_000);
  const downedAt = ctx.now();
  const removed = downed && (await until(() => cluster.removedEverywhere(address), 60_000));
  await sleep(ctx.leaseDurationMs + 2_000);
  release();
  const exited = await Promise.race([
    slot.proc!.whenExited().then(() => true),
    sleep(ctx.downedExitWaitMs).then(() => false),
  ]);
  if (!exited) {
    slot.proc!.process.kill("SIGKILL");
    await slot.proc!.whenExited();
  }
  await cluster.start(slot);
  await ctx.startLoad(slot);
  const how = exited ? "it exited by itself" : `it did NOT exit within ${ctx.downedExitWaitMs} ms (killed)`;
  return {
    detail: `downed=${downed} removed=${removed}; released after its leases expired; ${how}; restarted as ${slot.name}.${slot.incarnation}`,
    selfExited: exited,
    downed: { node, at: downedAt },
  };
}

/**
 * A graceful leave as Kubernetes does it: SIGTERM, on which the node shuts down (handleSigterm: leave, hand its shards
 * off, release its leases, wait until removed, terminate) and exits 0 when it was removed in time.
 */
async function leaveAndRestart(ctx: FaultContext, slot: Slot): Promise<string> {
  const proc = slot.proc!;
  const started = ctx.now();
  proc.process.kill("SIGTERM");
  const exited = await Promise.race([proc.whenExited().then(() => true), sleep(60_000).then(() => false)]);
  if (!exited) {
    proc.process.kill("SIGKILL");
    await proc.whenExited();
  }
  const code = proc.process.exitCode;
  const left = !exited
    ? "did NOT exit within 60 s of SIGTERM (killed)"
    : code === 0
      ? `left on SIGTERM and exited 0 after ${Math.round(ctx.now() - started)} ms`
      : `exited ${code ?? proc.process.signalCode} after SIGTERM (not removed before its 30 s deadline)`;
  await ctx.cluster.start(slot);
  await ctx.startLoad(slot);
  return `${left}; restarted as ${slot.name}.${slot.incarnation}`;
}

async function terminateBackends(ctx: FaultContext): Promise<string> {
  // Only the soak's own connections: those whose client port is one of the database proxy's upstream sockets.
  const ports = [...ctx.pgProxy.upstreamPorts];
  if (ports.length === 0) return "no connections";
  const admin = new pg.Client({ connectionString: ctx.postgres.url, application_name: "movie-soak-admin" });
  admin.on("error", () => undefined);
  await admin.connect();
  try {
    const result = await admin.query<{ pid: number; ok: boolean }>(
      `SELECT pid, pg_terminate_backend(pid) AS ok FROM pg_stat_activity
        WHERE client_port = ANY($1::int[]) AND client_addr IN ('127.0.0.1', '::1') AND datname = current_database()
          AND pid <> pg_backend_pid()`,
      [ports],
    );
    return `terminated ${result.rows.filter((r) => r.ok).length} of the soak's ${ports.length} connections`;
  } finally {
    await admin.end().catch(() => undefined);
  }
}

export async function runFault(ctx: FaultContext, fault: PlannedFault): Promise<FaultRecord> {
  const { cluster } = ctx;
  const slot = fault.target >= 0 ? cluster.slots[fault.target]! : null;
  const start = ctx.now();
  const wallStart = new Date().toISOString();
  let detail = "";
  let selfExited: boolean | null = null;
  let downed: { node: string; at: number } | undefined;
  switch (fault.kind) {
    case "kill": {
      const address = slot!.address!;
      slot!.proc!.process.kill("SIGKILL");
      await slot!.proc!.whenExited();
      detail = `SIGKILL ${slot!.name}.${slot!.incarnation}; ${await replaceDeadNode(ctx, slot!, address)}`;
      break;
    }
    case "pause-owner": {
      const pid = slot!.proc!.process.pid!;
      const name = `${slot!.name}.${slot!.incarnation}`;
      slot!.stopped = true;
      process.kill(pid, "SIGSTOP");
      const resume = () => {
        process.kill(pid, "SIGCONT");
        slot!.stopped = false;
      };
      if (fault.downed) {
        const away = await downWhileAway(ctx, slot!, resume);
        detail = `SIGSTOP ${name}; ${away.detail}`;
        selfExited = away.selfExited;
        downed = away.downed;
      } else {
        await sleep(fault.durationMs);
        resume();
        detail = `SIGSTOP ${name} for ${fault.durationMs} ms (lease ${ctx.leaseDurationMs} ms), resumed in place`;
      }
      break;
    }
    case "partition": {
      cluster.isolate(slot!, true);
      if (fault.downed) {
        const away = await downWhileAway(ctx, slot!, () => cluster.isolate(slot!, false));
        detail = `${slot!.name} cut off from every other node; ${away.detail}`;
        selfExited = away.selfExited;
        downed = away.downed;
      } else {
        await sleep(fault.durationMs);
        cluster.isolate(slot!, false);
        detail = `${slot!.name} cut off from every other node for ${fault.durationMs} ms, healed in place`;
      }
      break;
    }
    case "db-pause": {
      ctx.pgProxy.set("paused");
      await sleep(fault.durationMs);
      ctx.pgProxy.set("open");
      detail = `database connections frozen for ${fault.durationMs} ms`;
      break;
    }
    case "db-restart": {
      const owned = ctx.postgres.owned;
      if (owned !== null) {
        await owned.kill();
        await sleep(fault.durationMs);
        await owned.restart();
        detail = `throwaway PostgreSQL killed (SIGKILL) and restarted after ${fault.durationMs} ms`;
      } else {
        // The shared server is never stopped: the harness's proxy drops every connection and refuses new ones.
        ctx.pgProxy.set("cut", { refuse: true });
        await sleep(fault.durationMs);
        ctx.pgProxy.set("open");
        detail = `shared PostgreSQL: every connection dropped and refused for ${fault.durationMs} ms (proxy)`;
      }
      break;
    }
    case "pg-terminate":
      detail = await terminateBackends(ctx);
      break;
    case "leave-rejoin":
      detail = await leaveAndRestart(ctx, slot!);
      break;
    case "rolling-restart": {
      const steps: string[] = [];
      for (const s of cluster.slots) {
        if (!s.running) continue;
        steps.push(`${s.name}: ${await leaveAndRestart(ctx, s)}`);
        await until(() => cluster.healthy(), recoveryTimeoutMs);
      }
      detail = steps.join("; ");
      break;
    }
  }
  const end = ctx.now();
  const healthy = await until(() => cluster.healthy(), recoveryTimeoutMs);
  return {
    kind: fault.kind,
    target: slot?.name ?? (fault.kind.startsWith("db") || fault.kind === "pg-terminate" ? "postgres" : "cluster"),
    start,
    end,
    recovered: healthy ? ctx.now() : null,
    wallStart,
    detail,
    selfExited,
    ...(downed === undefined ? {} : { downed }),
  };
}
