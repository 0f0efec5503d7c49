// Sharding's shardMailboxCapacity: on the owner, the messages waiting in all entity mailboxes of one shard are
// bounded together; past it a delivery is refused (dead letter with reason mailboxOverflow, counted in
// shardMailboxOverflows, an ask rejects ShardMailboxOverflowError, a remote asker gets it as RemoteAskError), the
// other shards are unaffected, and the shard accepts again once its entities catch up.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { type DeadLetter, MailboxOverflowError, UniqueAddress } from "../../src/actor/index.ts";
import { RemoteAskError } from "../../src/remote/index.ts";
import {
  type ClusterSharding,
  ClusterShardingConfigurationError,
  type ShardedEntityType,
  ShardingSettings,
  ShardMailboxOverflowError,
} from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster } from "./fixtures/fake-cluster.ts";
import {
  closeHolds,
  GatedSequenceBehavior,
  Hold,
  holding,
  type OrderCommand,
  OrderCommand as OrderCommandClass,
  OrderReply,
  openHolds,
  orderClasses,
  Seq,
  sequenceSink,
} from "./fixtures/order.ts";
import { recordingLogger, type ShardingNode, settled, startShardingNodes, terminateAll } from "./fixtures/tcp-nodes.ts";

const logger = recordingLogger();
const cluster = new FakeCluster(orderClasses, { logger });
let tcpNodes: ShardingNode[] = [];
after(async () => {
  openHolds();
  await cluster.shutdown();
  await terminateAll(tcpNodes);
});

/** `count` entity ids (prefix `prefix`) in shard `shard`, found through the type's own partitioner. */
function idsInShard(
  sharding: ClusterSharding,
  type: ShardedEntityType<OrderCommand>,
  shard: number,
  prefix: string,
  count: number,
): string[] {
  const ids: string[] = [];
  for (let i = 0; ids.length < count; i++)
    if (sharding.shardOf(type, `${prefix}${i}`) === shard) ids.push(`${prefix}${i}`);
  return ids;
}

test("a shard's entities hold shardMailboxCapacity messages together; past it tells and asks are refused, other shards are not; then room again", async () => {
  const node = cluster.addNode("shard-bound");
  const type = node.sharding.init(
    "ShardBound",
    OrderCommandClass,
    { shardCount: 4, shardMailboxCapacity: 3 },
    (id) => new GatedSequenceBehavior(id),
  );
  await eventually(() => node.sharding.allocations(type).size === 4, { what: "a plan" });
  const [a, b, c, d, fresh] = idsInShard(node.sharding, type, 1, "sb-", 5) as [string, string, string, string, string];
  const [other] = idsInShard(node.sharding, type, 2, "sb-other-", 1) as [string];
  const letters: DeadLetter[] = [];
  const unsubscribe = node.system.onDeadLetter((letter) => letters.push(letter));

  closeHolds();
  // Three Holds at once: they are queued (and counted) together before any entity starts one.
  for (const id of [a, b, c]) node.sharding.entityRefFor(type, id).tell(new Hold());
  await eventually(() => [a, b, c].every((id) => holding.has(id)), { what: "three entities of shard 1 held" });
  // Three messages wait in three entities of shard 1 (each entity alone is far from any bound).
  for (const [n, id] of [a, b, c].entries()) node.sharding.entityRefFor(type, id).tell(new Seq(n + 1));
  const activations = node.sharding.stats.activations;
  const overflowsBefore = node.system.mailboxOverflowCount;
  node.sharding.entityRefFor(type, d).tell(new Seq(4));
  node.sharding.entityRefFor(type, fresh).tell(new Seq(5));
  await assert.rejects(node.sharding.entityRefFor(type, a).ask(new Seq(6), OrderReply, 5_000), (error: unknown) => {
    assert.ok(error instanceof ShardMailboxOverflowError, String(error));
    assert.equal(error.entityType, "ShardBound");
    assert.equal(error.shardId, 1);
    assert.equal(error.capacity, 3);
    assert.match(error.message, /ShardBound\/1 already holds 3 messages/);
    return true;
  });
  assert.equal(node.sharding.stats.shardMailboxOverflows, 3);
  assert.equal(node.system.mailboxOverflowCount - overflowsBefore, 3, "each refusal is a counted overflow letter");
  assert.deepEqual(
    letters.filter((l) => l.reason === "mailboxOverflow").map((l) => (l.message as Seq).n),
    [4, 5, 6],
  );
  assert.equal(node.sharding.stats.activations, activations, "a refused message activates nothing");
  assert.equal(
    logger.warnings.filter((w) => w.message.includes("shard's entity mailboxes are full")).length,
    1,
    "logged once for the shard",
  );

  // Another shard of the same type is unaffected.
  assert.ok((await node.sharding.entityRefFor(type, other).ask(new Seq(7), OrderReply, 5_000)) instanceof OrderReply);

  openHolds();
  await eventually(() => [a, b, c].every((id) => sequenceSink.get(id)?.length === 1), { what: "the queued ones ran" });
  assert.deepEqual(
    [a, b, c].map((id) => sequenceSink.get(id)),
    [[1], [2], [3]],
  );
  assert.equal(sequenceSink.get(d), undefined, "the refused tell never ran");
  for (const id of [a, b, c, d, fresh]) {
    assert.ok((await node.sharding.entityRefFor(type, id).ask(new Seq(8), OrderReply, 5_000)) instanceof OrderReply);
  }
  assert.equal(node.sharding.stats.shardMailboxOverflows, 3, "room again");
  unsubscribe();
});

