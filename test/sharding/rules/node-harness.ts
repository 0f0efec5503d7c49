// A node core driven by hand for the rule tests (no sockets, no shell): feed inputs with time passed in, read the
// effects. `coordinatorWithPlan` builds the usual starting point, three Up members whose coordinator a has authored
// a plan that places shards on all three, by feeding a exactly the messages b and c would send it.
import { type ActorRef, Address, UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ShardingSettings, type ShardingSettingsOptions } from "../../../src/sharding/index.ts";
import { CancelPreparations, PlanRequest, PlanUpdate, ShardingEnvelope } from "../../../src/sharding/internal/index.ts";
import type { ShardingClusterSnapshot } from "../../../src/sharding/membership.ts";
import {
  type Delivery,
  type NodeEffect,
  type NodeInput,
  type NodeState,
  newNodeState,
  step,
  type TypeState,
} from "../../../src/sharding/node/node-core.ts";

export const address = (port: number) =>
  new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", port), `u${port}`);
export const [a, b, c, d] = [address(2551), address(2552), address(2553), address(2554)];
export const type = "Order";

export const member = (uniqueAddress: UniqueAddress, status = "Up"): ShardingMember => ({
  uniqueAddress,
  status,
  roles: [],
});

export function view(
  self: UniqueAddress,
  members: ShardingMember[],
  options: { converged?: boolean; unreachable?: UniqueAddress[] } = {},
): ShardingClusterSnapshot {
  return { self, members, unreachable: options.unreachable ?? [], converged: options.converged ?? true };
}

export const allUp = (self: UniqueAddress) => view(self, [member(a), member(b), member(c)]);

/** A stand-in caller ref, distinct per call so assertions compare identities. */
let callers = 0;
export const caller = () => ({ path: `caller-${++callers}` }) as unknown as ActorRef<unknown>;

export class Driven {
  state: NodeState;
  readonly settings: ShardingSettings;
  readonly self: UniqueAddress;
  /** The effects of the first membership change and of the register step. */
  readonly joined: NodeEffect[];
  readonly registered: NodeEffect[];

  constructor(
    self: UniqueAddress,
    options: ShardingSettingsOptions = {},
    first: ShardingClusterSnapshot = allUp(self),
  ) {
    this.self = self;
    this.state = newNodeState(self);
    this.settings = ShardingSettings.create({ shardCount: 8, ...options });
    this.joined = this.feed({ kind: "membershipChanged", snapshot: first }, 0);
    this.registered = this.feed({ kind: "register", name: type, settings: this.settings }, 0);
  }

  feed(input: NodeInput, nowMs: number): NodeEffect[] {
    const [state, effects] = step(this.state, input, nowMs);
    this.state = state;
    return effects;
  }

  get t(): TypeState {
    return this.state.types.get(type)!;
  }

  get stats() {
    return this.state.counters;
  }

  /** The first entity id (e0, e1, …) whose shard satisfies `where`. */
  entityIn(where: (shard: number) => boolean): string {
    for (let i = 0; i < 1_000; i++) {
      const id = `e${i}`;
      if (where(this.shardOf(id))) return id;
    }
    throw new Error("no entity id found");
  }

  shardOf(entityId: string): number {
    return this.settings.partitioner.shardFor(type, entityId, this.settings.shardCount);
  }

  /** The first shard the plan places on `owner`. */
  shardOn(owner: UniqueAddress): number {
    for (const [shard, o] of this.t.plan.allocations) if (o.equals(owner)) return shard;
    throw new Error(`no shard on ${owner}`);
  }

  /** A caller's hop-0 delivery (a tell unless `askTimeoutMs` is given). */
  delivery(
    entityId: string,
    askTimeoutMs: number | null = null,
    sender: ActorRef<unknown> | null = caller(),
  ): Delivery {
    const envelope = new ShardingEnvelope(
      "User",
      type,
      entityId,
      this.shardOf(entityId),
      this.settings.key,
      0,
      null,
      askTimeoutMs,
      sender === null,
      null,
    );
    return { envelope, sender };
  }

  /** The hop-1 copy `coordinator` sends the owner. */
  forwardedBy(coordinator: UniqueAddress, entityId: string): Delivery {
    const d = this.delivery(entityId);
    return { envelope: d.envelope.forwarded(coordinator, false), sender: d.sender };
  }

  route(d: Delivery, nowMs: number, countsRemoteRoute = true): NodeEffect[] {
    return this.feed({ kind: "route", delivery: d, countsRemoteRoute }, nowMs);
  }

