import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterShardingConfigurationError } from "../../src/sharding/index.ts";
import {
  CancelPreparations,
  CoordinatorFlush,
  CoordinatorFlushed,
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
} from "../../src/sharding/internal/index.ts";
import {
  DirectGrant,
  DirectMarker,
  DirectProbe,
  DirectRefused,
  HandoffAnnounce,
  toAssignments,
} from "../../src/sharding/internal/messages.ts";
import { addr } from "./fixtures/members.ts";

const a = addr("a").toString();
const roundTrip = <T>(value: T, parse: (json: unknown) => T): T => parse(JSON.parse(JSON.stringify(value)));

let deep: unknown = "x";
for (let i = 0; i < 10_000; i++) deep = { deep };
/** Wrong values for any field of a wire message: wrong types, a hostile toString, __proto__, deep nesting, a huge string. */
const hostile: readonly [string, unknown][] = [
  ["missing", undefined],
  ["null", null],
  ["a number", 1],
  ["a boolean", true],
  ["an array", ["Order"]],
  ["an object whose toString is not a function", { toString: 5, valueOf: 5 }],
  ["an own __proto__ key", JSON.parse('{"__proto__": {"polluted": true}}')],
  ["10,000-deep nesting", deep],
  ["a 1 MB string", "x".repeat(1 << 20)],
  ["a negative number", -1],
  ["a fraction", 1.5],
  ["a number past 2^53", 2 ** 60],
];

/** An entity type or settings key may be any non-empty string (an unknown one is refused where it is looked up). */
const anyString = (field: string, value: unknown): boolean =>
  (field === "entityType" || field === "settingsKey") && typeof value === "string";

/**
 * Each of `fields` of `good`, set in turn to every hostile value that is not `valid` there, makes `parse` throw a
 * ClusterShardingConfigurationError naming that field; a whole message that is not an object is refused too.
 */
function refusesHostileFields(
  parse: (json: unknown) => unknown,
  good: Record<string, unknown>,
  fields: readonly string[],
  valid: (field: string, value: unknown) => boolean,
): void {
  for (const field of fields) {
    for (const [name, value] of hostile) {
      if (valid(field, value)) continue;
      assert.throws(
        () => parse({ ...good, [field]: value }),
        (e: unknown) => {
          assert.ok(e instanceof ClusterShardingConfigurationError, `${field} = ${name}: ${String(e)}`);
          assert.equal(e.field, field, `${field} = ${name}`);
          return true;
        },
        `${field} = ${name}`,
      );
    }
  }
  for (const whole of [null, [], "message", 3]) assert.throws(() => parse(whole), ClusterShardingConfigurationError);
}

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

test("the flush messages of a coordinator change survive a round trip and refuse a hostile value at every field", () => {
  const b = addr("b").toString();
  const flush = new CoordinatorFlush("Order", "k", a, b, 7);
  assert.deepEqual(roundTrip(flush, CoordinatorFlush.fromJSON), flush);
  const flushed = new CoordinatorFlushed("Order", "k", b, 7);
  assert.deepEqual(roundTrip(flushed, CoordinatorFlushed.fromJSON), flushed);

  const cases: [(json: unknown) => unknown, Record<string, unknown>, string[]][] = [
    [CoordinatorFlush.fromJSON, { ...flush }, ["entityType", "settingsKey", "caller", "target", "token"]],
    [CoordinatorFlushed.fromJSON, { ...flushed }, ["entityType", "settingsKey", "coordinator", "token"]],
  ];
  for (const [parse, good, fields] of cases) {
    // The address fields refuse a string that is not an address; 1 is a valid token.
    refusesHostileFields(
      parse,
      good,
      fields,
      (field, value) => anyString(field, value) || (field === "token" && value === 1),
    );
  }
  assert.equal(({} as { polluted?: boolean }).polluted, undefined, "nothing polluted");
});

