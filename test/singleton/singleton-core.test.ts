import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { InvalidArgumentError, UniqueAddress } from "../../src/actor/index.ts";
import { ClusterShardingConfigurationError } from "../../src/sharding/errors.ts";
import {
  ClusterSingletonConfigurationError,
  encodeBackingIdentity,
  isActivationCoordinator,
  ordinarySingletonEntityId,
  resolvePersistentSingletonSettings,
  resolveSingletonSettings,
  type SingletonBackingIdentity,
  SingletonCounters,
  SingletonPartitioner,
  singletonSettingsKey,
  singletonTypeName,
} from "../../src/singleton/index.ts";

const a = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2551#1");
const b = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2552#2");
const c = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2553#3");

function isConfigError(field: string) {
  return (e: unknown) =>
    e instanceof ClusterSingletonConfigurationError && e.field === field && e.singletonName === "s";
}

describe("singleton settings", () => {
  test("defaults: no roles, activation every 250 ms with a 2 s timeout", () => {
    assert.deepEqual(resolveSingletonSettings("s"), {
      roles: [],
      activationIntervalMs: 250,
      activationTimeoutMs: 2_000,
    });
  });

  test("roles are de-duplicated and sorted, so the settings key does not depend on their order", () => {
    const one = resolveSingletonSettings("s", { roles: ["worker", "backend", "worker"] });
    const two = resolveSingletonSettings("s", { roles: ["backend", "worker"] });
    assert.deepEqual(one.roles, ["backend", "worker"]);
    assert.equal(singletonSettingsKey(one), singletonSettingsKey(two));
    assert.notEqual(
      singletonSettingsKey(resolveSingletonSettings("s", { roles: ["a,b"] })),
      singletonSettingsKey(resolveSingletonSettings("s", { roles: ["a", "b"] })),
    );
    assert.notEqual(
      singletonSettingsKey(one),
      singletonSettingsKey(resolveSingletonSettings("s", { roles: ["backend", "worker"], activationInterval: 100 })),
    );
  });

  test("empty roles and non-positive durations are rejected with the field named", () => {
    assert.throws(() => resolveSingletonSettings("s", { roles: [""] }), isConfigError("roles"));
    assert.throws(() => resolveSingletonSettings("s", { roles: ["  "] }), isConfigError("roles"));
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.throws(
        () => resolveSingletonSettings("s", { activationInterval: bad }),
        isConfigError("activationInterval"),
      );
      assert.throws(
        () => resolveSingletonSettings("s", { activationTimeout: bad }),
        isConfigError("activationTimeout"),
      );
    }
    assert.throws(() => resolveSingletonSettings("s", { activationTimeout: 0 }), {
      name: "ClusterSingletonConfigurationError",
      message: /Cluster singleton s: activationTimeout must be a positive number of milliseconds/,
    });
  });

  test("persistent settings need an entity id and a renewal interval below the lease duration", () => {
    assert.deepEqual(resolvePersistentSingletonSettings("s", { entityId: "ledger" }), {
      roles: [],
      activationIntervalMs: 250,
      activationTimeoutMs: 2_000,
      entityId: "ledger",
      leaseDurationMs: 10_000,
      leaseRenewIntervalMs: 3_000,
    });
    assert.throws(() => resolvePersistentSingletonSettings("s", { entityId: "" }), isConfigError("entityId"));
    assert.throws(
      () => resolvePersistentSingletonSettings("s", { entityId: "x", leaseDuration: 0 }),
      isConfigError("leaseDuration"),
    );
    assert.throws(
      () => resolvePersistentSingletonSettings("s", { entityId: "x", leaseDuration: 1_000, leaseRenewInterval: 1_000 }),
      isConfigError("leaseRenewInterval"),
    );
  });
});

test("the sharding type name is movie.singleton.<name>; an empty name is an invalid argument", () => {
  assert.equal(singletonTypeName("scheduler"), "movie.singleton.scheduler");
  assert.throws(() => singletonTypeName(""), InvalidArgumentError);
});

