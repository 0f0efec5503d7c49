/**
 * The `movie` command line: talks to a node's management endpoint (`--url`, `MOVIE_MANAGEMENT_URL`; `--token`,
 * `MOVIE_MANAGEMENT_TOKEN`) and prints tables on a terminal or JSON with `--json`. `migrate` prints or applies the
 * persistence migrations. Exit codes: 0 done (status: ready), 1 refused or not ready, 2 bad usage, 3 the endpoint or
 * database could not be reached, 4 `leave --wait` or `rebalance --wait` ran out of time.
 */
import { parseArgs, styleText } from "node:util";
import { RealScheduler } from "../actor/clock.ts";
import { describe } from "../actor/untrusted.ts";

/** What the CLI writes to and reads from (the process's by default; tests pass their own). */
export interface CliIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** True when stdout is a terminal: tables, colour and a progress line that rewrites itself. */
  readonly isTTY: boolean;
}

/** The exit codes scripts can rely on. */
export const exitCodes = { ok: 0, refused: 1, usage: 2, unreachable: 3, timeout: 4 } as const;

const defaultUrl = "http://127.0.0.1:8558";

class CliError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

interface Command {
  readonly summary: string;
  readonly usage: string;
  readonly args: readonly string[];
  readonly options?: Record<string, { type: "string" | "boolean"; short?: string }>;
  run(ctx: Context, args: string[], values: Record<string, string | boolean | undefined>): Promise<number>;
}

interface Context {
  readonly io: CliIo;
  readonly url: string;
  readonly token: string | undefined;
  readonly json: boolean;
  readonly timeoutMs: number;
  readonly color: boolean;
}

const common = {
  url: { type: "string" },
  token: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  timeout: { type: "string" },
} as const;

function paint(ctx: Context, style: Parameters<typeof styleText>[0], text: string): string {
  return ctx.color ? styleText(style, text) : text;
}

/** Columns padded to their widest cell. */
export function table(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) {
    for (const [i, cell] of row.entries()) widths[i] = Math.max(widths[i] ?? 0, cell.length);
  }
  return `${rows
    .map((row) =>
      row
        .map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i]!)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n")}\n`;
}

async function call(
  ctx: Context,
  method: "GET" | "POST",
  path: string,
): Promise<{ status: number; body: unknown; text: string }> {
  let response: Response;
  const headers: Record<string, string> = { "user-agent": "movie-cli" };
  if (ctx.token !== undefined && method === "POST") headers.authorization = `Bearer ${ctx.token}`;
  try {
    response = await fetch(new URL(path, ctx.url), { method, headers, signal: AbortSignal.timeout(ctx.timeoutMs) });
  } catch (error) {
    // A request that got no answer in time reached a node that is slow or stuck, not an absent one: a timeout (exit
    // 4), which a loaded host otherwise reported as "cannot reach" (exit 3) with the abort's reason as "an object".
    if (error instanceof Error && error.name === "TimeoutError") {
      throw new CliError(
        exitCodes.timeout,
        `the management endpoint at ${ctx.url} did not answer ${method} ${path} within ${ctx.timeoutMs} ms; the node may be overloaded: try again, or give a longer --timeout`,
      );
    }
    const cause =
      error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : describe(error);
    throw new CliError(
      exitCodes.unreachable,
      `cannot reach the management endpoint at ${ctx.url}: ${cause}; is the node running, and is --url right?`,
    );
  }
  const text = await response.text();
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: /metrics, or a proxy's error page.
  }
  return { status: response.status, body, text };
}

/** Fails with the endpoint's error (exit 1) unless the status is 2xx. */
async function ok(ctx: Context, method: "GET" | "POST", path: string): Promise<unknown> {
  const res = await call(ctx, method, path);
  if (res.status >= 200 && res.status < 300) return res.body;
  const body = res.body as { error?: unknown; message?: unknown } | null;
  const detail =
    body !== null && typeof body === "object" && typeof body.message === "string"
      ? `${typeof body.error === "string" ? body.error : "error"}: ${body.message}`
      : res.text.slice(0, 200);
  throw new CliError(exitCodes.refused, `${method} ${path} → ${res.status} ${detail}`);
}

