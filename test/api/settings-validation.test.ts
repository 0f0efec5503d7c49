// Unknown or misplaced settings are refused with UnknownSettingError naming the key and the setting probably meant,
// on every settings object a newcomer writes; Database.use refuses what is not a store. Before this, each of these
// was silently ignored (enableCluster kept its 1 s / 5 s heartbeat defaults; configure opened the default SQLite file).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { checkSettingKeys } from "../../src/actor/settings-keys.ts";
import { ActorSystem, UnknownSettingError } from "../../src/index.ts";
import "../../src/cluster/index.ts";
import {
  Database,
  EventSourcedBehavior,
  EventSourcing,
  MemoryStore,
  PersistenceConfigurationError,
} from "../../src/persistence/index.ts";
import { ClusterSharding, ShardingSettings } from "../../src/sharding/index.ts";
import { initEventSourced } from "../../src/sharding/persistent/index.ts";
import { ClusterSingleton } from "../../src/singleton/index.ts";
import { initEventSourcedSingleton } from "../../src/singleton/persistent/index.ts";

function refused(key: string, suggestion: string | null, owner?: string) {
  return (error: unknown) => {
    assert.ok(error instanceof UnknownSettingError, `expected UnknownSettingError, got ${String(error)}`);
    assert.equal(error.key, key);
    assert.equal(error.suggestion, suggestion);
    if (owner !== undefined) assert.equal(error.settings, owner);
    assert.ok(error.message.includes(JSON.stringify(key)), error.message);
    if (suggestion !== null) assert.ok(error.message.includes(`did you mean "${suggestion}"`), error.message);
    return true;
  };
}

test("the key check names the unknown key and the misplaced, contained or misspelt setting meant", () => {
  const shape = {
    dbPath: true,
    detector: { heartbeatInterval: true, heartbeatTimeout: true },
    poolSize: true,
  } as const;
  assert.doesNotThrow(() => checkSettingKeys("x", { dbPath: "a", detector: { heartbeatTimeout: 1 } }, shape));
  assert.throws(
    () => checkSettingKeys("x", { heartbeatInterval: 1 }, shape),
    refused("heartbeatInterval", "detector.heartbeatInterval"),
  );
  assert.throws(() => checkSettingKeys("x", { path: "a" }, shape), refused("path", "dbPath"));
  assert.throws(() => checkSettingKeys("x", { poolSzie: 2 }, shape), refused("poolSzie", "poolSize"));
  assert.throws(
    () => checkSettingKeys("x", { detector: { heartbeatTimout: 2 } }, shape),
    refused("detector.heartbeatTimout", "detector.heartbeatTimeout"),
  );
  assert.throws(() => checkSettingKeys("x", { colour: "red" }, shape), refused("colour", null));
  // Hostile keys: a JSON "__proto__" own key, a huge key; the message stays short and the check total.
  assert.throws(
    () => checkSettingKeys("x", JSON.parse('{"__proto__": {"polluted": true}}'), shape),
    refused("__proto__", null),
  );
  const huge = "k".repeat(100_000);
  assert.throws(
    () => checkSettingKeys("x", { [huge]: 1 }, shape),
    (e: unknown) => e instanceof UnknownSettingError && e.message.length < 400,
  );
});

const systems: ActorSystem[] = [];
after(() => Promise.all(systems.map((s) => s.terminate())));

test("enableRemoting, enableCluster and Database.configure refuse unknown keys before they start anything", async () => {
  const system = ActorSystem.create("settings");
  systems.push(system);
  await assert.rejects(
    system.enableRemoting({ host: "127.0.0.1", port: 0, heartbeatIntreval: 100 } as never),
    refused("heartbeatIntreval", "heartbeatInterval", "enableRemoting"),
  );
  await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  await assert.rejects(
    system.enableCluster({ heartbeatInterval: 100 } as never),
    refused("heartbeatInterval", "failureDetector.heartbeatInterval", "enableCluster"),
  );
  await assert.rejects(
    Database.get(system).configure({ backend: "sqlite", path: "/tmp/x.sqlite3" } as never),
    refused("path", "dbPath", "Database.configure"),
  );
  await assert.rejects(
    Database.get(system).configure({ backend: "memory", groupCommit: { maxBatch: 8 } } as never),
    refused("groupCommit.maxBatch", "groupCommit.maxBatchSize"),
  );
  assert.equal(Database.get(system).backendName, "memory", "nothing was opened");
});

test("Database.use checks the store contract", async () => {
  const system = ActorSystem.create("store-contract");
  systems.push(system);
  const database = Database.get(system);
  await assert.rejects(database.use({} as never), (e: unknown) => {
    assert.ok(e instanceof PersistenceConfigurationError);
    assert.match(e.message, /lacks appendEvents\(\), loadEvents\(\).*close\(\) of the PersistenceStore contract/);
    return true;
  });
  await assert.rejects(database.use(null as never), PersistenceConfigurationError);
  const store = new MemoryStore();
  const renamed = Object.assign(Object.create(store) as MemoryStore, { backendName: "mongo" });
  await assert.rejects(database.use(renamed), /backendName is "mongo"/);
  await database.use(store);
  assert.equal(database.store, store);
});

test("sharding, persistent sharding and singleton settings refuse unknown keys", async () => {
  assert.throws(() => ShardingSettings.create({ shardcount: 8 } as never), refused("shardcount", "shardCount"));
  const system = ActorSystem.create("sharding-settings");
  systems.push(system);
  await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  await system.enableCluster({});
  class Command {}
  class Counter extends EventSourcedBehavior<Command, unknown, number> {
    emptyState() {
      return 0;
    }
    handleCommand() {
      return undefined as never;
    }
    applyEvent(state: number) {
      return state;
    }
  }
  const sharding = ClusterSharding.get(system);
  assert.throws(
    () => sharding.init("Counter", Command, { idleTimout: 10 } as never, () => ({ receive() {} }) as never),
    refused("idleTimout", "idleTimeout", "ClusterSharding.init"),
  );
  const counters = EventSourcing.get(system).registerEntity(Counter, Command, () => new Counter(), { name: "Counter" });
  assert.throws(
    () => initEventSourced(sharding, counters, { routingname: "c" } as never),
    refused("routingname", "routingName", "initEventSourced"),
  );
  const singletons = ClusterSingleton.get(system);
  assert.throws(
    () => singletons.init("clock", Command, { activationIntervall: 10 } as never, () => ({ receive() {} }) as never),
    refused("activationIntervall", "activationInterval", 'singleton "clock"'),
  );
  assert.throws(
    () => initEventSourcedSingleton(singletons, "counter", counters, { entityId: "one", leaseDurationMs: 5 } as never),
    refused("leaseDurationMs", "leaseDuration"),
  );
});
