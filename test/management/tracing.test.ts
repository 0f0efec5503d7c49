// Traces across three nodes over real loopback TCP: registerOpenTelemetryTracing on each node, with the real
// @opentelemetry/api (`trace`, `context`) and a recording Tracer standing in for an SDK's (the project has no
// tracing SDK installed; the bridge only uses the API's Tracer interface). A sharded ask from a node that is neither
// the coordinator nor the owner goes caller → coordinator → owner; the owner's span is a child of the caller's, in
// the same trace, with the entity's type, id and shard. A hostile traceparent crossing TCP is dropped and counted
// while the message is still delivered.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import {
  type Attributes,
  type Context,
  context,
  type Span,
  type SpanContext,
  SpanKind,
  type SpanOptions,
  type SpanStatus,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import { registerOpenTelemetryTracing } from "../../src/management/index.ts";
import type { ShardingTracer } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { DeliverOrder, GetOrder, OrderBehavior, OrderCommand, OrderReply } from "../sharding/fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  type ShardingNode,
  settled,
  startShardingNodes,
  terminateAll,
} from "../sharding/fixtures/tcp-nodes.ts";

interface Recorded {
  readonly name: string;
  readonly kind: SpanKind | undefined;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string | null;
  readonly attributes: Attributes;
  status: SpanStatus | null;
  ended: boolean;
}

/** A Tracer that records every span it starts, with the parent it found in the context (what an SDK does). */
class RecordingTracer implements Tracer {
  readonly spans: Recorded[] = [];
  startSpan(name: string, options: SpanOptions = {}, ctx: Context = context.active()): Span {
    const parent = trace.getSpanContext(ctx);
    const spanContext: SpanContext = {
      traceId: parent?.traceId ?? randomBytes(16).toString("hex"),
      spanId: randomBytes(8).toString("hex"),
      traceFlags: 1,
    };
    const record: Recorded = {
      name,
      kind: options.kind,
      traceId: spanContext.traceId,
      spanId: spanContext.spanId,
      parentSpanId: parent?.spanId ?? null,
      attributes: { ...options.attributes },
      status: null,
      ended: false,
    };
    this.spans.push(record);
    const span: Span = {
      spanContext: () => spanContext,
      setAttribute: () => span,
      setAttributes: () => span,
      addEvent: () => span,
      addLink: () => span,
      addLinks: () => span,
      setStatus: (status) => {
        record.status = status;
        return span;
      },
      updateName: () => span,
      end: () => {
        record.ended = true;
      },
      isRecording: () => true,
      recordException: () => {},
    };
    return span;
  }
  startActiveSpan(): never {
    throw new Error("not used by the sharding tracer");
  }
}

const settings = { shardCount: 12 };
let nodes: ShardingNode[] = [];
const tracers = new Map<ShardingNode, RecordingTracer>();
before(async () => {
  nodes = await startShardingNodes(3);
  for (const n of nodes) {
    n.sharding.init("Traced", OrderCommand, settings, (id) => new OrderBehavior(id));
    const tracer = new RecordingTracer();
    tracers.set(n, tracer);
    registerOpenTelemetryTracing(n.system, { tracer, api: { trace, context } });
  }
  await eventually(() => nodes.every((n) => settled(n, 3)) && planSettled(nodes, "Traced", settings), {
    what: "three nodes with a settled plan",
    describe: describeNodes(nodes, "Traced"),
    timeoutMs: 15_000,
  });
});
after(() => terminateAll(nodes));

/** A caller that is not the coordinator, and an entity id whose owner is neither: two hops over TCP. */
function route(): { caller: ShardingNode; owner: ShardingNode; coordinator: ShardingNode; id: string } {
  const coordinatorAddress = nodes[0]!.sharding.inspect("Traced").coordinator!;
  const coordinator = nodes.find((n) => n.cluster.selfAddress.equals(coordinatorAddress))!;
  const caller = nodes.find((n) => n !== coordinator)!;
  const owner = nodes.find((n) => n !== coordinator && n !== caller)!;
  for (let i = 0; i < 1000; i++) {
    const id = `t-${i}`;
    if (caller.sharding.ownerFor("Traced", id)?.equals(owner.cluster.selfAddress))
      return { caller, owner, coordinator, id };
  }
  throw new Error("no id owned by the third node");
}

const spansOf = (n: ShardingNode, id: string) =>
  tracers.get(n)!.spans.filter((s) => s.attributes["movie.entity.id"] === id);

