// The flush of a coordinator change (docs/protocol.md §8.7) as rules of the node core, fed by hand with time passed
// in. When a caller's coordinator changes from A to B, its new deliveries wait while a flush marker follows its last
// envelopes to A; A, no longer coordinator, relays the caller's envelopes it still holds (and what its handoff
// buffers held of them) to B in order, then the marker; B answers the caller, which then sends to B. Nothing is
// relayed twice, a gone A releases the caller at once, and a lost marker is sent again.
import assert from "node:assert/strict";
import { test } from "node:test";
import { type ActorRef, Address, UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { newHandoff } from "../../../src/sharding/handoff/handoff.ts";
import { NoShardOwnerError, ShardingSettings, type ShardingSettingsOptions } from "../../../src/sharding/index.ts";
import { attachTyped, typedOf } from "../../../src/sharding/internal/codec.ts";
import {
  CoordinatorFlush,
  CoordinatorFlushed,
  PlanSnapshot,
  PlanUpdate,
  ShardingEnvelope,
} from "../../../src/sharding/internal/index.ts";
import type { ShardingClusterSnapshot } from "../../../src/sharding/membership.ts";
import {
  type ControlMessage,
  type Delivery,
  type NodeEffect,
  type NodeInput,
  type NodeState,
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

function view(self: UniqueAddress, members: ShardingMember[]): ShardingClusterSnapshot {
  return { self, members, unreachable: [], converged: true };
}
/** a coordinates. */
const allUp = (self: UniqueAddress) => view(self, [member(a), member(b), member(c)]);
/** a left the Up set: b coordinates. */
const aLeaving = (self: UniqueAddress) => view(self, [member(a, "Leaving"), member(b), member(c)]);

/** A node core driven by hand: every step's effects are returned, time is whatever the test says. */
class Driven {
  state: NodeState;
  readonly settings: ShardingSettings;
  private calls = 0;
  constructor(self: UniqueAddress, first: ShardingClusterSnapshot, options: ShardingSettingsOptions = {}) {
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

  /** A local caller's tell to `entityId`. */
  call(entityId: string, nowMs: number): [Delivery, NodeEffect[]] {
    const d = this.delivery(entityId);
    return [d, this.feed({ kind: "route", delivery: d, countsRemoteRoute: true }, nowMs)];
  }

  delivery(entityId: string): Delivery {
    const shard = this.settings.partitioner.shardFor(type, entityId, this.settings.shardCount);
    const envelope = new ShardingEnvelope("User", type, entityId, shard, this.settings.key, 0, null, null, true, null);
    return { envelope, sender: { path: `caller-${++this.calls}` } as unknown as ActorRef<unknown> };
  }

  /** An envelope `d` arriving from `origin` (its delivery carries the origin, as the shell's does). */
  receive(d: Delivery, origin: UniqueAddress, nowMs: number): NodeEffect[] {
    return this.feed({ kind: "envelope", delivery: { ...d, origin }, origin }, nowMs);
  }

  control(message: ControlMessage, origin: UniqueAddress, nowMs: number): NodeEffect[] {
    return this.feed({ kind: "control", message, replyTo: null, origin }, nowMs);
  }

  get t() {
    return this.state.types.get(type)!;
  }
}

const forwards = (effects: NodeEffect[]) =>
  effects.flatMap((e) => (e.kind === "forward" ? [{ to: e.to.toString(), envelope: e.envelope, d: e.delivery }] : []));
const sends = (effects: NodeEffect[]) =>
  effects.flatMap((e) => (e.kind === "send" ? [{ to: e.to.toString(), message: e.message }] : []));
const markers = (effects: NodeEffect[]) =>
  sends(effects).flatMap((s) => (s.message instanceof CoordinatorFlush ? [{ to: s.to, marker: s.message }] : []));
const rejects = (effects: NodeEffect[]) =>
  effects.flatMap((e) => (e.kind === "reject" || e.kind === "refuse" ? [{ d: e.delivery, error: e.error }] : []));
/** Effects in order, as "forward <entity> to <port>" and "send <Class> to <port>" lines. */
const sequence = (effects: NodeEffect[]) =>
  effects.flatMap((e) =>
    e.kind === "forward"
      ? [`forward ${e.envelope.entityId} to ${e.to.address.port}`]
      : e.kind === "send"
        ? [`send ${e.message.constructor.name} to ${e.to.address.port}`]
        : [],
  );

/** A caller (c) that routed through a, then saw b elected. */
function callerAfterChange(): { n: Driven; sentBefore: Delivery; held: Delivery[]; effects: NodeEffect[] } {
  const n = new Driven(c, allUp(c));
  const [sentBefore, before] = n.call("e1", 0);
  assert.deepEqual(
    forwards(before).map((f) => f.to),
    [a.toString()],
    "routed through a",
  );
  // The flush starts with the change (its marker among these effects); the calls after it are held.
  const changed = n.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 10);
  const [first, firstEffects] = n.call("e1", 20);
  const [second, secondEffects] = n.call("e2", 21);
  return { n, sentBefore, held: [first, second], effects: [...changed, ...firstEffects, ...secondEffects] };
}

test("a caller whose coordinator changes holds its new deliveries and sends a flush marker to the old coordinator", () => {
  const { n, effects } = callerAfterChange();
  assert.deepEqual(forwards(effects), [], "nothing goes to b before the flush is answered");
  assert.deepEqual(rejects(effects), []);
  const [sent] = markers(effects);
  assert.equal(sent?.to, a.toString(), "to a, behind the envelopes already sent there");
  assert.equal(sent.marker.caller, c.toString());
  assert.equal(sent.marker.target, b.toString());
  assert.equal(n.state.counters.heldDeliveries, 2);
});

test("the caller releases its held deliveries to the new coordinator, in order, once it answers; a stale answer releases nothing", () => {
  const { n, held, effects } = callerAfterChange();
  const token = markers(effects)[0]!.marker.token;
  const stale = n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), token + 100), b, 30);
  assert.deepEqual(forwards(stale), []);
  const answered = n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), token), b, 40);
  assert.deepEqual(
    forwards(answered).map((f) => [f.to, f.d]),
    held.map((d) => [b.toString(), d]),
  );
  const [later, direct] = n.call("e1", 50);
  assert.deepEqual(
    forwards(direct).map((f) => [f.to, f.d]),
    [[b.toString(), later]],
    "then straight to b",
  );
});

