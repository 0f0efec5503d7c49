/**
 * The sharding wire protocol (docs/protocol.md §7). Every class has plain-JSON fields and a `static fromJSON` that
 * validates what arrived and rebuilds the instance, so a malformed or hostile message becomes a typed
 * ClusterShardingConfigurationError rather than a crash. Who sends what:
 *
 * - `ShardingEnvelope` (User / Activate / Passivate): caller → coordinator (hop 0), coordinator → owner (hop 1).
 * - `PlanRequest`: non-coordinator → coordinator; answered with a `PlanUpdate` to the requester unless it already
 *   holds that plan, and with `CancelPreparations` when it lists preparations the coordinator no longer stands by.
 * - `PlanSnapshotRequest`: bootstrapping coordinator → every Up peer; answered with a `PlanSnapshot` if it has a plan.
 * - `PlanUpdate`: coordinator → every Up member (broadcast after each generation).
 * - `PassivateShard`: coordinator → previous owner (ask); the owner drains the shard and replies `ShardingControlAck`.
 * - `PrepareShard`: coordinator → next owner (ask); replies `ShardingControlAck`.
 * - `ShardingControlAck`: the reply of Activate, PassivateShard and PrepareShard.
 * - `CoordinatorFlush`: a caller whose coordinator changed → the coordinator it last sent to, which relays the
 *   caller's waiting envelopes and then this marker to the new coordinator (docs/protocol.md §8.7).
 * - `CoordinatorFlushed`: the new coordinator → the caller, once the relayed marker reached it.
 * - `CancelPreparations`: coordinator → a member holding preparations of shards it no longer hands to that member
 *   (the handoff was aborted after the prepare): the member forgets them and releases their leases (§9.3).
 * - `DirectEnvelope`, `DirectBatch` (direct routing, §8.8): caller → owner, past the coordinator; `DirectProbe`,
 *   `DirectGrant`, `DirectRefused`, `HandoffAnnounce`, `DirectMarker`: the direct route's control messages.
 */
import { UniqueAddress } from "../../actor/index.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import { parseTraceparent } from "../tracing/traceparent.ts";
import { settingsDigest, settingsDigestLimit, settingsKeyOfDigest } from "./settings-digest.ts";

/** Kinds of routed envelopes. */
export type EnvelopeKind = "User" | "Activate" | "Passivate";

/** A registered user message as it travels inside an envelope: its registry tag, then its JSON. */
export interface WireMessage {
  readonly type: string;
  readonly payload: unknown;
}

/** Tag of the empty message control envelopes carry. */
export const emptyMessageType = "movie.cluster.sharding.control.empty.v1";

/** Wire names of the sharding messages (registered with remoting). */
export const wireNames = {
  /** v2: binary layout (src/sharding/internal/envelope-codec.ts); v1 was the envelope's JSON. */
  envelope: "movie.cluster.sharding.envelope.v2",
  controlAck: "movie.cluster.sharding.control-ack.v1",
  planRequest: "movie.cluster.sharding.plan-request.v1",
  planSnapshotRequest: "movie.cluster.sharding.plan-snapshot-request.v1",
  planSnapshot: "movie.cluster.sharding.plan-snapshot.v1",
  planUpdate: "movie.cluster.sharding.plan-update.v1",
  passivateShard: "movie.cluster.sharding.passivate-shard.v1",
  prepareShard: "movie.cluster.sharding.prepare-shard.v1",
  coordinatorFlush: "movie.cluster.sharding.coordinator-flush.v1",
  coordinatorFlushed: "movie.cluster.sharding.coordinator-flushed.v1",
  cancelPreparations: "movie.cluster.sharding.cancel-preparations.v1",
  /**
   * The direct route (docs/protocol.md §8.8): the envelope v2 layout with the settings key as its digest and the
   * coordinator as its uid, plus the generation the sender names. v1 carried the whole key and address.
   */
  directEnvelope: "movie.cluster.sharding.direct-envelope.v2",
  /** Consecutive direct envelopes of one caller to one owner with one sender, in one frame (docs/protocol.md §8.8). */
  directBatch: "movie.cluster.sharding.direct-batch.v1",
  /** The per-envelope part of a direct batch: never sent alone (the daemon refuses it as an unknown message). */
  directBatchEntry: "movie.cluster.sharding.direct-batch-entry.v1",
  directProbe: "movie.cluster.sharding.direct-probe.v1",
  directGrant: "movie.cluster.sharding.direct-grant.v1",
  directRefused: "movie.cluster.sharding.direct-refused.v1",
  handoffAnnounce: "movie.cluster.sharding.handoff-announce.v1",
  directMarker: "movie.cluster.sharding.direct-marker.v1",
} as const;

/** `hopCount` of a direct envelope: caller → owner, past the coordinator (docs/protocol.md §8.8). */
export const directHop = 2;
/** Largest generation a direct envelope or grant may name (the plan snapshot bound, docs/protocol.md §6.3). */
const directGenerationMax = 2 ** 40;
/** Longest coordinator uid a direct envelope may name (remoting's uids are 16 hex digits). */
const uidLengthMax = 64;

