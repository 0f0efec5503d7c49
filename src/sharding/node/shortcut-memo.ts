import { DirectEnvelope, type ReceivedDirectBatch } from "../internal/messages.ts";
import {
  type CallerOwnDirect,
  type CallerRouteTarget,
  callerOwnDirectOf,
  callerRouteOf,
  type Delivery,
  directDeliveryType,
  type NodeState,
  type TypeState,
} from "./node-core.ts";

/**
 * The node shell's memory of the core's shortcut answers (node-core.ts `callerRouteOf`, `directDeliveryType`) for the
 * data path of direct routing (docs/protocol.md §8.8): a stream of messages to one shard asks the same question again
 * and again, and the answer, a pure function of the node state, holds while `NodeState.version` stays the same (no
 * step ran and no shortcut changed what the answer reads). The memory is dropped at the first message after a change,
 * and holds only answers of the state itself, so it is bounded by the types and shards registered here.
 *
 * What makes it sound is that nothing changes the state without counting: `step` counts every input, and the
 * shortcuts' one change outside a step (`routeVia`) counts itself. The simulator cannot check the memory (each of its
 * inputs is a whole step, so the memory would never answer); test/sharding/rules/node-shortcut-memo-rules.test.ts
 * fills it, changes the state, and compares it with the core, and the TCP tests of direct routing fail without it.
 * And with `MOVIE_SHARDING_VERIFY_MEMO=1` in the environment (the test runner sets it for every test and every node
 * process a test starts), each answer taken from the memory is asked of the core again and compared: a change of the
 * state that forgot to count fails the test that made it, instead of passing unnoticed.
 */

/** Whether every answer taken from the memory is checked against the core's (see above; for tests). */
const verifyHits = process.env.MOVIE_SHARDING_VERIFY_MEMO === "1";

/** Throws unless the memory's `kept` answer is the core's `fresh` one (`MOVIE_SHARDING_VERIFY_MEMO=1`). */
function verified<T>(what: string, kept: T, fresh: T, same: (a: T, b: T) => boolean): T {
  if (!same(kept, fresh)) {
    const message = `sharding shortcut memory: ${what} differs from the core's answer at the same state version (a change of the node state that did not count: NodeState.version)`;
    // Also on stderr: thrown at an owner, inside the sharding daemon, the error stops the daemon, and a test with
    // logging silenced would only time out.
    process.stderr.write(`${message}\n${new Error(message).stack ?? ""}\n`);
    throw new Error(message);
  }
  return kept;
}

/** Where a member's caller's tell to one shard goes: `callerRouteOf`'s answer, and, when that is null, `callerOwnDirectOf`'s. */
export interface CallerAnswer {
  /** Another node (or the coordinator) the route step would send it to. */
  readonly target: CallerRouteTarget | null;
  /** This node's own grant, under which the route step would deliver it here. */
  readonly own: CallerOwnDirect | null;
}

const neither: CallerAnswer = { target: null, own: null };

/** The core's answer now (the two never both: a direct route to this node is not a route to another). */
function answerOf(state: NodeState, entityType: string, shard: number): CallerAnswer {
  const target = callerRouteOf(state, entityType, shard);
  if (target !== null) return { target, own: null };
  const own = callerOwnDirectOf(state, entityType, shard);
  return own === null ? neither : { target: null, own };
}

const sameTarget = (a: CallerRouteTarget | null, b: CallerRouteTarget | null): boolean =>
  a === b || (a !== null && b !== null && a.t === b.t && a.coordinator.equals(b.coordinator) && a.direct === b.direct);

const sameOwn = (a: CallerOwnDirect | null, b: CallerOwnDirect | null): boolean =>
  a === b || (a !== null && b !== null && a.t === b.t && a.coordinator.equals(b.coordinator) && a.route === b.route);

const sameAnswer = (a: CallerAnswer, b: CallerAnswer): boolean =>
  sameTarget(a.target, b.target) && sameOwn(a.own, b.own);

/** The answers for member callers' tells ({@link CallerAnswer}) at one state version, per entity type and shard. */
export class CallerRouteMemo {
  private version = -1;
  private readonly byType = new Map<string, Map<number, CallerAnswer>>();

  /** The core's {@link CallerAnswer}, kept while the state's version stays the same (for a registered type only). */
  answer(state: NodeState, entityType: string, shard: number): CallerAnswer {
    if (state.version !== this.version) {
      this.version = state.version;
      this.byType.clear();
    }
    let shards = this.byType.get(entityType);
    const known = shards?.get(shard);
    if (known !== undefined) {
      if (!verifyHits) return known;
      return verified("a caller's route", known, answerOf(state, entityType, shard), sameAnswer);
    }
    const answer = answerOf(state, entityType, shard);
    // Only answers about a registered type are kept (bounded by its shards): an unknown name asks the core again.
    if (!state.types.has(entityType)) return answer;
    if (shards === undefined) {
      shards = new Map();
      this.byType.set(entityType, shards);
    }
    shards.set(shard, answer);
    return answer;
  }
}

