import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualScheduler } from "../../../src/actor/index.ts";
import { ShardHandoffInProgressError, ShardLeaseUnavailableError } from "../../../src/sharding/errors.ts";
import {
  type LeaseCounter,
  LeaseKeeper,
  type LeaseStore,
  type ShardLeaseKey,
  type ShardLeaseToken,
  type StopReason,
} from "../../../src/sharding/lease/index.ts";

/** The lease table of REFERENCE §4.5 on the manual clock, with a switch to make calls fail. */
class FakeLeaseStore implements LeaseStore {
  readonly rows = new Map<number, { owner: string; epoch: number; untilMs: number }>();
  readonly calls: string[] = [];
  failing = false;
  constructor(private readonly scheduler: ManualScheduler) {}

  async acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null> {
    this.calls.push(`acquire ${key.shardId} ${owner}`);
    if (this.failing) throw new Error("connection refused");
    const now = this.scheduler.now();
    const row = this.rows.get(key.shardId);
    let epoch: number;
    if (row === undefined) epoch = 1;
    else if (row.owner === owner && row.untilMs > now) epoch = row.epoch;
    else if (row.untilMs <= now) epoch = row.epoch + 1;
    else return null;
    this.rows.set(key.shardId, { owner, epoch, untilMs: now + durationMs });
    return { key, owner, epoch, leaseUntilEpochMs: now + durationMs };
  }

  async renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null> {
    this.calls.push(`renew ${token.key.shardId}`);
    if (this.failing) throw new Error("connection refused");
    const now = this.scheduler.now();
    const row = this.rows.get(token.key.shardId);
    if (row === undefined || row.owner !== token.owner || row.epoch !== token.epoch || row.untilMs <= now) return null;
    row.untilMs = now + durationMs;
    return { ...token, leaseUntilEpochMs: row.untilMs };
  }