/** One shard's owner in a plan message. */
export interface Assignment {
  readonly shardId: number;
  /** UniqueAddress string. */
  readonly owner: string;
}

/**
 * The key of an envelope's typed message (internal/codec.ts `attachTyped`): the value its caller told, beside its wire
 * form, while the envelope stays in the caller's process (docs/protocol.md §7.2). A symbol: invisible to JSON.stringify,
 * so it never reaches the wire.
 */
export const typedKey: unique symbol = Symbol("movie.sharding.typed");
/** {@link typedKey}'s value on an envelope that carries no typed message (one that came from another node). */
export const untyped: unique symbol = Symbol("movie.sharding.untyped");

/** A user message, activation or passivation routed to an entity. */
export class ShardingEnvelope {
  /**
   * The typed message, or {@link untyped} (see {@link typedKey}). A field of every envelope from its construction, so
   * that attaching one is a store, not a new property (a new hidden class) and a holder object per envelope.
   */
  [typedKey]: unknown = untyped;

  constructor(
    readonly kind: EnvelopeKind,
    readonly entityType: string,
    readonly entityId: string,
    readonly shardId: number,
    readonly settingsKey: string,
    /** 0 from the caller to the coordinator, 1 from the coordinator to the owner. */
    readonly hopCount: number,
    /** The coordinator that forwarded it (hop 1), as a UniqueAddress string; null at hop 0. */
    readonly coordinator: string | null,
    /** Timeout of the original ask, ms; null for a tell. */
    readonly askTimeoutMs: number | null,
    /** True when the original tell had no sender (the owner then shows none). */
    readonly senderless: boolean,
    /** The user message (User kind) or null (control kinds). */
    readonly message: WireMessage | null,
    /** Retry attempts made by the delivery barrier so far. */
    readonly deliveryAttempt = 0,
    /** The caller's span as a W3C `traceparent` (docs/protocol.md §7.2), or null when the call is not traced. */
    readonly traceparent: string | null = null,
    /**
     * Set on decode when the sender wrote a `traceparent` that is not valid: it was dropped (`traceparent` is null)
     * and the receiving node counts it. Never on the wire.
     */
    readonly traceContextMalformed = false,
  ) {}

  /** A copy for the hop from the coordinator to the owner. */
  forwarded(coordinator: UniqueAddress, senderless: boolean): ShardingEnvelope {
    return new ShardingEnvelope(
      this.kind,
      this.entityType,
      this.entityId,
      this.shardId,
      this.settingsKey,
      this.hopCount + 1,
      coordinator.toString(),
      this.askTimeoutMs,
      this.senderless || senderless,
      this.message,
      this.deliveryAttempt,
      this.traceparent,
    );
  }

  /**
   * A copy that a former coordinator relays to the new one (docs/protocol.md §8.7): still hop 0, with `coordinator`
   * naming the relaying node (a caller's hop-0 envelope never names one), so the receiver relays it no further.
   */
  relayedBy(node: UniqueAddress): ShardingEnvelope {
    return new ShardingEnvelope(
      this.kind,
      this.entityType,
      this.entityId,
      this.shardId,
      this.settingsKey,
      0,
      node.toString(),
      this.askTimeoutMs,
      this.senderless,
      this.message,
      this.deliveryAttempt,
      this.traceparent,
    );
  }

  /**
   * Rebuilds an envelope from its JSON.
   * @throws ClusterShardingConfigurationError naming the malformed field
   */
  static fromJSON(json: unknown): ShardingEnvelope {
    return ShardingEnvelope.validated(json, false);
  }

  /**
   * Validates an envelope's JSON and builds it: a {@link DirectEnvelope} when `direct` (its own fields checked after
   * the shared ones). One function for both, so a direct envelope is built once on every delivery, not built as an
   * envelope first and copied.
   * @throws ClusterShardingConfigurationError naming the malformed field
   */
  protected static validated(json: unknown, direct: boolean): ShardingEnvelope {
    const o = object(json, "ShardingEnvelope");
    const e = entryFields(o, wireMessageOf(o.message));
    const hopCount = intValue(o.hopCount, "hopCount", 0);
    if (!direct) {
      const entityType = nonEmptyValue(o.entityType, "entityType");
      const settingsKey = strValue(o.settingsKey, "settingsKey");
      const coordinator = optStrValue(o.coordinator, "coordinator");
      if (coordinator !== null) address(coordinator, "coordinator");
      const message = e.message;
      e.message = null;
      return new ShardingEnvelope(
        e.kind,
        entityType,
        e.entityId,
        e.shardId,
        settingsKey,
        hopCount,
        coordinator,
        e.askTimeoutMs,
        e.senderless,
        message,
        e.deliveryAttempt,
        e.traceparent,
        e.malformedTrace,
      );
    }
    if (hopCount !== directHop) bad("hopCount", `a direct envelope has hop count ${directHop}`);
    const header = directHeader(o.entityType, o.settingsDigest, o.coordinatorUid);
    return directEnvelopeOf(e, header, directGeneration(o.generation));
  }
}