/**
 * The direct envelopes an owner accepted (`directDeliveryType`) at one state version: per shard, the generation
 * accepted, under one entity type, settings key and coordinator uid (what one caller's batch shares). An envelope that
 * matches one is accepted but for the check that depends on its entity id (its shard is the one the id hashes to),
 * which is made for every envelope: by hashing the id, or by the entity when it lives here under that shard (see
 * {@link DirectAcceptMemo.kept}).
 */
export class DirectAcceptMemo {
  private version = -1;
  private t: TypeState | null = null;
  private entityType = "";
  private settingsKey = "";
  private coordinatorUid = "";
  private readonly generations = new Map<number, number>();

  /** `directDeliveryType(state, d)`, with the shard's part kept while the state's version and the header stay. */
  accepts(state: NodeState, d: Delivery): TypeState | null {
    const e = d.envelope;
    if (e instanceof DirectEnvelope) {
      const kept = this.kept(state, e.entityType, e.settingsKey, e.coordinatorUid, e.shardId, e.generation, e.entityId);
      if (kept !== undefined) {
        if (!verifyHits) return kept;
        return verified("an owner's accept", kept, directDeliveryType(state, d), (x, y) => x === y);
      }
    }
    const accepted = directDeliveryType(state, d);
    if (accepted === null) return null;
    this.remember(state, accepted, e as DirectEnvelope);
    return accepted;
  }

  /**
   * {@link accepts} of record `i` of a received batch, answered only from the memory: null when the memory does not
   * hold the answer too (the caller then builds the envelope and asks {@link accepts}). A record of a batch has the
   * batch's header, as its envelope would. `liveShard` is the shard of the record's entity when it lives on this node
   * (`ShardingProvider.liveShardOf`): the same shard as the record's stands for the hash of its id (see {@link kept}).
   */
  acceptsRecord(
    state: NodeState,
    batch: ReceivedDirectBatch,
    i: number,
    liveShard: number | undefined = undefined,
  ): TypeState | null {
    const h = batch.header;
    const r = batch.records[i]!;
    const kept = this.kept(
      state,
      h.entityType,
      h.settingsKey,
      h.coordinatorUid,
      r.shardId,
      r.generation,
      r.entityId,
      liveShard,
    );
    if (kept === undefined) return null;
    if (!verifyHits) return kept;
    const d = { envelope: batch.envelopeAt(i), sender: null, origin: null };
    return verified("an owner's accept of a batch record", kept, directDeliveryType(state, d), (x, y) => x === y);
  }

  /**
   * The kept answer for a direct delivery with these fields, or undefined when the memory holds none: the type kept
   * for its shard and generation under its header at this version, or null when its entity id hashes to another shard
   * (the one check made for every envelope). An entity living here under the envelope's shard (`liveShard`) answers
   * that check without hashing: a provider creates an entity only under the shard its id hashes to
   * (`requireEntityShard`, whatever envelope asked for it). The hash cost about a tenth of an owner's CPU per direct
   * tell in profiles.
   */
  private kept(
    state: NodeState,
    entityType: string,
    settingsKey: string,
    coordinatorUid: string,
    shard: number,
    generation: number,
    entityId: string,
    liveShard: number | undefined = undefined,
  ): TypeState | null | undefined {
    const t = this.t;
    if (
      t === null ||
      state.version !== this.version ||
      entityType !== this.entityType ||
      settingsKey !== this.settingsKey ||
      coordinatorUid !== this.coordinatorUid ||
      this.generations.get(shard) !== generation
    ) {
      return undefined;
    }
    if (liveShard === shard) return t;
    const settings = t.settings;
    return settings.partitioner.shardFor(entityType, entityId, settings.shardCount) === shard ? t : null;
  }

  /** Keeps `accepted`, the core's acceptance of `direct`, for its shard (dropping what another version kept). */
  private remember(state: NodeState, accepted: TypeState, direct: DirectEnvelope): void {
    if (
      state.version !== this.version ||
      accepted !== this.t ||
      direct.entityType !== this.entityType ||
      direct.settingsKey !== this.settingsKey ||
      direct.coordinatorUid !== this.coordinatorUid
    ) {
      this.version = state.version;
      this.t = accepted;
      this.entityType = direct.entityType;
      this.settingsKey = direct.settingsKey;
      this.coordinatorUid = direct.coordinatorUid;
      this.generations.clear();
    }
    this.generations.set(direct.shardId, direct.generation);
  }
}