test("with entityMailboxCapacity too: an entity's own bound refuses first and uses none of the shard's room", async () => {
  const node = cluster.addNode("both-bounds");
  const type = node.sharding.init(
    "BothBounds",
    OrderCommandClass,
    { shardCount: 2, shardMailboxCapacity: 2, entityMailboxCapacity: 1 },
    (id) => new GatedSequenceBehavior(id),
  );
  await eventually(() => node.sharding.allocations(type).size === 2, { what: "a plan" });
  const [a, b, c] = idsInShard(node.sharding, type, 0, "bb-", 3) as [string, string, string];
  closeHolds();
  node.sharding.entityRefFor(type, a).tell(new Hold());
  node.sharding.entityRefFor(type, b).tell(new Hold());
  await eventually(() => holding.has(a) && holding.has(b), { what: "two entities held" });
  node.sharding.entityRefFor(type, a).tell(new Seq(1));
  await assert.rejects(node.sharding.entityRefFor(type, a).ask(new Seq(2), OrderReply, 5_000), MailboxOverflowError);
  assert.equal(node.sharding.stats.shardMailboxOverflows, 0);
  // The entity's refusal took none of the shard's room: one more fits (in another entity), then the shard is full.
  node.sharding.entityRefFor(type, b).tell(new Seq(3));
  await assert.rejects(
    node.sharding.entityRefFor(type, c).ask(new Seq(4), OrderReply, 5_000),
    ShardMailboxOverflowError,
  );
  assert.equal(node.sharding.stats.shardMailboxOverflows, 1);
  openHolds();
  await eventually(() => sequenceSink.get(a)?.length === 1 && sequenceSink.get(b)?.length === 1, {
    what: "the queued ones ran",
  });
  assert.ok((await node.sharding.entityRefFor(type, c).ask(new Seq(5), OrderReply, 5_000)) instanceof OrderReply);
});

test("shardMailboxCapacity is validated, local (not in the settings key) and compatible across inits", () => {
  const base = ShardingSettings.create({});
  const bounded = ShardingSettings.create({ shardMailboxCapacity: 5_000 });
  assert.equal(base.shardMailboxCapacity, null);
  assert.equal(bounded.shardMailboxCapacity, 5_000);
  assert.equal(ShardingSettings.create({ shardMailboxCapacity: null }).shardMailboxCapacity, null);
  assert.equal(bounded.key, base.key);
  assert.equal(bounded.incompatibleField(base), null);
  for (const bad of [0, 1.5, -3, Number.NaN, Number.POSITIVE_INFINITY, 100_000_001, "10", { valueOf: 1 }]) {
    assert.throws(
      () => ShardingSettings.create({ shardMailboxCapacity: bad as number }),
      (error: unknown) => error instanceof ClusterShardingConfigurationError && error.field === "shardMailboxCapacity",
    );
  }
});