/**
 * The fields of an envelope that are its own in a direct batch (all but the entity type, settings, hop count,
 * coordinator and, of a direct envelope, the generation, which is checked apart), validated. Filled in place by
 * {@link entryFields} and read at once: one object for the process instead of one per envelope read. Its message is
 * cleared when read, so the scratch never keeps a payload alive.
 */
interface EntryFields {
  kind: EnvelopeKind;
  message: WireMessage | null;
  askTimeoutMs: number | null;
  traceparent: string | null;
  /** The sender wrote a `traceparent` that is not valid: dropped (`traceparent` null), counted where received. */
  malformedTrace: boolean;
  entityId: string;
  shardId: number;
  senderless: boolean;
  deliveryAttempt: number;
}

const entryScratch: EntryFields = {
  kind: "User",
  message: null,
  askTimeoutMs: null,
  traceparent: null,
  malformedTrace: false,
  entityId: "",
  shardId: 0,
  senderless: false,
  deliveryAttempt: 0,
};

/**
 * Validates an envelope's own fields (as {@link EntryFields}) into the shared scratch and returns it; the caller
 * reads it before validating another.
 * @throws ClusterShardingConfigurationError naming the malformed field
 */
function entryFields(o: Json, message: WireMessage | null): EntryFields {
  // Each field is read by name here, once (a helper given the object and a key would make every read a keyed lookup
  // on the owner's hot path), then checked by value.
  const kind = strValue(o.kind, "kind");
  if (kind !== "User" && kind !== "Activate" && kind !== "Passivate") bad("kind", `unknown kind ${kind}`);
  if (kind === "User" && message === null) bad("message", "a User envelope needs a message");
  const askTimeoutMs =
    o.askTimeoutMs === null || o.askTimeoutMs === undefined ? null : nonNegativeValue(o.askTimeoutMs, "askTimeoutMs");
  // A bad trace context costs the trace, not the message: dropped here, counted by the receiving node.
  const parsedTrace = parseTraceparent(o.traceparent);
  const traceparent = parsedTrace === null ? null : (o.traceparent as string);
  const entityId = nonEmptyValue(o.entityId, "entityId");
  const shardId = intValue(o.shardId, "shardId", 0);
  const senderless = boolValue(o.senderless, "senderless");
  const deliveryAttempt = o.deliveryAttempt === undefined ? 0 : intValue(o.deliveryAttempt, "deliveryAttempt", 0);
  const e = entryScratch;
  e.kind = kind;
  e.message = message;
  e.askTimeoutMs = askTimeoutMs;
  e.traceparent = traceparent;
  e.malformedTrace = traceparent === null && o.traceparent !== null && o.traceparent !== undefined;
  e.entityId = entityId;
  e.shardId = shardId;
  e.senderless = senderless;
  e.deliveryAttempt = deliveryAttempt;
  return e;
}

/** An envelope's `message` as its JSON or its nesting codec's fields gave it (untrusted), validated; null when absent. */
function wireMessageOf(message: unknown): WireMessage | null {
  if (message === null || message === undefined) return null;
  const m = object(message, "message");
  return { type: strValue(m.type, "type"), payload: m.payload };
}

/** What every direct envelope of one batch shares (a direct batch's header), validated. */
export interface DirectHeader {
  readonly entityType: string;
  /** The local settings key the digest resolves to (one no settings here have resolves to none that matches). */
  readonly settingsKey: string;
  readonly settingsDigest: number;
  readonly coordinatorUid: string;
}

/**
 * Validates the shared fields a direct envelope has beyond the v2 layout's, and its entity type: a `settingsDigest` in
 * 0..2^52-1 and a `coordinatorUid` of 1..64 characters.
 * @throws ClusterShardingConfigurationError naming the malformed field
 */
export function directHeader(entityType: unknown, settingsDigest: unknown, coordinatorUid: unknown): DirectHeader {
  const type = nonEmptyValue(entityType, "entityType");
  const digest = intValue(settingsDigest, "settingsDigest", 0);
  if (digest >= settingsDigestLimit) bad("settingsDigest", "expected an integer below 2^52");
  const uid = nonEmptyValue(coordinatorUid, "coordinatorUid");
  if (uid.length > uidLengthMax) bad("coordinatorUid", `longer than ${uidLengthMax} characters`);
  return { entityType: type, settingsKey: settingsKeyOfDigest(digest), settingsDigest: digest, coordinatorUid: uid };
}

/**
 * A direct envelope's `generation`: 1..2^40.
 * @throws ClusterShardingConfigurationError
 */
export function directGeneration(generation: unknown): number {
  const gen = intValue(generation, "generation", 1);
  if (gen > directGenerationMax) bad("generation", `above ${directGenerationMax}`);
  return gen;
}

/** Reply of Activate, PassivateShard and PrepareShard. `accepted` on Activate: this call created the actor. */
export class ShardingControlAck {
  constructor(readonly accepted: boolean) {}

