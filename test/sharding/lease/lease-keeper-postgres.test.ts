// The lease keeper against the real PostgreSQL lease table (database clock), with real time and short leases.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { RealScheduler } from "../../../src/actor/index.ts";
import { StaleShardOwnerError } from "../../../src/persistence/index.ts";
import { ShardLeaseUnavailableError } from "../../../src/sharding/errors.ts";
import { type LeaseCounter, LeaseKeeper, type LeaseStore } from "../../../src/sharding/lease/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore } from "../../persistence/pg-fixture.ts";

const { store, dispose } = await freshPostgresStore("lease_keeper");
after(dispose);

function keeperFor(owner: string, leases: LeaseStore = store) {
  const counts: Record<LeaseCounter, number> = { leaseAcquisitions: 0, leaseRenewals: 0, leaseLosses: 0 };
  const keeper = new LeaseKeeper(
    { clusterName: "pg-test", entityType: "Order", owner, leaseDurationMs: 600, leaseRenewIntervalMs: 100 },
    leases,
    new RealScheduler(),
    { stopEntities: () => {}, count: (c, by) => (counts[c] += by), safeToOwn: () => true },
  );
  return { keeper, counts };
}

test("on PostgreSQL: acquire, renew, fence the other owner, release on drain, epoch + 1 for the next owner", async () => {
  const a = keeperFor("movie.tcp://pg@127.0.0.1:1#a");
  const b = keeperFor("movie.tcp://pg@127.0.0.1:2#b");
  a.keeper.own(0);
  b.keeper.own(0);
  const tokenA = await a.keeper.acquire(0);
  assert.equal(tokenA.owner, "movie.tcp://pg@127.0.0.1:1#a");
  await assert.rejects(b.keeper.acquire(0), ShardLeaseUnavailableError);
  await eventually(() => a.counts.leaseRenewals >= 3, { what: "renewals", describe: () => a.counts });
  assert.equal(a.counts.leaseLosses, 0);
  assert.equal(a.keeper.requireToken(0).epoch, tokenA.epoch);

  await a.keeper.drain(0);
  const tokenB = await b.keeper.acquire(0);
  assert.equal(tokenB.epoch, tokenA.epoch + 1, "released, so taken at once at the next epoch");
  await assert.rejects(
    store.appendEvents({
      persistenceId: "Order:late",
      expectedRevision: 0,
      operationId: "op-1",
      events: [{ manifest: "json", payload: "{}" }],
      fence: tokenA,
    }),
    StaleShardOwnerError,
    "the old owner's epoch commits nothing",
  );
  await b.keeper.stopAll();
  await a.keeper.stopAll();
});
