// The app version in a member's record: settings and MOVIE_APP_VERSION, the wire form refusing hostile values, the
// merge keeping its order total, and two nodes over TCP seeing each other's version.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import {
  ClusterConfigurationError,
  compareRecords,
  type Member,
  mergeMembers,
  resolveClusterSettings,
} from "../../src/cluster/index.ts";
import { memberFromJSON, memberToJSON } from "../../src/cluster/member.ts";
import { eventually } from "../fixtures/eventually.ts";
import { allUp, describe, startClusterNode, terminateAll } from "./fixtures/nodes.ts";

const record: Member = {
  uniqueAddress: new UniqueAddress(Address.tcp("movie", "127.0.0.1", 2551), "u1"),
  status: "Up",
  roles: ["backend"],
  upNumber: 1,
  revision: 2,
  changedBy: "u1",
  appVersion: "1.4.2",
};

test("a record's app version survives the wire form, and a record without one has none", () => {
  const back = memberFromJSON(JSON.parse(JSON.stringify(memberToJSON(record))));
  assert.deepEqual(back, record);
  const { appVersion: _, ...unversioned } = record;
  const json = memberToJSON(unversioned);
  assert.equal(Object.hasOwn(json, "appVersion"), false, "no field is written for a node without a version");
  assert.deepEqual(memberFromJSON(json), unversioned);
});

test("a hostile app version is refused with a reason and never throws", () => {
  const evil = {
    toString() {
      throw new Error("toString called");
    },
  };
  const hostile: unknown[] = [
    42,
    null,
    true,
    {},
    [],
    ["1.0"],
    evil,
    "",
    " 1.0",
    "1.0\u0000",
    "1.0\n",
    "-1",
    "x".repeat(65),
    "a".repeat(1_000_000),
    JSON.parse('{"__proto__": "1.0"}'),
  ];
  for (const value of hostile) {
    const result = memberFromJSON({ ...memberToJSON(record), appVersion: value });
    assert.equal(typeof result, "string", `appVersion ${typeof value} should be refused`);
    assert.match(result as string, /member\.appVersion/);
  }
  // An inherited appVersion (a polluted prototype or a __proto__ key) is not read as the record's own.
  const viaProto = JSON.parse(`{"__proto__": {"appVersion": 7}}`) as Record<string, unknown>;
  const json = { ...memberToJSON({ ...record, appVersion: undefined }), ...viaProto };
  const parsed = memberFromJSON(Object.assign(Object.create({ appVersion: 7 }), json));
  assert.equal(typeof parsed, "object");
  assert.equal((parsed as Member).appVersion, undefined);
});

test("two records differing only in app version still compare unequal, so the merge stays commutative", () => {
  const other: Member = { ...record, appVersion: "1.4.3" };
  assert.notEqual(compareRecords(record, other), 0);
  const key = record.uniqueAddress.toString();
  const ab = mergeMembers(new Map([[key, record]]), [other]).members.get(key);
  const ba = mergeMembers(new Map([[key, other]]), [record]).members.get(key);
  assert.deepEqual(ab, ba);
});

test("the app version comes from the setting, else MOVIE_APP_VERSION, and an invalid one names its source", () => {
  const saved = process.env.MOVIE_APP_VERSION;
  try {
    delete process.env.MOVIE_APP_VERSION;
    assert.equal(resolveClusterSettings({}, "movie").appVersion, undefined);
    assert.equal(resolveClusterSettings({ appVersion: "2.0.1" }, "movie").appVersion, "2.0.1");
    process.env.MOVIE_APP_VERSION = "3.1.0+build.7";
    assert.equal(resolveClusterSettings({}, "movie").appVersion, "3.1.0+build.7");
    assert.equal(resolveClusterSettings({ appVersion: "4" }, "movie").appVersion, "4", "the setting wins");
    process.env.MOVIE_APP_VERSION = "not a version";
    assert.throws(
      () => resolveClusterSettings({}, "movie"),
      (e: unknown) => e instanceof ClusterConfigurationError && /MOVIE_APP_VERSION/.test(e.message),
    );
    assert.throws(
      () => resolveClusterSettings({ appVersion: 2 as unknown as string }, "movie"),
      (e: unknown) => e instanceof ClusterConfigurationError && e.setting === "appVersion",
    );
  } finally {
    if (saved === undefined) delete process.env.MOVIE_APP_VERSION;
    else process.env.MOVIE_APP_VERSION = saved;
  }
});

test("over TCP each node sees the other's app version in its membership", async () => {
  const first = await startClusterNode([], { settings: { appVersion: "1.0.0" } });
  const second = await startClusterNode([first], { settings: { appVersion: "1.1.0" } });
  const nodes = [first, second];
  try {
    await eventually(() => nodes.every((n) => allUp(n, 2)), { what: "2 nodes Up", describe: describe(nodes) });
    for (const n of nodes) {
      const versions = n.cluster
        .snapshot()
        .members.map((m) => m.appVersion)
        .sort();
      assert.deepEqual(versions, ["1.0.0", "1.1.0"]);
    }
  } finally {
    await terminateAll(nodes);
  }
});