  /** @throws ClusterShardingConfigurationError when `accepted` is not a boolean */
  static fromJSON(json: unknown): ShardingControlAck {
    return new ShardingControlAck(bool(object(json, "ShardingControlAck"), "accepted"));
  }
}

/** A non-coordinator asks the coordinator for the current plan of a type. */
export class PlanRequest {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    /** The requester's UniqueAddress string; must equal the transport identity. */
    readonly requester: string,
    /**
     * The plan the requester holds: its author (UniqueAddress string, null for none) and generation (0 for none). The
     * coordinator answers a poll only when its own plan differs, so a steady cluster does not re-send every plan to
     * every member four times a second. Absent on the wire (an older sender): unknown, always answered.
     */
    readonly knownAuthor: string | null = null,
    readonly knownGeneration = 0,
    /**
     * The shards the requester holds prepared by the coordinator it asks (sorted, no duplicates): the coordinator
     * cancels those it no longer hands to the requester (docs/protocol.md §9.3). Absent on the wire (an older
     * sender): none.
     */
    readonly prepared: readonly number[] = [],
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): PlanRequest {
    const o = object(json, "PlanRequest");
    const requester = addressField(o, "requester");
    const knownAuthor = optStr(o, "knownAuthor");
    if (knownAuthor !== null) address(knownAuthor, "knownAuthor");
    const knownGeneration = o.knownGeneration === undefined ? 0 : int(o, "knownGeneration", 0);
    const prepared = o.prepared === undefined ? [] : shardIds(o, "prepared");
    return new PlanRequest(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      requester,
      knownAuthor,
      knownGeneration,
      prepared,
    );
  }
}

/** A bootstrapping coordinator asks a peer for the plan it holds. */
export class PlanSnapshotRequest {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    /** The requesting coordinator's UniqueAddress string; must equal the transport identity. */
    readonly coordinator: string,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): PlanSnapshotRequest {
    const o = object(json, "PlanSnapshotRequest");
    const coordinator = addressField(o, "coordinator");
    return new PlanSnapshotRequest(nonEmpty(o, "entityType"), str(o, "settingsKey"), coordinator);
  }
}

/** A plan with its author and generation: the body of PlanUpdate and PlanSnapshot. */
abstract class PlanBody {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    /** The author of the plan, as a UniqueAddress string. */
    readonly coordinator: string,
    readonly generation: number,
    /** Sorted by shard id, no duplicates. */
    readonly assignments: readonly Assignment[],
  ) {}

  /** The assignments as a map (validated by fromJSON). */
  allocations(): Map<number, UniqueAddress> {
    return new Map(this.assignments.map((a) => [a.shardId, UniqueAddress.parse(a.owner)]));
  }

  /** The author as a UniqueAddress. */
  author(): UniqueAddress {
    return UniqueAddress.parse(this.coordinator);
  }

  /** The checked fields of a plan body's decoded wire JSON, in constructor order. */
  protected static parts(json: unknown, what: string): [string, string, string, number, Assignment[]] {
    const o = object(json, what);
    const coordinator = addressField(o, "coordinator");
    const generation = int(o, "generation", 0);
    if (!Array.isArray(o.assignments)) bad("assignments", "expected an array");
    const seen = new Set<number>();
    const assignments = (o.assignments as unknown[]).map((a) => {
      const ao = object(a, "assignment");
      const shardId = int(ao, "shardId", 0);
      if (seen.has(shardId)) bad("assignments", `duplicate shard ${shardId}`);
      seen.add(shardId);
      const owner = str(ao, "owner");
      address(owner, "assignments.owner");
      return { shardId, owner };
    });
    assignments.sort((a, b) => a.shardId - b.shardId);
    return [nonEmpty(o, "entityType"), str(o, "settingsKey"), coordinator, generation, assignments];
  }
}

/** Turns a plan map into sorted assignments. */
export function toAssignments(allocations: ReadonlyMap<number, UniqueAddress>): Assignment[] {
  return [...allocations].sort((a, b) => a[0] - b[0]).map(([shardId, owner]) => ({ shardId, owner: owner.toString() }));
}

/** The coordinator's authoritative plan of a type (broadcast, or the answer to a PlanRequest). */
export class PlanUpdate extends PlanBody {
  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): PlanUpdate {
    return new PlanUpdate(...PlanBody.parts(json, "PlanUpdate"));
  }
}

/** A peer's stored plan, sent to a bootstrapping coordinator. */
export class PlanSnapshot extends PlanBody {
  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): PlanSnapshot {
    return new PlanSnapshot(...PlanBody.parts(json, "PlanSnapshot"));
  }
}

