// A deterministic in-memory network of membership cores for tests: virtual time, ticks at fixed intervals,
// messages round-tripped through JSON and fromJSON like the wire does, optional seeded delivery order, crashes
// and blackholes. No sockets, no timers: everything moves when the test calls advance().
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import type { Member } from "../../src/cluster/member.ts";
import {
  initialMembership,
  type MembershipConfig,
  type MembershipInput,
  type MembershipState,
  snapshotOf,
  step,
} from "../../src/cluster/membership.ts";
import { type ClusterMessage, clusterMessageClasses } from "../../src/cluster/messages.ts";
import type { ClusterSnapshot } from "../../src/cluster/snapshot.ts";
import { type ClusterStats, emptyClusterStats } from "../../src/cluster/stats.ts";
import { Prng } from "../fixtures/prng.ts";

export interface SimNode {
  readonly self: UniqueAddress;
  state: MembershipState;
  alive: boolean;
  stats: ClusterStats;
  rejects: string[];
  /** The status this node was downed to, once it learned it (the `self-downed` effect). */
  selfDowned: string | null;
  departureReady: (member: Member) => boolean;
}

interface InFlight {
  readonly from: UniqueAddress;
  readonly to: Address;
  readonly message: ClusterMessage;
}

export interface SimOptions {
  readonly tickMs?: number;
  readonly heartbeatTimeoutMs?: number;
  readonly fanout?: number;
  readonly seed?: number;
  readonly remoteDownAllowed?: boolean;
  readonly maxMembers?: number;
}

export function address(port: number, system = "sim"): Address {
  return Address.tcp(system, "127.0.0.1", port);
}

export class Sim {
  nowMs = 0;
  readonly nodes = new Map<string, SimNode>();
  private queue: InFlight[] = [];
  private readonly blackholes = new Set<string>();
  private readonly rng: Prng;
  private uidCounter = 0;
  readonly tickMs: number;

  constructor(readonly options: SimOptions = {}) {
    this.tickMs = options.tickMs ?? 50;
    this.rng = new Prng(options.seed ?? 0);
  }

  start(port: number, seeds: number[], options: { roles?: string[]; clusterName?: string } = {}): SimNode {
    const self = new UniqueAddress(address(port), `uid${++this.uidCounter}`);
    const config: MembershipConfig = {
      self,
      clusterName: options.clusterName ?? "sim-cluster",
      seeds: seeds.map((p) => address(p)),
      roles: options.roles ?? [],
      gossipFanout: this.options.fanout ?? 3,
      maxMembers: this.options.maxMembers ?? 10_000,
      heartbeatTimeoutMs: this.options.heartbeatTimeoutMs ?? 500,
      remoteDownAllowed: this.options.remoteDownAllowed ?? false,
    };
    const node: SimNode = {
      self,
      state: initialMembership(config, this.nowMs),
      alive: true,
      stats: emptyClusterStats(),
      rejects: [],
      selfDowned: null,
      departureReady: () => true,
    };
    this.nodes.set(self.address.toString(), node);
    return node;
  }

  /** Stops a node without leaving (like SIGKILL). */
  crash(node: SimNode): void {
    node.alive = false;
  }

  blackhole(a: SimNode, b: SimNode): void {
    this.blackholes.add(`${a.self.address}|${b.self.address}`);
    this.blackholes.add(`${b.self.address}|${a.self.address}`);
  }

  unblackhole(a: SimNode, b: SimNode): void {
    this.blackholes.delete(`${a.self.address}|${b.self.address}`);
    this.blackholes.delete(`${b.self.address}|${a.self.address}`);
  }

  input(node: SimNode, input: MembershipInput): boolean | null {
    const [state, effects] = step(node.state, input, this.nowMs, { departureReady: node.departureReady });
    node.state = state;
    let outcome: boolean | null = null;
    for (const effect of effects) {
      if (effect.kind === "send") this.queue.push({ from: node.self, to: effect.to, message: effect.message });
      else if (effect.kind === "count") node.stats[effect.stat]++;
      else if (effect.kind === "outcome") outcome = effect.accepted;
      else if (effect.kind === "gossip-rejected") {
        node.stats.gossipRejected[effect.reason] += effect.count;
        node.rejects.push(`${effect.reason}: ${effect.detail}`);
      } else if (effect.kind === "self-downed") node.selfDowned = effect.status;
      else node.rejects.push(effect.reason);
    }
    return outcome;
  }

  private deliver(item: InFlight): void {
    const sender = this.nodes.get(item.from.address.toString());
    if (sender === undefined || !sender.alive || !sender.self.equals(item.from)) return;
    const target = this.nodes.get(item.to.toString());
    if (target === undefined || !target.alive) return;
    if (this.blackholes.has(`${item.from.address}|${item.to}`)) return;
    const cls = clusterMessageClasses.find((c) => item.message instanceof c)!;
    const decoded = cls.fromJSON(JSON.parse(JSON.stringify(item.message)));
    this.input(target, {
      kind: "message",
      origin: item.from,
      senderPath: `${item.from.address}/system/cluster`,
      message: decoded,
    });
  }

  private flush(): void {
    for (let guard = 0; guard < 100 && this.queue.length > 0; guard++) {
      const batch = this.queue;
      this.queue = [];
      if (this.options.seed !== undefined) {
        for (let i = batch.length - 1; i > 0; i--) {
          const j = this.rng.int(i + 1);
          [batch[i], batch[j]] = [batch[j]!, batch[i]!];
        }
      }
      for (const item of batch) this.deliver(item);
    }
  }

  /** Moves virtual time by `ms`, ticking every live node each tick and delivering what they send. */
  advance(ms: number): void {
    const end = this.nowMs + ms;
    while (this.nowMs < end) {
      this.nowMs += this.tickMs;
      for (const node of this.nodes.values()) {
        if (!node.alive) continue;
        for (const kind of ["join-tick", "gossip-tick", "heartbeat-tick"] as const) this.input(node, { kind });
        this.flush();
      }
    }
  }

  /** Advances until `condition` holds, at most `maxMs`; returns whether it held. */
  until(condition: () => boolean, maxMs = 20_000): boolean {
    const end = this.nowMs + maxMs;
    while (!condition()) {
      if (this.nowMs >= end) return false;
      this.advance(this.tickMs);
    }
    return true;
  }

  snapshot(node: SimNode): ClusterSnapshot {
    return snapshotOf(node.state);
  }

  live(): SimNode[] {
    return [...this.nodes.values()].filter((n) => n.alive);
  }

  /** True when every given node sees exactly `expected` members, all Up, converged, with one common leader. */
  allUp(nodes: SimNode[], expected = nodes.length): boolean {
    const snaps = nodes.map((n) => snapshotOf(n.state));
    return snaps.every(
      (s) =>
        s.converged &&
        s.members.length === expected &&
        s.members.every((m) => m.status === "Up") &&
        String(s.leader) === String(snaps[0]!.leader),
    );
  }

  describe(nodes: SimNode[] = this.live()) {
    return nodes.map((n) => {
      const s = snapshotOf(n.state);
      return {
        self: String(s.self),
        converged: s.converged,
        leader: String(s.leader),
        members: s.members.map((m) => `${m.uniqueAddress.address.port}#${m.uniqueAddress.uid}:${m.status}`),
        unreachable: s.unreachable.map(String),
      };
    });
  }
}