  async releaseShardLease(token: ShardLeaseToken): Promise<boolean> {
    this.calls.push(`release ${token.key.shardId}`);
    const row = this.rows.get(token.key.shardId);
    if (row === undefined || row.owner !== token.owner || row.epoch !== token.epoch) return false;
    row.untilMs = 0;
    return true;
  }
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

function setup(owner = "node-a") {
  const scheduler = new ManualScheduler();
  const store = new FakeLeaseStore(scheduler);
  const counts: Record<LeaseCounter, number> = { leaseAcquisitions: 0, leaseRenewals: 0, leaseLosses: 0 };
  const stopped: [number, StopReason][] = [];
  let safe = true;
  const keeper = new LeaseKeeper(
    { clusterName: "shop", entityType: "Order", owner, leaseDurationMs: 10_000, leaseRenewIntervalMs: 3_000 },
    store,
    scheduler,
    {
      stopEntities: (shardId, reason) => {
        stopped.push([shardId, reason]);
      },
      count: (counter, by) => {
        counts[counter] += by;
      },
      safeToOwn: () => safe,
    },
  );
  return {
    scheduler,
    store,
    counts,
    stopped,
    keeper,
    setSafe: (value: boolean) => {
      safe = value;
    },
  };
}

/** A keeper that holds shard 3 at epoch 1. */
async function holding() {
  const s = setup();
  s.keeper.own(3);
  assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
  await flush();
  assert.equal(s.keeper.requireToken(3).epoch, 1);
  return s;
}

describe("lease keeper", () => {
  test("the first delivery starts one acquire and is refused; a retry finds the lease", async () => {
    const s = setup();
    s.keeper.own(3);
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
    assert.deepEqual(s.store.calls, ["acquire 3 node-a"], "one acquire however many deliveries wait");
    await flush();
    const token = s.keeper.requireToken(3);
    assert.deepEqual(token.key, { clusterName: "shop", entityType: "Order", shardId: 3 });
    assert.equal(token.owner, "node-a");
    assert.equal(s.counts.leaseAcquisitions, 1);
  });

  test("renews every renewal interval on the scheduler; each renewal extends the lease", async () => {
    const s = await holding();
    s.scheduler.advance(3_000);
    await flush();
    s.scheduler.advance(3_000);
    await flush();
    assert.deepEqual(s.store.calls, ["acquire 3 node-a", "renew 3", "renew 3"]);
    assert.equal(s.counts.leaseRenewals, 2);
    assert.equal(s.store.rows.get(3)!.untilMs, 16_000);
    assert.equal(s.keeper.requireToken(3).leaseUntilEpochMs, 16_000);
  });

  test("a renewal that finds the lease gone counts a loss and stops the shard's entities", async () => {
    const s = await holding();
    s.store.rows.set(3, { owner: "node-b", epoch: 2, untilMs: 99_000 });
    s.scheduler.advance(3_000);
    await flush();
    assert.equal(s.counts.leaseLosses, 1);
    assert.deepEqual(s.stopped, [[3, "lost"]]);
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
    await flush();
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError, "node-b holds it");
  });

  test("a failing database makes the renewal a loss; once it recovers the lease is acquired again", async () => {
    const s = await holding();
    s.store.failing = true;
    s.scheduler.advance(3_000);
    await flush();
    assert.equal(s.counts.leaseLosses, 1);
    s.store.failing = false;
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
    await flush();
    assert.equal(s.keeper.requireToken(3).epoch, 1, "still ours and unexpired: renewed in place");
  });

  test("unsafe to own: leases are dropped without a release, entities stop, nothing renews", async () => {
    const s = await holding();
    s.setSafe(false);
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
    assert.equal(s.counts.leaseLosses, 1);
    assert.deepEqual(s.stopped, [[3, "suspended"]]);
    s.scheduler.advance(30_000);
    await flush();
    assert.deepEqual(s.store.calls, ["acquire 3 node-a"], "no renew, no release: the lease expires in the database");
    assert.equal(s.store.rows.get(3)!.untilMs, 10_000);
    s.setSafe(true);
    assert.throws(() => s.keeper.requireToken(3), ShardLeaseUnavailableError);
    await flush();
    assert.equal(s.keeper.requireToken(3).epoch, 2, "expired meanwhile: taken again at the next epoch");
  });

  test("suspend from the sharding shell has the same effect", async () => {
    const s = await holding();
    s.keeper.suspend();
    assert.equal(s.counts.leaseLosses, 1);
    assert.deepEqual(s.stopped, [[3, "suspended"]]);
  });

  test("drain stops the entities, then releases; the next owner gets the next epoch at once", async () => {
    const s = await holding();
    const drained = s.keeper.drain(3);
    assert.throws(() => s.keeper.requireToken(3), ShardHandoffInProgressError);
    await drained;
    assert.deepEqual(s.stopped, [[3, "handoff"]]);
    assert.deepEqual(s.store.calls.at(-1), "release 3");
    assert.equal(s.store.rows.get(3)!.untilMs, 0);
    const other = setup("node-b");
    other.store.rows.set(3, { ...s.store.rows.get(3)! });
    other.keeper.own(3);
    assert.equal((await other.keeper.acquire(3)).epoch, 2);
  });

  test("acquire for a handoff prepare resolves with the token or rejects when fenced", async () => {
    const s = setup("node-b");
    s.store.rows.set(5, { owner: "node-a", epoch: 4, untilMs: 10_000 });
    s.keeper.own(5);
    await assert.rejects(s.keeper.acquire(5), ShardLeaseUnavailableError);
    s.scheduler.advance(10_000);
    assert.equal((await s.keeper.acquire(5)).epoch, 5);
    await assert.rejects(s.keeper.acquire(6), ShardLeaseUnavailableError, "not owned here");
  });

  test("retain releases the shards outside the set; stopAll releases the rest", async () => {
    const s = setup();
    for (const shard of [1, 2, 3]) {
      s.keeper.own(shard);
      await s.keeper.acquire(shard);
    }
    s.keeper.retain([2, 3]);
    await flush();
    assert.equal(s.store.rows.get(1)!.untilMs, 0);
    assert.notEqual(s.store.rows.get(2)!.untilMs, 0);
    await s.keeper.stopAll();
    assert.equal(s.store.rows.get(2)!.untilMs, 0);
    assert.equal(s.store.rows.get(3)!.untilMs, 0);
    assert.deepEqual(
      s.stopped.map(([shard, reason]) => `${shard}:${reason}`),
      ["1:not-retained", "2:stopping", "3:stopping"],
    );
    assert.equal(s.scheduler.pendingTimers, 0, "no renewal left behind");
    assert.throws(() => s.keeper.requireToken(2), ShardLeaseUnavailableError);
  });
});
