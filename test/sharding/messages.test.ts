import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterShardingConfigurationError } from "../../src/sharding/index.ts";
import {
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
} from "../../src/sharding/internal/index.ts";
import { toAssignments } from "../../src/sharding/internal/messages.ts";
import { addr } from "./fixtures/members.ts";

const a = addr("a").toString();
const roundTrip = <T>(value: T, parse: (json: unknown) => T): T => parse(JSON.parse(JSON.stringify(value)));

test("every wire message survives a JSON round trip", () => {
  const env = new ShardingEnvelope("User", "Order", "order-42", 68, "k", 0, null, 3000, false, {
    type: "DeliverOrder",
    payload: { parcel: "p" },
  });
  assert.deepEqual(roundTrip(env, ShardingEnvelope.fromJSON), env);
  const fwd = env.forwarded(addr("a"), true);
  assert.equal(fwd.hopCount, 1);
  assert.equal(fwd.coordinator, a);
  assert.equal(fwd.senderless, true);
  assert.deepEqual(roundTrip(fwd, ShardingEnvelope.fromJSON), fwd);
  assert.deepEqual(roundTrip(new ShardingControlAck(true), ShardingControlAck.fromJSON), new ShardingControlAck(true));
  assert.deepEqual(roundTrip(new PlanRequest("Order", "k", a), PlanRequest.fromJSON), new PlanRequest("Order", "k", a));
  const knowing = new PlanRequest("Order", "k", a, addr("b").toString(), 7);
  assert.deepEqual(roundTrip(knowing, PlanRequest.fromJSON), knowing);
  assert.deepEqual(
    roundTrip(new PlanSnapshotRequest("Order", "k", a), PlanSnapshotRequest.fromJSON),
    new PlanSnapshotRequest("Order", "k", a),
  );
  const assignments = toAssignments(
    new Map([
      [3, addr("b")],
      [1, addr("a")],
    ]),
  );
  assert.deepEqual(
    assignments.map((x) => x.shardId),
    [1, 3],
  );
  const update = new PlanUpdate("Order", "k", a, 4, assignments);
  const back = roundTrip(update, PlanUpdate.fromJSON);
  assert.deepEqual(back, update);
  assert.ok(back.allocations().get(3)!.equals(addr("b")));
  assert.ok(back.author().equals(addr("a")));
  assert.ok(
    roundTrip(new PlanSnapshot("Order", "k", a, 4, assignments), PlanSnapshot.fromJSON) instanceof PlanSnapshot,
  );
  assert.deepEqual(
    roundTrip(new PassivateShard("Order", "k", 2, a, null), PassivateShard.fromJSON),
    new PassivateShard("Order", "k", 2, a, null),
  );
  assert.deepEqual(
    roundTrip(new PrepareShard("Order", "k", 2, a), PrepareShard.fromJSON),
    new PrepareShard("Order", "k", 2, a),
  );
});

test("malformed messages are rejected with a typed error naming the field", () => {
  const good = {
    kind: "User",
    entityType: "Order",
    entityId: "x",
    shardId: 1,
    settingsKey: "k",
    hopCount: 0,
    coordinator: null,
    askTimeoutMs: null,
    senderless: false,
    message: { type: "T", payload: {} },
  };
  const cases: [unknown, string][] = [
    [null, "ShardingEnvelope"],
    [[], "ShardingEnvelope"],
    [{ ...good, kind: "Explode" }, "kind"],
    [{ ...good, entityType: "" }, "entityType"],
    [{ ...good, entityId: 5 }, "entityId"],
    [{ ...good, shardId: -1 }, "shardId"],
    [{ ...good, shardId: 1.5 }, "shardId"],
    [{ ...good, hopCount: "1" }, "hopCount"],
    [{ ...good, coordinator: "not-an-address" }, "coordinator"],
    [{ ...good, askTimeoutMs: -1 }, "askTimeoutMs"],
    [{ ...good, senderless: "no" }, "senderless"],
    [{ ...good, message: null }, "message"],
    [{ ...good, message: { payload: 1 } }, "type"],
  ];
  for (const [json, field] of cases) {
    assert.throws(
      () => ShardingEnvelope.fromJSON(json),
      (e: unknown) => {
        assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
        assert.equal(e.field, field, JSON.stringify(json));
        return true;
      },
    );
  }
  const plan = {
    entityType: "Order",
    settingsKey: "k",
    coordinator: a,
    generation: 1,
    assignments: [{ shardId: 1, owner: a }],
  };
  assert.throws(
    () =>
      PlanUpdate.fromJSON({
        ...plan,
        assignments: [
          { shardId: 1, owner: a },
          { shardId: 1, owner: a },
        ],
      }),
    /duplicate shard 1/,
  );
  assert.throws(() => PlanUpdate.fromJSON({ ...plan, assignments: {} }), /assignments/);
  assert.throws(() => PlanUpdate.fromJSON({ ...plan, generation: -1 }), /generation/);
  assert.throws(() => PlanUpdate.fromJSON({ ...plan, assignments: [{ shardId: 1, owner: "x" }] }), /assignments.owner/);
  assert.throws(() => PlanRequest.fromJSON({ entityType: "Order", settingsKey: "k", requester: "" }), /requester/);
  assert.throws(() => ShardingControlAck.fromJSON({ accepted: 1 }), /accepted/);
  assert.throws(
    () => PassivateShard.fromJSON({ entityType: "Order", settingsKey: "k", shardId: 1, coordinator: a, nextOwner: 3 }),
    /nextOwner/,
  );
});

test("a plan request's known plan: absent means none (an older sender), a malformed one is a typed error", () => {
  const old = PlanRequest.fromJSON({ entityType: "Order", settingsKey: "k", requester: a });
  assert.equal(old.knownAuthor, null);
  assert.equal(old.knownGeneration, 0);
  const malformed = (fields: Record<string, unknown>, field: string) =>
    assert.throws(
      () => PlanRequest.fromJSON({ entityType: "Order", settingsKey: "k", requester: a, ...fields }),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === field,
      JSON.stringify(fields),
    );
  malformed({ knownGeneration: -1 }, "knownGeneration");
  malformed({ knownGeneration: 1.5 }, "knownGeneration");
  malformed({ knownGeneration: "3" }, "knownGeneration");
  malformed({ knownAuthor: 5 }, "knownAuthor");
  malformed({ knownAuthor: "not an address" }, "knownAuthor");
});