/** The coordinator asks the previous owner to drain a shard (DRAIN_AND_STOP its entities) and ack. */
export class PassivateShard {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    readonly coordinator: string,
    readonly nextOwner: string | null,
    /**
     * Direct routing (docs/protocol.md §8.8): the handoff's token, named by the HandoffAnnounce every member got, and
     * the members whose DirectMarker of that token the owner waits for before it drains. Null / empty in coordinator
     * routing (and absent on the wire from an older sender).
     */
    readonly handoffToken: number | null = null,
    readonly waitFor: readonly string[] = [],
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): PassivateShard {
    const o = object(json, "PassivateShard");
    const coordinator = addressField(o, "coordinator");
    const nextOwner = optStr(o, "nextOwner");
    if (nextOwner !== null) address(nextOwner, "nextOwner");
    const handoffToken = o.handoffToken === null || o.handoffToken === undefined ? null : int(o, "handoffToken", 0);
    let waitFor: string[] = [];
    if (o.waitFor !== undefined && o.waitFor !== null) {
      if (!Array.isArray(o.waitFor)) bad("waitFor", "expected an array");
      if (o.waitFor.length > waitForMax) bad("waitFor", `more than ${waitForMax} members`);
      waitFor = (o.waitFor as unknown[]).map((m) => {
        if (typeof m !== "string") bad("waitFor", "expected unique address strings");
        address(m, "waitFor");
        return m;
      });
    }
    return new PassivateShard(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      int(o, "shardId", 0),
      coordinator,
      nextOwner,
      handoffToken,
      waitFor,
    );
  }
}

/** The coordinator asks the next owner to prepare a shard before the buffered traffic is forwarded. */
export class PrepareShard {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    readonly coordinator: string,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): PrepareShard {
    const o = object(json, "PrepareShard");
    const coordinator = addressField(o, "coordinator");
    return new PrepareShard(nonEmpty(o, "entityType"), str(o, "settingsKey"), int(o, "shardId", 0), coordinator);
  }
}

/**
 * The flush marker of a coordinator change (docs/protocol.md §8.7). The caller sends it to the coordinator it last
 * sent envelopes to, behind them on the same connection; that node relays the caller's envelopes it still holds and
 * then this marker to `target`, behind them; `target` answers the caller with `CoordinatorFlushed`.
 */
export class CoordinatorFlush {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    /** The caller's UniqueAddress string: the transport identity of the first hop, the one to answer. */
    readonly caller: string,
    /** The coordinator the caller now routes through, as a UniqueAddress string. */
    readonly target: string,
    /** The caller's number for this flush: an answer with another is stale. */
    readonly token: number,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): CoordinatorFlush {
    const o = object(json, "CoordinatorFlush");
    const caller = addressField(o, "caller");
    const target = addressField(o, "target");
    return new CoordinatorFlush(nonEmpty(o, "entityType"), str(o, "settingsKey"), caller, target, int(o, "token", 0));
  }
}

/** The new coordinator's answer to a relayed `CoordinatorFlush`: everything the caller sent before it has arrived. */
export class CoordinatorFlushed {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    /** The answering coordinator's UniqueAddress string; must equal the transport identity. */
    readonly coordinator: string,
    readonly token: number,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): CoordinatorFlushed {
    const o = object(json, "CoordinatorFlushed");
    const coordinator = addressField(o, "coordinator");
    return new CoordinatorFlushed(nonEmpty(o, "entityType"), str(o, "settingsKey"), coordinator, int(o, "token", 0));
  }
}

/**
 * The coordinator's answer to a plan request that listed preparations it no longer stands by: no handoff of those
 * shards to the requester is running (one was aborted after its prepare), and the plan does not place them there. The
 * requester forgets each one still prepared by this coordinator and releases its lease unless its own plan places the
 * shard there; a lost copy is repeated at the next plan request, which lists them again (docs/protocol.md §9.3).
 */
export class CancelPreparations {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    /** The coordinator (UniqueAddress string); must equal the transport identity. */
    readonly coordinator: string,
    /** Sorted, no duplicates. */
    readonly shardIds: readonly number[],
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): CancelPreparations {
    const o = object(json, "CancelPreparations");
    const coordinator = addressField(o, "coordinator");
    return new CancelPreparations(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      coordinator,
      shardIds(o, "shardIds"),
    );
  }
}

/** Most members a PassivateShard's `waitFor` may list (far above any cluster this runtime forms). */
const waitForMax = 10_000;

/**
 * A delivery sent by the caller straight to the shard's owner under the owner's grant (docs/protocol.md §8.8):
 * `hopCount` 2, the grant's coordinator named by its uid (`coordinatorUid`; `coordinator` stays null), and `generation`
 * the grant's plan generation. Its own wire name, so the envelope v2 of coordinator routing is unchanged. On the wire
 * the settings key is its 52-bit digest (`settingsDigest`, internal/settings-digest.ts) and the coordinator its uid:
 * these two texts were about 150 of the envelope's bytes, written and read on every direct delivery. Received, its
 * `settingsKey` is the local key the digest resolves to, so the owner's settings checks are those of any envelope.
 */
