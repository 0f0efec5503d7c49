// The node shell's memory of the core's direct-routing answers (node/shortcut-memo.ts): while the node state's version
// stays the same it answers as the core does without asking it, and from the first change on it asks again. Each rule
// compares the memory with the core's own answer (callerRouteOf, callerOwnDirectOf, directDeliveryType) at the same moment, after the
// memory has kept an answer that the change makes wrong.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type DirectBatchRecord,
  DirectEnvelope,
  DirectMarker,
  HandoffAnnounce,
  PassivateShard,
  ReceivedDirectBatch,
} from "../../../src/sharding/internal/messages.ts";
import {
  callerOwnDirectOf,
  callerRouteOf,
  type Delivery,
  directDeliveryType,
  routedDirect,
  routeVia,
} from "../../../src/sharding/node/node-core.ts";
import { CallerRouteMemo, DirectAcceptMemo } from "../../../src/sharding/node/shortcut-memo.ts";
import { cluster, control, directFrom, grantedDirect, ownerWithOwnGrant } from "./direct-harness.ts";
import { a, b, c, type } from "./node-harness.ts";

/** c, the owner of a shard in a's direct plan, a memory that accepted one direct envelope for it, and that envelope. */
function ownerThatAccepted() {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const memo = new DirectAcceptMemo();
  const d = directFrom(k.c, id, a, k.c.t.plan.generation);
  assert.equal(memo.accepts(k.c.state, d), k.c.t);
  return { k, shard, id, memo, d };
}

test("memo: the owner's memory accepts a later envelope of the same shard and grant as the core does, without a step between", () => {
  const { k, shard, id, memo } = ownerThatAccepted();
  const other = Array.from({ length: 1_000 }, (_, i) => `e${i}`).find((x) => x !== id && k.c.shardOf(x) === shard)!;
  const next = directFrom(k.c, other, a, k.c.t.plan.generation);
  const version = k.c.state.version;
  assert.equal(memo.accepts(k.c.state, next), k.c.t);
  assert.equal(directDeliveryType(k.c.state, next), k.c.t);
  assert.equal(k.c.state.version, version, "asking changes nothing");
});

test("memo: on a kept shard, an envelope whose entity id hashes to another shard is refused, as the core refuses it", () => {
  const { k, shard, memo, d } = ownerThatAccepted();
  const elsewhere = k.c.entityIn((s) => s !== shard);
  // A hostile sender names the accepted shard, generation and header for an entity of another shard.
  const lie = new DirectEnvelope(
    "User",
    type,
    elsewhere,
    shard,
    d.envelope.settingsKey,
    null,
    true,
    null,
    0,
    null,
    (d.envelope as DirectEnvelope).generation,
    (d.envelope as DirectEnvelope).coordinatorUid,
    (d.envelope as DirectEnvelope).settingsDigest,
  );
  const forged = { envelope: lie, sender: null };
  assert.equal(directDeliveryType(k.c.state, forged), null);
  assert.equal(memo.accepts(k.c.state, forged), null);
});

test("memo: on a kept shard, another generation or coordinator is asked of the core, not taken from the memory", () => {
  const { k, id, memo } = ownerThatAccepted();
  const generation = k.c.t.plan.generation;
  for (const d of [directFrom(k.c, id, a, generation + 1), directFrom(k.c, id, b, generation)]) {
    assert.equal(directDeliveryType(k.c.state, d), null);
    assert.equal(memo.accepts(k.c.state, d), null);
  }
  // The kept answer still holds for the grant it was kept for.
  assert.equal(memo.accepts(k.c.state, directFrom(k.c, id, a, generation)), k.c.t);
});

test("memo: after the steps that close the shard at its owner for a handoff, the memory refuses what it accepted before, as the core does", () => {
  const { k, shard, memo, d } = ownerThatAccepted();
  const key = k.c.settings.key;
  control(k.c, new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, [b.toString()]), a, 2_000);
  // Until b's marker arrives, what b sent before it is still delivered: the memory keeps accepting, as the core does.
  assert.equal(directDeliveryType(k.c.state, d), k.c.t);
  assert.equal(memo.accepts(k.c.state, d), k.c.t);
  control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 2_001);
  assert.equal(directDeliveryType(k.c.state, d), null, "the core refuses it: the shard drains");
  assert.equal(memo.accepts(k.c.state, d), null);
});

