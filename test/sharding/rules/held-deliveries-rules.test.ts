// Held deliveries (docs/protocol.md §8.6) as rules of the node core, fed by hand with time passed in: while there is
// no converged coordinator a caller's delivery waits in order, bounded by a count per shard and a deadline, and is
// routed once a coordinator exists; awaitCoordinator false keeps the immediate failure; an unreachable member is
// named when the wait ends; a hop-0 envelope at a coordinator in transition is held, never guessed (a stepped-down
// coordinator relays it on its caller's flush marker: coordinator-flush-rules.test.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import { type ActorRef, Address, UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { NoShardOwnerError, ShardingSettings, type ShardingSettingsOptions } from "../../../src/sharding/index.ts";
import { ShardingEnvelope } from "../../../src/sharding/internal/index.ts";
import type { ShardingClusterSnapshot } from "../../../src/sharding/membership.ts";
import { HeldDeliveries, type HeldDelivery } from "../../../src/sharding/node/held-deliveries.ts";
import {
  type Delivery,
  type NodeEffect,
  type NodeInput,
  type NodeState,
  type NodeTimer,
  newNodeState,
  step,
} from "../../../src/sharding/node/node-core.ts";

const node = (port: number) => new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", port), `u${port}`);
const [a, b, c] = [node(2551), node(2552), node(2553)];
const member = (address: UniqueAddress, status = "Up"): ShardingMember => ({
  uniqueAddress: address,
  status,
  roles: [],
});
const type = "Order";

function view(
  self: UniqueAddress,
  members: ShardingMember[],
  options: { converged?: boolean; unreachable?: UniqueAddress[] } = {},
): ShardingClusterSnapshot {
  return { self, members, unreachable: options.unreachable ?? [], converged: options.converged ?? true };
}

const allUp = (self: UniqueAddress) => view(self, [member(a), member(b), member(c)]);
const reconverging = (self: UniqueAddress) => view(self, [member(a), member(b), member(c)], { converged: false });

/** A node core driven by hand: every step's effects are kept, time is whatever the test says. */
class Driven {
  state: NodeState;
  readonly settings: ShardingSettings;
  private calls = 0;
  constructor(
    self: UniqueAddress,
    options: ShardingSettingsOptions = {},
    first: ShardingClusterSnapshot = reconverging(self),
  ) {
    this.state = newNodeState(self);
    this.settings = ShardingSettings.create({ shardCount: 8, ...options });
    this.feed({ kind: "membershipChanged", snapshot: first }, 0);
    this.feed({ kind: "register", name: type, settings: this.settings }, 0);
  }

  feed(input: NodeInput, nowMs: number): NodeEffect[] {
    const [state, effects] = step(this.state, input, nowMs);
    this.state = state;
    return effects;
  }

  /** A local caller's tell (askTimeoutMs null) or ask to `entityId`. */
  call(entityId: string, nowMs: number, askTimeoutMs: number | null = null): [Delivery, NodeEffect[]] {
    const d = this.delivery(entityId, askTimeoutMs);
    return [d, this.feed({ kind: "route", delivery: d, countsRemoteRoute: true }, nowMs)];
  }

  delivery(entityId: string, askTimeoutMs: number | null = null): Delivery {
    const shard = this.settings.partitioner.shardFor(type, entityId, this.settings.shardCount);
    const envelope = new ShardingEnvelope(
      "User",
      type,
      entityId,
      shard,
      this.settings.key,
      0,
      null,
      askTimeoutMs,
      true,
      null,
    );
    // A distinct stand-in sender per call, so two deliveries to one entity differ and assertions compare identities.
    return { envelope, sender: { path: `caller-${++this.calls}` } as unknown as ActorRef<unknown> };
  }

  get stats() {
    return this.state.counters;
  }
}

const forwards = (effects: NodeEffect[]) =>
  effects.flatMap((e) =>
    e.kind === "forward" ? [{ to: e.to.toString(), id: e.envelope.entityId, d: e.delivery }] : [],
  );
const failures = (effects: NodeEffect[], kind: "reject" | "refuse") =>
  effects.flatMap((e) => (e.kind === kind ? [{ d: e.delivery, error: e.error }] : []));
const sweeps = (effects: NodeEffect[]) =>
  effects.flatMap((e) =>
    e.kind === "schedule" && e.timer.kind === "heldSweep" ? [{ afterMs: e.afterMs, timer: e.timer as NodeTimer }] : [],
  );