test("an answer from another node than the marker's target is refused and releases nothing", () => {
  const { n, effects } = callerAfterChange();
  const token = markers(effects)[0]!.marker.token;
  const forged = n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), token), a, 30);
  assert.deepEqual(forwards(forged), []);
  assert.equal(
    forged.filter((e) => e.kind === "refused").length,
    1,
    "refused: the answer must come from the coordinator it names",
  );
});

test("the old coordinator holds a stepped-down caller's envelopes, then relays them in order and the marker behind them to the target", () => {
  // a's view elects b; c still sends to a.
  const n = new Driven(a, aLeaving(a));
  const ds = ["e1", "e2", "e1"].map((id) => n.delivery(id));
  for (const [i, d] of ds.entries()) assert.deepEqual(rejects(n.receive(d, c, i)), [], "held, not rejected");
  const fromB = n.delivery("e3");
  n.receive(fromB, b, 3);
  const marker = new CoordinatorFlush(type, n.settings.key, c.toString(), b.toString(), 7);
  const relayed = n.control(marker, c, 10);
  assert.deepEqual(sequence(relayed).at(-1), "send CoordinatorFlush to 2552", "the marker behind them");
  const sent = forwards(relayed);
  assert.deepEqual(
    new Set(sent.map((f) => f.d.envelope)),
    new Set(ds.map((d) => d.envelope)),
    "the caller's envelopes, nobody else's",
  );
  assert.deepEqual(
    sent.filter((f) => f.envelope.entityId === "e1").map((f) => f.d.envelope),
    [ds[0]!.envelope, ds[2]!.envelope],
    "each entity's in order",
  );
  for (const f of sent) {
    assert.equal(f.envelope.hopCount, 0, "still hop 0: b routes them as coordinator");
    assert.equal(f.envelope.coordinator, a.toString(), "naming the relay");
  }
  assert.equal(n.t.heldForwarded.size, 1, "b's own envelope waits for b's own marker");
});

test("the new coordinator answers a relayed marker to the caller; a node whose view elects another does not", () => {
  const n = new Driven(b, aLeaving(b));
  const marker = new CoordinatorFlush(type, n.settings.key, c.toString(), b.toString(), 7);
  const answered = sends(n.control(marker, a, 10));
  assert.equal(answered.length, 1);
  assert.equal(answered[0]!.to, c.toString());
  assert.ok(answered[0]!.message instanceof CoordinatorFlushed && answered[0]!.message.token === 7);
  // c's marker relayed to c... a node that does not coordinate in its own view leaves the caller to retry.
  const behind = new Driven(c, allUp(c));
  const toC = new CoordinatorFlush(type, behind.settings.key, b.toString(), c.toString(), 3);
  assert.deepEqual(sends(behind.control(toC, a, 10)), []);
});

test("an envelope relayed once is not relayed again: at a node whose view elects another coordinator it fails closed", () => {
  const n = new Driven(b, view(b, [member(a), member(b), member(c)]));
  // a coordinates in b's view: an envelope relayed to b by c fails at once.
  const d = n.delivery("e1");
  const relayed = { envelope: d.envelope.relayedBy(c), sender: d.sender };
  const effects = n.receive(relayed, c, 0);
  assert.deepEqual(forwards(effects), []);
  assert.equal(rejects(effects).length, 1);
  assert.ok(rejects(effects)[0]!.error instanceof NoShardOwnerError);
  // One that names another relay than its transport origin is refused too.
  const forged = n.receive({ envelope: d.envelope.relayedBy(a), sender: d.sender }, c, 1);
  assert.equal(rejects(forged).length, 1);
});

test("when the old coordinator is Down the caller releases its held deliveries at once", () => {
  const { n, held } = callerAfterChange();
  const down = view(c, [member(a, "Down"), member(b), member(c)]);
  const released = n.feed({ kind: "membershipChanged", snapshot: down }, 30);
  assert.deepEqual(
    forwards(released).map((f) => [f.to, f.d]),
    held.map((d) => [b.toString(), d]),
  );
});