test("the cancel of stale preparations and a plan request's prepared shards: round trip, and a hostile value at every field refused", () => {
  const cancel = new CancelPreparations("Order", "k", a, [0, 3, 17]);
  assert.deepEqual(roundTrip(cancel, CancelPreparations.fromJSON), cancel);
  const request = new PlanRequest("Order", "k", a, a, 4, [2, 5]);
  assert.deepEqual(roundTrip(request, PlanRequest.fromJSON), request);
  assert.deepEqual(
    PlanRequest.fromJSON({ entityType: "Order", settingsKey: "k", requester: a }).prepared,
    [],
    "absent: none",
  );
  assert.deepEqual(CancelPreparations.fromJSON({ ...cancel, shardIds: [9, 1, 4] }).shardIds, [1, 4, 9], "sorted");

  let deep: unknown = [0];
  for (let i = 0; i < 10_000; i++) deep = [deep];
  const hostile: [string, unknown][] = [
    ["null", null],
    ["a number", 1],
    ["a string", "0,1"],
    ["an object", { 0: 1, length: 1 }],
    ["an object whose toString is not a function", { toString: 5, valueOf: 5 }],
    ["an own __proto__ key", JSON.parse('{"__proto__": {"polluted": true}}')],
    ["a negative id", [-1]],
    ["a fractional id", [1.5]],
    ["an id past 2^53", [2 ** 60]],
    ["a string id", ["1"]],
    ["a null id", [null]],
    ["a nested array", deep],
    ["a duplicate id", [3, 3]],
    [
      "an id whose toString throws",
      [
        {
          toString: () => {
            throw new Error("boom");
          },
        },
      ],
    ],
  ];
  const cases: [(json: unknown) => unknown, Record<string, unknown>, string][] = [
    [CancelPreparations.fromJSON, { ...cancel }, "shardIds"],
    [PlanRequest.fromJSON, { ...request }, "prepared"],
  ];
  for (const [parse, good, field] of cases) {
    for (const [name, value] of hostile) {
      assert.throws(
        () => parse({ ...good, [field]: value }),
        (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === field,
        `${field} = ${name}`,
      );
    }
  }
  assert.throws(
    () => CancelPreparations.fromJSON({ ...cancel, shardIds: undefined }),
    ClusterShardingConfigurationError,
  );
  refusesHostileFields(
    CancelPreparations.fromJSON,
    { ...cancel },
    ["entityType", "settingsKey", "coordinator"],
    anyString,
  );
  assert.throws(
    () => CancelPreparations.fromJSON({ ...cancel, coordinator: "not an address" }),
    ClusterShardingConfigurationError,
  );
  assert.equal(({} as { polluted?: boolean }).polluted, undefined, "nothing polluted");
});

test("the direct route's messages survive a round trip and refuse a hostile value at every field", () => {
  const b = addr("b").toString();
  const probe = new DirectProbe("Order", "k", 3, a, 7);
  const forwardedProbe = probe.forwardedBy(addr("b"));
  const grant = new DirectGrant("Order", "k", 3, b, a, 12, 7);
  const refused = new DirectRefused("Order", "k", 3, b);
  const announce = new HandoffAnnounce("Order", "k", 3, a, b, 9);
  const marker = new DirectMarker("Order", "k", 3, a, b, 9);
  const passivate = new PassivateShard("Order", "k", 3, a, b, 9, [a, b]);
  for (const [value, parse] of [
    [probe, DirectProbe.fromJSON],
    [forwardedProbe, DirectProbe.fromJSON],
    [grant, DirectGrant.fromJSON],
    [refused, DirectRefused.fromJSON],
    [announce, HandoffAnnounce.fromJSON],
    [marker, DirectMarker.fromJSON],
    [passivate, PassivateShard.fromJSON],
  ] as [object, (json: unknown) => unknown][]) {
    assert.deepEqual(roundTrip(value, parse), value);
  }
  // An older sender's PassivateShard has neither field: coordinator routing's drain.
  const older = PassivateShard.fromJSON({
    entityType: "Order",
    settingsKey: "k",
    shardId: 3,
    coordinator: a,
    nextOwner: null,
  });
  assert.equal(older.handoffToken, null);
  assert.deepEqual(older.waitFor, []);

  const integers = new Set(["shardId", "token", "generation", "handoffToken"]);
  const cases: [(json: unknown) => unknown, Record<string, unknown>, string[]][] = [
    [DirectProbe.fromJSON, { ...probe }, ["entityType", "settingsKey", "shardId", "caller", "token", "coordinator"]],
    [
      DirectGrant.fromJSON,
      { ...grant },
      ["entityType", "settingsKey", "shardId", "owner", "coordinator", "generation", "token"],
    ],
    [DirectRefused.fromJSON, { ...refused }, ["entityType", "settingsKey", "shardId", "owner"]],
    [
      HandoffAnnounce.fromJSON,
      { ...announce },
      ["entityType", "settingsKey", "shardId", "coordinator", "previousOwner", "token"],
    ],
    [DirectMarker.fromJSON, { ...marker }, ["entityType", "settingsKey", "shardId", "caller", "coordinator", "token"]],
    [PassivateShard.fromJSON, { ...passivate }, ["handoffToken", "waitFor"]],
  ];
  for (const [parse, good, fields] of cases) {
    refusesHostileFields(parse, good, fields, (field, value) => {
      if (anyString(field, value) || (integers.has(field) && value === 1)) return true; // 1: a valid number
      // Optional fields: absent or null means none.
      const optional =
        field === "handoffToken" || field === "waitFor" || (field === "coordinator" && parse === DirectProbe.fromJSON);
      return optional && (value === undefined || value === null);
    });
  }
  // A generation past the plan bound, and a waitFor past its bound or holding a non-address, are refused too.
  assert.throws(() => DirectGrant.fromJSON({ ...grant, generation: 2 ** 40 + 1 }), /generation/);
  assert.throws(() => PassivateShard.fromJSON({ ...passivate, waitFor: ["nope"] }), /waitFor/);
  assert.throws(() => PassivateShard.fromJSON({ ...passivate, waitFor: new Array(10_001).fill(a) }), /waitFor/);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});
