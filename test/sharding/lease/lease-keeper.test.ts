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

/** The lease table of docs/protocol.md §13.3 on the manual clock, with a switch to make calls fail. */
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

/** The fake lease table with the batch calls: one call per batch, recorded with its shard ids. */
class BatchLeaseStore extends FakeLeaseStore {
  async acquireShardLeases(keys: readonly ShardLeaseKey[], owner: string, durationMs: number) {
    this.calls.push(`acquire* ${keys.map((k) => k.shardId).join(",")}`);
    if (this.failing) throw new Error("connection refused");
    const tokens: (ShardLeaseToken | null)[] = [];
    const before = this.calls.length;
    for (const key of keys) tokens.push(await this.acquireShardLease(key, owner, durationMs));
    this.calls.length = before;
    return tokens;
  }

  async renewShardLeases(tokens: readonly ShardLeaseToken[], durationMs: number) {
    this.calls.push(`renew* ${tokens.map((t) => t.key.shardId).join(",")}`);
    if (this.failing) throw new Error("connection refused");
    const renewed: (ShardLeaseToken | null)[] = [];
    const before = this.calls.length;
    for (const t of tokens) renewed.push(await this.renewShardLease(t, durationMs));
    this.calls.length = before;
    return renewed;
  }
}

function roundsSetup(random: number, owner = "node-a") {
  const scheduler = new ManualScheduler();
  const store = new BatchLeaseStore(scheduler);
  const counts: Record<LeaseCounter, number> = { leaseAcquisitions: 0, leaseRenewals: 0, leaseLosses: 0 };
  const stopped: [number, StopReason][] = [];
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
      safeToOwn: () => true,
    },
    { renewalRounds: true, random: () => random },
  );
  return { scheduler, store, counts, stopped, keeper };
}

/** A keeper in renewal rounds holding shards 0..n-1, acquired as a node's start wants them (all at once). */
async function holdingMany(n: number, random = 0.5) {
  const s = roundsSetup(random);
  for (let shard = 0; shard < n; shard++) {
    s.keeper.own(shard);
    assert.throws(() => s.keeper.requireToken(shard), ShardLeaseUnavailableError);
  }
  for (let i = 0; i < 5; i++) await flush();
  for (let shard = 0; shard < n; shard++) assert.equal(s.keeper.requireToken(shard).epoch, 1);
  return s;
}

/** Advances the manual clock in 100 ms steps (letting each call answer), asserting no held lease lapses meanwhile. */
async function advanceWatching(s: ReturnType<typeof roundsSetup>, ms: number, shards: number) {
  for (let t = 0; t < ms; t += 100) {
    s.scheduler.advance(100);
    await flush();
    for (let shard = 0; shard < shards; shard++) {
      const row = s.store.rows.get(shard)!;
      assert.ok(row.untilMs > s.scheduler.now(), `shard ${shard}'s lease lapsed at ${s.scheduler.now()} ms`);
    }
  }
}

