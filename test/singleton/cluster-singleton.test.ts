// The cluster singleton over the in-process fake cluster (sharding's test fixture).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { AbstractBehavior, type ActorContext, STOP, UniqueAddress } from "../../src/actor/index.ts";
import { ClusterSingleton, ClusterSingletonConfigurationError } from "../../src/singleton/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster } from "../sharding/fixtures/fake-cluster.ts";

abstract class TickerCommand {}
class Tick extends TickerCommand {}
class WhereAreYou extends TickerCommand {}
class TickerReply {
  constructor(
    readonly host: string,
    readonly ticks: number,
    readonly incarnation: number,
  ) {}
}
abstract class OtherCommand {}

const created: string[] = [];

class Ticker extends AbstractBehavior<TickerCommand> {
  private ticks = 0;
  private readonly incarnation: number;
  constructor(private readonly host: string) {
    super();
    created.push(host);
    this.incarnation = created.length;
  }
  receive(message: TickerCommand, ctx: ActorContext<TickerCommand>): void {
    if (message instanceof Tick) this.ticks++;
    else if (message instanceof WhereAreYou) ctx.sender?.tell(new TickerReply(this.host, this.ticks, this.incarnation));
  }
}

const cluster = new FakeCluster([Tick, WhereAreYou, TickerReply]);
after(() => cluster.shutdown());
const a = cluster.addNode("single-a");
const b = cluster.addNode("single-b", { roles: ["worker"] });
const options = { activationInterval: 20 };
const refA = ClusterSingleton.get(a.system).init("ticker", TickerCommand, options, () => new Ticker("single-a"));
const refB = ClusterSingleton.get(b.system).init("ticker", TickerCommand, options, () => new Ticker("single-b"));

test("one instance cluster-wide, activated eagerly by the lowest node, reached through the ref from every node", async () => {
  await eventually(() => created.length === 1, { what: "eager activation", describe: () => created });
  assert.deepEqual(created, ["single-a"], "the lowest Up node owns it");
  assert.equal(ClusterSingleton.get(a.system).stats.activations, 1);
  refB.tell(new Tick());
  refA.tell(new Tick());
  await eventually(async () => (await refB.ask(new WhereAreYou(), TickerReply, 3_000)).ticks === 2, { what: "ticks" });
  const reply = await refA.ask(new WhereAreYou(), TickerReply, 3_000);
  assert.deepEqual(reply, new TickerReply("single-a", 2, 1));
  // b learns the owner from the coordinator's published plan, which may arrive after the asks were answered.
  await eventually(() => refB.owner()?.equals(a.address) === true, { what: "b's plan view naming a as the owner" });
  assert.equal(refA.isLocallyOwned(), true);
  assert.equal(refB.isLocallyOwned(), false);
  assert.equal(created.length, 1, "still one");
  const stats = ClusterSingleton.get(b.system).stats;
  assert.equal(stats.registrations, 1);
  assert.equal(stats.asks >= 1 && stats.tells === 1, true);
});

test("a lower address joining later neither moves it nor starts a second instance", async () => {
  const low = cluster.addNode("single-0");
  assert.ok(UniqueAddress.compare(low.address, a.address) < 0, "the newcomer sorts below the owner");
  const refLow = ClusterSingleton.get(low.system).init("ticker", TickerCommand, options, () => new Ticker("single-0"));
  // The newcomer is now the lowest Up node, so both the sharding coordinator and the activation coordinator: its
  // eager activations must find the instance where the recovered plan keeps it.
  await eventually(() => ClusterSingleton.get(low.system).stats.activationAttempts >= 3, {
    what: "activation attempts by the newcomer",
  });
  await eventually(() => refLow.owner() !== null, { what: "the newcomer's plan (after its bootstrap as coordinator)" });
  assert.equal(refLow.owner()?.toString(), a.address.toString(), "the recovered plan keeps it in place");
  const reply = await refLow.ask(new WhereAreYou(), TickerReply, 3_000);
  assert.equal(reply.host, "single-a", "still on the first owner");
  assert.equal(reply.incarnation, 1, "the same instance");
  assert.deepEqual(created, ["single-a"], "never a second instance");
  assert.equal(ClusterSingleton.get(low.system).stats.activations, 0, "its activations found the instance alive");
  // Out again, so that the later tests see the two-node cluster they expect.
  low.setStatus("Removed");
  cluster.emit();
  await eventually(
    async () => {
      try {
        return (await refB.ask(new WhereAreYou(), TickerReply, 1_000)).host === "single-a";
      } catch {
        return false;
      }
    },
    { what: "routing through the old coordinator again", describe: () => [refA.owner(), refB.owner()] },
  );
});