test("while membership re-converges a caller's deliveries are held, then routed in their order once it converges", () => {
  const n = new Driven(c);
  const calls = ["e1", "e2", "e1", "e3", "e1"].map((id, i) => n.call(id, 10 * i, i === 3 ? 3_000 : null));
  for (const [, effects] of calls) {
    assert.deepEqual(forwards(effects), [], "nothing routed without a converged coordinator");
    assert.deepEqual(failures(effects, "refuse"), [], "nothing failed");
  }
  assert.equal(n.stats.heldDeliveries, 5);
  assert.equal(sweeps(calls[0]![1]).length, 1, "the first hold arms the type's one sweep");
  assert.equal(sweeps(calls[1]![1]).length, 0, "a later deadline arms no other timer");
  const converged = n.feed({ kind: "membershipChanged", snapshot: allUp(c) }, 100);
  const routed = forwards(converged);
  assert.deepEqual(
    routed.map((f) => f.to),
    Array(5).fill(a.toString()),
    "all to the elected coordinator",
  );
  const sent = calls.map(([d]) => d);
  // Per shard in arrival order: each entity's own deliveries keep their order.
  for (const id of ["e1", "e2", "e3"]) {
    assert.deepEqual(
      routed.filter((f) => f.id === id).map((f) => f.d),
      sent.filter((d) => d.envelope.entityId === id),
      `${id} in order`,
    );
  }
  assert.equal(n.stats.remoteRoutes, 5, "counted as remote routes once they went");
  // A later call goes straight through, behind them.
  const [, later] = n.call("e1", 110);
  assert.equal(forwards(later).length, 1);
});

test("a call arriving while deliveries are held for its shard goes behind them, even in the step the view converges", () => {
  const n = new Driven(c);
  const [first] = n.call("e1", 0);
  // The shell hands the core a new view before the next input: the held delivery goes before the new call.
  n.feed({ kind: "view", snapshot: allUp(c) }, 5);
  const [second, effects] = n.call("e1", 5);
  assert.deepEqual(
    forwards(effects).map((f) => f.d),
    [first, second],
  );
});

test("a shard holds at most heldDeliveriesPerShard: the next call fails at once and is counted; other shards still hold", () => {
  const n = new Driven(c, { heldDeliveriesPerShard: 2 });
  n.call("e1", 0);
  n.call("e1", 1);
  const [third, effects] = n.call("e1", 2);
  const refused = failures(effects, "refuse");
  assert.equal(refused.length, 1);
  assert.equal(refused[0]!.d, third);
  assert.ok(refused[0]!.error instanceof NoShardOwnerError && refused[0]!.error.shardId === -1);
  assert.equal(n.stats.heldRefused, 1);
  assert.equal(n.stats.rejectedEnvelopes, 1);
  const other = ["e2", "e3", "e4", "e5"].find((id) => n.delivery(id).envelope.shardId !== third.envelope.shardId)!;
  assert.deepEqual(failures(n.call(other, 3)[1], "refuse"), [], "another shard has room");
  assert.equal(n.stats.heldDeliveries, 3);
});

test("a held delivery past its deadline is rejected: a tell at heldDeliveryTimeout, an ask at its own shorter timeout", () => {
  const n = new Driven(c, { heldDeliveryTimeout: 1_000 });
  const [tell, e1] = n.call("e1", 0);
  const [ask, e2] = n.call("e2", 100, 300);
  const [tellSweep] = sweeps(e1);
  const [askSweep] = sweeps(e2);
  assert.equal(tellSweep!.afterMs, 1_000);
  assert.equal(askSweep!.afterMs, 300, "the earlier deadline re-arms the sweep");
  const atAsk = n.feed({ kind: "timer", timer: askSweep!.timer }, 400);
  assert.deepEqual(
    failures(atAsk, "reject").map((r) => r.d),
    [ask],
  );
  const [next] = sweeps(atAsk);
  assert.equal(next!.afterMs, 600, "re-armed for the tell's deadline");
  assert.deepEqual(failures(n.feed({ kind: "timer", timer: tellSweep!.timer }, 1_000), "reject"), [], "stale timer");
  const atTell = n.feed({ kind: "timer", timer: next!.timer }, 1_000);
  const rejected = failures(atTell, "reject");
  assert.deepEqual(
    rejected.map((r) => r.d),
    [tell],
  );
  assert.ok(rejected[0]!.error instanceof NoShardOwnerError);
  assert.equal(n.stats.heldExpired, 2);
  assert.equal(n.stats.rejectedEnvelopes, 2);
  assert.deepEqual(forwards(n.feed({ kind: "membershipChanged", snapshot: allUp(c) }, 1_100)), [], "nothing left");
});