function out(ctx: Context, value: unknown, human: () => string): number {
  ctx.io.stdout(ctx.json ? `${JSON.stringify(value, null, 2)}\n` : human());
  return exitCodes.ok;
}

interface Member {
  address: string;
  hostPort: string;
  status: string;
  roles: string[];
  appVersion?: string | null;
  reachable: boolean;
  leader: boolean;
  self: boolean;
}
interface Members {
  self: string;
  leader: string | null;
  converged: boolean;
  members: Member[];
}
interface TypeSummary {
  type: string;
  shardCount: number;
  allocatedShards: number;
  generation: number;
  handoffsInProgress: number;
  localEntities: number;
  shardsPerOwner: [string, number][];
}

function memberRows(ctx: Context, members: Members): string[][] {
  return [
    ["ADDRESS", "STATUS", "REACHABLE", "ROLES", "VERSION", "LEADER"],
    ...members.members.map((m) => [
      `${m.address}${m.self ? " (this node)" : ""}`,
      m.status === "Up" ? paint(ctx, "green", m.status) : paint(ctx, "yellow", m.status),
      m.reachable ? "yes" : paint(ctx, "red", "no"),
      m.roles.join(",") || "-",
      m.appVersion ?? "-",
      m.leader ? "leader" : "",
    ]),
  ];
}

/** One projection or slice, as GET /projections lists it in `slices`. */
interface SliceView {
  readonly projection: string;
  readonly slice: number | null;
  readonly owner: string | null;
  readonly status: string;
  readonly checkpoint: number | null;
  readonly lag: number;
  readonly eventsPerSecond: number | null;
  readonly rebuildFrom: number | null;
  readonly lastError: string | null;
  readonly lastErrorAtEpochMs: number | null;
}

/** GET /outbox. */
interface OutboxView {
  readonly backend: string;
  readonly counts: {
    pending: number;
    claimed: number;
    retrying: number;
    parked: number;
    delivered: number;
    oldestPendingAgeMs: number | null;
  };
  readonly parked: { offset: number; messageId: string; persistenceId: string; attempts: number; lastError: string }[];
}

/** `text` cut to `max` characters on one line (a table cell). */
function clip(text: string, max: number): string {
  const line = text.replace(/\s+/g, " ");
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
}

/** "cluster-wide" for a sharded projection, "this node only" for one started with Projections.start. */
function scopeOf(result: unknown): string {
  return (result as { scope?: unknown }).scope === "cluster" ? "cluster-wide" : "this node only";
}