test("a failed activation is counted and its error kept for lastActivationError", async () => {
  const singletons = ClusterSingleton.get(a.system);
  // No member has the role, so every eager activation is refused.
  singletons.init("orphan", TickerCommand, { roles: ["nobody"], activationInterval: 20 }, () => new Ticker("x"));
  assert.equal(singletons.lastActivationError("orphan"), null);
  await eventually(() => singletons.lastActivationError("orphan") !== null, { what: "a failed activation" });
  assert.match(singletons.lastActivationError("orphan")!, /^NoShardOwnerError: /);
  assert.ok(singletons.stats.activationFailures >= 1);
  assert.equal(singletons.lastActivationError("never-registered"), null);
});

test("init returns the same ref for the same settings and refuses different ones", () => {
  const again = ClusterSingleton.get(a.system).init("ticker", TickerCommand, options, () => new Ticker("x"));
  assert.equal(again, refA);
  assert.throws(
    () =>
      ClusterSingleton.get(a.system).init("ticker", TickerCommand, { activationInterval: 30 }, () => new Ticker("x")),
    (e: unknown) =>
      e instanceof ClusterSingletonConfigurationError &&
      e.field === "settings" &&
      e.message.startsWith("Cluster singleton ticker: already registered with different settings; use the same"),
  );
  assert.throws(
    () =>
      ClusterSingleton.get(a.system).init(
        "ticker",
        OtherCommand as unknown as typeof TickerCommand,
        options,
        () => new Ticker("x"),
      ),
    (e: unknown) => e instanceof ClusterSingletonConfigurationError && e.field === "messageType",
  );
  assert.throws(() => ClusterSingleton.get(a.system).init("x", TickerCommand, { roles: [""] }, () => new Ticker("x")), {
    name: "ClusterSingletonConfigurationError",
  });
});

test("STOP passivates it and the activation loop re-creates it behind the same ref", async () => {
  const before = created.length;
  refB.sendSystem(STOP);
  await eventually(() => created.length === before + 1, { what: "re-creation" });
  const reply = await refB.ask(new WhereAreYou(), TickerReply, 3_000);
  assert.equal(reply.ticks, 0, "a fresh instance");
  assert.equal(reply.incarnation, before + 1);
  await eventually(() => ClusterSingleton.get(a.system).stats.reactivations >= 1, { what: "counted" });
  assert.equal(ClusterSingleton.get(b.system).stats.stopRequests, 1);
});

test("roles constrain the owner", async () => {
  const workers: string[] = [];
  class Worker extends Ticker {
    constructor(host: string) {
      super(host);
      workers.push(host);
    }
  }
  const roles = { roles: ["worker"], activationInterval: 20 };
  const wa = ClusterSingleton.get(a.system).init("worker", TickerCommand, roles, () => new Worker("single-a"));
  ClusterSingleton.get(b.system).init("worker", TickerCommand, roles, () => new Worker("single-b"));
  await eventually(() => workers.length === 1, { what: "activation on the worker" });
  assert.deepEqual(workers, ["single-b"]);
  assert.equal((await wa.ask(new WhereAreYou(), TickerReply, 3_000)).host, "single-b");
});

test("a node that disagrees on the message type has its envelopes rejected with the sharding error", async () => {
  const c = cluster.addNode("single-c");
  const refC = ClusterSingleton.get(c.system).init(
    "ticker",
    OtherCommand as unknown as typeof TickerCommand,
    options,
    () => new Ticker("single-c"),
  );
  await assert.rejects(refC.ask(new WhereAreYou(), TickerReply, 3_000), (e: unknown) => {
    const error = e as { name: string; remoteClass?: string };
    return (error.remoteClass ?? error.name) === "ClusterShardingConfigurationError";
  });
  assert.ok(ClusterSingleton.get(c.system).stats.routingRejections >= 1);
  c.setStatus("Removed");
});

test("the owner leaving gracefully moves it; the ref keeps working", async () => {
  const before = created.length;
  a.setStatus("Leaving");
  await eventually(() => refB.owner()?.equals(b.address) === true, { what: "the plan to move it", timeoutMs: 10_000 });
  await eventually(() => created.length === before + 1, { what: "re-created on b" });
  assert.equal(created.at(-1), "single-b");
  const reply = await refB.ask(new WhereAreYou(), TickerReply, 3_000);
  assert.equal(reply.host, "single-b");
  assert.ok(ClusterSingleton.get(b.system).stats.ownerChanges >= 1);
});