test("an ask across caller → coordinator → owner: the owner's span is a child of the caller's, in one trace", async () => {
  const { caller, owner, coordinator, id } = route();
  const reply = await caller.sharding.entityRefFor<OrderCommand>("Traced", id).ask(new GetOrder(), OrderReply, 5_000);
  assert.equal(reply.host, owner.system.address.toString());
  const [call] = spansOf(caller, id);
  assert.ok(call !== undefined, "the caller recorded a span");
  assert.equal(call.name, "Traced ask");
  assert.equal(call.kind, SpanKind.CLIENT);
  assert.equal(call.parentSpanId, null, "no active span at the caller: a root span");
  assert.equal(call.ended, true, "ended with the reply");
  assert.equal(call.status, null, "not failed");
  const shard = caller.sharding.shardOf("Traced", id);
  assert.deepEqual(call.attributes, {
    "movie.entity.type": "Traced",
    "movie.entity.id": id,
    "movie.shard.id": shard,
    "movie.call": "ask",
  });
  await eventually(() => spansOf(owner, id).length === 1, {
    what: "the owner's span",
    describe: () => nodes.map((n) => spansOf(n, id)),
  });
  const [delivery] = spansOf(owner, id);
  assert.equal(delivery!.name, "Traced ask deliver");
  assert.equal(delivery!.kind, SpanKind.SERVER);
  assert.equal(delivery!.traceId, call.traceId, "same trace");
  assert.equal(delivery!.parentSpanId, call.spanId, "child of the caller's span");
  assert.equal(delivery!.attributes["movie.shard.id"], shard);
  assert.equal(delivery!.ended, true);
  assert.deepEqual(spansOf(coordinator, id), [], "the coordinator forwards the trace context unchanged");
  for (const n of nodes) assert.equal(n.sharding.stats.malformedTraceContexts, 0);
});

test("a tell: a producer span on the caller and a consumer child on the owner", async () => {
  const { caller, owner, id } = route();
  const tellId = `${id}`;
  caller.sharding.entityRefFor<OrderCommand>("Traced", tellId).tell(new DeliverOrder("p"));
  const call = spansOf(caller, tellId).find((s) => s.name === "Traced tell");
  assert.ok(call !== undefined && call.kind === SpanKind.PRODUCER && call.ended, "the tell's span, ended once routed");
  await eventually(() => spansOf(owner, tellId).some((s) => s.name === "Traced tell deliver"), {
    what: "the owner's tell span",
    describe: () => nodes.map((n) => spansOf(n, tellId)),
  });
  const delivery = spansOf(owner, tellId).find((s) => s.name === "Traced tell deliver")!;
  assert.equal(delivery.kind, SpanKind.CONSUMER);
  assert.equal(delivery.parentSpanId, call.spanId);
});

test("untraced callers send no trace context: the owner starts no span", async () => {
  const { caller, owner, id } = route();
  caller.sharding.useTracer(null);
  try {
    const quietId = `${id}`;
    const before = spansOf(owner, quietId).length;
    await caller.sharding.entityRefFor<OrderCommand>("Traced", quietId).ask(new GetOrder(), OrderReply, 5_000);
    assert.equal(spansOf(owner, quietId).length, before);
  } finally {
    registerOpenTelemetryTracing(caller.system, { tracer: tracers.get(caller)!, api: { trace, context } });
  }
});

test("a hostile traceparent over TCP is dropped and counted on the receiving node; the message is delivered", async () => {
  const { caller, owner, coordinator, id } = route();
  const hostile: ShardingTracer = {
    startCall: () => ({ traceparent: "00-NOT-A-TRACE-CONTEXT", end: () => {} }),
    startDelivery: () => ({ traceparent: null, end: () => {} }),
  };
  caller.sharding.useTracer(hostile);
  try {
    const reply = await caller.sharding.entityRefFor<OrderCommand>("Traced", id).ask(new GetOrder(), OrderReply, 5_000);
    assert.equal(reply.entityId, id, "delivered all the same");
    // The coordinator decoded it first, dropped the value and forwarded none: only it counts.
    assert.equal(coordinator.sharding.stats.malformedTraceContexts, 1);
    assert.equal(owner.sharding.stats.malformedTraceContexts, 0);
    assert.equal(coordinator.sharding.stats.rejectedEnvelopes, 0);
  } finally {
    registerOpenTelemetryTracing(caller.system, { tracer: tracers.get(caller)!, api: { trace, context } });
  }
});

test("a tracer that throws costs the span, never the call", async () => {
  const { caller, id } = route();
  caller.sharding.useTracer({
    startCall: () => {
      throw new Error("tracer broke");
    },
    startDelivery: () => {
      throw new Error("tracer broke");
    },
  });
  try {
    const reply = await caller.sharding.entityRefFor<OrderCommand>("Traced", id).ask(new GetOrder(), OrderReply, 5_000);
    assert.equal(reply.entityId, id);
    caller.sharding.entityRefFor<OrderCommand>("Traced", id).tell(new DeliverOrder("q"));
  } finally {
    registerOpenTelemetryTracing(caller.system, { tracer: tracers.get(caller)!, api: { trace, context } });
  }
});