export class DirectEnvelope extends ShardingEnvelope {
  constructor(
    kind: EnvelopeKind,
    entityType: string,
    entityId: string,
    shardId: number,
    settingsKey: string,
    askTimeoutMs: number | null,
    senderless: boolean,
    message: WireMessage | null,
    deliveryAttempt: number,
    traceparent: string | null,
    /** The plan generation the owner granted under. */
    readonly generation: number,
    /**
     * The uid of the coordinator that forwarded the probe and authored the owner's plan: the owner accepts only when it
     * is its accepting coordinator's. A uid names one incarnation (64 random bits); the sender is authenticated by
     * remoting, and this field is only its claim of which plan it follows.
     */
    readonly coordinatorUid: string,
    /** {@link settingsDigest} of `settingsKey`: what the wire carries for it. */
    readonly settingsDigest: number,
    traceContextMalformed = false,
  ) {
    super(
      kind,
      entityType,
      entityId,
      shardId,
      settingsKey,
      directHop,
      null,
      askTimeoutMs,
      senderless,
      message,
      deliveryAttempt,
      traceparent,
      traceContextMalformed,
    );
  }

  /** The caller's hop-0 envelope, sent directly to the owner under a grant of `coordinator` at `generation`. */
  static of(envelope: ShardingEnvelope, coordinator: UniqueAddress, generation: number): DirectEnvelope {
    return new DirectEnvelope(
      envelope.kind,
      envelope.entityType,
      envelope.entityId,
      envelope.shardId,
      envelope.settingsKey,
      envelope.askTimeoutMs,
      envelope.senderless,
      envelope.message,
      envelope.deliveryAttempt,
      envelope.traceparent,
      generation,
      coordinator.uid,
      settingsDigest(envelope.settingsKey),
    );
  }

  /**
   * Rebuilds a direct envelope from its JSON: the envelope fields as for v2 but the settings key and coordinator, then
   * `hopCount` exactly 2, a `settingsDigest` in 0..2^52-1, a `coordinatorUid` of 1..64 characters, and a `generation`
   * in 1..2^40.
   * @throws ClusterShardingConfigurationError naming the malformed field
   */
  static override fromJSON(json: unknown): DirectEnvelope {
    return ShardingEnvelope.validated(json, true) as DirectEnvelope;
  }

  /**
   * Rebuilds one envelope of a direct batch: its entry's own fields and generation, as the entry's nesting codec read
   * them (`NestingCodec.readRecord`: untrusted), validated as a single direct envelope's are, and the batch's `header`,
   * validated once for the batch ({@link directHeader}). The record's `message` is the codec's own (a `NestedMessage`
   * of a wire name and the payload it read, or null): taken as it is, not copied.
   * @throws ClusterShardingConfigurationError naming the malformed field
   */
  static fromBatchRecord(record: Readonly<Record<string, unknown>>, header: DirectHeader): DirectEnvelope {
    const e = entryFields(record, record.message as WireMessage | null);
    return directEnvelopeOf(e, header, directGeneration(record.generation));
  }
}

/** A direct envelope of validated fields (the scratch `e`'s message is taken and cleared). */
function directEnvelopeOf(e: EntryFields, header: DirectHeader, generation: number): DirectEnvelope {
  const message = e.message;
  e.message = null;
  return new DirectEnvelope(
    e.kind,
    header.entityType,
    e.entityId,
    e.shardId,
    header.settingsKey,
    e.askTimeoutMs,
    e.senderless,
    message,
    e.deliveryAttempt,
    e.traceparent,
    generation,
    header.coordinatorUid,
    header.settingsDigest,
    e.malformedTrace,
  );
}

/** Most direct envelopes one {@link DirectBatch} may carry. */
export const directBatchMax = 256;

/**
 * Direct envelopes that one caller sent one owner back to back, with one sender, carried in one frame (docs/protocol.md
 * §8.8 "Batches"). The owner handles them one by one, in order, exactly as that many single direct envelopes from the
 * same link: a batch only saves the frame, the mailbox turn and the sender lookup each would cost.
 */
export class DirectBatch {
  constructor(
    readonly envelopes: readonly DirectEnvelope[],
    /**
     * True when whoever built the batch checked, envelope by envelope, that all share the first one's entity type,
     * settings digest and coordinator uid (the caller's batches, node/direct-batches.ts): its codec then
     * writes it without checking them again. Never on the wire.
     */
    readonly sameHeader = false,
  ) {}

  /**
   * Rebuilds a batch from its JSON: `envelopes`, an array of 1..{@link directBatchMax} direct envelopes, each validated
   * as {@link DirectEnvelope.fromJSON} validates one.
   * @throws ClusterShardingConfigurationError naming the malformed field
   */
  static fromJSON(json: unknown): DirectBatch {
    const o = object(json, "DirectBatch");
    const list = o.envelopes;
    if (!Array.isArray(list) || list.length === 0 || list.length > directBatchMax) {
      bad("envelopes", `expected an array of 1 to ${directBatchMax} direct envelopes`);
    }
    const envelopes: DirectEnvelope[] = [];
    for (let i = 0; i < list.length; i++) envelopes.push(DirectEnvelope.fromJSON(list[i]));
    return new DirectBatch(envelopes);
  }
}

/**
 * One envelope of a received {@link DirectBatch}, as its entry's nesting codec read it (`NestingCodec.readRecord`) and
 * {@link checkedBatchRecord} validated it: a direct envelope's fields but those of the batch's header.
 */
