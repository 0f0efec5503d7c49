import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import "../../src/cluster/index.ts";
import { InvalidClusterMessageError } from "../../src/cluster/errors.ts";
import { type MemberJSON, memberFromJSON } from "../../src/cluster/member.ts";
import {
  ClusterDown,
  ClusterGossip,
  ClusterGossipAck,
  ClusterHeartbeat,
  ClusterJoin,
  ClusterWelcome,
  clusterMessageClasses,
  membersOf,
} from "../../src/cluster/messages.ts";
import { EnvelopeDecodeError, MessageRegistry } from "../../src/remote/index.ts";

const from = "movie.tcp://sys@127.0.0.1:2551#abc";
const to = "movie.tcp://sys@127.0.0.1:2552#def";
const record: MemberJSON = {
  address: from,
  status: "Up",
  roles: ["a", "b"],
  upNumber: 1,
  revision: 1,
  changedBy: "abc",
};

test("every wire message round-trips through JSON and fromJSON", () => {
  const messages = [
    new ClusterJoin("c", from, record),
    new ClusterGossip("c", from, to, 3, "a".repeat(64), [record]),
    new ClusterGossipAck("c", from, to, 3, "b".repeat(64)),
    new ClusterHeartbeat("c", from, to, 9),
    new ClusterDown("c", from, to),
  ];
  for (const m of messages) {
    const cls = clusterMessageClasses.find((c) => m instanceof c)!;
    assert.deepEqual(cls.fromJSON(JSON.parse(JSON.stringify(m))), m);
  }
  assert.equal(membersOf(messages[1] as ClusterGossip)[0]!.uniqueAddress.toString(), from);
  assert.equal(new Set(clusterMessageClasses.map((c) => c.wireName)).size, clusterMessageClasses.length);
});

test("malformed wire messages throw InvalidClusterMessageError naming the field", () => {
  const bad: [(typeof clusterMessageClasses)[number], unknown, RegExp][] = [
    [ClusterGossip, null, /not a JSON object/],
    [ClusterGossip, { clusterName: "c", from, to, round: 1, digest: "xyz", members: [] }, /digest/],
    [ClusterGossip, { clusterName: "c", from, to, round: -1, digest: "a".repeat(64), members: [] }, /round/],
    [ClusterGossip, { clusterName: "c", from, to, round: 1, digest: "a".repeat(64), members: {} }, /members/],
    [ClusterHeartbeat, { clusterName: "c", from: "movie://sys#u", to, seq: 1 }, /remote unique address/],
    [ClusterJoin, { clusterName: "c", from, member: { ...record, status: "Zombie" } }, /status/],
    [ClusterJoin, { clusterName: "", from, member: record }, /clusterName/],
  ];
  for (const [cls, json, pattern] of bad) {
    assert.throws(
      () => cls.fromJSON(json),
      (e: Error) => e.name === "InvalidClusterMessageError" && pattern.test(e.message),
      `${cls.wireName} ${JSON.stringify(json)}`,
    );
  }
});

test("member records are validated: roles sorted and unique, revision above 0, author present", () => {
  assert.equal(typeof memberFromJSON(record), "object");
  assert.match(String(memberFromJSON({ ...record, roles: ["b", "a"] })), /sorted/);
  assert.match(String(memberFromJSON({ ...record, revision: 0 })), /revision/);
  assert.match(String(memberFromJSON({ ...record, changedBy: "" })), /changedBy/);
  assert.match(String(memberFromJSON({ ...record, address: "nope" })), /unique address/);
});

test("a member record with a NUL in a role or in its author is refused, and so is the message carrying it", () => {
  // NUL separates the digest's fields and separated the merge's tie-break (docs/protocol.md §4.5): a role "a\0b"
  // tied with the roles "a" and "b". An app version cannot hold one (app-version.test.ts).
  const refused: [MemberJSON, RegExp][] = [
    [{ ...record, roles: ["a\u0000b"] }, /member\.roles .*without NUL/],
    [{ ...record, roles: ["a", "b\u0000"] }, /member\.roles .*without NUL/],
    [{ ...record, roles: ["\u0000"] }, /member\.roles .*without NUL/],
    [{ ...record, changedBy: "abc\u0000" }, /member\.changedBy .*without NUL/],
    [{ ...record, changedBy: "\u0000" }, /member\.changedBy .*without NUL/],
  ];
  for (const [json, pattern] of refused) {
    const what = JSON.stringify(json);
    assert.match(String(memberFromJSON(json)), pattern, what);
    // Through the wire: a join, a welcome and a gossip carrying it are refused whole with the typed error, and the
    // registry refuses the envelope as undecodable, which the receive path counts in stats.rejected.undecodable.
    const messages: [(typeof clusterMessageClasses)[number], unknown][] = [
      [ClusterJoin, new ClusterJoin("c", from, json)],
      [ClusterWelcome, new ClusterWelcome("c", from, to, [record, json])],
      [ClusterGossip, new ClusterGossip("c", from, to, 1, "a".repeat(64), [json])],
    ];
    for (const [cls, message] of messages) {
      const wire = JSON.parse(JSON.stringify(message)) as unknown;
      assert.throws(
        () => cls.fromJSON(wire),
        (e: Error) => e instanceof InvalidClusterMessageError && pattern.test(e.message),
        `${cls.wireName} ${what}`,
      );
      assert.throws(
        () => MessageRegistry.default.decode(cls.wireName, wire),
        (e: Error) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && e.typeName === cls.wireName,
        `${cls.wireName} ${what} through the registry`,
      );
    }
  }
});

test("a member record with hostile values is refused with a text, never by running the value's code", () => {
  const base = { address: "movie.tcp://s@127.0.0.1:1#u", status: "Up", roles: [], upNumber: 1, revision: 1 };
  const hostile = { toString: 1, valueOf: 1 };
  for (const record of [
    { ...base, status: hostile },
    { ...base, status: [[[]]] },
    { ...base, address: "x".repeat(100_000) },
  ]) {
    const result = memberFromJSON(record);
    assert.equal(typeof result, "string");
    assert.ok((result as string).length < 300, result as string);
  }
});

test("a received gossip's records are parsed once, at decode (membership then reads the parsed ones)", () => {
  const records = Array.from({ length: 50 }, (_, i) => ({
    ...record,
    address: `movie.tcp://sys@127.0.0.1:${3000 + i}#u${i}`,
  }));
  const json = JSON.parse(JSON.stringify(new ClusterGossip("c", from, to, 1, "0".repeat(64), records))) as unknown;
  const parse = UniqueAddress.parse;
  let calls = 0;
  UniqueAddress.parse = (text: string) => {
    calls++;
    return parse.call(UniqueAddress, text);
  };
  try {
    const gossip = ClusterGossip.fromJSON(json);
    const members = membersOf(gossip);
    assert.equal(members.length, 50);
    assert.equal(members[7]!.uniqueAddress.toString(), records[7]!.address);
    assert.equal(calls, 2 + 50, "from, to and each record once");
  } finally {
    UniqueAddress.parse = parse;
  }
});
