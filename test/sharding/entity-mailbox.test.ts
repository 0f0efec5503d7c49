// Sharding's entityMailboxCapacity: each entity actor's mailbox is bounded on this node; a delivery past it is a
// counted dead letter and an ask behind it rejects MailboxOverflowError. Local: not part of the settings key.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { MailboxOverflowError } from "../../src/actor/index.ts";
import { ClusterShardingConfigurationError, ShardingSettings } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster } from "./fixtures/fake-cluster.ts";
import {
  closeHolds,
  GatedSequenceBehavior,
  Hold,
  holding,
  OrderCommand,
  OrderReply,
  openHolds,
  orderClasses,
  Seq,
  sequenceSink,
} from "./fixtures/order.ts";

const cluster = new FakeCluster(orderClasses);
after(() => {
  openHolds();
  return cluster.shutdown();
});
const node = cluster.addNode("bounded");

test("an entity's mailbox holds entityMailboxCapacity deliveries; past it a tell is a dead letter, an ask rejects", async () => {
  const type = node.sharding.init(
    "BoundedSeq",
    OrderCommand,
    { shardCount: 4, entityMailboxCapacity: 2 },
    (id) => new GatedSequenceBehavior(id),
  );
  await eventually(() => node.sharding.allocations(type).size === 4, { what: "a plan" });
  const entity = node.sharding.entityRefFor(type, "e-1");
  closeHolds();
  entity.tell(new Hold());
  await eventually(() => holding.has("e-1"), { what: "the entity to hold its mailbox" });
  entity.tell(new Seq(1));
  entity.tell(new Seq(2));
  const before = node.system.mailboxOverflowCount;
  entity.tell(new Seq(3));
  await assert.rejects(entity.ask(new Seq(4), OrderReply, 5_000), MailboxOverflowError);
  assert.equal(node.system.mailboxOverflowCount - before, 2);
  openHolds();
  await eventually(() => sequenceSink.get("e-1")?.length === 2, { what: "the queued deliveries to run" });
  assert.deepEqual(sequenceSink.get("e-1"), [1, 2]);
  assert.ok((await entity.ask(new Seq(5), OrderReply, 5_000)) instanceof OrderReply, "room again");
});

test("entityMailboxCapacity is validated, local (not in the settings key) and compatible across inits", () => {
  const base = ShardingSettings.create({});
  const bounded = ShardingSettings.create({ entityMailboxCapacity: 100 });
  assert.equal(base.entityMailboxCapacity, null);
  assert.equal(bounded.entityMailboxCapacity, 100);
  assert.equal(bounded.key, base.key);
  assert.equal(bounded.incompatibleField(base), null);
  for (const bad of [0, 1.5, -3, 1_000_001, "10", { valueOf: 1 }]) {
    assert.throws(
      () => ShardingSettings.create({ entityMailboxCapacity: bad as number }),
      (error: unknown) => error instanceof ClusterShardingConfigurationError && error.field === "entityMailboxCapacity",
    );
  }
});
