/**
 * The management endpoint as a fetch-style handler (`Request` → `Response`), independent of any server: the
 * node:http server of `startManagement` calls it, and a user can mount it in their own (Hono, Fastify's fetch
 * adapter, Bun, Deno). Every route reads through public inspection APIs; every refusal is a 4xx JSON body
 * `{ "error": code, "message": text }` and a counter, never an exception out of `handle`.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { ActorSystem, UniqueAddress } from "../actor/index.ts";
import { errorText } from "../actor/untrusted.ts";
import type { Cluster } from "../cluster/index.ts";
import type { ClusterSharding } from "../sharding/index.ts";
import { dashboardPage } from "./dashboard-page.ts";
import { ManagementConfigurationError, ManagementRequestError } from "./errors.ts";
import { eventStream } from "./event-stream.ts";
import { expositionContentType } from "./exposition.ts";
import { type HealthReport, readiness } from "./health.ts";
import { renderMetrics } from "./metrics.ts";
import { type OperatorAction, OperatorLog } from "./operator-log.ts";
import { outboxCountsOrNull, outboxView, parkedLimitOf } from "./outbox-routes.ts";
import {
  actionOffset,
  noParameters,
  type ProjectionAction,
  projectionAction,
  projectionNameOf,
  projectionsView,
  projectionView,
} from "./projection-routes.ts";
import { clusterOf, membersView, shardingOf, shardView, statsView, typeShardsView, typeSummary } from "./views.ts";

/** Longest request target (path and query) the handler reads, in characters; longer ones get 414. */
export const requestTargetCharsMax = 4_096;

/** Options of {@link createManagementHandler}. */
export interface ManagementHandlerOptions {
  /**
   * The bearer token write endpoints require (`Authorization: Bearer <token>`), at least 16 characters. Without one,
   * write endpoints answer 403: reading is harmless, changing membership is not.
   */
  readonly token?: string;
  /** How often the dashboard's event stream sends a snapshot, in ms (default 1,000; 100 to 60,000). */
  readonly dashboardIntervalMs?: number;
  /** Most dashboard event streams open at once (default 16); more get 503. */
  readonly maxEventStreams?: number;
}

/** What the server knows about a request beyond the `Request` itself. */
export interface RequestContext {
  /** The peer's `ip:port`, for the audit log. */
  readonly remote?: string;
}

/** A mounted management endpoint. */
export interface ManagementHandler {
  /** Answers one request; never rejects. */
  handle(request: Request, context?: RequestContext): Promise<Response>;
  /** The audit trail of write requests and refusal counters. */
  readonly operatorLog: OperatorLog;
  /** Ends every open event stream. */
  close(): void;
}

type Json = Record<string, unknown> | readonly unknown[];

function json(status: number, body: Json): Response {
  return new Response(`${JSON.stringify(body)}\n`, {
    status,
    headers: { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" },
  });
}

function refuse(status: number, code: string, message: string): never {
  throw new ManagementRequestError(status, code, message);
}

/** The SHA-256 of a token: equal-length inputs for timingSafeEqual whatever the lengths of the tokens compared. */
function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

function validateOptions(options: ManagementHandlerOptions): Required<Omit<ManagementHandlerOptions, "token">> & {
  token: string | null;
} {
  const token = options.token;
  if (token !== undefined && (typeof token !== "string" || token.length < 16 || /[\s]/.test(token))) {
    throw new ManagementConfigurationError("token", "must be a string of at least 16 characters without spaces");
  }
  const interval = options.dashboardIntervalMs ?? 1_000;
  if (!Number.isSafeInteger(interval) || interval < 100 || interval > 60_000) {
    throw new ManagementConfigurationError("dashboardIntervalMs", "must be a whole number from 100 to 60,000");
  }
  const streams = options.maxEventStreams ?? 16;
  if (!Number.isSafeInteger(streams) || streams < 0 || streams > 1_000) {
    throw new ManagementConfigurationError("maxEventStreams", "must be a whole number from 0 to 1,000");
  }
  return { token: token ?? null, dashboardIntervalMs: interval, maxEventStreams: streams };
}

/** Splits a path into percent-decoded segments. @throws ManagementRequestError 400 on bad percent-encoding */
function segmentsOf(pathname: string): string[] {
  const raw = pathname.split("/").slice(1);
  if (raw.length > 0 && raw[raw.length - 1] === "") raw.pop();
  return raw.map((segment) => {
    try {
      return decodeURIComponent(segment);
    } catch {
      return refuse(400, "BadPercentEncoding", "a path segment is not valid percent-encoded UTF-8");
    }
  });
}

/** Runs a read of the database: a refusal passes, any other failure is 503 StoreUnavailable naming it. */
async function storeRead<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (error) {
    if (error instanceof ManagementRequestError) throw error;
    return refuse(503, "StoreUnavailable", `the database could not be read: ${errorText(error).slice(0, 300)}`);
  }
}

