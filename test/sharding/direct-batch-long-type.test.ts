// A direct batch's header carries the entity type once (docs/protocol.md §8.8 "Batches"), and a receiver refuses a
// header text past 4,096 bytes. An entity type may be named longer (only an empty name is refused), and its single
// direct envelopes carry such a name: a caller must not write a batch its owner can only refuse, losing every tell
// of it, but send those envelopes one by one, as it would without batches.
import assert from "node:assert/strict";
import { test } from "node:test";
import { EnvelopeDecodeError, MessageEncodeError, MessageRegistry } from "../../src/remote/index.ts";
import { LeastLoadedAllocation, NoRebalance, ShardingSettings } from "../../src/sharding/index.ts";
import { RegistryCodec, registerShardingWireTypes } from "../../src/sharding/internal/codec.ts";
import {
  DirectBatch,
  DirectEnvelope,
  ReceivedDirectBatch,
  ShardingEnvelope,
  wireNames,
} from "../../src/sharding/internal/messages.ts";
import { eventually } from "../fixtures/eventually.ts";
import { addr } from "./fixtures/members.ts";
import { type OrderCommand, OrderReply, Seq, sequenceSink } from "./fixtures/order.ts";
import { idOwnedBy, type ShardingNode, startWithType, terminateAll } from "./fixtures/tcp-nodes.ts";

const settings = {
  shardCount: 8,
  allocation: new LeastLoadedAllocation(),
  rebalance: new NoRebalance(),
  routing: "direct" as const,
};

test("direct routing over TCP: tells to an entity type named past a batch header's 4,096 bytes still arrive, in order", async () => {
  // 4,100 characters, 2-byte UTF-8 each past the first: 8,199 bytes.
  const type = `L${"é".repeat(4_099)}`;
  const nodes = await startWithType(3, type, settings);
  try {
    const [coordinator, caller, owner] = nodes as [ShardingNode, ShardingNode, ShardingNode];
    const id = idOwnedBy(coordinator, type, owner, "long");
    const ref = caller.sharding.entityRefFor<OrderCommand>(type, id);
    // The grant first (the first message goes through the coordinator), then a direct ask.
    await ref.ask(new Seq(0), OrderReply, 5_000);
    await eventually(
      async () => {
        await ref.ask(new Seq(-1), OrderReply, 5_000);
        return caller.sharding.stats.directRoutes > 0;
      },
      { what: "the direct route", describe: () => caller.sharding.stats },
    );
    // One synchronous burst: one batch's worth of tells to one owner with one sender.
    const unencodableBefore = caller.remoting.stats.unencodable;
    const batchesBefore = caller.sharding.stats.directBatches;
    for (let n = 1; n <= 20; n++) ref.tell(new Seq(n));
    await eventually(() => (sequenceSink.get(id) ?? []).includes(20), {
      what: "the burst processed",
      describe: () => ({ processed: sequenceSink.get(id), caller: caller.sharding.stats, owner: owner.sharding.stats }),
      timeoutMs: 5_000,
    });
    assert.deepEqual(
      (sequenceSink.get(id) ?? []).filter((n) => n > 0),
      Array.from({ length: 20 }, (_, k) => k + 1),
    );
    assert.equal(owner.sharding.stats.malformedEnvelopes.undecodable, 0, "nothing written that the owner refused");
    // Not even tried as a batch: the caller knew the header could not carry the type.
    assert.equal(caller.sharding.stats.directBatches, batchesBefore, "no batch sent");
    assert.equal(caller.remoting.stats.unencodable, unencodableBefore, "no batch refused by remoting's encoder");
  } finally {
    await terminateAll(nodes);
  }
});

test("a batch whose header the receiver would refuse or mangle is refused at send, so its envelopes go one by one", () => {
  const registry = new MessageRegistry(null);
  registry.register(Seq, { name: "test.seq" });
  registerShardingWireTypes(registry);
  const codec = registry.lookupName(wireNames.directBatch)!.codec!;
  const wire = new RegistryCodec(registry);
  const key = ShardingSettings.create({ routing: "direct" }).key;
  const batchOf = (type: string) =>
    new DirectBatch(
      [1, 2].map((n) =>
        DirectEnvelope.of(
          new ShardingEnvelope("User", type, `e${n}`, 1, key, 0, null, null, true, wire.encode(new Seq(n)), 0, null),
          addr("c"),
          3,
        ),
      ),
    );
  const roundTrip = (batch: DirectBatch): unknown => {
    const bound = codec.measure(batch);
    codec.checkText(batch);
    const buf = Buffer.alloc(bound);
    const end = codec.write(buf, 0, batch);
    return codec.read(buf, 0, end, Object.prototype);
  };
  // 4,096 bytes is the most a header text may hold: written and read back.
  const longest = "é".repeat(2_048);
  const back = roundTrip(batchOf(longest));
  assert.ok(back instanceof ReceivedDirectBatch);
  assert.equal(back.envelopeAt(1).entityType, longest);
  for (const [what, type] of [
    ["4,097 bytes of UTF-8", `${"é".repeat(2_048)}x`],
    ["4,097 ASCII bytes", "x".repeat(4_097)],
    ["a lone surrogate", "Account\ud800"],
  ] as const) {
    assert.throws(
      () => roundTrip(batchOf(type)),
      (e: unknown) => e instanceof MessageEncodeError && !(e instanceof EnvelopeDecodeError),
      what,
    );
  }
});