/** The batch an owner would read from a caller's batch of these direct deliveries (their header, their records). */
function receivedBatch(...ds: Delivery[]): ReceivedDirectBatch {
  const first = ds[0]!.envelope as DirectEnvelope;
  const header = {
    entityType: first.entityType,
    settingsKey: first.settingsKey,
    settingsDigest: first.settingsDigest,
    coordinatorUid: first.coordinatorUid,
  };
  const records = ds.map(({ envelope }): DirectBatchRecord => {
    const e = envelope as DirectEnvelope;
    // The harness's envelopes carry no payload; a received User record always does (validated as read).
    const message = e.message ?? { type: "test.payload", payload: null };
    return { ...e, message, askTimeoutMs: e.askTimeoutMs ?? undefined, traceparent: e.traceparent ?? undefined };
  });
  return new ReceivedDirectBatch(header, records);
}

/** The core's answer for record `i` of `batch`, asked of the envelope the owner would build from it. */
function coreAnswer(state: Parameters<typeof directDeliveryType>[0], batch: ReceivedDirectBatch, i: number) {
  return directDeliveryType(state, { envelope: batch.envelopeAt(i), sender: null });
}

test("memo: a batch's record is answered only from the memory: none before it kept the shard, the core's after", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const memo = new DirectAcceptMemo();
  const d = directFrom(k.c, id, a, k.c.t.plan.generation);
  const batch = receivedBatch(d, d);
  assert.equal(coreAnswer(k.c.state, batch, 0), k.c.t, "the core accepts it");
  assert.equal(memo.acceptsRecord(k.c.state, batch, 0), null, "nothing kept yet: the envelope is built and asked");
  assert.equal(memo.accepts(k.c.state, { envelope: batch.envelopeAt(0), sender: null }), k.c.t);
  assert.equal(memo.acceptsRecord(k.c.state, batch, 1), k.c.t);
});

test("memo: a batch's record of a kept shard is refused from the memory where the core refuses its envelope", () => {
  const { k, shard, id, memo, d } = ownerThatAccepted();
  const generation = k.c.t.plan.generation;
  const elsewhere = k.c.entityIn((s) => s !== shard);
  const lie = { ...(d.envelope as DirectEnvelope), entityId: elsewhere } as DirectEnvelope;
  // The same header as the kept one: an id hashing to another shard, another generation; then another coordinator.
  const batch = receivedBatch(d, { envelope: lie, sender: null }, directFrom(k.c, id, a, generation + 1));
  assert.equal(memo.acceptsRecord(k.c.state, batch, 0), k.c.t);
  for (const i of [1, 2]) {
    assert.equal(coreAnswer(k.c.state, batch, i), null, `record ${i}`);
    assert.equal(memo.acceptsRecord(k.c.state, batch, i), null, `record ${i}`);
  }
  const otherCoordinator = receivedBatch(directFrom(k.c, id, b, generation));
  assert.equal(coreAnswer(k.c.state, otherCoordinator, 0), null);
  assert.equal(memo.acceptsRecord(k.c.state, otherCoordinator, 0), null);
});

test("memo: after the steps that close the shard for a handoff, a batch's record is refused from the memory, as the core refuses its envelope", () => {
  const { k, shard, memo, d } = ownerThatAccepted();
  const batch = receivedBatch(d);
  const key = k.c.settings.key;
  control(k.c, new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, [b.toString()]), a, 2_000);
  assert.equal(memo.accepts(k.c.state, d), k.c.t);
  assert.equal(memo.acceptsRecord(k.c.state, batch, 0), k.c.t);
  control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 2_001);
  assert.equal(coreAnswer(k.c.state, batch, 0), null, "the core refuses it: the shard drains");
  assert.equal(memo.acceptsRecord(k.c.state, batch, 0), null);
});

test("memo: the caller's memory keeps a direct route and drops it at the step that announces the shard's handoff", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  const memo = new CallerRouteMemo();
  const kept = memo.answer(k.b.state, type, shard).target;
  assert.ok(kept?.direct?.owner.equals(c));
  assert.equal(memo.answer(k.b.state, type, shard).target, kept, "the same answer, from the memory");
  routedDirect(k.b.state, kept!);
  assert.equal(
    memo.answer(k.b.state, type, shard).target,
    kept,
    "routing through the same coordinator changes nothing",
  );
  control(k.b, new HandoffAnnounce(type, k.b.settings.key, shard, a.toString(), c.toString(), 42), a, 2_010);
  const fresh = callerRouteOf(k.b.state, type, shard);
  assert.equal(fresh?.direct ?? null, null, "the core: no direct route while the shard moves");
  assert.equal(memo.answer(k.b.state, type, shard).target?.direct ?? null, null);
});

