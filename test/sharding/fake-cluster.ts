/**
 * An in-process cluster for sharding tests, in addition to the real loopback tests: several ActorSystems joined by a
 * simulated network (FIFO per link, asynchronous, JSON round trip of every wire message so fromJSON validation runs,
 * an authenticated origin per link, blackholes) and a membership view the test drives by hand.
 */
import {
  type ActorPath,
  type ActorRef,
  ActorSystem,
  Address,
  type AskOptions,
  askVia,
  type Class,
  LocalActorRef,
  type SystemMessage,
  silentLogger,
  UniqueAddress,
} from "../../src/actor/index.ts";
import {
  ClusterSharding,
  ClusterShardingConfigurationError,
  PassivateShard,
  type PayloadCodec,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
  type ShardingMember,
  type ShardingMembership,
  type WireMessage,
} from "../../src/sharding/index.ts";

type Parser = (json: unknown) => unknown;

const wireClasses: [abstract new (...args: never) => unknown, Parser][] = [
  [ShardingEnvelope, ShardingEnvelope.fromJSON],
  [ShardingControlAck, ShardingControlAck.fromJSON],
  [PlanRequest, PlanRequest.fromJSON],
  [PlanSnapshotRequest, PlanSnapshotRequest.fromJSON],
  [PlanSnapshot, PlanSnapshot.fromJSON],
  [PlanUpdate, PlanUpdate.fromJSON],
  [PassivateShard, PassivateShard.fromJSON],
  [PrepareShard, PrepareShard.fromJSON],
];

/** A tiny registry codec: user classes by name, payload = own JSON fields, rebuilt on the class prototype. */
export class TestCodec implements PayloadCodec {
  private readonly byName = new Map<string, Class<unknown>>();
  constructor(classes: Class<unknown>[]) {
    for (const c of classes) this.byName.set(c.name, c);
  }
  encode(message: unknown): WireMessage {
    const type = (message as object).constructor.name;
    if (!this.byName.has(type)) {
      throw new ClusterShardingConfigurationError(`message class ${type} is not registered`, "message");
    }
    return { type, payload: JSON.parse(JSON.stringify(message)) };
  }
  decode(wire: WireMessage): unknown {
    const c = this.byName.get(wire.type);
    if (c === undefined) throw new ClusterShardingConfigurationError(`unknown message type ${wire.type}`, "message");
    return Object.assign(Object.create(c.prototype as object), wire.payload);
  }
}

interface NodeEntry {
  readonly system: ActorSystem;
  readonly address: UniqueAddress;
  status: string;
  readonly roles: string[];
  /** What this node sees as unreachable. */
  readonly unreachable: Set<string>;
  converged: boolean;
  readonly listeners: Set<(event: unknown) => void>;
  readonly guards: Map<string, (member: ShardingMember) => boolean>;
  sharding: ClusterSharding | null;
}

/** The simulated network plus membership. */
export class FakeCluster {
  private readonly nodes = new Map<string, NodeEntry>();
  private readonly blackholes = new Set<string>();
  private nextPort = 30000;
  /** Messages dropped by blackholes. */
  dropped = 0;
  /** Extra user classes the codec knows. */
  readonly codec: TestCodec;

  constructor(userClasses: Class<unknown>[]) {
    this.codec = new TestCodec(userClasses);
  }

  /** Starts a node (status Up by default) with sharding on it. */
  addNode(name: string, options: { roles?: string[]; status?: string; uid?: string } = {}): Node {
    const system = ActorSystem.create(name, { logger: silentLogger });
    const port = this.nextPort++;
    const address = new UniqueAddress(Address.tcp(name, "127.0.0.1", port), options.uid ?? `uid${port}`);
    const entry: NodeEntry = {
      system,
      address,
      status: options.status ?? "Up",
      roles: options.roles ?? [],
      unreachable: new Set(),
      converged: true,
      listeners: new Set(),
      guards: new Map(),
      sharding: null,
    };
    this.nodes.set(address.address.toString(), entry);
    system.enableRemoteAddressing(address.address, (path) => new FakeRemoteRef(this, entry, path));
    const membership: ShardingMembership = {
      selfAddress: address,
      snapshot: () => this.snapshotFor(entry),
      subscribe: (listener) => {
        entry.listeners.add(listener);
        queueMicrotask(() => listener({ kind: "CurrentState" }));
        return () => entry.listeners.delete(listener);
      },
      registerDepartureGuard: (n, guard) => entry.guards.set(n, guard),
      unregisterDepartureGuard: (n) => entry.guards.delete(n),
    };
    entry.sharding = ClusterSharding.start(system, { membership, codec: this.codec });
    this.emit();
    return new Node(this, entry);
  }

  /** Tells every node's subscribers that membership changed. */
  emit(): void {
    for (const n of this.nodes.values()) for (const l of n.listeners) l({ kind: "Changed" });
  }

  /** @internal */
  entries(): NodeEntry[] {
    return [...this.nodes.values()];
  }