/** A shard number from a path segment. @throws ManagementRequestError 400 unless it is in 0..shardCount-1 */
function parseShard(text: string, shardCount: number): number {
  const shard = /^(0|[1-9][0-9]{0,8})$/.test(text) ? Number(text) : -1;
  if (shard < 0 || shard >= shardCount) {
    refuse(400, "ShardOutOfRange", `shard must be a whole number from 0 to ${shardCount - 1}`);
  }
  return shard;
}

/**
 * The fetch-style management handler of `system`.
 * @throws ManagementConfigurationError for invalid options
 */
export function createManagementHandler(
  system: ActorSystem,
  options: ManagementHandlerOptions = {},
): ManagementHandler {
  const settings = validateOptions(options);
  const tokenDigest = settings.token === null ? null : digest(settings.token);
  const operatorLog = new OperatorLog(system.log);
  const streams = new Set<{ close(): void }>();

  const requireCluster = (): Cluster =>
    clusterOf(system) ?? refuse(409, "ClusterNotEnabled", "cluster membership is not enabled on this node");
  const requireSharding = (): ClusterSharding =>
    shardingOf(system) ?? refuse(409, "ShardingNotEnabled", "cluster sharding is not started on this node");
  const requireType = (name: string) => {
    const sharding = requireSharding();
    if (!sharding.entityTypeNames.includes(name)) {
      refuse(
        404,
        "UnknownEntityType",
        `entity type ${JSON.stringify(name.slice(0, 100))} is not registered on this node`,
      );
    }
    return sharding.inspect(name);
  };

  /** The member `text` names: its full unique address, `system@host:port`, or `host:port`. */
  const findMember = (cluster: Cluster, text: string): UniqueAddress => {
    const matches = cluster
      .snapshot()
      .members.map((m) => m.uniqueAddress)
      .filter(
        (a) =>
          a.toString() === text || a.address.hostPort === text || `${a.address.system}@${a.address.hostPort}` === text,
      );
    if (matches.length === 0) {
      refuse(
        404,
        "UnknownMember",
        `no member ${JSON.stringify(text.slice(0, 200))} in this node's view; GET /cluster/members lists them`,
      );
    }
    if (matches.length > 1) {
      refuse(
        409,
        "AmbiguousMember",
        "more than one incarnation matches; name the member by its full address with #uid",
      );
    }
    return matches[0]!;
  };

  const authorize = (request: Request): void => {
    if (tokenDigest === null) {
      refuse(403, "WritesDisabled", "write endpoints are disabled: start the management server with a token");
    }
    const header = request.headers.get("authorization");
    const match = header === null ? null : /^Bearer ([^\s]{1,1024})$/i.exec(header);
    if (match === null || !timingSafeEqual(digest(match[1]!), tokenDigest)) {
      operatorLog.unauthorized++;
      refuse(401, "Unauthorized", "a write needs the header Authorization: Bearer <token> with the configured token");
    }
  };

  /**
   * Runs one write after the token check: logs who asked what and when with the outcome (accepted, or the refusal's
   * code) and answers 202 with what `perform` returns.
   */
  const audited = async (
    request: Request,
    context: RequestContext,
    action: OperatorAction["action"],
    target: string,
    perform: () =>
      | { readonly target: string; readonly body: Json }
      | Promise<{ readonly target: string; readonly body: Json }>,
  ): Promise<Response> => {
    authorize(request);
    const base = {
      atEpochMs: system.scheduler.wallNow(),
      action,
      target: target.slice(0, 300),
      remote: context.remote ?? null,
      userAgent: request.headers.get("user-agent")?.slice(0, 100) ?? null,
    };
    let done: { readonly target: string; readonly body: Json };
    try {
      done = await perform();
    } catch (error) {
      const outcome = error instanceof ManagementRequestError ? error.code : errorText(error);
      operatorLog.record({ ...base, outcome });
      if (error instanceof ManagementRequestError) throw error;
      return refuse(409, "Refused", errorText(error));
    }
    operatorLog.record({ ...base, target: done.target.slice(0, 300), outcome: "accepted" });
    return json(202, done.body);
  };

  const membershipWrite = (
    request: Request,
    context: RequestContext,
    action: "down" | "leave",
    target: string,
  ): Promise<Response> =>
    audited(request, context, action, target, () => {
      const cluster = requireCluster();
      const member = findMember(cluster, target);
      if (action === "down") {
        if (member.equals(cluster.selfAddress)) {
          refuse(409, "CannotDownSelf", "a node cannot down itself; send the request to another member, or leave");
        }
        if (!cluster.down(member))
          refuse(409, "DownRefused", "the member is not known to the leader, or this node was downed");
      } else {
        // Resolves once the member is Removed; the caller polls GET /cluster/members (the CLI's --wait does).
        cluster.leave(member).catch((error: unknown) => {
          system.log.warn({ target: member.toString(), error: errorText(error) }, "management: leave did not complete");
        });
      }
      return { target: member.toString(), body: { accepted: true, action, member: member.toString() } };
    });

  /** `POST /sharding/types/:type/shards/:shard/rebalance[?to=<member>]`: one shard moved by the coordinator. */
  const rebalance = (
    request: Request,
    context: RequestContext,
    type: string,
    shardText: string,
    query: URLSearchParams,
  ): Promise<Response> => {
    const tos = query.getAll("to");
    const label = `${type.slice(0, 100)}/${shardText.slice(0, 12)}${tos.length === 1 ? ` to ${tos[0]!.slice(0, 200)}` : ""}`;
    return audited(request, context, "rebalance", label, () => {
      for (const key of query.keys()) {
        if (key !== "to") refuse(400, "UnknownParameter", "the only query parameter of a rebalance is to=<member>");
      }
      if (tos.length > 1) refuse(400, "UnknownParameter", "name at most one target with to=<member>");
      if (tos.length === 1 && tos[0] === "") refuse(400, "InvalidTarget", "to= names no member");
      const view = requireType(type);
      const shard = parseShard(shardText, view.shardCount);
      const to = tos.length === 1 ? findMember(requireCluster(), tos[0]!) : undefined;
      const decision = requireSharding().moveShard(view.name, shard, to === undefined ? {} : { to });
      if (decision.kind === "refused") {
        throw new ManagementRequestError(
          decision.reason === "ShardOutOfRange" ? 400 : 409,
          decision.reason,
          decision.message,
          { coordinator: decision.coordinator?.toString() ?? null },
        );
      }
      return {
        target: `${view.name}/${shard} to ${decision.to.toString()}`,
        body: {
          accepted: true,
          action: "rebalance",
          type: view.name,
          shard,
          from: decision.from.toString(),
          to: decision.to.toString(),
          followUpMoves: [...decision.followUpMoves],
        },
      };
    });
  };

  const route = async (request: Request, context: RequestContext): Promise<Response> => {
    const url = request.url;
    if (url.length > requestTargetCharsMax + 64) refuse(414, "UriTooLong", "the request target is too long");
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return refuse(400, "BadRequestTarget", "the request target is not a valid URL");
    }
    const path = segmentsOf(parsed.pathname);
    const method = request.method;
    const get = method === "GET" || method === "HEAD";
    const post = method === "POST";
    const [first, second, third, fourth, fifth, ...rest] = path;
    const wrongMethod = (allowed: string): never => refuse(405, "MethodNotAllowed", `use ${allowed}`);

    if (path.length === 0) {
      if (!get) wrongMethod("GET");

      return new Response(dashboardPage, {
        headers: {
          "content-type": "text/html; charset=utf-8",
          "cache-control": "no-store",
          // The page's own inline script and style, its event stream, nothing else.
          "content-security-policy":
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
          "x-content-type-options": "nosniff",
        },
      });
    }
    if (first === "health" && path.length === 2) {
      if (!get) wrongMethod("GET");
      if (second === "alive") return json(200, { alive: true });
      if (second === "ready") {
        const report: HealthReport = readiness(system);
        return json(report.ready ? 200 : 503, { ...report });
      }
    }
    if (first === "metrics" && path.length === 1) {
      if (!get) wrongMethod("GET");
      const outbox = await outboxCountsOrNull(system);
      return new Response(renderMetrics(system, operatorLog, { outbox }), {
        headers: { "content-type": expositionContentType, "cache-control": "no-store" },
      });
    }
    if (first === "stats" && path.length === 1) {
      if (!get) wrongMethod("GET");
      // The outbox's counts (parked messages included) come from the database: null without persistence or when it
      // does not answer now.
      return json(200, { ...statsView(system), outbox: await outboxCountsOrNull(system) });
    }
    if (first === "operator-actions" && path.length === 1) {
      if (!get) wrongMethod("GET");
      return json(200, { actions: operatorLog.actions });
    }
    if (first === "events" && path.length === 1) {
      if (!get) wrongMethod("GET");
      if (streams.size >= settings.maxEventStreams) {
        refuse(503, "TooManyEventStreams", "too many dashboard event streams are open; close one and retry");
      }

      return eventStream(system, operatorLog, settings.dashboardIntervalMs, streams, request.signal);
    }
    if (first === "cluster" && second === "members") {
      if (path.length === 2) {
        if (!get) wrongMethod("GET");
        return json(200, { ...membersView(requireCluster().snapshot()) });
      }
      if (path.length === 4 && (fourth === "down" || fourth === "leave")) {
        if (!post) wrongMethod("POST");
        return membershipWrite(request, context, fourth, third!);
      }
    }
    if (first === "sharding" && second === "types") {
      if (path.length === 2) {
        if (!get) wrongMethod("GET");
        const sharding = requireSharding();
        return json(200, { types: sharding.entityTypeNames.map((n) => typeSummary(sharding.inspect(n))) });
      }
      if (path.length === 4 && fourth === "shards") {
        if (!get) wrongMethod("GET");
        return json(200, { ...typeShardsView(requireType(third!)) });
      }
      if (path.length === 5 && fourth === "shards") {
        if (!get) wrongMethod("GET");
        const view = requireType(third!);
        return json(200, { type: view.name, ...shardView(view, parseShard(fifth!, view.shardCount)) });
      }
      if (path.length === 6 && fourth === "shards" && rest[0] === "rebalance") {
        if (!post) wrongMethod("POST");
        return rebalance(request, context, third!, fifth!, parsed.searchParams);
      }
      if (path.length === 5 && fourth === "entities") {
        if (!get) wrongMethod("GET");
        const view = requireType(third!);
        const sharding = requireSharding();
        let shard: number;
        try {
          shard = sharding.shardOf(view.name, fifth!);
        } catch (error) {
          return refuse(400, "InvalidEntityId", errorText(error));
        }
        if (fifth!.length === 0) refuse(400, "InvalidEntityId", "the entity id is empty");
        const owner = sharding.ownerFor(view.name, fifth!);
        return json(200, {
          type: view.name,
          entityId: fifth,
          shard,
          owner: owner?.toString() ?? null,
          localEntities: view.localEntities.get(shard) ?? 0,
        });
      }
    }
    if (first === "projections") {
      if (path.length === 1) {
        if (!get) wrongMethod("GET");
        noParameters(parsed.searchParams, "/projections");
        return json(200, await storeRead(() => projectionsView(system)));
      }
      if (path.length === 2) {
        if (!get) wrongMethod("GET");
        const name = projectionNameOf(second!);
        noParameters(parsed.searchParams, "/projections/:name");
        return json(200, await storeRead(() => projectionView(system, name)));
      }
      if (path.length === 3 && (third === "pause" || third === "resume" || third === "rebuild")) {
        if (!post) wrongMethod("POST");
        const action: ProjectionAction = third;
        const label = `${second!.slice(0, 256)}`;
        return audited(request, context, `projection-${action}`, label, async () => {
          const name = projectionNameOf(second!);
          const offset = actionOffset(action, parsed.searchParams);
          return projectionAction(system, name, action, offset);
        });
      }
    }
    if (first === "outbox" && path.length === 1) {
      if (!get) wrongMethod("GET");
      return json(200, { ...(await outboxView(system, parkedLimitOf(parsed.searchParams))) });
    }
    if (first === "persistence" && second === "leases" && path.length === 2) {
      if (!get) wrongMethod("GET");
      const sharding = shardingOf(system);
      const types = (sharding?.entityTypeNames ?? []).flatMap((name) => {
        const view = sharding!.inspect(name);
        return view.leases === null ? [] : [{ type: name, leases: view.leases }];
      });
      return json(200, { owner: clusterOf(system)?.selfAddress.toString() ?? null, types });
    }
    return refuse(404, "NotFound", "no such endpoint; see docs/operations.md for the list");
  };

  return {
    operatorLog,
    async handle(request: Request, context: RequestContext = {}): Promise<Response> {
      try {
        return await route(request, context);
      } catch (error) {
        if (error instanceof ManagementRequestError) {
          if (error.status !== 401) operatorLog.badRequests++;
          const response = json(error.status, { error: error.code, message: error.message, ...error.details });
          if (error.status === 401) response.headers.set("www-authenticate", 'Bearer realm="movie"');
          if (error.status === 405) response.headers.set("allow", error.message.slice(4));
          return response;
        }
        system.log.warn({ error: errorText(error) }, "management: a request failed unexpectedly");
        return json(500, { error: "Internal", message: "the request failed; the node's log says why" });
      }
    },
    close(): void {
      for (const stream of [...streams]) stream.close();
    },
  };
}
