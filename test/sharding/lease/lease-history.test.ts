// Seeded random histories: several nodes' lease books against one simulated lease table (docs/protocol.md §13.3 semantics,
// database clock = the virtual clock), with random delays (some longer than the lease), database errors, partitions
// (unsafe to own), handoffs, retains, stops and crashes. Invariants are checked after every step; a failure prints
// its seed so the history can be replayed.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  createLeaseBook,
  type LeaseBookState,
  type LeaseEffect,
  type LeaseInput,
  liveToken,
  type ShardLeaseKey,
  type ShardLeaseToken,
  step,
} from "../../../src/sharding/lease/index.ts";
import { randomOf } from "../../fixtures/prng.ts";

const nodeCount = 3;
const shardCount = 3;
const leaseDurationMs = 1_000;
const leaseRenewIntervalMs = 300;
const stepsPerHistory = 400;
const historyCount = 300;

interface Row {
  owner: string;
  epoch: number;
  untilMs: number;
}

/** The lease table of docs/protocol.md §13.3 with "now" taken from the virtual clock. */
class LeaseTable {
  readonly rows = new Map<number, Row>();
  readonly epochsSeen = new Map<number, number>();

  acquire(key: ShardLeaseKey, owner: string, durationMs: number, nowMs: number): ShardLeaseToken | null {
    const row = this.rows.get(key.shardId);
    let next: Row | null = null;
    if (row === undefined) next = { owner, epoch: 1, untilMs: nowMs + durationMs };
    else if (row.owner === owner && row.untilMs > nowMs) next = { ...row, untilMs: nowMs + durationMs };
    else if (row.untilMs <= nowMs) next = { owner, epoch: row.epoch + 1, untilMs: nowMs + durationMs };
    if (next === null) return null;
    this.set(key.shardId, next);
    return { key, owner, epoch: next.epoch, leaseUntilEpochMs: next.untilMs };
  }

  renew(token: ShardLeaseToken, durationMs: number, nowMs: number): ShardLeaseToken | null {
    const row = this.rows.get(token.key.shardId);
    if (row === undefined || row.owner !== token.owner || row.epoch !== token.epoch || row.untilMs <= nowMs)
      return null;
    this.set(token.key.shardId, { ...row, untilMs: nowMs + durationMs });
    return { ...token, leaseUntilEpochMs: nowMs + durationMs };
  }

  release(token: ShardLeaseToken): boolean {
    const row = this.rows.get(token.key.shardId);
    if (row === undefined || row.owner !== token.owner || row.epoch !== token.epoch) return false;
    this.set(token.key.shardId, { ...row, untilMs: 0 });
    return true;
  }

  private set(shardId: number, row: Row): void {
    assert.ok(row.epoch >= (this.epochsSeen.get(shardId) ?? 0), "database epoch never decreases");
    this.epochsSeen.set(shardId, row.epoch);
    this.rows.set(shardId, row);
  }
}

interface SimNode {
  index: number;
  generation: number;
  owner: string;
  book: LeaseBookState;
  safe: boolean;
  /** Tokens (shard:epoch) dropped by a suspension, which must never be released afterwards. */
  suspended: Set<string>;
  /** Highest epoch this node ever held per shard. */
  heldEpoch: Map<number, number>;
}

interface SimEvent {
  atMs: number;
  seq: number;
  node: number;
  generation: number;
  run: () => void;
}

interface Totals {
  grants: number;
  losses: number;
  releases: number;
  acquisitions: number;
  renewals: number;
}