describe("lease keeper, renewal rounds (issue 23)", () => {
  test("a node's start: the first acquisition goes alone, those asked for meanwhile in one batch call", async () => {
    const s = await holdingMany(40);
    assert.deepEqual(s.store.calls, [
      "acquire 0 node-a",
      `acquire* ${Array.from({ length: 39 }, (_, i) => i + 1).join(",")}`,
    ]);
    assert.equal(s.counts.leaseAcquisitions, 40);
  });

  test("upkeep: one renewal call per round for every shard held, as many calls for 400 shards as for 40", async () => {
    const calls: number[] = [];
    for (const n of [40, 400]) {
      const s = await holdingMany(n);
      const acquireCalls = s.store.calls.length;
      await advanceWatching(s, 30_000, n);
      const renewCalls = s.store.calls.slice(acquireCalls);
      assert.ok(
        renewCalls.every((c) => c === `renew* ${Array.from({ length: n }, (_, i) => i).join(",")}`),
        `every round renews all ${n} shards in one call: ${renewCalls.map((c) => c.slice(0, 30)).join(" | ")}`,
      );
      assert.equal(s.counts.leaseRenewals, n * renewCalls.length);
      assert.equal(s.counts.leaseLosses, 0);
      calls.push(renewCalls.length);
      await s.keeper.stopAll();
      assert.equal(s.scheduler.pendingTimers, 0, "no round left behind");
    }
    assert.equal(calls[0], calls[1], "upkeep independent of the shard count");
    // One round per renewal interval, rounded up to the grid's 1,500 ms step: every 4,500 ms.
    assert.ok(calls[0]! >= 6 && calls[0]! <= 7, `${calls[0]} rounds in 30 s`);
  });

  test("shards acquired at other times join the grid: at most a few rounds per interval, none late by a step", async () => {
    const s = roundsSetup(0.3);
    for (let shard = 0; shard < 30; shard++) {
      s.keeper.own(shard);
      assert.throws(() => s.keeper.requireToken(shard), ShardLeaseUnavailableError);
      await flush();
      s.scheduler.advance(170);
      await flush();
    }
    const before = s.store.calls.length;
    await advanceWatching(s, 45_000, 30);
    const rounds = s.store.calls.length - before;
    assert.ok(rounds <= 3 * 10 + 1, `${rounds} renewal calls in 45 s for 30 shards acquired over 5 s`);
    assert.equal(s.counts.leaseLosses, 0);
  });

  test("a row the batch did not renew is lost exactly as a failed lone renewal; the others stay held", async () => {
    const s = await holdingMany(10);
    s.store.rows.set(7, { owner: "node-b", epoch: 2, untilMs: 99_000 });
    s.scheduler.advance(4_500);
    await flush();
    assert.equal(s.counts.leaseLosses, 1);
    assert.deepEqual(s.stopped, [[7, "lost"]]);
    assert.throws(() => s.keeper.requireToken(7), ShardLeaseUnavailableError);
    for (const shard of [0, 1, 2, 3, 4, 5, 6, 8, 9]) assert.equal(s.keeper.requireToken(shard).epoch, 1);
    assert.equal(s.counts.leaseRenewals, 9);
  });

  test("a failed batch call fails each renewal in it, as each lone call would have failed", async () => {
    const s = await holdingMany(5);
    s.store.failing = true;
    s.scheduler.advance(4_500);
    await flush();
    assert.equal(s.counts.leaseLosses, 5);
    assert.deepEqual(
      s.stopped.map(([shard, reason]) => `${shard}:${reason}`),
      ["0:lost", "1:lost", "2:lost", "3:lost", "4:lost"],
    );
    s.store.failing = false;
    assert.throws(() => s.keeper.requireToken(2), ShardLeaseUnavailableError);
    await flush();
    assert.equal(s.keeper.requireToken(2).epoch, 1, "still ours and unexpired: taken again in place");
  });

  test("after a slow acquisition the renewal goes when due rather than in a round the lease would not see", async () => {
    const s = roundsSetup(0.99);
    let answer!: () => void;
    const slow = new Promise<void>((resolve) => {
      answer = resolve;
    });
    const acquire = s.store.acquireShardLease.bind(s.store);
    s.store.acquireShardLease = async (key, owner, ms) => {
      await slow;
      return acquire(key, owner, ms);
    };
    s.keeper.own(1);
    assert.throws(() => s.keeper.requireToken(1), ShardLeaseUnavailableError);
    await flush();
    // The database took the lease at 0 (valid locally until 10,000) but the answer arrives at 6,600: due at 9,600,
    // while the grid's next instant (offset 1,485, step 1,500) would be 10,485, past the local validity.
    s.scheduler.advance(6_600);
    answer();
    await flush();
    await flush();
    assert.equal(s.keeper.requireToken(1).epoch, 1);
    s.scheduler.advance(3_000);
    await flush();
    assert.deepEqual(s.store.calls.slice(-1), ["renew 1"], "renewed alone at 9,600");
    assert.equal(s.counts.leaseLosses, 0);
    assert.equal(s.keeper.requireToken(1).epoch, 1);
  });

  test("the grid offset comes from the random source: two nodes renew at different instants", async () => {
    const instants: number[][] = [];
    for (const random of [0.1, 0.9]) {
      const s = await holdingMany(3, random);
      const at: number[] = [];
      const renew = s.store.renewShardLeases.bind(s.store);
      s.store.renewShardLeases = (tokens, ms) => {
        at.push(s.scheduler.now());
        return renew(tokens, ms);
      };
      await advanceWatching(s, 10_000, 3);
      instants.push(at);
    }
    assert.deepEqual(
      instants[0],
      [3_150, 7_650],
      "offset 150 ms on the 1,500 ms grid: due at 3,000, then 6,200 (answered at the next 100 ms step)",
    );
    assert.deepEqual(instants[1], [4_350, 8_850], "offset 1,350 ms: due at 3,000, then 7,400");
  });
});