  envelope(d: Delivery, origin: UniqueAddress | null, nowMs: number): NodeEffect[] {
    return this.feed({ kind: "envelope", delivery: d, origin }, nowMs);
  }

  /** The plan as the message the coordinator broadcasts. */
  update(): PlanUpdate {
    const t = this.t;
    return new PlanUpdate(
      type,
      t.settings.key,
      t.plan.author!.toString(),
      t.plan.generation,
      [...t.plan.allocations].sort((x, y) => x[0] - y[0]).map(([shardId, o]) => ({ shardId, owner: o.toString() })),
    );
  }
}

/**
 * a, the coordinator of a, b, c (all Up), after b and c registered the type and a's snapshot bootstrap ended: a plan
 * of generation 1 authored by a, with shards on each member. The clock is at 1,000 ms.
 */
export function coordinatorWithPlan(options: ShardingSettingsOptions = {}): Driven {
  const n = new Driven(a, options);
  for (const peer of [b, c]) {
    n.feed(
      {
        kind: "control",
        message: new PlanRequest(type, n.settings.key, peer.toString()),
        replyTo: null,
        origin: peer,
      },
      10,
    );
  }
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  const plan = n.t.plan;
  if (!plan.author?.equals(a) || plan.generation < 1) throw new Error("the harness's coordinator has no plan");
  for (const m of [a, b, c]) n.shardOn(m);
  return n;
}

/** `self` (b or c), following a's plan `update`. */
export function follower(self: UniqueAddress, update: PlanUpdate, options: ShardingSettingsOptions = {}): Driven {
  const n = new Driven(self, options);
  n.feed({ kind: "control", message: update, replyTo: null, origin: a }, 10);
  if (n.t.plan.generation !== update.generation) throw new Error("the follower did not take the plan");
  return n;
}

// Effect readers.
export const forwards = (effects: NodeEffect[]) => effects.flatMap((e) => (e.kind === "forward" ? [e] : []));
export const sends = (effects: NodeEffect[]) => effects.flatMap((e) => (e.kind === "send" ? [e] : []));
export const asks = (effects: NodeEffect[]) => effects.flatMap((e) => (e.kind === "ask" ? [e] : []));
export const delivers = (effects: NodeEffect[]) => effects.flatMap((e) => (e.kind === "deliver" ? [e] : []));
export const rejects = (effects: NodeEffect[]) => effects.flatMap((e) => (e.kind === "reject" ? [e] : []));
export const refuses = (effects: NodeEffect[]) => effects.flatMap((e) => (e.kind === "refuse" ? [e] : []));
export const schedules = (effects: NodeEffect[], kind: string) =>
  effects.flatMap((e) => (e.kind === "schedule" && e.timer.kind === kind ? [e] : []));
export const ofKind = <K extends NodeEffect["kind"]>(effects: NodeEffect[], kind: K) =>
  effects.filter((e): e is Extract<NodeEffect, { kind: K }> => e.kind === kind);
export const logs = (effects: NodeEffect[], level?: string) =>
  effects.flatMap((e) => (e.kind === "log" && (level === undefined || e.level === level) ? [e] : []));

/** The CancelPreparations among `effects`: to whom, which shards. */
export const cancels = (effects: NodeEffect[]) =>
  sends(effects).flatMap((s) =>
    s.message instanceof CancelPreparations ? [{ to: s.to.toString(), shards: s.message.shardIds }] : [],
  );

/**
 * a, the coordinator, after a move of one of b's shards to c aborted once c had prepared (seeds 754, 2490): the
 * completion found the plan authored elsewhere (as after a pause), so the handoff aborted; then a's plan stands again.
 * The abort's effects are returned with the node and the shard.
 */
export function abortedAfterPrepare(options: ShardingSettingsOptions = {}) {
  const n = coordinatorWithPlan(options);
  const moving = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_000);
  const token = n.t.handoffs.get(moving)!.token;
  n.feed({ kind: "handoffReply", type, shard: moving, token, step: "passivated", error: null }, 2_010);
  const plan = n.t.plan;
  n.t.plan = { ...plan, author: b };
  const aborted = n.feed({ kind: "handoffReply", type, shard: moving, token, step: "prepared", error: null }, 2_020);
  n.t.plan = plan;
  if (n.t.handoffs.has(moving)) throw new Error("the harness's handoff did not abort");
  return { n, moving, aborted };
}
