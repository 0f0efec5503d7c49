// appVersion: validated in settings (or MOVIE_APP_VERSION), carried in the member record by gossip, and refused as
// hostile input in a peer's record.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ActorSystem, silentLogger, UniqueAddress } from "../../src/actor/index.ts";
import "../../src/cluster/index.ts";
import { ClusterConfigurationError } from "../../src/cluster/errors.ts";
import { memberFromJSON, memberToJSON } from "../../src/cluster/member.ts";
import { resolveClusterSettings } from "../../src/cluster/settings.ts";
import { eventually } from "../fixtures/eventually.ts";

const record = {
  address: "movie.tcp://s@127.0.0.1:2552#abc",
  status: "Up",
  roles: [],
  upNumber: 1,
  revision: 1,
  changedBy: "abc",
};

test("appVersion setting: validated, from settings or MOVIE_APP_VERSION, default none", () => {
  const saved = process.env.MOVIE_APP_VERSION;
  try {
    delete process.env.MOVIE_APP_VERSION;
    assert.equal(resolveClusterSettings({}, "s").appVersion, "");
    assert.equal(resolveClusterSettings({ appVersion: "2.4.1+build-7" }, "s").appVersion, "2.4.1+build-7");
    process.env.MOVIE_APP_VERSION = "3.0.0";
    assert.equal(resolveClusterSettings({}, "s").appVersion, "3.0.0");
    assert.equal(resolveClusterSettings({ appVersion: "1" }, "s").appVersion, "1", "the setting wins");
    process.env.MOVIE_APP_VERSION = "bad version";
    assert.throws(() => resolveClusterSettings({}, "s"), ClusterConfigurationError);
  } finally {
    if (saved === undefined) delete process.env.MOVIE_APP_VERSION;
    else process.env.MOVIE_APP_VERSION = saved;
  }
  for (const bad of [1, {}, [], "a b", "x".repeat(65), "é", "1\n", { toString: () => "1" }, null]) {
    if (bad === null) continue;
    assert.throws(
      () => resolveClusterSettings({ appVersion: bad } as never, "s"),
      (e: unknown) => e instanceof ClusterConfigurationError && /appVersion/.test(e.message) && e.message.length < 400,
    );
  }
});

test("a peer's record: appVersion round-trips, is optional, and hostile values are refused with a reason", () => {
  const parsed = memberFromJSON({ ...record, appVersion: "2.0.0" });
  assert.ok(typeof parsed !== "string");
  assert.equal(parsed.appVersion, "2.0.0");
  assert.deepEqual(memberToJSON(parsed), { ...record, appVersion: "2.0.0" });
  const without = memberFromJSON(record);
  assert.ok(typeof without !== "string");
  assert.equal(without.appVersion, undefined);
  assert.deepEqual(memberToJSON(without), record, "no field on the wire when unset (older nodes parse it)");
  const hostile: unknown[] = [
    "",
    1,
    null,
    {},
    [],
    ["1"],
    "x".repeat(1_000_000),
    "1 2",
    "__proto__",
    { toString: () => "1" },
    JSON.parse('{"__proto__": "1"}'),
    "\u0000",
    "\ud800",
    true,
  ];
  for (const appVersion of hostile) {
    const r = memberFromJSON({ ...record, appVersion });
    if (appVersion === "__proto__") {
      // A plain string of allowed characters: a version like any other, never used as a key.
      assert.ok(typeof r !== "string");
      continue;
    }
    assert.equal(typeof r, "string", `appVersion ${typeof appVersion} refused`);
    assert.ok((r as string).startsWith("member.appVersion") && (r as string).length < 300, String(r));
  }
});

const systems: ActorSystem[] = [];
after(() => Promise.all(systems.map((s) => s.terminate())));

test("gossip carries each member's appVersion to every node", async () => {
  const start = async (seed: number | null, appVersion: string) => {
    const system = ActorSystem.create("v", { logger: silentLogger });
    systems.push(system);
    const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
    const port = remoting.selfAddress.address.port!;
    const cluster = await system.enableCluster({
      seedNodes: [`127.0.0.1:${seed ?? port}`],
      gossipInterval: 30,
      joinRetryInterval: 30,
      appVersion,
    });
    return { port, cluster, self: remoting.selfAddress };
  };
  const a = await start(null, "1.0.0");
  const b = await start(a.port, "2.0.0");
  const versions = (c: typeof a) =>
    Object.fromEntries(
      c.cluster
        .snapshot()
        .members.filter((m) => m.status === "Up")
        .map((m) => [m.uniqueAddress.toString(), m.appVersion]),
    );
  const expected = { [a.self.toString()]: "1.0.0", [b.self.toString()]: "2.0.0" };
  await eventually(() => [a, b].every((n) => JSON.stringify(versions(n)) === JSON.stringify(sortKeys(expected))), {
    what: "both nodes see both versions",
    describe: () => [versions(a), versions(b)],
  });
  assert.ok(UniqueAddress.compare(a.self, b.self) !== 0);
});

function sortKeys(o: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(o).sort(([x], [y]) => (x < y ? -1 : 1)));
}