test("awaitCoordinator false keeps the immediate failure: the call is refused, nothing held", () => {
  const n = new Driven(c, { awaitCoordinator: false });
  const [d, effects] = n.call("e1", 0);
  const refused = failures(effects, "refuse");
  assert.equal(refused.length, 1);
  assert.equal(refused[0]!.d, d);
  assert.ok(refused[0]!.error instanceof NoShardOwnerError && refused[0]!.error.entityType === "cluster");
  assert.equal(n.stats.heldDeliveries, 0);
  assert.deepEqual(sweeps(effects), []);
});

test("with an unreachable member the wait ends at its deadline and the error names the member", () => {
  const n = new Driven(
    c,
    { heldDeliveryTimeout: 500 },
    view(c, [member(a), member(b), member(c)], { unreachable: [b] }),
  );
  const [d, effects] = n.call("e1", 0, 2_000);
  assert.deepEqual(failures(effects, "refuse"), [], "held, not refused");
  const expired = failures(n.feed({ kind: "timer", timer: sweeps(effects)[0]!.timer }, 500), "reject");
  assert.equal(expired.length, 1);
  assert.equal(expired[0]!.d, d);
  const error = expired[0]!.error;
  assert.ok(error instanceof NoShardOwnerError);
  assert.equal(error.unreachableMember, b.toString());
  assert.match(error.message, new RegExp(`member ${b.toString().replace(/[.#]/g, "\\$&")} is unreachable`));
  // Immediate failure names it too.
  const impatient = new Driven(
    c,
    { awaitCoordinator: false },
    view(c, [member(a), member(b), member(c)], { unreachable: [b] }),
  );
  const refused = failures(impatient.call("e1", 0)[1], "refuse");
  assert.equal((refused[0]!.error as NoShardOwnerError).unreachableMember, b.toString());
});

test("a Leaving node's own callers fail at once: it never routes again, so waiting cannot help", () => {
  const n = new Driven(c, {}, view(c, [member(a), member(b), member(c, "Leaving")]));
  const refused = failures(n.call("e1", 0)[1], "refuse");
  assert.equal(refused.length, 1);
  assert.equal(n.stats.heldDeliveries, 0);
});

test("a Joining node's callers wait until the node is Up", () => {
  const n = new Driven(c, {}, view(c, [member(a), member(b), member(c, "Joining")]));
  const [d, effects] = n.call("e1", 0);
  assert.deepEqual(failures(effects, "refuse"), []);
  assert.deepEqual(
    forwards(n.feed({ kind: "membershipChanged", snapshot: allUp(c) }, 50)).map((f) => f.d),
    [d],
  );
});

test("a new coordinator collecting snapshots holds its callers' and other nodes' hop-0 deliveries, then routes them in order", () => {
  // a is the lowest address: elected once converged; its first reconcile starts a 500 ms snapshot bootstrap.
  const n = new Driven(a);
  n.feed({ kind: "membershipChanged", snapshot: allUp(a) }, 0);
  const fromB = n.delivery("e1");
  const held = n.feed({ kind: "envelope", delivery: fromB, origin: b }, 10);
  assert.deepEqual(failures(held, "reject"), [], "not rejected while the plan is bootstrapping");
  const [own] = n.call("e1", 20);
  assert.equal(n.stats.heldDeliveries, 2);
  const published = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  const dispatched = published.flatMap((e) =>
    e.kind === "forward" ? [e.delivery] : e.kind === "deliver" ? e.deliveries : [],
  );
  // Two senders: each keeps its own order; the two queues (this node's callers, other nodes') flush one after the other.
  assert.deepEqual(new Set(dispatched), new Set([fromB, own]), "both routed once the plan is authored");
  assert.equal(dispatched.length, 2);
  assert.ok(n.state.types.get(type)!.plan.author?.equals(a));
});

test("a hop-0 envelope at a former coordinator waits there for its caller's flush marker, neither rejected nor sent on at once", () => {
  // a left the Up set (Leaving): b is elected in a's converged view. Sending it on at once could put it behind the
  // caller's later messages, which may already go to b; the marker relays it in order (coordinator-flush-rules).
  const n = new Driven(a, {}, view(a, [member(a, "Leaving"), member(b), member(c)]));
  const fromC = n.delivery("e1");
  const effects = n.feed({ kind: "envelope", delivery: fromC, origin: c }, 0);
  assert.deepEqual(forwards(effects), []);
  assert.deepEqual(failures(effects, "reject"), []);
  assert.equal(n.stats.heldDeliveries, 1);
});