/**
 * Over TCP: `caller` asks an entity of a shard owned by `owner` whose entities are full. With the caller as
 * coordinator the ask is forwarded one hop and relayed (the owner answers the asker directly); with the owner as
 * coordinator it is a remote route to it. Either way the refusal reaches the asker at once.
 */
async function refusedAcrossNodes(caller: ShardingNode, owner: ShardingNode, typeName: string): Promise<void> {
  const settings = { shardCount: 4, shardMailboxCapacity: 2 };
  const type = caller.sharding.init(typeName, OrderCommandClass, settings, (id) => new GatedSequenceBehavior(id));
  owner.sharding.init(typeName, OrderCommandClass, settings, (id) => new GatedSequenceBehavior(id));
  await eventually(
    () =>
      tcpNodes.every((n) => n.sharding.allocations(type).size === 4) &&
      [...caller.sharding.allocations(type).values()].some((o) => o.equals(owner.cluster.selfAddress)),
    { what: "a plan with a shard on the owner node" },
  );
  const shard = [...caller.sharding.allocations(type).entries()].find(([, o]) =>
    o.equals(owner.cluster.selfAddress),
  )![0];
  const [a, b] = idsInShard(caller.sharding, type, shard, `${typeName}-`, 2) as [string, string];
  closeHolds();
  for (const id of [a, b]) caller.sharding.entityRefFor(type, id).tell(new Hold());
  await eventually(() => holding.has(a) && holding.has(b), { what: "two entities held on the owner" });
  const delivered = owner.sharding.stats.localDeliveries;
  const overflows = owner.sharding.stats.shardMailboxOverflows;
  const callerOverflows = caller.sharding.stats.shardMailboxOverflows;
  caller.sharding.entityRefFor(type, a).tell(new Seq(1));
  caller.sharding.entityRefFor(type, b).tell(new Seq(2));
  await eventually(() => owner.sharding.stats.localDeliveries === delivered + 2, { what: "two queued on the owner" });
  await assert.rejects(caller.sharding.entityRefFor(type, a).ask(new Seq(3), OrderReply, 5_000), (error: unknown) => {
    assert.ok(error instanceof RemoteAskError, String(error));
    assert.equal(error.remoteClass, "ShardMailboxOverflowError");
    assert.match(error.remoteMessage, new RegExp(`${typeName}/${shard} already holds 2 messages`));
    return true;
  });
  caller.sharding.entityRefFor(type, b).tell(new Seq(4));
  await eventually(() => owner.sharding.stats.shardMailboxOverflows === overflows + 2, {
    what: "the ask and the tell refused on the owner",
    describe: () => owner.sharding.stats,
  });
  assert.equal(caller.sharding.stats.shardMailboxOverflows, callerOverflows, "counted where the bound is: the owner");
  openHolds();
  await eventually(() => sequenceSink.get(a)?.length === 1 && sequenceSink.get(b)?.length === 1, {
    what: "the queued ones ran",
  });
  assert.ok((await caller.sharding.entityRefFor(type, a).ask(new Seq(5), OrderReply, 5_000)) instanceof OrderReply);
}

test("over TCP: a caller on another node gets RemoteAskError naming ShardMailboxOverflowError, relayed or routed", async () => {
  tcpNodes = await startShardingNodes(2);
  await eventually(() => tcpNodes.every((n) => settled(n, 2)), { what: "two Up members" });
  // The coordinator is the lowest Up member.
  const [coordinator, other] = [...tcpNodes].sort((x, y) =>
    UniqueAddress.compare(x.cluster.selfAddress, y.cluster.selfAddress),
  ) as [ShardingNode, ShardingNode];
  const forwards = coordinator.sharding.stats.forwards;
  await refusedAcrossNodes(coordinator, other, "TcpRelayed");
  assert.ok(coordinator.sharding.stats.forwards > forwards, "the relayed case went through a forward");
  const remoteRoutes = other.sharding.stats.remoteRoutes;
  await refusedAcrossNodes(other, coordinator, "TcpRouted");
  assert.ok(other.sharding.stats.remoteRoutes > remoteRoutes, "the routed case went to the coordinator-owner");
});