test("when the old coordinator left the view the caller waits for its answer a bounded time, then releases", () => {
  const { n, held, effects } = callerAfterChange();
  const removed = view(c, [member(b), member(c)]);
  assert.deepEqual(forwards(n.feed({ kind: "membershipChanged", snapshot: removed }, 30)), [], "it may still relay");
  const retry = effects.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "flushRetry" ? [e.timer] : []));
  const waiting = n.feed({ kind: "timer", timer: retry[0]! }, 320);
  assert.deepEqual(markers(waiting), [], "no marker resent to a node that left: a late relay could overtake");
  const next = waiting.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "flushRetry" ? [e.timer] : []));
  assert.equal(next.length, 1, "checked again later");
  const released = n.feed({ kind: "timer", timer: next[0]! }, 20 + 1_000);
  assert.deepEqual(
    forwards(released).map((f) => [f.to, f.d]),
    held.map((d) => [b.toString(), d]),
  );
});

test("an unanswered marker is sent again with the same token (a lost marker or answer), and an answer to either copy releases", () => {
  const { n, effects } = callerAfterChange();
  const retry = effects.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "flushRetry" ? [e.timer] : []));
  assert.equal(retry.length, 1);
  const again = markers(n.feed({ kind: "timer", timer: retry[0]! }, 400));
  assert.equal(again.length, 1);
  assert.equal(again[0]!.to, a.toString());
  const first = markers(effects)[0]!.marker.token;
  // The same flush: a relay of the first copy that arrives after the resend (a slow old coordinator) still counts.
  assert.equal(again[0]!.marker.token, first);
  assert.deepEqual(
    forwards(n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), first + 1), b, 410)),
    [],
  );
  assert.equal(
    forwards(n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), first), b, 420)).length,
    2,
  );
  // A second answer (to the other copy) finds no flush: nothing more happens.
  assert.deepEqual(forwards(n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), first), b, 430)), []);
});

/** A coordinator a (elected by `first`) with an authored plan and a running handoff of e1's shard buffering a
 * delivery from c and one from a's own caller. */
function coordinatorWithHandoff(first: ShardingClusterSnapshot) {
  const n = new Driven(a, first);
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  assert.ok(n.t.plan.author?.equals(a), "a authored the plan");
  const shard = n.delivery("e1").envelope.shardId;
  n.t.handoffs.set(shard, { state: newHandoff(type, shard, a, b), token: 999, startedAtMs: 600 });
  const fromC = n.delivery("e1");
  assert.deepEqual(rejects(n.receive(fromC, c, 610)), []);
  const [own, ownEffects] = n.call("e1", 611);
  assert.deepEqual(rejects(ownEffects), []);
  assert.equal(n.t.handoffs.get(shard)!.state.buffer.length, 2, "both buffered");
  return { n, fromC, own };
}

test("a caller that was the coordinator flushes through itself: its handoff buffers of the lost term are relayed, not rejected", () => {
  const z = node(2550);
  const { n, fromC, own } = coordinatorWithHandoff(view(a, [member(a), member(b), member(c), member(z, "Joining")]));
  // z, a lower address, comes Up and coordinates: the change itself starts a flush through a itself.
  const effects = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(z)]) },
    620,
  );
  assert.deepEqual(rejects(effects), [], "nothing rejected");
  assert.deepEqual(
    sequence(effects).filter((line) => line.startsWith("forward") || line.includes("CoordinatorFlush")),
    ["forward e1 to 2550", "send CoordinatorFlush to 2550"],
    "own part, then marker",
  );
  // a's next call waits for the answer.
  const [next, nextEffects] = n.call("e1", 621);
  assert.deepEqual(forwards(nextEffects), []);
  assert.equal(forwards(effects)[0]!.d, own);
  assert.equal(n.t.handoffs.size, 0, "the handoff of the lost term ended");
  // c's part waits for c's marker.
  const relayed = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), z.toString(), 5), c, 630);
  assert.deepEqual(
    forwards(relayed).map((f) => f.d.envelope),
    [fromC.envelope],
  );
  // z answers a: a's next call goes out behind its earlier one.
  const token = markers(effects)[0]!.marker.token;
  const released = n.control(new CoordinatorFlushed(type, n.settings.key, z.toString(), token), z, 640);
  assert.deepEqual(
    forwards(released).map((f) => [f.to, f.d]),
    [[z.toString(), next]],
  );
});

test("a leaving coordinator relays its own callers' buffered deliveries at once: its callers are refused from now on", () => {
  const { n, fromC, own } = coordinatorWithHandoff(allUp(a));
  n.feed({ kind: "membershipChanged", snapshot: aLeaving(a) }, 620);
  const shard = own.envelope.shardId;
  const token = n.t.handoffs.get(shard)!.token;
  // The handoff's next attempt finds the term lost.
  const effects = n.feed({ kind: "timer", timer: { kind: "handoffAttempt", type, shard, token } }, 700);
  assert.deepEqual(rejects(effects), []);
  assert.deepEqual(
    forwards(effects).map((f) => [f.to, f.d]),
    [[b.toString(), own]],
  );
  assert.deepEqual(
    n.t.heldForwarded.list().map((h) => h.delivery.envelope),
    [fromC.envelope],
    "c's part waits for c's marker",
  );
});

test("with awaitCoordinator false a stepped-down coordinator rejects at once, as before", () => {
  const n = new Driven(a, aLeaving(a), { awaitCoordinator: false });
  const effects = n.receive(n.delivery("e1"), c, 0);
  assert.equal(rejects(effects).length, 1);
  assert.equal(n.t.heldForwarded.size, 0);
});