test("memo: a route through another coordinator than the one the callers last used is a change (NodeState.version)", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  const t = k.b.t;
  const memo = new CallerRouteMemo();
  assert.ok(memo.answer(k.b.state, type, shard).target?.direct?.owner.equals(c), "a direct route, kept");
  const before = k.b.state.version;
  routeVia(k.b.state, t, t.via);
  assert.equal(k.b.state.version, before, "the same coordinator again: no change");
  // Callers that last routed through another coordinator than the routing one: the core answers null (its held
  // deliveries' pass is not idle until they are flushed), and so must the memory.
  routeVia(k.b.state, t, c);
  assert.equal(k.b.state.version, before + 1);
  assert.equal(callerRouteOf(k.b.state, type, shard), null);
  assert.equal(memo.answer(k.b.state, type, shard).target, null);
});

test("memo: the caller's memory keeps this node's own grant and drops it at the step that begins the shard's drain", () => {
  const { n, shard } = ownerWithOwnGrant();
  const memo = new CallerRouteMemo();
  assert.equal(memo.answer(n.state, type, shard).target, null, "no route to another node");
  const kept = memo.answer(n.state, type, shard).own;
  assert.equal(kept?.t, n.t);
  assert.equal(memo.answer(n.state, type, shard).own, kept, "the same answer, from the memory");
  routedDirect(n.state, kept!);
  assert.equal(memo.answer(n.state, type, shard).own, kept, "routing through the same coordinator changes nothing");
  // A handoff of the shard with no member to wait for: the drain begins at once, and direct deliveries are refused.
  const key = n.settings.key;
  control(n, new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, []), a, 2_100);
  assert.equal(callerOwnDirectOf(n.state, type, shard), null, "the core: no own delivery while the shard drains");
  assert.equal(memo.answer(n.state, type, shard).own, null);
});

test("memo: a kept null (no grant yet: the step routes the tell) gives way to the direct route once the grant arrives", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const memo = new CallerRouteMemo();
  assert.equal(callerRouteOf(k.b.state, type, shard), null, "the core: no grant, the route step decides");
  assert.equal(memo.answer(k.b.state, type, shard).target, null);
  assert.equal(memo.answer(k.b.state, type, shard).target, null, "the kept null");
  grantedDirect(k, shard, 2_000);
  assert.ok(callerRouteOf(k.b.state, type, shard)?.direct?.owner.equals(c));
  assert.ok(memo.answer(k.b.state, type, shard).target?.direct?.owner.equals(c));
  assert.equal(memo.answer(k.b.state, "NotRegistered", shard).target, null, "an unknown type: asked, nothing kept");
});

test("memo: a batch's record whose entity lives here under the record's shard is accepted without hashing its id; under another shard, the hash decides", () => {
  const { k, shard, id, memo, d } = ownerThatAccepted();
  const elsewhere = k.c.entityIn((s) => s !== shard);
  const lie = { ...(d.envelope as DirectEnvelope), entityId: elsewhere } as DirectEnvelope;
  const batch = receivedBatch(d, { envelope: lie, sender: null });
  const partitioner = k.c.t.settings.partitioner;
  const shardFor = partitioner.shardFor;
  let hashed = 0;
  partitioner.shardFor = (entityType, entityId, shardCount) => {
    hashed++;
    return shardFor.call(partitioner, entityType, entityId, shardCount);
  };
  // With MOVIE_SHARDING_VERIFY_MEMO=1 (the test runner's default) the core's own answer is asked again for every
  // answer the memory gives, and hashes the id once.
  const verifying = process.env.MOVIE_SHARDING_VERIFY_MEMO === "1" ? 1 : 0;
  const hashesOf = (answer: () => unknown, expected: unknown): number => {
    const before = hashed;
    assert.equal(answer(), expected);
    return hashed - before;
  };
  try {
    assert.equal(
      hashesOf(() => memo.acceptsRecord(k.c.state, batch, 0, shard), k.c.t),
      verifying,
      "live: not hashed",
    );
    assert.equal(
      hashesOf(() => memo.acceptsRecord(k.c.state, batch, 0, undefined), k.c.t),
      1 + verifying,
      "hashed",
    );
    // An entity of another shard that lives here (its own shard) does not vouch for a record naming this one.
    const other = k.c.shardOf(elsewhere);
    assert.equal(
      hashesOf(() => memo.acceptsRecord(k.c.state, batch, 1, other), null),
      1 + verifying,
      "hashed",
    );
    assert.equal(coreAnswer(k.c.state, batch, 1), null);
  } finally {
    partitioner.shardFor = shardFor;
  }
  assert.equal(k.c.shardOf(id), shard);
});
