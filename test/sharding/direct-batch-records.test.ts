// A received direct batch is delivered record by record (docs/protocol.md §8.8 "Batches"): a plain tell of a shard
// whose acceptance the shell's memory holds straight from its record (NodeShell.receiveRecord), every other record as
// its envelope through the shell's receive. Each record must come out exactly as its single envelope would: in order,
// with its sender (none when senderless, the relaying wrapper for an ask), a bad trace context counted, a payload that
// does not decode refused and counted, and a delivery its provider cannot take now (no lease) retried, not lost.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorRef } from "../../src/actor/index.ts";
import { DecodedMessage, EncodedMessage } from "../../src/remote/index.ts";
import {
  LeastLoadedAllocation,
  NoRebalance,
  ShardingSettings,
  ShardLeaseUnavailableError,
} from "../../src/sharding/index.ts";
import { shardingHostOf } from "../../src/sharding/internal/host.ts";
import {
  type DirectBatchRecord,
  ReceivedDirectBatch,
  ShardingEnvelope,
  type WireMessage,
} from "../../src/sharding/internal/messages.ts";
import type { ShardingProvider } from "../../src/sharding/internal/provider.ts";
import { settingsDigest } from "../../src/sharding/internal/settings-digest.ts";
import { eventually } from "../fixtures/eventually.ts";
import { OrderCommand, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import { type ShardingNode, startShardingNodes, terminateAll } from "./fixtures/tcp-nodes.ts";

const settings = ShardingSettings.create({
  shardCount: 8,
  allocation: new LeastLoadedAllocation(),
  rebalance: new NoRebalance(),
  routing: "direct",
});

/** What the provider was handed, in order. */
interface Delivered {
  readonly entityId: string;
  readonly n: number;
  readonly sender: ActorRef<unknown> | null;
}

/** A provider that records its deliveries and refuses the next `leaseRefusals` shard authorizations (no lease). */
class RecordingProvider implements ShardingProvider {
  readonly messageTypeName = "Seq";
  readonly entityCount = 0;
  readonly delivered: Delivered[] = [];
  leaseRefusals = 0;

  constructor(
    readonly name: string,
    readonly settings: ShardingSettings,
  ) {}

  entitiesByShard(): Map<number, number> {
    return new Map();
  }
  leases(): null {
    return null;
  }
  /** Entities delivered to, under the shard of their first delivery (what a provider's live entities answer). */
  private readonly live = new Map<string, number>();

  liveShardOf(entityId: string): number | undefined {
    return this.live.get(entityId);
  }
  authorizeShard(shardId: number): void {
    if (this.leaseRefusals > 0) {
      this.leaseRefusals--;
      throw new ShardLeaseUnavailableError(this.name, shardId);
    }
  }
  async prepareShard(): Promise<void> {}
  deliver(shard: number, entityId: string, message: unknown, sender: ActorRef<unknown> | null): void {
    assert.ok(message instanceof Seq, `a Seq, got ${String(message)}`);
    if (!this.live.has(entityId)) this.live.set(entityId, shard);
    this.delivered.push({ entityId, n: message.n, sender });
  }
  activate(): boolean {
    return false;
  }
  passivate(): boolean {
    return false;
  }
  async drainShard(): Promise<void> {}
  retainShards(): void {}
  suspendOwnership(): void {}
  passivateIdle(): number {
    return 0;
  }
  entityTerminated(): void {}
  async stopAll(): Promise<void> {}
}

class Quiet extends AbstractBehavior<unknown> {
  receive(): void {}
}

let node: ShardingNode;
let provider: RecordingProvider;
let daemon: ActorRef<unknown>;
let probe: ActorRef<unknown>;
const type = "Records";
const id = "rec-1";

before(async () => {
  // A real node (its membership's snapshot is stable between changes, which the shell's shortcuts need).
  [node] = (await startShardingNodes(1)) as [ShardingNode];
  provider = new RecordingProvider(type, settings);
  shardingHostOf(node.sharding).registerProvider(provider);
  await eventually(() => node.sharding.allocations(type).size === settings.shardCount, { what: "a plan" });
  daemon = node.system.findLocal(["system", "sharding"])!;
  assert.ok(daemon !== null, "the sharding daemon");
  probe = node.system.spawn(new Quiet(), "probe");
});

after(() => terminateAll(node === undefined ? [] : [node]));

/** A record of a tell (or, with `askTimeoutMs`, an ask) of Seq(n) to `id`, as the batch codec reads one. */
function record(n: number, options: Partial<DirectBatchRecord> = {}): DirectBatchRecord {
  const message: WireMessage = { type: "Seq", payload: new DecodedMessage(new Seq(n)) };
  return {
    kind: "User",
    entityId: id,
    shardId: node.sharding.shardOf(type, id),
    askTimeoutMs: undefined,
    senderless: false,
    deliveryAttempt: 0,
    traceparent: undefined,
    generation: node.sharding.planGeneration(type),
    message,
    ...options,
  };
}

/** A batch of `records` under this node's grant (it is the coordinator and the owner), told to its daemon. */
function receive(records: DirectBatchRecord[]): void {
  const header = {
    entityType: type,
    settingsKey: settings.key,
    settingsDigest: settingsDigest(settings.key),
    coordinatorUid: node.cluster.selfAddress.uid,
  };
  daemon.tell(new ReceivedDirectBatch(header, records), probe);
}

test("every record of a batch is delivered as its single envelope would be, in order, plain tells and others alike", async () => {
  const before = node.sharding.stats;
  const from = provider.delivered.length;
  // Left encoded as read (it did not decode there), under a name no class is registered for here.
  const undecodable: WireMessage = { type: "NotRegistered", payload: new EncodedMessage(1, 0, Buffer.from("{}")) };
  receive([
    record(1, { senderless: true }),
    record(2),
    record(3, { senderless: true }),
    record(4, { askTimeoutMs: 5_000 }),
    record(5, { senderless: true, traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" }),
    record(6, { traceparent: "not a trace context" }),
    record(7, { message: undecodable }),
    record(8),
  ]);
  await eventually(() => provider.delivered.slice(from).some((d) => d.n === 8), {
    what: "the batch delivered",
    describe: () => ({ delivered: provider.delivered.slice(from).map((d) => d.n), stats: node.sharding.stats }),
  });
  const delivered = provider.delivered.slice(from);
  assert.deepEqual(
    delivered.map((d) => d.n),
    [1, 2, 3, 4, 5, 6, 8],
    "in order; the payload that does not decode is refused",
  );
  const senderOf = (n: number) => delivered.find((d) => d.n === n)!.sender;
  assert.equal(senderOf(1), null, "senderless");
  assert.equal(senderOf(2), probe);
  assert.equal(senderOf(3), null, "senderless");
  const relayed = senderOf(4);
  assert.ok(relayed !== null && relayed !== probe, "an ask's sender is the owner's relaying wrapper");
  assert.equal(senderOf(5), null, "senderless, traced");
  assert.equal(senderOf(6), probe, "a bad trace context costs the trace, not the message");
  assert.equal(senderOf(8), probe);
  const after = node.sharding.stats;
  assert.equal(after.malformedTraceContexts - before.malformedTraceContexts, 1);
  assert.equal(after.malformedEnvelopes.payload - before.malformedEnvelopes.payload, 1);
  assert.equal(after.rejectedEnvelopes - before.rejectedEnvelopes, 1);
});

test("a record its provider cannot take now (no lease) goes to the retry barrier, and every record after it follows in order", async () => {
  // The memory holds the shard's acceptance (a batch delivered before), so the next record is a plain tell taken
  // straight from its record when the provider refuses it.
  receive([record(100), record(101)]);
  await eventually(() => provider.delivered.some((d) => d.n === 101), { what: "the shard accepted" });
  const from = provider.delivered.length;
  const before = node.sharding.stats;
  provider.leaseRefusals = 3;
  receive([record(102), record(103), record(104)]);
  await eventually(() => provider.delivered.slice(from).some((d) => d.n === 104), {
    what: "the refused records retried",
    describe: () => ({ delivered: provider.delivered.slice(from).map((d) => d.n), stats: node.sharding.stats }),
  });
  assert.deepEqual(
    provider.delivered.slice(from).map((d) => d.n),
    [102, 103, 104],
  );
  assert.equal(provider.leaseRefusals, 0, "all three refusals were met");
  assert.ok(node.sharding.stats.leaseRetries > before.leaseRetries, "counted as lease retries");
});

/** The first of `e0`, `e1`, … whose shard is `wanted(shard)`. */
function idWhere(prefix: string, wanted: (shard: number) => boolean): string {
  const found = Array.from({ length: 1_000 }, (_, i) => `${prefix}${i}`).find((e) =>
    wanted(node.sharding.shardOf(type, e)),
  );
  assert.ok(found !== undefined, `an id of ${prefix} on a wanted shard`);
  return found;
}

test("a live entity vouches only for its own id under its own shard: other ids and other shards are hashed and refused", async () => {
  const shardA = node.sharding.shardOf(type, id);
  const other = idWhere("o", (s) => s !== shardA);
  const shardB = node.sharding.shardOf(type, other);
  const stranger = idWhere("s", (s) => s !== shardA);
  // Both shards' acceptance kept, both entities live (the provider reports them from their first delivery).
  receive([record(200), record(201, { entityId: other, shardId: shardB }), record(202)]);
  await eventually(() => provider.delivered.some((d) => d.n === 202), { what: "both shards accepted" });
  assert.equal(provider.liveShardOf(id), shardA);
  assert.equal(provider.liveShardOf(other), shardB);
  const from = provider.delivered.length;
  const before = node.sharding.stats.rejectedEnvelopes;
  receive([
    record(203),
    // An id not live here, naming a live entity's shard (its own is another).
    record(204, { entityId: stranger, shardId: shardA }),
    // A live entity under another accepted shard than its own.
    record(205, { shardId: shardB }),
    record(206, { entityId: other, shardId: shardA }),
    record(207),
  ]);
  await eventually(
    () => provider.delivered.some((d) => d.n === 207) && node.sharding.stats.rejectedEnvelopes - before === 3,
    {
      what: "the batch decided",
      describe: () => ({
        delivered: provider.delivered.slice(from).map((d) => d.n),
        rejected: node.sharding.stats.rejectedEnvelopes - before,
      }),
    },
  );
  assert.deepEqual(
    provider.delivered.slice(from).map((d) => d.n),
    [203, 207],
  );
});

test("no entity is created under a shard its id does not hash to, even by an envelope a coordinator forwarded", async () => {
  const real = "RealRecords";
  node.sharding.init(real, OrderCommand, settings, (entityId) => new SequenceBehavior(entityId));
  await eventually(() => node.sharding.allocations(real).size === settings.shardCount, { what: "a plan" });
  const x = "forged-1";
  const own = node.sharding.shardOf(real, x);
  const wrong = (own + 1) % settings.shardCount;
  const entitiesBefore = node.sharding.localEntityCount;
  const before = node.sharding.stats;
  const forward = (shard: number, n: number) => {
    const message: WireMessage = { type: "Seq", payload: new DecodedMessage(new Seq(n)) };
    // Hop 1, naming this node (the coordinator) as the one that forwarded it: the owner takes the coordinator's check.
    const coordinator = node.cluster.selfAddress.toString();
    daemon.tell(new ShardingEnvelope("User", real, x, shard, settings.key, 1, coordinator, null, true, message), probe);
  };
  forward(wrong, 1);
  forward(own, 2);
  await eventually(() => (sequenceSink.get(x) ?? []).includes(2), {
    what: "the envelope under the right shard delivered",
    describe: () => ({ seen: sequenceSink.get(x), stats: node.sharding.stats }),
  });
  assert.deepEqual(sequenceSink.get(x), [2], "the one under the wrong shard created nothing and delivered nothing");
  assert.equal(node.sharding.localEntityCount, entitiesBefore + 1);
  assert.equal(node.sharding.stats.rejectedEnvelopes - before.rejectedEnvelopes, 1, "refused and counted");
});