test("a stepped-down coordinator's held envelopes without a marker fail at their deadline", () => {
  const n = new Driven(a, aLeaving(a), { heldDeliveryTimeout: 500 });
  const d = n.delivery("e1");
  const effects = n.receive(d, c, 0);
  const sweep = effects.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "heldSweep" ? [e.timer] : []));
  const expired = rejects(n.feed({ kind: "timer", timer: sweep[0]! }, 500));
  assert.deepEqual(
    expired.map((r) => r.d.envelope),
    [d.envelope],
  );
});

test("a marker that reaches the old coordinator while its own view still makes it coordinator waits there until its term is lost", () => {
  // c's view already has z (a lower address) as coordinator; a's does not yet, and a's handoff of e1's shard buffers
  // one of c's envelopes. Relaying the marker now would release c while that envelope waits in a's handoff: it would
  // be dispatched behind c's later messages, or fail. The marker waits; when a sees z coordinate, the handoff ends,
  // its buffer is held, and c's part goes to z in front of the marker.
  const z = node(2550);
  const { n, fromC, own } = coordinatorWithHandoff(view(a, [member(a), member(b), member(c), member(z, "Joining")]));
  const early = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), z.toString(), 5), c, 620);
  assert.deepEqual(sequence(early), [], "nothing relayed, no marker sent while a still drives the handoff");
  assert.equal(n.t.handoffs.size, 1, "the handoff runs on");
  assert.equal(n.t.pendingMarkers.size, 1);
  const later = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(z)]) },
    630,
  );
  assert.deepEqual(rejects(later), [], "nothing rejected");
  const toZ = sequence(later).filter((line) => line.startsWith("forward") || line.includes("CoordinatorFlush"));
  // c's part and c's marker; then a's own caller's part, whose flush through a itself starts at once.
  assert.deepEqual(toZ, [
    "forward e1 to 2550",
    "send CoordinatorFlush to 2550",
    "forward e1 to 2550",
    "send CoordinatorFlush to 2550",
  ]);
  assert.deepEqual(
    forwards(later).map((f) => f.d.envelope),
    [fromC.envelope, own.envelope],
  );
  assert.deepEqual(
    markers(later).map((m) => m.marker.caller),
    [c.toString(), a.toString()],
  );
  assert.equal(n.t.handoffs.size, 0, "the handoff of the lost term ended");
  assert.equal(n.t.pendingMarkers.size, 0);
});

test("a handoff that gives up waiting for convergence in a settling term rejects its buffer, as before the flush", () => {
  // a is still the lowest Up member and author, only convergence is missing: nothing says another coordinator will
  // take over, so the buffer is not held for flush markers; the settling bound (docs/protocol.md §9.3) stands.
  const { n } = coordinatorWithHandoff(allUp(a));
  n.feed({ kind: "membershipChanged", snapshot: { ...allUp(a), converged: false } }, 620);
  const shard = n.delivery("e1").envelope.shardId;
  const running = n.t.handoffs.get(shard)!;
  const effects = n.feed(
    { kind: "timer", timer: { kind: "handoffRetryComplete", type, shard, token: running.token } },
    640,
  );
  const aborted = [effects];
  // Drive attempts until the handoff ends (each settling round is one timer).
  for (let i = 0; i < 50 && n.t.handoffs.has(shard); i++) {
    const timers = aborted
      .at(-1)!
      .flatMap((e) =>
        e.kind === "schedule" && (e.timer.kind === "handoffAttempt" || e.timer.kind === "handoffRetryComplete")
          ? [e.timer]
          : [],
      );
    const timer = timers[0] ?? { kind: "handoffAttempt" as const, type, shard, token: running.token };
    aborted.push(n.feed({ kind: "timer", timer }, 700 + i * 100));
  }
  assert.equal(n.t.handoffs.size, 0, "the handoff ended");
  assert.equal(rejects(aborted.flat()).length, 2, "both buffered deliveries rejected");
  assert.equal(n.t.heldForwarded.size, 0, "none held for a marker");
});

test("the flush starts with the coordinator change itself, not with the caller's next call", () => {
  // Every caller of this node may be waiting for the reply to an ask the old coordinator holds for this flush: with
  // no new call, a flush started lazily would never start, and those asks would fail at their deadline.
  const n = new Driven(c, allUp(c));
  n.call("e1", 0);
  const changed = n.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 10);
  const [sent] = markers(changed);
  assert.equal(sent?.to, a.toString(), "the marker goes to a at once");
  assert.equal(sent.marker.target, b.toString());
  // A node that never sent anything through a coordinator has nothing to flush.
  const quiet = new Driven(c, allUp(c));
  assert.deepEqual(markers(quiet.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 10)), []);
});

test("a coordinator elected while members leave publishes above a Leaving member's generation, so it can leave", () => {
  // z, a lower address, joined and coordinates with a plan of generation 1, while a (Leaving) still holds generation
  // 7 from the old coordinator: a refuses z's plan as stale and answers with its snapshot. Counting only Up members'
  // snapshots, z never published above 7, a never saw a plan without its shards, and its departure never completed
  // (the simulator's coordinator churn, seed 6).
  const z = node(2550);
  const n = new Driven(z, view(z, [member(z), member(a, "Leaving")]));
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  assert.ok(n.t.plan.author?.equals(z), "z authored the plan");
  const before = n.t.plan.generation;
  assert.ok(before < 7);
  const effects = n.control(new PlanSnapshot(type, n.settings.key, b.toString(), 7, []), a, 700);
  assert.equal(n.t.plan.generation, 8, "published above the Leaving member's generation");
  const updates = sends(effects).filter((x) => x.message instanceof PlanUpdate);
  assert.ok(
    updates.some((u) => u.to === a.toString() && (u.message as PlanUpdate).generation === 8),
    "the Leaving member gets it",
  );
});

