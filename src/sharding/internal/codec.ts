import { decodeNested, encodeNested, type MessageRegistry, registerNesting } from "../../remote/index.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import { DirectBatchCodec, isBatchEntryCodec } from "./direct-batch-codec.ts";
import { directBatchEntryLayout, directEnvelopeLayout, envelopeLayout } from "./envelope-codec.ts";
import {
  CancelPreparations,
  CoordinatorFlush,
  CoordinatorFlushed,
  DirectBatch,
  DirectBatchEntry,
  DirectEnvelope,
  DirectGrant,
  DirectMarker,
  DirectProbe,
  DirectRefused,
  HandoffAnnounce,
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
  typedKey,
  untyped,
  type WireMessage,
  wireNames,
} from "./messages.ts";

/**
 * Turns a user message into its wire form inside an envelope and back. The remoting message registry implements it
 * for real clusters; a message that is not registered fails at the caller (docs/protocol.md §7.2: even on one node, because
 * the envelope always carries a serialized payload).
 */
export interface PayloadCodec {
  /** @throws when the message's class is not registered */
  encode(message: unknown): WireMessage;
  /** @throws when the tag is unknown or the payload invalid */
  decode(wire: WireMessage): unknown;
}

// The typed value travels beside its envelope inside one process, so local hops never decode (docs/protocol.md §7.2),
// in the envelope's own `typedKey` field (messages.ts).

/** Remembers the typed message of an envelope (process-local; not serialized). */
export function attachTyped(envelope: ShardingEnvelope, value: unknown): void {
  envelope[typedKey] = value;
}

/** Gives `to` the typed message of `from`, if it has one (a copy of an envelope within a process). */
export function shareTyped(from: ShardingEnvelope, to: ShardingEnvelope): void {
  const typed = from[typedKey];
  if (typed !== untyped) to[typedKey] = typed;
}

/** The typed message attached to `envelope`, or {@link untyped} when it never had one (it came from another node). */
export function typedOf(envelope: ShardingEnvelope): unknown {
  return envelope[typedKey];
}

/** A codec for a process without remoting: it tags by class name and can only resolve values attached locally. */
export const inProcessCodec: PayloadCodec = {
  encode(message: unknown): WireMessage {
    const type = (message as object)?.constructor?.name ?? typeof message;
    return { type, payload: null };
  },
  decode(wire: WireMessage): unknown {
    throw new ClusterShardingConfigurationError(
      `Sharded message ${wire.type} cannot be decoded without remoting; register it with MessageRegistry`,
      "message",
    );
  },
};

/**
 * The codec of a real cluster: the message's registered wire name, and the message itself as payload (the remoting
 * writer serializes it inside the envelope in the same pass, so no intermediate payload string is built).
 */
export class RegistryCodec implements PayloadCodec {
  constructor(private readonly registry: MessageRegistry) {}

  /** @throws UnknownMessageTypeError when the message's class is not registered */
  encode(message: unknown): WireMessage {
    return encodeNested(this.registry, message);
  }

  /** @throws EnvelopeDecodeError for an unknown tag or an invalid payload */
  decode(wire: WireMessage): unknown {
    return decodeNested(this.registry, wire);
  }
}

/**
 * Registers the sharding protocol classes under their stable dotted names (idempotent). The envelope, which every
 * routed message travels in, has a binary codec; the control messages are rare and travel as JSON.
 */
export function registerShardingWireTypes(registry: MessageRegistry): void {
  registerNesting(registry, ShardingEnvelope, wireNames.envelope, envelopeLayout);
  registry.register(ShardingControlAck, { name: wireNames.controlAck });
  registry.register(PlanRequest, { name: wireNames.planRequest });
  registry.register(PlanSnapshotRequest, { name: wireNames.planSnapshotRequest });
  registry.register(PlanSnapshot, { name: wireNames.planSnapshot });
  registry.register(PlanUpdate, { name: wireNames.planUpdate });
  registry.register(PassivateShard, { name: wireNames.passivateShard });
  registry.register(PrepareShard, { name: wireNames.prepareShard });
  registry.register(CoordinatorFlush, { name: wireNames.coordinatorFlush });
  registry.register(CoordinatorFlushed, { name: wireNames.coordinatorFlushed });
  registry.register(CancelPreparations, { name: wireNames.cancelPreparations });
  registerNesting(registry, DirectEnvelope, wireNames.directEnvelope, directEnvelopeLayout);
  // A batch's envelopes in the entry layout, through the nesting codec registered for it here.
  const entry = registerNesting(registry, DirectBatchEntry, wireNames.directBatchEntry, directBatchEntryLayout).codec;
  if (!isBatchEntryCodec(entry)) {
    throw new Error(`${wireNames.directBatchEntry} is registered without its nesting codec`);
  }
  registry.registerCodec(DirectBatch, wireNames.directBatch, new DirectBatchCodec(entry));
  registry.register(DirectProbe, { name: wireNames.directProbe });
  registry.register(DirectGrant, { name: wireNames.directGrant });
  registry.register(DirectRefused, { name: wireNames.directRefused });
  registry.register(HandoffAnnounce, { name: wireNames.handoffAnnounce });
  registry.register(DirectMarker, { name: wireNames.directMarker });
}
