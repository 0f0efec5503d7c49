// The operator's partition procedure on the real PostgreSQL, over the fake cluster: while a member is unreachable
// routing fails closed and the owner drops its leases without releasing them; after the other side is downed and
// removed, the survivor takes the shard at epoch + 1 once the old lease expired, and the entity recovers there with
// every committed event.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  Database,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
} from "../../../src/persistence/index.ts";
import { NoShardOwnerError } from "../../../src/sharding/errors.ts";
import { initEventSourced } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";

abstract class CartCommand {}
class AddItem extends CartCommand {
  constructor(
    readonly item: string,
    readonly op: string,
  ) {
    super();
  }
}
class ViewCart extends CartCommand {}
class CartView {
  constructor(
    readonly items: string[],
    readonly epoch: number,
  ) {}
}
class ItemAdded {
  constructor(readonly item: string) {}
}

class Cart extends EventSourcedBehavior<CartCommand, ItemAdded, { items: string[] }> {
  emptyState() {
    return { items: [] as string[] };
  }
  applyEvent(state: { items: string[] }, event: ItemAdded) {
    return { items: [...state.items, event.item] };
  }
  handleCommand(state: { items: string[] }, command: CartCommand, ctx: EntityContext<CartCommand>) {
    const reply = (s: { items: string[] }) => ctx.sender?.tell(new CartView(s.items, ctx.fence?.epoch ?? 0));
    if (command instanceof AddItem) {
      return Effect.persist<ItemAdded, { items: string[] }>(new ItemAdded(command.item), command.op).thenRun(reply);
    }
    return Effect.none<ItemAdded, { items: string[] }>().thenRun(() => reply(state));
  }
}

const cluster = new FakeCluster([AddItem, ViewCart, CartView]);
const pg = await freshPostgresStore("persistent_partition");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

async function start(name: string): Promise<Node> {
  const node = cluster.addNode(name);
  await Database.get(node.system).use(pg.store);
  Database.get(node.system).codec.register(ItemAdded);
  const carts = EventSourcing.get(node.system).registerEntity(Cart, CartCommand, () => new Cart(), { name: "Cart" });
  initEventSourced(node.sharding, carts, { shardCount: 4, leaseDuration: 1_500, leaseRenewInterval: 300 });
  return node;
}

test("partition: fail closed, leases left to expire; after down, the survivor recovers the entity at epoch + 1", async () => {
  const a = await start("part-a");
  const b = await start("part-b");
  // Wait for the rebalance after b's join to settle: two shards each, the same plan on both nodes.
  const onA = (node: Node) => [...node.sharding.allocations("Cart").values()].filter((o) => o.equals(a.address)).length;
  await eventually(
    () =>
      a.sharding.allocations("Cart").size === 4 &&
      b.sharding.allocations("Cart").size === 4 &&
      onA(a) === 2 &&
      onA(b) === 2 &&
      a.sharding.handoffsInProgress === 0,
    { what: "a settled plan" },
  );
  const id = ["cart-1", "cart-2", "cart-3", "cart-4", "cart-5", "cart-6", "cart-7", "cart-8"].find((candidate) =>
    b.sharding.ownerFor("Cart", candidate)?.equals(a.address),
  )!;
  assert.ok(id !== undefined, "some cart lives on a");
  const cartOnB = b.sharding.entityRefFor<CartCommand>("Cart", id);
  await cartOnB.ask(new AddItem("apple", "op-1"), CartView, 5_000);
  const committed = await cartOnB.ask(new AddItem("pear", "op-2"), CartView, 5_000);
  assert.deepEqual(committed, new CartView(["apple", "pear"], 1));

  // The partition: each side sees the other as unreachable, and nothing crosses.
  const aLosses = a.sharding.stats.leaseLosses;
  cluster.blackhole(a, b);
  cluster.blackhole(b, a);
  a.setUnreachable(b);
  b.setUnreachable(a);
  assert.throws(() => cartOnB.tell(new AddItem("plum", "op-x")), NoShardOwnerError, "routing fails closed");
  await eventually(() => a.sharding.stats.leaseLosses > aLosses, {
    what: "a to drop its leases",
    describe: () => [a.sharding.stats, aLosses, a.system.name, b.sharding.stats.leaseAcquisitions],
  });
  const shard = b.sharding.shardOf("Cart", id);
  const client = await rawClient(pg.url, pg.schema);
  try {
    const row = await client.query(
      "SELECT owner, epoch, lease_until_epoch_ms > 0 AS unreleased FROM shard_lease WHERE entity_type = 'Cart' AND shard_id = $1",
      [shard],
    );
    assert.deepEqual(row.rows[0], { owner: a.address.toString(), epoch: "1", unreleased: true }, "not released");

    // The operator downs a through the survivor; a is removed and b sees a converged cluster of one.
    a.setStatus("Removed");
    b.setUnreachable(a, false);
    await eventually(
      async () => {
        try {
          const view = await cartOnB.ask(new ViewCart(), CartView, 5_000);
          return view.epoch === 2 && view.items.join() === "apple,pear";
        } catch {
          return false;
        }
      },
      { what: "the cart to recover on b at epoch 2", timeoutMs: 15_000 },
    );
    const after = await client.query(
      "SELECT owner, epoch FROM shard_lease WHERE entity_type = 'Cart' AND shard_id = $1",
      [shard],
    );
    assert.deepEqual(after.rows[0], { owner: b.address.toString(), epoch: "2" });
  } finally {
    await client.end();
  }
  assert.deepEqual((await cartOnB.ask(new AddItem("plum", "op-3"), CartView, 5_000)).items, ["apple", "pear", "plum"]);
});