export interface DirectBatchRecord {
  readonly kind: EnvelopeKind;
  readonly entityId: string;
  readonly shardId: number;
  /** Null or undefined (the wire's absent) for a tell. */
  readonly askTimeoutMs: number | null | undefined;
  readonly senderless: boolean;
  readonly deliveryAttempt: number;
  /** As the sender wrote it: one that is not a valid trace context is dropped, and counted, when its envelope is built. */
  readonly traceparent: string | null | undefined;
  readonly generation: number;
  /** The codec's own `NestedMessage`: the payload decoded as read (`DecodedMessage`), or kept encoded. */
  readonly message: WireMessage | null;
}

/**
 * A direct batch as an owner reads it (internal/direct-batch-codec.ts): its header, validated once, and its envelopes'
 * records, each validated as a single direct envelope's fields are. An envelope is built from its record only where it
 * is needed ({@link envelopeAt}): the owner's daemon delivers a plain tell of a shard it accepted straight from the
 * record (node-shell.ts `receiveRecord`), so a batch in the daemon's mailbox holds no envelope objects.
 */
export class ReceivedDirectBatch {
  /** @internal Made by the batch's codec. */
  constructor(
    readonly header: DirectHeader,
    readonly records: readonly DirectBatchRecord[],
  ) {}

  /** The direct envelope of record `i`, built on each call (the same one a single direct envelope would be). */
  envelopeAt(i: number): DirectEnvelope {
    return DirectEnvelope.fromBatchRecord(this.records[i] as unknown as Readonly<Record<string, unknown>>, this.header);
  }
}

/**
 * A batch entry's fields as its nesting codec read them (untrusted), validated as a single direct envelope's are (the
 * checks of {@link DirectEnvelope.fromBatchRecord}), as the record they are.
 * @throws ClusterShardingConfigurationError naming the malformed field
 */
export function checkedBatchRecord(record: Readonly<Record<string, unknown>>): DirectBatchRecord {
  // The scratch's message is cleared (it never keeps a payload alive): only the checks are wanted here.
  entryFields(record, record.message as WireMessage | null).message = null;
  directGeneration(record.generation);
  return record as unknown as DirectBatchRecord;
}

/**
 * The per-envelope part of a {@link DirectBatch} on the wire: a direct envelope's fields but those the batch header
 * carries once (internal/direct-batch-codec.ts). Registered only so that remoting's nesting codec writes and reads it;
 * it is never sent alone. Read, it only holds the entry's fields as they came, unvalidated: an inert value to any
 * actor a peer addresses one to (the daemon refuses it as an unknown message and counts it), which only the batch's
 * codec opens, validating the fields ({@link checkedBatchRecord}).
 */
export class DirectBatchEntry {
  /** @internal Made by {@link DirectBatchEntry.fromJSON} only. */
  constructor(
    /** The fields as read (untrusted). */
    readonly fields: unknown,
  ) {}

  /** Wraps the fields read (the nesting codec's decode): nothing is validated or trusted here. */
  static fromJSON(json: unknown): DirectBatchEntry {
    return new DirectBatchEntry(json);
  }
}

/**
 * A caller asks for the direct route to a shard's owner (docs/protocol.md §8.8): sent to the coordinator behind the
 * caller's hop-0 envelopes (`coordinator` null), forwarded by it to the owner behind what it forwarded there
 * (`coordinator` the forwarding coordinator).
 */
export class DirectProbe {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    /** The asking node's UniqueAddress string: the transport identity of the first leg, where the grant goes. */
    readonly caller: string,
    /** The caller's number for this probe: a grant with another is stale. */
    readonly token: number,
    /** Null on the first leg; the forwarding coordinator's UniqueAddress string on the second. */
    readonly coordinator: string | null = null,
  ) {}

  /** The copy the coordinator forwards to the owner. */
  forwardedBy(coordinator: UniqueAddress): DirectProbe {
    return new DirectProbe(
      this.entityType,
      this.settingsKey,
      this.shardId,
      this.caller,
      this.token,
      coordinator.toString(),
    );
  }

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): DirectProbe {
    const o = object(json, "DirectProbe");
    const caller = addressField(o, "caller");
    const coordinator = optStr(o, "coordinator");
    if (coordinator !== null) address(coordinator, "coordinator");
    return new DirectProbe(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      int(o, "shardId", 0),
      caller,
      int(o, "token", 0),
      coordinator,
    );
  }
}

/** The owner's answer to a forwarded DirectProbe: the caller may send the shard's deliveries straight to it. */
export class DirectGrant {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    /** The granting owner's UniqueAddress string; must equal the transport identity. */
    readonly owner: string,
    /** The coordinator that forwarded the probe and authored the owner's plan. */
    readonly coordinator: string,
    /** The owner's plan generation: direct envelopes name it. */
    readonly generation: number,
    readonly token: number,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): DirectGrant {
    const o = object(json, "DirectGrant");
    const owner = addressField(o, "owner");
    const coordinator = addressField(o, "coordinator");
    const generation = int(o, "generation", 1);
    if (generation > directGenerationMax) bad("generation", `above ${directGenerationMax}`);
    return new DirectGrant(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      int(o, "shardId", 0),
      owner,
      coordinator,
      generation,
      int(o, "token", 0),
    );
  }
}

