import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../../src/actor/index.ts";
import { bindEntity, type OwnershipSnapshot, safeToOwn } from "../../../src/sharding/lease/index.ts";

const a = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2551#1");
const b = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2552#2");

function snapshot(patch: Partial<OwnershipSnapshot> = {}): OwnershipSnapshot {
  return {
    self: a,
    members: [
      { uniqueAddress: a, status: "Up" },
      { uniqueAddress: b, status: "Up" },
    ],
    unreachable: [],
    converged: true,
    ...patch,
  };
}

test("safe to own when self is Up (or Leaving/Exiting while handing off) and nobody is unreachable", () => {
  assert.equal(safeToOwn(snapshot()), true);
  assert.equal(safeToOwn(snapshot({ converged: false })), true, "a convergence flicker with everyone reachable");
  assert.equal(safeToOwn(snapshot({ unreachable: [b] })), false);
  assert.equal(safeToOwn(snapshot({ unreachable: [a] })), false);
  assert.equal(safeToOwn(snapshot({ unreachable: [b], converged: false })), false);
  for (const status of ["Leaving", "Exiting"]) {
    const members = [
      { uniqueAddress: a, status },
      { uniqueAddress: b, status: "Up" },
    ];
    assert.equal(safeToOwn(snapshot({ members })), true, `${status}: the handoff releases the leases`);
    assert.equal(safeToOwn(snapshot({ members, unreachable: [b] })), false, `${status} with b unreachable`);
  }
  for (const status of ["Joining", "WeaklyUp", "Down", "Removed"]) {
    const members = [
      { uniqueAddress: a, status },
      { uniqueAddress: b, status: "Up" },
    ];
    assert.equal(safeToOwn(snapshot({ members })), false, status);
  }
  assert.equal(safeToOwn(snapshot({ members: [{ uniqueAddress: b, status: "Up" }] })), false, "self not a member");
  const restarted = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2551#9");
  assert.equal(safeToOwn(snapshot({ self: restarted })), false, "same host:port, new uid is another node");
});

test("an entity actor is reused only under the epoch it was activated under", () => {
  assert.deepEqual(bindEntity(null, 3), { kind: "create", epoch: 3 });
  assert.deepEqual(bindEntity(3, 3), { kind: "reuse", epoch: 3 });
  assert.deepEqual(bindEntity(2, 3), { kind: "replace", staleEpoch: 2, epoch: 3 });
  assert.deepEqual(bindEntity(4, 3), { kind: "replace", staleEpoch: 4, epoch: 3 });
});