test("the planted skipped flush takes effect: the caller routes through the new coordinator at once, with no marker", () => {
  // The simulator's proof that it catches a skipped flush (test/sim/node-sim.test.ts) needs the switch to bite.
  const n = new Driven(c, allUp(c));
  n.state = { ...n.state, bugs: { skipCoordinatorFlush: true } };
  n.call("e1", 0);
  const changed = n.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 10);
  const [, effects] = n.call("e1", 20);
  assert.deepEqual(markers([...changed, ...effects]), [], "no flush marker");
  assert.deepEqual(
    forwards(effects).map((f) => f.to),
    [b.toString()],
    "straight to the new coordinator",
  );
  assert.equal(n.state.counters.heldDeliveries, 0);
});

test("a lost term's handoff buffer is held with each delivery's own deadline: counted once each, the sweep armed for the earliest, what exceeds the shard's bound rejected", () => {
  const z = node(2550);
  const n = new Driven(a, view(a, [member(a), member(b), member(c), member(z, "Joining")]), {
    heldDeliveryTimeout: 5_000,
    heldDeliveriesPerShard: 2,
  });
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  assert.ok(n.t.plan.author?.equals(a), "a authored the plan");
  const shard = n.delivery("e1").envelope.shardId;
  n.t.handoffs.set(shard, { state: newHandoff(type, shard, a, b), token: 999, startedAtMs: 600 });
  const tell = n.delivery("e1");
  const base = n.delivery("e1");
  const e = base.envelope;
  const ask: Delivery = {
    envelope: new ShardingEnvelope(
      e.kind,
      e.entityType,
      e.entityId,
      e.shardId,
      e.settingsKey,
      0,
      null,
      300,
      false,
      null,
    ),
    sender: base.sender,
  };
  const over = n.delivery("e1");
  for (const d of [tell, ask, over]) assert.deepEqual(rejects(n.receive(d, c, 610)), []);
  assert.equal(n.t.handoffs.get(shard)!.state.buffer.length, 3, "all three buffered");
  // z, a lower address, comes Up and coordinates; a's handoff finds its term lost at its next attempt.
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(z)]) }, 620);
  const before = { held: n.state.counters.heldDeliveries, refused: n.state.counters.heldRefused };
  const effects = n.feed({ kind: "timer", timer: { kind: "handoffAttempt", type, shard, token: 999 } }, 700);
  assert.equal(n.t.handoffs.has(shard), false, "the handoff of the lost term ended");
  assert.deepEqual(
    n.t.heldForwarded.list().map((h) => [h.delivery.envelope, h.deadlineMs]),
    [
      [tell.envelope, 5_700],
      [ask.envelope, 1_000],
    ],
    "held in order, each with its own deadline, up to the bound",
  );
  assert.deepEqual(
    rejects(effects).map((r) => r.d.envelope),
    [over.envelope],
    "what does not fit is rejected",
  );
  assert.ok(rejects(effects)[0]!.error instanceof NoShardOwnerError);
  assert.equal(n.state.counters.heldDeliveries - before.held, 2, "two held");
  assert.equal(n.state.counters.heldRefused - before.refused, 1, "one refused");
  const sweeps = effects.flatMap((x) => (x.kind === "schedule" && x.timer.kind === "heldSweep" ? [x] : []));
  assert.deepEqual(
    sweeps.map((s) => s.afterMs),
    [300],
    "the sweep fires at the ask's deadline, the earliest",
  );
  assert.equal(n.t.heldSweep?.atMs, 1_000);
});

test("a relayed marker must name this node as its target: one relayed here for another node is refused", () => {
  const n = new Driven(b, aLeaving(b));
  // From a (not the caller c), naming c as the target: not a marker b can answer or relay.
  const marker = new CoordinatorFlush(type, n.settings.key, c.toString(), c.toString(), 7);
  const effects = n.feed({ kind: "control", message: marker, replyTo: null, origin: a }, 10);
  assert.equal(effects.filter((e) => e.kind === "refused").length, 1);
  assert.deepEqual(sends(effects), []);
});

test("a caller's marker relays its held envelopes, but one another node relayed here already fails instead of being relayed again", () => {
  // b's view is re-converging (no coordinator): c's envelopes wait here, one of them already relayed by c once.
  const n = new Driven(b, { ...allUp(b), converged: false });
  const fresh = n.delivery("e1");
  const once = n.delivery("e2");
  const relayedOnce = { envelope: once.envelope.relayedBy(c), sender: once.sender };
  assert.deepEqual(rejects(n.receive(fresh, c, 10)), []);
  assert.deepEqual(rejects(n.receive(relayedOnce, c, 11)), []);
  assert.equal(n.t.heldForwarded.size, 2);
  // The newest view (not yet handled as a membership change) elects a; c's marker for a arrives.
  n.feed({ kind: "view", snapshot: allUp(b) }, 20);
  const effects = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), a.toString(), 4), c, 21);
  assert.deepEqual(
    forwards(effects).map((f) => [f.to, f.envelope.entityId]),
    [[a.toString(), "e1"]],
    "only the fresh one is relayed",
  );
  assert.deepEqual(
    rejects(effects).map((r) => r.d.envelope),
    [relayedOnce.envelope],
  );
  assert.ok(rejects(effects)[0]!.error instanceof NoShardOwnerError);
});