test("deliveries held at a coordinator whose view then elects another keep waiting for their callers' markers", () => {
  const n = new Driven(a);
  const fromC = n.delivery("e1");
  assert.deepEqual(failures(n.feed({ kind: "envelope", delivery: fromC, origin: c }, 0), "reject"), []);
  const stepped = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a, "Leaving"), member(b), member(c)]) },
    10,
  );
  assert.deepEqual(forwards(stepped), []);
  assert.deepEqual(failures(stepped, "reject"), []);
  assert.deepEqual(
    n.state.types
      .get(type)!
      .heldForwarded.list()
      .map((h) => h.delivery),
    [fromC],
  );
});

test("a hop-0 envelope reaching a node whose view is re-converging is held there and routed once it converges", () => {
  const n = new Driven(a);
  const fromC = n.delivery("e1");
  const held = n.feed({ kind: "envelope", delivery: fromC, origin: c }, 0);
  assert.deepEqual(failures(held, "reject"), []);
  assert.equal(n.stats.heldDeliveries, 1);
});

test("stop rejects what is held", () => {
  const n = new Driven(c);
  const [d] = n.call("e1", 0);
  assert.deepEqual(
    failures(n.feed({ kind: "stop" }, 1), "reject").map((r) => r.d),
    [d],
  );
});

test("the held queues themselves: at least one per shard, expiry takes only what is due and keeps the rest in order, the next deadline is the earliest held", () => {
  for (const bad of [0, -1, 1.5, Number.NaN]) assert.throws(() => new HeldDeliveries<string>(bad), `${bad} per shard`);
  const one = new HeldDeliveries<string>(1);
  const at = (delivery: string, deadlineMs: number): HeldDelivery<string> => ({
    delivery,
    deadlineMs,
    origin: null,
    countsRemoteRoute: false,
  });
  assert.equal(one.hold(1, at("x", 10)), true);
  assert.equal(one.hold(1, at("y", 10)), false, "the second delivery of a shard holding one is refused");

  const held = new HeldDeliveries<string>(8);
  held.hold(1, at("s1-late", 300));
  held.hold(1, at("s1-early", 100));
  held.hold(1, at("s1-mid", 200));
  held.hold(2, at("s2-mid", 200));
  held.hold(2, at("s2-late", 400));
  assert.equal(held.nextDeadlineMs(), 100, "the earliest deadline, wherever it is held");
  const names = (hs: HeldDelivery<string>[]) => hs.map((h) => h.delivery);
  assert.deepEqual(names(held.expire(99)), []);
  assert.deepEqual(names(held.expire(100)), ["s1-early"], "a deadline at `now` is due");
  assert.equal(held.size, 4);
  assert.deepEqual(names(held.list()), ["s1-late", "s1-mid", "s2-mid", "s2-late"], "the rest keep their order");
  assert.equal(held.nextDeadlineMs(), 200);
  assert.deepEqual(names(held.expire(200)), ["s1-mid", "s2-mid"]);
  assert.deepEqual(names(held.list()), ["s1-late", "s2-late"]);
  assert.equal(held.size, 2);
  assert.equal(held.nextDeadlineMs(), 300);
  assert.deepEqual(names(held.expire(1_000)), ["s1-late", "s2-late"]);
  assert.equal(held.size, 0);
  assert.equal(held.nextDeadlineMs(), null);
  assert.deepEqual(held.list(), []);
});

test("the held queues: entries put back in front keep their order ahead of what the shard holds, as many as fit the shard's bound; the latest of the rest are returned", () => {
  const at = (delivery: string): HeldDelivery<string> => ({
    delivery,
    deadlineMs: 100,
    origin: null,
    countsRemoteRoute: false,
  });
  const held = new HeldDeliveries<string>(4);
  held.hold(1, at("held-1"));
  held.hold(1, at("held-2"));
  const rest = held.holdFront(1, [at("front-1"), at("front-2"), at("front-3")]);
  assert.deepEqual(
    rest.map((h) => h.delivery),
    ["front-3"],
    "two of four places were free",
  );
  assert.deepEqual(
    held.list().map((h) => h.delivery),
    ["front-1", "front-2", "held-1", "held-2"],
  );
  assert.equal(held.size, 4);
  assert.equal(held.countOf(1), 4);
  // A full shard keeps none; another shard takes them all.
  assert.equal(held.holdFront(1, [at("late")]).length, 1);
  assert.deepEqual(held.holdFront(2, [at("other")]), []);
  assert.equal(held.size, 5);
});