/** The owner refused a direct delivery (docs/protocol.md §8.8): the sender drops its grant and routes through the coordinator. */
export class DirectRefused {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    /** The refusing owner's UniqueAddress string; must equal the transport identity. */
    readonly owner: string,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): DirectRefused {
    const o = object(json, "DirectRefused");
    const owner = addressField(o, "owner");
    return new DirectRefused(nonEmpty(o, "entityType"), str(o, "settingsKey"), int(o, "shardId", 0), owner);
  }
}

/**
 * The coordinator announces a handoff of a shard (docs/protocol.md §8.8): every member drops its grant for it and sends
 * a DirectMarker of `token` to `previousOwner`, behind whatever it sent there directly.
 */
export class HandoffAnnounce {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    readonly coordinator: string,
    readonly previousOwner: string,
    readonly token: number,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): HandoffAnnounce {
    const o = object(json, "HandoffAnnounce");
    const coordinator = addressField(o, "coordinator");
    const previousOwner = addressField(o, "previousOwner");
    return new HandoffAnnounce(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      int(o, "shardId", 0),
      coordinator,
      previousOwner,
      int(o, "token", 0),
    );
  }
}

/** A member's marker of an announced handoff: nothing it sent the owner directly for the shard comes after it. */
export class DirectMarker {
  constructor(
    readonly entityType: string,
    readonly settingsKey: string,
    readonly shardId: number,
    /** The marking member's UniqueAddress string; must equal the transport identity. */
    readonly caller: string,
    /** The coordinator that announced the handoff. */
    readonly coordinator: string,
    /** The announced handoff's token. */
    readonly token: number,
  ) {}

  /** @throws ClusterShardingConfigurationError naming the malformed field */
  static fromJSON(json: unknown): DirectMarker {
    const o = object(json, "DirectMarker");
    const caller = addressField(o, "caller");
    const coordinator = addressField(o, "coordinator");
    return new DirectMarker(
      nonEmpty(o, "entityType"),
      str(o, "settingsKey"),
      int(o, "shardId", 0),
      caller,
      coordinator,
      int(o, "token", 0),
    );
  }
}

type Json = Record<string, unknown>;

function bad(field: string, detail: string): never {
  throw new ClusterShardingConfigurationError(`Malformed sharding message: ${field}: ${detail}`, field);
}
function object(value: unknown, what: string): Json {
  if (value === null || typeof value !== "object" || Array.isArray(value)) bad(what, "expected an object");
  return value as Json;
}
function strValue(v: unknown, field: string): string {
  if (typeof v !== "string") bad(field, "expected a string");
  return v;
}
function str(o: Json, field: string): string {
  return strValue(o[field], field);
}
function nonEmptyValue(v: unknown, field: string): string {
  const text = strValue(v, field);
  if (text.length === 0) bad(field, "must not be empty");
  return text;
}
function nonEmpty(o: Json, field: string): string {
  return nonEmptyValue(o[field], field);
}
function optStrValue(v: unknown, field: string): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v !== "string") bad(field, "expected a string or null");
  return v;
}
function optStr(o: Json, field: string): string | null {
  return optStrValue(o[field], field);
}
function intValue(v: unknown, field: string, min: number): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) bad(field, `expected an integer of ${min} or more`);
  return v;
}
function int(o: Json, field: string, min: number): number {
  return intValue(o[field], field, min);
}
/** A list of distinct shard ids (integers of 0 or more), returned sorted. */
function shardIds(o: Json, field: string): number[] {
  const v = o[field];
  if (!Array.isArray(v)) bad(field, "expected an array of shard ids");
  const ids = new Set<number>();
  for (const id of v as unknown[]) {
    if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0) {
      bad(field, "expected shard ids: integers of 0 or more");
    }
    if (ids.has(id)) bad(field, `duplicate shard ${id}`);
    ids.add(id);
  }
  return [...ids].sort((a, b) => a - b);
}
function nonNegativeValue(v: unknown, field: string): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) bad(field, "expected a non-negative number");
  return v;
}
function boolValue(v: unknown, field: string): boolean {
  if (typeof v !== "boolean") bad(field, "expected a boolean");
  return v;
}
function bool(o: Json, field: string): boolean {
  return boolValue(o[field], field);
}
// Every envelope a coordinator forwards names it, so the last address that parsed is remembered (null until one has:
// an initial "" would let an empty address through unchecked).
let lastValidAddress: string | null = null;
/** A string field that must be a unique address (`UniqueAddress.parse`), returned as the text. */
function addressField(o: Json, field: string): string {
  const text = str(o, field);
  address(text, field);
  return text;
}
function address(text: string, field: string): void {
  if (text === lastValidAddress) return;
  try {
    UniqueAddress.parse(text);
  } catch {
    bad(field, `not a unique address: ${text}`);
  }
  lastValidAddress = text;
}