describe("singleton partitioner", () => {
  const identity: SingletonBackingIdentity = {
    kind: "Behavior",
    persistenceEntityType: "",
    messageType: "SchedulerCommand",
    entityId: ordinarySingletonEntityId,
    settingsKey: singletonSettingsKey(resolveSingletonSettings("scheduler")),
    lease: null,
  };

  test("routes its one entity id to shard 0 and refuses any other", () => {
    const partitioner = new SingletonPartitioner(identity);
    assert.equal(partitioner.shardFor("movie.singleton.scheduler", "singleton", 1), 0);
    assert.throws(
      () => partitioner.shardFor("movie.singleton.scheduler", "other", 1),
      (e: unknown) =>
        e instanceof ClusterShardingConfigurationError && /routes only entity id "singleton"/.test(e.message),
    );
  });

  test("the configuration key differs whenever any part of the backing identity differs", () => {
    const variants: SingletonBackingIdentity[] = [
      identity,
      { ...identity, kind: "EventSourced" },
      { ...identity, kind: "DurableState" },
      { ...identity, persistenceEntityType: "Ledger" },
      { ...identity, messageType: "OtherCommand" },
      { ...identity, entityId: "ledger-1" },
      { ...identity, settingsKey: singletonSettingsKey(resolveSingletonSettings("scheduler", { roles: ["a"] })) },
      { ...identity, lease: { leaseDurationMs: 10_000, leaseRenewIntervalMs: 3_000 } },
      { ...identity, lease: { leaseDurationMs: 10_000, leaseRenewIntervalMs: 2_000 } },
    ];
    const keys = new Set(variants.map((v) => new SingletonPartitioner(v).configurationKey));
    assert.equal(keys.size, variants.length);
    assert.equal(
      new SingletonPartitioner({ ...identity }).configurationKey,
      new SingletonPartitioner(identity).configurationKey,
    );
  });

  test("length prefixes keep shifted field boundaries apart", () => {
    const one = encodeBackingIdentity({ ...identity, messageType: "ab", entityId: "c" });
    const two = encodeBackingIdentity({ ...identity, messageType: "a", entityId: "bc" });
    assert.notEqual(one, two);
    assert.ok(one.startsWith("8:Behavior0:2:ab1:c"), one);
  });
});

describe("activation coordinator", () => {
  const members = (statuses: [UniqueAddress, string][]) =>
    statuses.map(([uniqueAddress, status]) => ({ uniqueAddress, status }));
  const upAll = members([
    [a, "Up"],
    [b, "Up"],
    [c, "Up"],
  ]);

  test("only the lowest Up node of a converged, fully reachable cluster activates", () => {
    const answers = [a, b, c].map((self) =>
      isActivationCoordinator({ self, members: upAll, unreachable: [], converged: true }),
    );
    assert.deepEqual(answers, [true, false, false]);
  });

  test("nobody activates while membership is not converged or someone is unreachable", () => {
    assert.equal(isActivationCoordinator({ self: a, members: upAll, unreachable: [], converged: false }), false);
    assert.equal(isActivationCoordinator({ self: a, members: upAll, unreachable: [c], converged: true }), false);
  });

  test("members that are not Up do not count, and a joining self is not the coordinator", () => {
    const snapshot = {
      members: members([
        [a, "Leaving"],
        [b, "Up"],
        [c, "Joining"],
      ]),
      unreachable: [],
      converged: true,
    };
    assert.equal(isActivationCoordinator({ ...snapshot, self: a }), false);
    assert.equal(isActivationCoordinator({ ...snapshot, self: b }), true);
    assert.equal(isActivationCoordinator({ ...snapshot, self: c }), false);
  });
});

test("singleton counters: first creation, re-creations and owner changes", () => {
  const counters = new SingletonCounters();
  counters.increment("registrations");
  counters.increment("activationAttempts", 3);
  counters.recordActivation("s", false);
  counters.recordActivation("s", true);
  counters.recordActivation("s", true);
  counters.recordActivation("t", true);
  counters.recordOwner("s", a.toString());
  counters.recordOwner("s", null);
  counters.recordOwner("s", a.toString());
  counters.recordOwner("s", b.toString());
  const stats = counters.snapshot({
    handoffsInProgress: 1,
    handoffsCompleted: 2,
    rejectedEnvelopes: 3,
    leaseAcquisitions: 4,
    leaseRenewals: 5,
    leaseLosses: 6,
    leaseRetries: 7,
  });
  assert.deepEqual(stats, {
    registrations: 1,
    activationAttempts: 3,
    activations: 2,
    reactivations: 1,
    activationFailures: 0,
    tells: 0,
    asks: 0,
    stopRequests: 0,
    routingRejections: 0,
    ownerChanges: 1,
    sharedShardingHandoffsInProgress: 1,
    sharedShardingHandoffsCompleted: 2,
    sharedShardingRejectedEnvelopes: 3,
    sharedShardingLeaseAcquisitions: 4,
    sharedShardingLeaseRenewals: 5,
    sharedShardingLeaseLosses: 6,
    sharedShardingLeaseRetries: 7,
  });
});