const commands: Record<string, Command> = {
  status: {
    summary: "members, readiness and shard plans in one view (exit 1 when the node is not ready)",
    usage: "movie status [--url URL] [--json]",
    args: [],
    async run(ctx) {
      const members = (await ok(ctx, "GET", "/cluster/members")) as Members;
      const readyRes = await call(ctx, "GET", "/health/ready");
      const ready = readyRes.body as { ready: boolean; checks: { check: string; ok: boolean; detail: string }[] };
      const types = ((await call(ctx, "GET", "/sharding/types")).body as { types?: TypeSummary[] } | null)?.types ?? [];
      const code = ready?.ready === true ? exitCodes.ok : exitCodes.refused;
      out(ctx, { members, ready, types }, () => {
        const head = `node ${members.self}\nleader ${members.leader ?? "none"}, ${members.converged ? "converged" : paint(ctx, "yellow", "not converged")}, ${ready?.ready ? paint(ctx, "green", "ready") : paint(ctx, "red", "not ready")}\n`;
        const failing = (ready?.checks ?? [])
          .filter((c) => !c.ok)
          .map((c) => `  ${c.check}: ${c.detail}\n`)
          .join("");
        const typeRows = [
          ["TYPE", "SHARDS", "ALLOCATED", "GENERATION", "HANDOFFS", "LOCAL ENTITIES"],
          ...types.map((t) => [
            t.type,
            `${t.shardCount}`,
            `${t.allocatedShards}`,
            `${t.generation}`,
            `${t.handoffsInProgress}`,
            `${t.localEntities}`,
          ]),
        ];
        return `${head}${failing}\n${table(memberRows(ctx, members))}${types.length > 0 ? `\n${table(typeRows)}` : ""}`;
      });
      return code;
    },
  },
  members: {
    summary: "the members this node sees, with status, reachability, roles and the leader",
    usage: "movie members [--url URL] [--json]",
    args: [],
    async run(ctx) {
      const members = (await ok(ctx, "GET", "/cluster/members")) as Members;
      return out(ctx, members, () => table(memberRows(ctx, members)));
    },
  },
  shards: {
    summary: "the shard map of an entity type: shards per owner, or every shard with --all",
    usage: "movie shards <type> [--all] [--url URL] [--json]",
    args: ["type"],
    options: { all: { type: "boolean" } },
    async run(ctx, [type], values) {
      const view = (await ok(ctx, "GET", `/sharding/types/${encodeURIComponent(type!)}/shards`)) as {
        generation: number;
        coordinator: string | null;
        handoffs: number[];
        shards: { shard: number; owner: string | null; inHandoff: boolean; localEntities: number }[];
      };
      return out(ctx, view, () => {
        const head = `${type}: generation ${view.generation}, coordinator ${view.coordinator ?? "none"}, handoffs ${view.handoffs.length === 0 ? "none" : view.handoffs.join(",")}\n`;
        if (values.all === true) {
          return (
            head +
            table([
              ["SHARD", "OWNER", "HANDOFF", "LOCAL ENTITIES"],
              ...view.shards.map((s) => [`${s.shard}`, s.owner ?? "-", s.inHandoff ? "yes" : "", `${s.localEntities}`]),
            ])
          );
        }
        const perOwner = new Map<string, number[]>();
        for (const s of view.shards)
          perOwner.set(s.owner ?? "(none)", [...(perOwner.get(s.owner ?? "(none)") ?? []), s.shard]);
        return (
          head +
          table([
            ["OWNER", "SHARDS", "COUNT"],
            ...[...perOwner].sort().map(([o, list]) => [o, ranges(list), `${list.length}`]),
          ])
        );
      });
    },
  },
  entity: {
    summary: "where an entity lives: its shard and that shard's owner",
    usage: "movie entity <type> <id> [--url URL] [--json]",
    args: ["type", "id"],
    async run(ctx, [type, id]) {
      const view = (await ok(
        ctx,
        "GET",
        `/sharding/types/${encodeURIComponent(type!)}/entities/${encodeURIComponent(id!)}`,
      )) as { shard: number; owner: string | null };
      return out(
        ctx,
        view,
        () => `${type} ${id}: shard ${view.shard}, owner ${view.owner ?? "none (no converged coordinator)"}\n`,
      );
    },
  },
  down: {
    summary: "mark an unreachable member Down through the leader (needs --token)",
    usage: "movie down <address> --token TOKEN [--url URL] [--json]",
    args: ["address"],
    async run(ctx, [address]) {
      const result = await ok(ctx, "POST", `/cluster/members/${encodeURIComponent(address!)}/down`);
      return out(ctx, result, () => `down of ${(result as { member: string }).member} accepted\n`);
    },
  },
  leave: {
    summary: "make a member leave gracefully (needs --token); --wait follows its shards until it is removed",
    usage: "movie leave <address> --token TOKEN [--wait] [--timeout MS] [--url URL] [--json]",
    args: ["address"],
    options: { wait: { type: "boolean" } },
    async run(ctx, [address], values) {
      const result = (await ok(ctx, "POST", `/cluster/members/${encodeURIComponent(address!)}/leave`)) as {
        member: string;
      };
      if (values.wait !== true) return out(ctx, result, () => `leave of ${result.member} accepted\n`);
      return waitRemoved(ctx, result.member);
    },
  },
  rebalance: {
    summary:
      "move one shard to the least-loaded member, or --to a named one, through the coordinator's handoff (needs --token; send it to the coordinator's endpoint); --wait follows the move",
    usage: "movie rebalance <type> <shard> --token TOKEN [--to ADDRESS] [--wait] [--timeout MS] [--url URL] [--json]",
    args: ["type", "shard"],
    options: { to: { type: "string" }, wait: { type: "boolean" } },
    async run(ctx, [type, shard], values) {
      if (!/^(0|[1-9][0-9]{0,8})$/.test(shard!)) {
        throw new CliError(exitCodes.usage, `<shard> must be a shard number (0, 1, …), not ${describe(shard)}`);
      }
      const query = typeof values.to === "string" ? `?to=${encodeURIComponent(values.to)}` : "";
      const path = `/sharding/types/${encodeURIComponent(type!)}/shards/${shard}`;
      const result = (await ok(ctx, "POST", `${path}/rebalance${query}`)) as {
        shard: number;
        from: string;
        to: string;
        followUpMoves: number[];
      };
      const moving = `${type} shard ${result.shard}: moving from ${result.from} to ${result.to}`;
      const then =
        result.followUpMoves.length === 0 ? "" : `; the rebalance policy then moves ${ranges(result.followUpMoves)}`;
      if (values.wait !== true) return out(ctx, result, () => `${moving}${then}\n`);
      if (!ctx.json) ctx.io.stdout(`${moving}\n`);
      const deadline = scheduler.now() + ctx.timeoutMs;
      for (;;) {
        const view = (await ok(ctx, "GET", path)) as { owner: string | null; inHandoff: boolean };
        if (view.owner === result.to && !view.inHandoff) {
          return out(
            ctx,
            { ...result, moved: true },
            () => `${type} shard ${result.shard} moved to ${result.to}${then}\n`,
          );
        }
        if (scheduler.now() > deadline) {
          throw new CliError(
            exitCodes.timeout,
            `${type} shard ${result.shard} did not reach ${result.to} within ${ctx.timeoutMs} ms (owner ${view.owner ?? "none"}${view.inHandoff ? ", in handoff" : ""}); the handoff may have been aborted: see movie shards ${type} --all`,
          );
        }
        await pause(100);
      }
    },
  },
  projections: {
    summary:
      "projections and their slices: owner, status, checkpoint, lag, events/s, pending rebuild and last error (rate and error of slices run here)",
    usage: "movie projections [--url URL] [--json]",
    args: [],
    async run(ctx) {
      const view = (await ok(ctx, "GET", "/projections")) as { slices: SliceView[] };
      return out(ctx, view, () => {
        if (view.slices.length === 0) return "no projection runs or was initialised on this node\n";
        return table([
          ["PROJECTION", "SLICE", "OWNER", "STATUS", "CHECKPOINT", "LAG", "EVENTS/S", "REBUILD FROM", "LAST ERROR"],
          ...view.slices.map((s) => [
            s.projection,
            s.slice === null ? "-" : `${s.slice}`,
            s.owner ?? "none",
            s.status === "running"
              ? paint(ctx, "green", s.status)
              : s.status === "remote"
                ? s.status
                : paint(ctx, s.status === "paused" ? "yellow" : "red", s.status),
            s.checkpoint === null ? "-" : `${s.checkpoint}`,
            `${s.lag}`,
            s.eventsPerSecond === null ? "-" : s.eventsPerSecond.toFixed(1),
            s.rebuildFrom === null ? "-" : `${s.rebuildFrom}`,
            s.lastError === null
              ? "-"
              : `${clip(s.lastError, 80)}${s.lastErrorAtEpochMs === null ? "" : ` (${new Date(s.lastErrorAtEpochMs).toISOString()})`}`,
          ]),
        ]);
      });
    },
  },
  outbox: {
    summary:
      "the outbox: messages by state, the oldest pending age, and the oldest parked messages with their last error",
    usage: "movie outbox [--limit N] [--url URL] [--json]",
    args: [],
    options: { limit: { type: "string" } },
    async run(ctx, _args, values) {
      const limit = values.limit;
      if (
        limit !== undefined &&
        (typeof limit !== "string" || !/^(0|[1-9][0-9]{0,3})$/.test(limit) || Number(limit) > 1000)
      ) {
        throw new CliError(exitCodes.usage, `--limit must be a whole number from 0 to 1000, not ${describe(limit)}`);
      }
      const view = (await ok(ctx, "GET", `/outbox${limit === undefined ? "" : `?limit=${limit}`}`)) as OutboxView;
      return out(ctx, view, () => {
        const c = view.counts;
        const age = c.oldestPendingAgeMs === null ? "none" : `${(c.oldestPendingAgeMs / 1000).toFixed(1)} s`;
        const parked = c.parked > 0 ? paint(ctx, "red", `${c.parked} parked`) : "0 parked";
        const head = `outbox (${view.backend}): ${c.pending} pending (${c.claimed} claimed, ${c.retrying} retrying), ${parked}, ${c.delivered} delivered; oldest pending ${age}\n`;
        if (view.parked.length === 0) return head;
        const more =
          c.parked > view.parked.length ? `(${c.parked - view.parked.length} more parked; --limit shows more)\n` : "";
        return `${head}\n${table([
          ["PARKED", "MESSAGE", "SENDER", "ATTEMPTS", "LAST ERROR"],
          ...view.parked.map((m) => [
            `${m.offset}`,
            m.messageId,
            m.persistenceId,
            `${m.attempts}`,
            clip(m.lastError, 100),
          ]),
        ])}${more}`;
      });
    },
  },
  "pause-projection": {
    summary: "pause a projection: a sharded one cluster-wide, kept across handoffs and restarts (needs --token)",
    usage: "movie pause-projection <name> --token TOKEN [--url URL] [--json]",
    args: ["name"],
    async run(ctx, [name]) {
      const result = await ok(ctx, "POST", `/projections/${encodeURIComponent(name!)}/pause`);
      return out(ctx, result, () => `${name}: pause accepted (${scopeOf(result)})\n`);
    },
  },
  "resume-projection": {
    summary: "resume a paused projection (needs --token)",
    usage: "movie resume-projection <name> --token TOKEN [--url URL] [--json]",
    args: ["name"],
    async run(ctx, [name]) {
      const result = await ok(ctx, "POST", `/projections/${encodeURIComponent(name!)}/resume`);
      return out(ctx, result, () => `${name}: resume accepted (${scopeOf(result)})\n`);
    },
  },
  "rebuild-projection": {
    summary:
      "rebuild a projection from a feed offset: reset its read model past it and handle those events again, once (needs --token)",
    usage: "movie rebuild-projection <name> <offset> --token TOKEN [--url URL] [--json]",
    args: ["name", "offset"],
    async run(ctx, [name, offset]) {
      if (!/^(0|[1-9][0-9]{0,15})$/.test(offset!)) {
        throw new CliError(exitCodes.usage, `<offset> must be a feed offset (0, 1, …), not ${describe(offset)}`);
      }
      const result = await ok(ctx, "POST", `/projections/${encodeURIComponent(name!)}/rebuild?from=${offset}`);
      return out(ctx, result, () => `${name}: rebuild from ${offset} accepted (${scopeOf(result)})\n`);
    },
  },
  metrics: {
    summary: "the node's metrics in the Prometheus text format",
    usage: "movie metrics [--url URL]",
    args: [],
    async run(ctx) {
      const res = await call(ctx, "GET", "/metrics");
      if (res.status !== 200) throw new CliError(exitCodes.refused, `GET /metrics → ${res.status}`);
      ctx.io.stdout(res.text);
      return exitCodes.ok;
    },
  },
  migrate: {
    summary: "print (--print) or apply (--apply --url postgres://…) the PostgreSQL persistence migrations",
    usage: "movie migrate --print | --apply --url postgres://user@host/db [--schema NAME] [--json]",
    args: [],
    options: { print: { type: "boolean" }, apply: { type: "boolean" }, schema: { type: "string" } },
    async run(ctx, _args, values) {
      const { postgresMigrations, postgresMigrationSql, PostgresStore } = await import(
        "../persistence/postgres/index.ts"
      );
      const list = postgresMigrations.map((m) => ({ version: m.version, name: m.name, checksum: m.checksum }));
      if (values.print === true && values.apply !== true) {
        if (ctx.json) return out(ctx, { migrations: list, sql: postgresMigrationSql() }, () => "");
        const header = list.map((m) => `-- ${m.version} ${m.name} checksum ${m.checksum}`).join("\n");
        ctx.io.stdout(`${header}\n${postgresMigrationSql()}`);
        return exitCodes.ok;
      }
      if (values.apply !== true || values.print === true)
        throw new CliError(exitCodes.usage, "migrate needs exactly one of --print and --apply");
      if (!ctx.url.startsWith("postgres://") && !ctx.url.startsWith("postgresql://")) {
        throw new CliError(exitCodes.usage, "migrate --apply needs --url postgres://user@host:port/database");
      }
      const schema = typeof values.schema === "string" ? values.schema : undefined;
      let store: Awaited<ReturnType<typeof PostgresStore.connect>>;
      try {
        store = await PostgresStore.connect({ connectionUri: ctx.url, ...(schema === undefined ? {} : { schema }) });
      } catch (error) {
        throw new CliError(
          exitCodes.unreachable,
          `cannot migrate: ${error instanceof Error ? error.message : describe(error)}`,
        );
      }
      await store.close();
      return out(
        ctx,
        { applied: list, schema: schema ?? null },
        () =>
          `schema${schema === undefined ? "" : ` ${schema}`} is at version ${list[list.length - 1]?.version ?? 0}:\n${table([["VERSION", "NAME", "CHECKSUM"], ...list.map((m) => [`${m.version}`, m.name, m.checksum])])}`,
      );
    },
  },
};

