// Wait, don't fail (docs/zero-downtime.md), over real loopback TCP: with `awaitCoordinator`, asks issued during a
// join, a graceful leave and a coordinator change all succeed within a 3 s ask timeout, and numbered tells sent in
// those windows are all delivered, in per-sender order; with an unreachable member the wait ends at its deadline and
// the error names the member.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import { NoShardOwnerError, type ShardingSettingsOptions } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { GetOrder, OrderCommand, OrderReply, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import { describeNodes, type ShardingNode, settled, startShardingNode, terminateAll } from "./fixtures/tcp-nodes.ts";

const settings: ShardingSettingsOptions = { shardCount: 16, awaitCoordinator: true, heldTellTimeout: 3_000 };
const askTimeoutMs = 3_000;
const nodes: ShardingNode[] = [];
after(() => terminateAll(nodes));

async function start(seed: ShardingNode | null): Promise<ShardingNode> {
  const node = await startShardingNode(seed?.port ?? null);
  node.sharding.init("Zd", OrderCommand, settings, (id) => new SequenceBehavior(id));
  nodes.push(node);
  return node;
}

function live(): ShardingNode[] {
  return nodes.filter((n) => n.cluster.snapshot().selfStatus === "Up");
}

function address(n: ShardingNode): UniqueAddress {
  return n.remoting.selfAddress;
}

/** Every live node sees `count` Up members, converged, and the same complete plan; no handoff runs. */
async function planSettled(count: number): Promise<void> {
  await eventually(
    () => {
      const ns = live();
      if (ns.length !== count || !ns.every((n) => settled(n, count))) return false;
      const coordinator = ns.map(address).sort(UniqueAddress.compare)[0]!;
      return ns.every(
        (n) =>
          n.sharding.allocations("Zd").size === 16 &&
          n.sharding.handoffsInProgress === 0 &&
          n.sharding.ownerFor("Zd", "probe") !== null &&
          [...n.sharding.allocations("Zd").values()].every((o) => ns.some((m) => address(m).equals(o))) &&
          n.sharding.ownerFor("Zd", "probe") !== null &&
          coordinator !== undefined,
      );
    },
    { what: `${count} nodes Up with one complete plan`, describe: describeNodes(nodes, "Zd"), timeoutMs: 20_000 },
  );
}

/** Continuous asks and numbered tells from `caller` to `ids` until stopped; every failure is kept. */
class Load {
  readonly failures: string[] = [];
  readonly sent = new Map<string, number>();
  asked = 0;
  private running = true;
  private readonly loops: Promise<void>[] = [];

  constructor(
    private readonly caller: ShardingNode,
    private readonly ids: string[],
    askers: number,
  ) {
    for (let i = 0; i < askers; i++) this.loops.push(this.askLoop(i));
    this.loops.push(this.tellLoop());
  }

  private async askLoop(offset: number): Promise<void> {
    let k = offset;
    while (this.running) {
      const id = this.ids[k++ % this.ids.length]!;
      try {
        await this.caller.sharding.entityRefFor<OrderCommand>("Zd", id).ask(new GetOrder(), OrderReply, askTimeoutMs);
        this.asked++;
      } catch (error) {
        this.failures.push(`ask ${id}: ${(error as Error).name}: ${(error as Error).message}`);
        // A failing route rejects at once: pause, or the loop would starve the event loop.
        await new Promise<void>((r) => setTimeout(r, 5));
      }
    }
  }

  private async tellLoop(): Promise<void> {
    let k = 0;
    while (this.running) {
      const id = this.ids[k++ % this.ids.length]!;
      const n = (this.sent.get(id) ?? 0) + 1;
      try {
        this.caller.sharding.entityRefFor<OrderCommand>("Zd", id).tell(new Seq(n));
        this.sent.set(id, n);
      } catch (error) {
        this.failures.push(`tell ${id}#${n}: ${(error as Error).name}: ${(error as Error).message}`);
      }
      await new Promise<void>((r) => setTimeout(r, 2));
    }
  }