  private snapshotFor(entry: NodeEntry) {
    const members = [...this.nodes.values()]
      .filter((n) => n.status !== "Removed")
      .map((n) => ({ uniqueAddress: n.address, status: n.status, roles: n.roles }));
    const unreachable = members
      .filter((m) => entry.unreachable.has(m.uniqueAddress.toString()))
      .map((m) => m.uniqueAddress);
    return { self: entry.address, members, unreachable, converged: entry.converged };
  }

  /** Drops everything between `a` and `b`, both ways. */
  blackhole(a: Node, b: Node): void {
    this.blackholes.add(`${a.address}|${b.address}`);
    this.blackholes.add(`${b.address}|${a.address}`);
  }

  /** @internal Delivers `message` from `from` to `path` after a macrotask, FIFO per link. */
  send(from: NodeEntry, path: ActorPath, message: unknown, sender: ActorRef<unknown> | null, failure?: Error): void {
    const target = this.nodes.get(path.address.toString());
    if (target === undefined || target.system.isTerminated) return;
    if (this.blackholes.has(`${from.address}|${target.address}`)) {
      this.dropped++;
      return;
    }
    const wire = failure === undefined ? serialize(message) : null;
    this.link(from, target).push(() => {
      const ref = target.system.findLocal(path.elements);
      if (ref === null) return;
      if (failure !== undefined) {
        ref.failAsk?.(failure);
        return;
      }
      const rebuilt = wire === null ? message : deserialize(wire, message);
      if (ref instanceof LocalActorRef) ref.deliver(rebuilt, sender, from.address);
      else ref.tell(rebuilt, sender);
    });
  }

  private readonly links = new Map<string, LinkQueue>();
  private link(from: NodeEntry, to: NodeEntry): LinkQueue {
    const key = `${from.address}|${to.address}`;
    let q = this.links.get(key);
    if (q === undefined) {
      q = new LinkQueue();
      this.links.set(key, q);
    }
    return q;
  }

  /** Terminates every system. */
  async shutdown(): Promise<void> {
    await Promise.all([...this.nodes.values()].map((n) => n.system.terminate()));
  }
}

class LinkQueue {
  private readonly queue: (() => void)[] = [];
  private scheduled = false;
  push(task: () => void): void {
    this.queue.push(task);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.drain());
    }
  }
  private drain(): void {
    this.scheduled = false;
    const batch = this.queue.splice(0, this.queue.length);
    for (const t of batch) t();
  }
}

function serialize(message: unknown): { ctor: string; json: string } | null {
  for (const [ctor] of wireClasses) {
    if (message instanceof ctor) return { ctor: ctor.name, json: JSON.stringify(message) };
  }
  return null;
}

function deserialize(wire: { ctor: string; json: string }, original: unknown): unknown {
  for (const [ctor, parse] of wireClasses) if (ctor.name === wire.ctor) return parse(JSON.parse(wire.json));
  return original;
}

/** A ref to another node's actor through the fake network. */
class FakeRemoteRef implements ActorRef<unknown> {
  constructor(
    private readonly net: FakeCluster,
    private readonly from: NodeEntry,
    readonly path: ActorPath,
  ) {}
  tell(message: unknown, sender?: ActorRef<unknown> | null): void {
    this.net.send(this.from, this.path, message, sender ?? null);
  }
  ask<R>(message: unknown, replyType: Class<R>, timeoutMs: number, options?: AskOptions): Promise<R> {
    return askVia(this.from.system, this, message, replyType, timeoutMs, options);
  }
  sendSystem(_message: SystemMessage): void {}
  failAsk(error: Error): void {
    // As remoting does: the asker sees a RemoteAskError carrying the remote class name.
    this.net.send(this.from, this.path, null, null, new RemoteAskErrorLike(error.name, error.message));
  }
}

/** Stands in for remoting's RemoteAskError in the fake network. */
export class RemoteAskErrorLike extends Error {
  override readonly name = "RemoteAskError";
  constructor(
    readonly remoteClass: string,
    message: string,
  ) {
    super(message);
  }
}

/** One node of a {@link FakeCluster}. */
export class Node {
  constructor(
    private readonly net: FakeCluster,
    private readonly entry: NodeEntry,
  ) {}
  get system(): ActorSystem {
    return this.entry.system;
  }
  get address(): UniqueAddress {
    return this.entry.address;
  }
  get sharding(): ClusterSharding {
    return this.entry.sharding!;
  }
  get status(): string {
    return this.entry.status;
  }
  /** Changes this member's status everywhere and notifies. */
  setStatus(status: string): void {
    this.entry.status = status;
    this.net.emit();
  }
  /** Makes this node see `other` as unreachable (or reachable again). */
  setUnreachable(other: Node, unreachable = true): void {
    if (unreachable) this.entry.unreachable.add(other.address.toString());
    else this.entry.unreachable.delete(other.address.toString());
    this.net.emit();
  }
  setConverged(converged: boolean): void {
    this.entry.converged = converged;
    this.net.emit();
  }
  /** True when every departure guard of this node lets `member` go. */
  guardsAllow(member: Node): boolean {
    const m = { uniqueAddress: member.address, status: member.status, roles: [] };
    return [...this.entry.guards.values()].every((g) => g(m));
  }
}