function runHistory(seed: number, totals: Totals): void {
  const random = randomOf(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const chance = (p: number) => random() < p;
  const table = new LeaseTable();
  const grantEpochs = new Map<number, number>();
  let nowMs = 0;
  let seq = 0;
  let requestIds = 0;
  let events: SimEvent[] = [];
  const where = () => `seed ${seed} at ${nowMs} ms`;

  const newBook = (owner: string) => {
    const book = createLeaseBook({
      clusterName: "sim",
      entityType: "Order",
      owner,
      leaseDurationMs,
      leaseRenewIntervalMs,
    });
    return step(book, { kind: "safeToOwn", safe: true }, nowMs)[0];
  };
  const nodes: SimNode[] = Array.from({ length: nodeCount }, (_, index) => ({
    index,
    generation: 0,
    owner: `node-${index}#0`,
    book: newBook(`node-${index}#0`),
    safe: true,
    suspended: new Set(),
    heldEpoch: new Map(),
  }));

  const schedule = (node: SimNode, afterMs: number, run: () => void) => {
    events.push({ atMs: nowMs + afterMs, seq: seq++, node: node.index, generation: node.generation, run });
  };
  // Mostly quick, sometimes slower than the lease itself (a stalled database or event loop).
  const delay = () => (chance(0.05) ? Math.floor(random() * 1_500) : Math.floor(random() * 60));

  const feed = (node: SimNode, input: LeaseInput) => {
    const before = node.book;
    const [after, effects] = step(before, input, nowMs);
    node.book = after;
    if (input.kind === "safeToOwn" || input.kind === "renewTick") {
      if (!after.safe && (input.kind === "safeToOwn" ? !input.safe : !input.safeToOwn)) {
        for (const lease of before.shards.values()) {
          if (lease.phase === "held" || lease.phase === "draining") {
            node.suspended.add(`${lease.token.key.shardId}:${lease.token.epoch}`);
          }
        }
      }
    }
    if (input.kind === "acquired" && input.token !== null) {
      const pending = before.shards.get(input.shardId);
      // A freshly acquired token (the same epoch again when the owner renews in place) is a new lease to release.
      if (pending?.phase === "acquiring" && pending.callId === input.callId) {
        node.suspended.delete(`${input.shardId}:${input.token.epoch}`);
      }
    }
    for (const [shardId, lease] of after.shards) {
      if (lease.phase !== "held") continue;
      const seen = node.heldEpoch.get(shardId) ?? 0;
      assert.ok(lease.token.epoch >= seen, `${where()}: node ${node.index} shard ${shardId} epoch went backwards`);
      node.heldEpoch.set(shardId, lease.token.epoch);
    }
    for (const effect of effects) perform(node, effect);
  };

  type Call = { kind: "acquire" | "renew" | "release"; callId: number; shardId: number };
  const failureOf = (call: Call): LeaseInput => {
    const error = "simulated database error";
    if (call.kind === "acquire") return { kind: "acquireFailed", callId: call.callId, shardId: call.shardId, error };
    if (call.kind === "renew") return { kind: "renewFailed", callId: call.callId, shardId: call.shardId, error };
    return { kind: "releaseFailed", callId: call.callId, shardId: call.shardId, error };
  };

  const perform = (node: SimNode, effect: LeaseEffect) => {
    switch (effect.kind) {
      case "acquire":
      case "renew":
      case "release": {
        const shardId = effect.kind === "acquire" ? effect.key.shardId : effect.token.key.shardId;
        if (effect.kind === "release") {
          assert.ok(
            !node.suspended.has(`${shardId}:${effect.token.epoch}`),
            `${where()}: node ${node.index} released shard ${shardId} epoch ${effect.token.epoch} after suspending it`,
          );
          totals.releases++;
        }
        const call: Call = { kind: effect.kind, callId: effect.callId, shardId };
        const execute = (): LeaseInput => {
          if (effect.kind === "acquire") {
            const token = table.acquire(effect.key, effect.owner, effect.leaseDurationMs, nowMs);
            return { kind: "acquired", callId: effect.callId, shardId, token };
          }
          if (effect.kind === "renew") {
            const token = table.renew(effect.token, effect.leaseDurationMs, nowMs);
            return { kind: "renewed", callId: effect.callId, shardId, token };
          }
          return { kind: "released", callId: effect.callId, shardId, released: table.release(effect.token) };
        };
        schedule(node, delay(), () => {
          // An error either happens before the statement runs (nothing changed) or after it committed (reply lost).
          const fault = chance(0.08) ? (chance(0.5) ? "before" : "after") : null;
          const result = fault === "before" ? null : execute();
          schedule(node, delay(), () => feed(node, fault === null && result !== null ? result : failureOf(call)));
        });
        return;
      }
      case "scheduleRenewal":
        schedule(node, effect.afterMs, () =>
          feed(node, { kind: "renewTick", shardId: effect.shardId, epoch: effect.epoch, safeToOwn: node.safe }),
        );
        return;
      case "stopEntities":
        if (effect.reason === "handoff" || effect.reason === "not-retained" || effect.reason === "stopping") {
          schedule(node, Math.floor(random() * 100), () =>
            feed(node, { kind: "entitiesStopped", shardId: effect.shardId }),
          );
        }
        return;
      case "grant": {
        totals.grants++;
        const row = table.rows.get(effect.token.key.shardId);
        assert.ok(
          row !== undefined &&
            row.owner === effect.token.owner &&
            row.epoch === effect.token.epoch &&
            row.untilMs > nowMs,
          `${where()}: node ${node.index} granted ${JSON.stringify(effect.token)} but the table says ${JSON.stringify(row)}`,
        );
        const last = grantEpochs.get(effect.token.key.shardId) ?? 0;
        assert.ok(effect.token.epoch >= last, `${where()}: shard ${effect.token.key.shardId} granted an older epoch`);
        grantEpochs.set(effect.token.key.shardId, effect.token.epoch);
        return;
      }
      case "count":
        if (effect.counter === "leaseLosses") totals.losses += effect.by;
        if (effect.counter === "leaseAcquisitions") totals.acquisitions += effect.by;
        if (effect.counter === "leaseRenewals") totals.renewals += effect.by;
        return;
      case "fail":
      case "drained":
        return;
    }
  };

  const checkInvariants = () => {
    for (let shardId = 0; shardId < shardCount; shardId++) {
      const live = nodes.filter((n) => liveToken(n.book, shardId, nowMs) !== null);
      assert.ok(live.length <= 1, `${where()}: shard ${shardId} is live on nodes ${live.map((n) => n.index)}`);
      for (const node of live) {
        const token = liveToken(node.book, shardId, nowMs)!;
        const row = table.rows.get(shardId);
        assert.ok(
          row !== undefined && row.owner === token.owner && row.epoch === token.epoch && row.untilMs > nowMs,
          `${where()}: node ${node.index} holds a live token the table does not back`,
        );
      }
    }
  };

  for (let i = 0; i < stepsPerHistory; i++) {
    const node = pick(nodes);
    const shardId = Math.floor(random() * shardCount);
    const roll = random();
    if (roll < 0.45) {
      feed(node, { kind: "needLease", requestId: ++requestIds, shardId });
    } else if (roll < 0.6) {
      feed(node, { kind: "own", shardId });
    } else if (roll < 0.66) {
      feed(node, { kind: "retain", shardIds: [...Array(shardCount).keys()].filter(() => chance(0.6)) });
    } else if (roll < 0.72) {
      feed(node, { kind: "drain", shardId });
    } else if (roll < 0.8) {
      node.safe = !node.safe;
      feed(node, { kind: "safeToOwn", safe: node.safe });
    } else if (roll < 0.82) {
      feed(node, { kind: "stopAll" });
    } else if (roll < 0.83) {
      feed(node, { kind: "verify", shardId });
    } else if (roll < 0.85) {
      // A crash, or a restart after stopAll: the process comes back as a new owner with an empty book.
      node.generation++;
      node.owner = `node-${node.index}#${node.generation}`;
      node.book = newBook(node.owner);
      node.safe = true;
      node.suspended = new Set();
      node.heldEpoch = new Map();
    }
    checkInvariants();
    // Let time pass and run whatever fell due, in order.
    const untilMs = nowMs + Math.floor(random() * 200);
    for (;;) {
      events.sort((x, y) => x.atMs - y.atMs || x.seq - y.seq);
      const next = events[0];
      if (next === undefined || next.atMs > untilMs) break;
      events = events.slice(1);
      nowMs = Math.max(nowMs, next.atMs);
      if (nodes[next.node]!.generation === next.generation) next.run();
      checkInvariants();
    }
    nowMs = untilMs;
    checkInvariants();
  }
}

test(`${historyCount} seeded lease histories keep one live owner per shard, monotonic epochs, no release after suspend`, () => {
  const totals: Totals = { grants: 0, losses: 0, releases: 0, acquisitions: 0, renewals: 0 };
  const base = Number(process.env.MOVIE_SIM_SEED ?? 1);
  for (let seed = base; seed < base + historyCount; seed++) runHistory(seed, totals);
  if (process.env.MOVIE_SIM_VERBOSE) console.log(totals);
  // The histories must actually exercise every path, or the invariants above prove little.
  assert.ok(totals.grants > 1_000, JSON.stringify(totals));
  assert.ok(totals.losses > 50, JSON.stringify(totals));
  assert.ok(totals.releases > 50, JSON.stringify(totals));
  assert.ok(totals.renewals > 100, JSON.stringify(totals));
});