test("the bounded wait for an old coordinator that left the view is counted from the flush's start: released at exactly 1 s, not before", () => {
  // The change comes late (at 5 s): the grace must be measured from then, not from time zero.
  const n = new Driven(c, allUp(c));
  n.call("e1", 5_000);
  const changed = n.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 5_000);
  assert.equal(markers(changed).length, 1, "the flush starts at 5,000 ms");
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(b), member(c)]) }, 5_010);
  const [early, earlyEffects] = n.call("e2", 5_999);
  assert.deepEqual(forwards(earlyEffects), [], "still waiting 1 ms before the grace ends");
  const [, onTime] = n.call("e3", 6_000);
  assert.deepEqual(
    forwards(onTime).map((f) => [f.to, f.d.envelope.entityId]),
    [
      [b.toString(), early.envelope.entityId],
      [b.toString(), "e3"],
    ],
    "released at the grace's end, in order",
  );
});

test("an old coordinator that is still a member is waited for past the grace: only one that left the view counts as gone", () => {
  // z, a lower address, takes over from a, which stays Up: its answer is waited for however long it takes.
  const z = node(2550);
  const n = new Driven(c, view(c, [member(a), member(b), member(c), member(z, "Joining")]));
  n.call("e1", 0);
  const changed = n.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c), member(z)]) },
    10,
  );
  assert.equal(markers(changed).length, 1);
  const [, later] = n.call("e2", 5_000);
  assert.deepEqual(forwards(later), [], "still waiting for a's answer");
  assert.notEqual(n.t.flush, null);
});

test("a flush that ends without an answer is a warning; an old coordinator already Down when the change is seen needs no flush and no warning", () => {
  const logs = (effects: NodeEffect[], level: string) => effects.filter((e) => e.kind === "log" && e.level === level);
  const n = new Driven(c, allUp(c));
  n.call("e1", 0);
  n.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 10);
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(a, "Down"), member(b), member(c)]) }, 20);
  const [, next] = n.call("e2", 30);
  assert.equal(n.t.flush, null, "released: a is Down");
  assert.equal(forwards(next).length, 1, "the next call goes to b");
  assert.equal(logs(next, "warn").length, 1, "what a held is lost: worth a warning");
  const quiet = new Driven(c, allUp(c));
  quiet.call("e1", 0);
  const gone = quiet.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a, "Down"), member(b), member(c)]) },
    10,
  );
  assert.deepEqual(markers(gone), [], "no flush through a Down node");
  assert.deepEqual(logs(gone, "warn"), []);
});

test("an elected coordinator that has not authored a plan yet drives no handoffs: a caller's marker for another target is relayed at once", () => {
  // a's own view still elects a, but a holds no plan of its own (still bootstrapping); c's view moved on to b.
  const n = new Driven(a, allUp(a));
  assert.equal(n.t.plan.author, null);
  const effects = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), b.toString(), 3), c, 10);
  assert.deepEqual(
    markers(effects).map((m) => [m.to, m.marker.token]),
    [[b.toString(), 3]],
    "relayed to b, not kept waiting for a term a does not hold",
  );
  assert.equal(n.t.pendingMarkers.size, 0);
});

test("while an earlier flush is unanswered the callers wait, even when the coordinator changes back to the one they last sent to", () => {
  // c sent through a; z (a lower address) took over, so c's flush went to a for z; z left before answering and a
  // coordinates again. The flush is still unanswered: c's next call waits for a new one (through a, for a).
  const z = node(2550);
  const n = new Driven(c, view(c, [member(a), member(b), member(c), member(z, "Joining")]));
  n.call("e1", 0);
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c), member(z)]) }, 10);
  assert.ok(n.t.flush?.target.equals(z));
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c), member(z, "Leaving")]) }, 20);
  const [, effects] = n.call("e2", 30);
  assert.deepEqual(forwards(effects), [], "held until a answers the new flush");
  assert.ok(n.t.flush?.target.equals(a), "a new flush, for a");
});

test("envelopes held while this node's view elects another coordinator wait for their callers' markers, relayed ones too: an unrelated step fails none", () => {
  const n = new Driven(b, { ...allUp(b), converged: false });
  const fresh = n.delivery("e1");
  const once = n.delivery("e2");
  const relayedOnce = { envelope: once.envelope.relayedBy(c), sender: once.sender };
  n.receive(fresh, c, 10);
  n.receive(relayedOnce, c, 11);
  n.feed({ kind: "view", snapshot: allUp(b) }, 20);
  // b's own caller routes meanwhile (to a): nothing held for c is touched.
  const [, own] = n.call("e3", 21);
  assert.deepEqual(rejects(own), []);
  assert.equal(n.t.heldForwarded.size, 2, "both still wait for c's marker");
  // The same at a former coordinator that still holds the plan it authored.
  const former = new Driven(a, allUp(a));
  former.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  assert.ok(former.t.plan.author?.equals(a));
  former.feed({ kind: "membershipChanged", snapshot: { ...allUp(a), converged: false } }, 610);
  former.receive(former.delivery("e1"), c, 611);
  const again = former.delivery("e2");
  former.receive({ envelope: again.envelope.relayedBy(c), sender: again.sender }, c, 612);
  assert.equal(former.t.heldForwarded.size, 2);
  former.feed({ kind: "view", snapshot: aLeaving(a) }, 620);
  const [, refused] = former.call("e3", 621);
  assert.equal(rejects(refused).length, 1, "a is leaving: its own caller is refused");
  assert.equal(former.t.heldForwarded.size, 2, "c's envelopes still wait for c's marker");
});