  /** Stops the load; then every accepted tell must arrive, each entity's in the order sent. */
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    assert.deepEqual(this.failures.slice(0, 5), [], `${this.failures.length} failures`);
    assert.ok(this.asked > 0, "asks were answered");
    await eventually(() => this.ids.every((id) => (sequenceSink.get(id)?.length ?? 0) >= (this.sent.get(id) ?? 0)), {
      what: "every accepted tell delivered",
      describe: () => this.ids.map((id) => [id, this.sent.get(id), sequenceSink.get(id)?.length]),
      timeoutMs: 10_000,
    });
    for (const id of this.ids) {
      const expected = Array.from({ length: this.sent.get(id) ?? 0 }, (_, i) => i + 1);
      assert.deepEqual(sequenceSink.get(id) ?? [], expected, `${id}: delivered once each, in the order sent`);
    }
  }
}

const ids = (phase: string): string[] => Array.from({ length: 24 }, (_, i) => `${phase}-${i}`);
let caller: ShardingNode;

test("asks and tells during a join all succeed, in order", async () => {
  const a = await start(null);
  const b = await start(a);
  await planSettled(2);
  // The caller is the higher of the two: it never becomes the coordinator below (a or the joiner is lower).
  caller = [a, b].sort((x, y) => UniqueAddress.compare(address(y), address(x)))[0]!;
  const load = new Load(caller, ids("join"), 8);
  await new Promise((r) => setTimeout(r, 200));
  const c = await start(a);
  await planSettled(3);
  await eventually(() => [...caller.sharding.allocations("Zd").values()].some((o) => o.equals(address(c))), {
    what: "the joiner hosts shards",
    describe: describeNodes(nodes, "Zd"),
  });
  await new Promise((r) => setTimeout(r, 200));
  await load.stop();
  assert.ok(caller.sharding.stats.heldDeliveries >= 0);
});

test("asks and tells during a graceful leave of a non-coordinator all succeed, in order", async () => {
  const ns = live();
  const coordinator = ns.map(address).sort(UniqueAddress.compare)[0]!;
  const leaving = ns.find((n) => n !== caller && !address(n).equals(coordinator))!;
  const load = new Load(caller, ids("leave"), 8);
  await new Promise((r) => setTimeout(r, 200));
  await leaving.cluster.leave();
  await planSettled(2);
  await new Promise((r) => setTimeout(r, 200));
  await load.stop();
  await leaving.system.terminate();
});

test("asks and tells while the coordinator leaves (a coordinator change) all succeed, in order", async () => {
  const ns = live();
  const coordinator = ns.find((n) => n !== caller)!;
  assert.ok(UniqueAddress.compare(address(coordinator), address(caller)) < 0, "the leaving node is the coordinator");
  const load = new Load(caller, ids("coordinator"), 8);
  await new Promise((r) => setTimeout(r, 200));
  await coordinator.cluster.leave();
  await planSettled(1);
  await new Promise((r) => setTimeout(r, 200));
  await load.stop();
  await coordinator.system.terminate();
});

test("with an unreachable member the wait ends at its deadline and the error names the member", async () => {
  const other = await start(caller);
  await planSettled(2);
  caller.remoting.blackhole(address(other));
  try {
    await eventually(() => caller.cluster.snapshot().unreachable.length > 0, {
      what: "the other node unreachable from the caller",
      timeoutMs: 10_000,
    });
    const ref = caller.sharding.entityRefFor<OrderCommand>("Zd", "unreachable-1");
    const expired = caller.sharding.stats.heldExpired;
    ref.tell(new Seq(1)); // held, not thrown
    const t0 = performance.now();
    await assert.rejects(ref.ask(new GetOrder(), OrderReply, 1_000), (error: unknown) => {
      assert.ok(error instanceof NoShardOwnerError, String(error));
      assert.deepEqual(error.unreachableMembers, [address(other).toString()]);
      assert.match(error.message, new RegExp(`${address(other).address.port}.*unreachable`));
      return true;
    });
    assert.ok(performance.now() - t0 >= 850, "the ask waited until (just before) its own timeout");
    await eventually(() => caller.sharding.stats.heldExpired >= expired + 2, {
      what: "the held tell expired and was counted",
      timeoutMs: 6_000,
      describe: () => caller.sharding.stats,
    });
    assert.equal(sequenceSink.get("unreachable-1"), undefined, "nothing was routed while unreachable");
  } finally {
    caller.remoting.unblackhole(address(other));
  }
});