/** `[1,2,3,7,9,10]` → `1-3,7,9-10`. */
export function ranges(sorted: readonly number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(",");
}

const scheduler = new RealScheduler();
const pause = (ms: number): Promise<void> => new Promise((resolve) => scheduler.scheduleOnce(ms, resolve));

/** Polls members and shard plans until `member` is gone, printing one progress line per change (exit 4 on timeout). */
async function waitRemoved(ctx: Context, member: string): Promise<number> {
  const deadline = scheduler.now() + ctx.timeoutMs;
  let last = "";
  for (;;) {
    const members = (await ok(ctx, "GET", "/cluster/members")) as Members;
    const record = members.members.find((m) => m.address === member);
    const typesBody = (await call(ctx, "GET", "/sharding/types")).body as { types?: TypeSummary[] } | null;
    let shards = 0;
    for (const t of typesBody?.types ?? [])
      for (const [owner, n] of t.shardsPerOwner) if (owner === member) shards += n;
    if (record === undefined) {
      if (ctx.io.isTTY) ctx.io.stdout("\n");
      return out(ctx, { member, removed: true }, () => `${member} removed; its shards moved to the other members\n`);
    }
    const line = `leaving ${member}: ${record.status}, owns ${shards} shard${shards === 1 ? "" : "s"}`;
    if (line !== last && !ctx.json) ctx.io.stdout(ctx.io.isTTY ? `\r${line}\u001b[K` : `${line}\n`);
    last = line;
    if (scheduler.now() > deadline) {
      if (ctx.io.isTTY) ctx.io.stdout("\n");
      throw new CliError(
        exitCodes.timeout,
        `${member} was not removed within ${ctx.timeoutMs} ms (last: ${record.status}, ${shards} shards)`,
      );
    }
    await pause(250);
  }
}