test("a handoff's buffer remembers which node each envelope came from, even when the delivery itself does not say", () => {
  const z = node(2550);
  const n = new Driven(a, view(a, [member(a), member(b), member(c), member(z, "Joining")]));
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  const shard = n.delivery("e1").envelope.shardId;
  n.t.handoffs.set(shard, { state: newHandoff(type, shard, a, b), token: 999, startedAtMs: 600 });
  // The delivery carries no origin of its own; the envelope input names c.
  const fromC = n.delivery("e1");
  n.feed({ kind: "envelope", delivery: fromC, origin: c }, 610);
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(z)]) }, 620);
  n.feed({ kind: "timer", timer: { kind: "handoffAttempt", type, shard, token: 999 } }, 700);
  const held = n.t.heldForwarded.list();
  assert.equal(held.length, 1);
  assert.ok(held[0]!.origin?.equals(c), "held for c's marker, not as this node's own caller's");
});

test("a flush retry finds the old coordinator Down: the flush ends, no marker is sent to the Down node", () => {
  const n = new Driven(c, allUp(c));
  n.call("e1", 0);
  const changed = n.feed({ kind: "membershipChanged", snapshot: aLeaving(c) }, 10);
  const [retry] = changed.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "flushRetry" ? [e.timer] : []));
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(a, "Down"), member(b), member(c)]) }, 20);
  const effects = n.feed({ kind: "timer", timer: retry! }, 310);
  assert.deepEqual(markers(effects), [], "nothing to a Down node");
  assert.equal(n.t.flush, null, "the flush ended");
});

test("a marker waiting for the old coordinator's term is relayed in the step that loses the term, even with nothing held there", () => {
  // a coordinates and drives handoffs (none runs, nothing buffered or held); c's view already elects z. c's marker
  // waits at a; once a sees z coordinate, it goes on to z at once, not at c's next resend.
  const z = node(2550);
  const n = new Driven(a, view(a, [member(a), member(b), member(c), member(z, "Joining")]));
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  assert.ok(n.t.plan.author?.equals(a), "a authored the plan");
  const early = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), z.toString(), 5), c, 620);
  assert.deepEqual(markers(early), [], "waits while a drives handoffs");
  assert.equal(n.t.pendingMarkers.size, 1);
  assert.equal(n.t.heldLocal.size + n.t.heldForwarded.size, 0, "nothing held");
  const lost = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(z)]) },
    630,
  );
  assert.deepEqual(
    markers(lost).map((m) => [m.to, m.marker.caller, m.marker.token]),
    [[z.toString(), c.toString(), 5]],
    "c's marker relayed to z",
  );
  assert.equal(n.t.pendingMarkers.size, 0);
});

test("a flush retry while no coordinator is routed and the old coordinator has left the view sends nothing and re-arms nothing; the change that elects one resumes the check", () => {
  const { n, held, effects } = callerAfterChange();
  // a left the view and the view does not converge: no coordinator to route through, so nothing to check against.
  const unsettled = { ...view(c, [member(b), member(c)]), converged: false };
  n.feed({ kind: "membershipChanged", snapshot: unsettled }, 30);
  assert.equal(n.state.view.routing, null);
  const retry = effects.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "flushRetry" ? [e.timer] : []));
  const fired = n.feed({ kind: "timer", timer: retry[0]! }, 320);
  assert.deepEqual(
    fired.filter((e) => e.kind !== "log"),
    [],
    "no marker, no timer, nothing released",
  );
  assert.notEqual(n.t.flush, null, "the flush stands");
  // Converged again past the grace: the membership change itself ends the wait and releases in order.
  const settled = n.feed({ kind: "membershipChanged", snapshot: view(c, [member(b), member(c)]) }, 20 + 1_000);
  assert.equal(n.t.flush, null);
  assert.deepEqual(
    forwards(settled).map((f) => [f.to, f.d]),
    held.map((d) => [b.toString(), d]),
  );
});

test("a flush start is logged at info", () => {
  const { effects } = callerAfterChange();
  const started = effects.filter(
    (e) =>
      e.kind === "log" &&
      e.message === "sharding coordinator changed: callers wait for the flush of what went to the old one",
  );
  assert.deepEqual(
    started.map((e) => e.kind === "log" && e.level),
    ["info"],
  );
});

test("a relayed marker reaching a node whose view elects no coordinator (not converged) is answered: only another elected coordinator leaves the caller to retry", () => {
  const n = new Driven(b, { ...aLeaving(b), converged: false });
  assert.equal(n.state.view.elected, null);
  const answered = sends(n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), b.toString(), 7), a, 10));
  assert.deepEqual(
    answered.map((s) => [s.to, s.message instanceof CoordinatorFlushed && s.message.token]),
    [[c.toString(), 7]],
  );
});

test("a node that becomes coordinator answers its own flush itself when the old coordinator relays its marker back: released in that step, no message to itself", () => {
  const z = node(2550);
  const n = new Driven(a, view(a, [member(z), member(a), member(b), member(c)]));
  const [, first] = n.call("e1", 0);
  assert.deepEqual(
    forwards(first).map((f) => f.to),
    [z.toString()],
    "routed through z",
  );
  const changed = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(z, "Leaving"), member(a), member(b), member(c)]) },
    10,
  );
  const [sent] = markers(changed);
  assert.deepEqual([sent?.to, sent?.marker.caller, sent?.marker.target], [z.toString(), a.toString(), a.toString()]);
  const back = n.control(sent!.marker, z, 20);
  assert.equal(n.t.flush, null, "the flush is answered in this step");
  assert.ok(n.t.via?.equals(a), "its callers route through itself from now on");
  assert.deepEqual(
    sends(back).filter((s) => s.message instanceof CoordinatorFlushed),
    [],
  );
});

test("an answer from the target that names another coordinator is refused and releases nothing", () => {
  const { n, effects } = callerAfterChange();
  const token = markers(effects)[0]!.marker.token;
  const forged = n.control(new CoordinatorFlushed(type, n.settings.key, a.toString(), token), b, 30);
  assert.deepEqual(forwards(forged), []);
  assert.equal(forged.filter((e) => e.kind === "refused").length, 1);
  assert.notEqual(n.t.flush, null, "still waiting");
});

test("an answer arriving after the flush ended (a resent marker's second answer) is ignored: nothing released again, nothing refused or logged", () => {
  const { n, effects } = callerAfterChange();
  const token = markers(effects)[0]!.marker.token;
  n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), token), b, 40);
  assert.equal(n.t.flush, null);
  const again = n.control(new CoordinatorFlushed(type, n.settings.key, b.toString(), token), b, 50);
  assert.deepEqual(again, []);
});

test("the old coordinator logs the relay of a caller's marker at info, with how many envelopes it relayed", () => {
  const n = new Driven(a, aLeaving(a));
  for (const [i, id] of ["e1", "e2"].entries()) n.receive(n.delivery(id), c, i);
  const relayed = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), b.toString(), 7), c, 10);
  const lines = relayed.flatMap((e) =>
    e.kind === "log" && e.message === "sharding flush marker relayed to the new coordinator" ? [e] : [],
  );
  assert.deepEqual(
    lines.map((e) => [e.level, e.fields.relayed]),
    [["info", 2]],
  );
});

test("a caller's waiting marker is dropped by its own newer marker naming this node, not by another node's relayed marker", () => {
  // a coordinates and drives handoffs; c's view elected z for a moment, so c's marker for z waits at a.
  const z = node(2550);
  const n = new Driven(a, view(a, [member(a), member(b), member(c), member(z, "Joining")]));
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), z.toString(), 5), c, 620);
  assert.deepEqual([...n.t.pendingMarkers.keys()], [c.toString()]);
  // b relays a marker of c's that names z, not a: refused, and c's own waiting marker stays.
  const misrouted = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), z.toString(), 6), b, 630);
  assert.equal(misrouted.filter((e) => e.kind === "refused").length, 1);
  assert.deepEqual([...n.t.pendingMarkers.keys()], [c.toString()], "still waiting");
  // c's view elects a again: its newer flush goes through a for a, answered at once; the one for z is over.
  const back = n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), a.toString(), 8), c, 640);
  assert.deepEqual(
    sends(back).map((s) => [s.to, s.message instanceof CoordinatorFlushed && s.message.token]),
    [[c.toString(), 8]],
  );
  assert.equal(n.t.pendingMarkers.size, 0, "the marker for z is dropped");
});

test("a leaving coordinator whose view elects nobody keeps its own callers' buffered deliveries held (relayed to nobody), and relays them once another is elected", () => {
  const { n, fromC, own } = coordinatorWithHandoff(allUp(a));
  n.feed({ kind: "membershipChanged", snapshot: { ...aLeaving(a), converged: false } }, 620);
  assert.equal(n.state.view.elected, null);
  const shard = own.envelope.shardId;
  const token = n.t.handoffs.get(shard)!.token;
  const effects = n.feed({ kind: "timer", timer: { kind: "handoffAttempt", type, shard, token } }, 700);
  assert.deepEqual(rejects(effects), []);
  assert.deepEqual(
    effects.filter((e) => e.kind === "forward"),
    [],
    "no coordinator to relay to",
  );
  assert.deepEqual(
    n.t.heldForwarded.list().map((h) => h.delivery.envelope),
    [fromC.envelope, own.envelope],
  );
  const settled = n.feed({ kind: "membershipChanged", snapshot: aLeaving(a) }, 710);
  assert.deepEqual(
    forwards(settled).map((f) => [f.to, f.d]),
    [[b.toString(), own]],
  );
});

test("a relayed envelope keeps the caller's typed message (in-process payload), and each relay counts as a forward", () => {
  const n = new Driven(a, aLeaving(a));
  const d = n.delivery("e1");
  const payload = { order: 42 };
  attachTyped(d.envelope, payload);
  n.receive(d, c, 0);
  const before = n.state.counters.forwards;
  const relayed = forwards(n.control(new CoordinatorFlush(type, n.settings.key, c.toString(), b.toString(), 7), c, 10));
  assert.equal(relayed.length, 1);
  assert.equal(typedOf(relayed[0]!.envelope), payload);
  assert.equal(n.state.counters.forwards, before + 1);
});