function help(name: string | null): string {
  if (name !== null) {
    const c = commands[name]!;
    return `${c.summary}\n\nusage: ${c.usage}\n\n--url URL      management endpoint (env MOVIE_MANAGEMENT_URL, default ${defaultUrl})\n--token TOKEN  bearer token for writes (env MOVIE_MANAGEMENT_TOKEN)\n--json         machine-readable output\n--timeout MS   per request, and for leave --wait and rebalance --wait (default 10000; 120000 and 60000 with --wait)\n`;
  }
  const rows = Object.entries(commands).map(([n, c]) => [`  ${n}`, c.summary]);
  return `movie: operate a Movie cluster through a node's management endpoint\n\nusage: movie <command> [options]   (movie <command> --help for more)\n\n${table(rows)}\nexit codes: 0 ok, 1 refused or not ready, 2 bad usage, 3 unreachable, 4 timed out\n`;
}

/** Runs the CLI on `argv` (without `node` and the script); resolves the exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    io.stdout(help(null));
    return name === undefined ? exitCodes.usage : exitCodes.ok;
  }
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (command === undefined) {
    io.stderr(`movie: unknown command ${describe(name)}; run movie --help\n`);
    return exitCodes.usage;
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: [...rest],
      options: { ...common, ...command.options },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    io.stderr(`movie ${name}: ${error instanceof Error ? error.message : describe(error)}\nusage: ${command.usage}\n`);
    return exitCodes.usage;
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  if (values.help === true) {
    io.stdout(help(name));
    return exitCodes.ok;
  }
  if (parsed.positionals.length !== command.args.length) {
    io.stderr(
      `movie ${name}: expected ${command.args.length === 0 ? "no arguments" : command.args.map((a) => `<${a}>`).join(" ")}\nusage: ${command.usage}\n`,
    );
    return exitCodes.usage;
  }
  const timeoutText = values.timeout;
  const timeoutMs =
    typeof timeoutText === "string"
      ? Number(timeoutText)
      : name === "leave"
        ? 120_000
        : name === "rebalance" && values.wait === true
          ? 60_000
          : 10_000;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0) {
    io.stderr(`movie ${name}: --timeout must be a whole number of milliseconds above 0\n`);
    return exitCodes.usage;
  }
  const url = (typeof values.url === "string" ? values.url : undefined) ?? io.env.MOVIE_MANAGEMENT_URL ?? defaultUrl;
  if (name !== "migrate") {
    try {
      const u = new URL(url);
      if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("not http");
    } catch {
      io.stderr(`movie ${name}: --url ${describe(url)} is not an http(s) URL\n`);
      return exitCodes.usage;
    }
  }
  const token = (typeof values.token === "string" ? values.token : undefined) ?? io.env.MOVIE_MANAGEMENT_TOKEN;
  const ctx: Context = {
    io,
    url,
    token,
    json: values.json === true,
    timeoutMs,
    color: io.isTTY && io.env.NO_COLOR === undefined,
  };
  try {
    return await command.run(ctx, parsed.positionals, values);
  } catch (error) {
    if (error instanceof CliError) {
      io.stderr(`movie ${name}: ${error.message}\n`);
      return error.code;
    }
    io.stderr(`movie ${name}: ${error instanceof Error ? error.message : describe(error)}\n`);
    return exitCodes.refused;
  }
}
