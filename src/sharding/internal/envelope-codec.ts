import type { NestingLayout } from "../../remote/index.ts";

/**
 * The wire layout of {@link ShardingEnvelope}: its own fields, in wire order, and the user message nested in it.
 * Remoting's nesting codec (`registerNesting`) writes the envelope and the nested message into the outgoing frame in
 * one pass and reads them back without JSON:
 *
 * `[u32 n][nested message: n bytes][envelope fields]`, the nested message being absent (n = 0) for control kinds, else
 * `[u16 m][wire name: m bytes UTF-8][u8 format][u32 fingerprint, binary format only][payload]`.
 *
 * A caller's envelope (hop 0) arrives at the coordinator, which forwards it: its payload stays encoded (remoting's
 * `EncodedMessage`) and goes on as it came. A forwarded one (hop 1) arrives at the owner, where it is delivered: its
 * payload is decoded as it is read, straight from the frame (`decodeHere`), so the owner copies no payload bytes. A
 * payload that does not decode stays encoded either way, and the node that delivers the envelope refuses it there
 * (`decodeNested`) and counts it (`malformedEnvelopes.payload`) rather than dropping the whole envelope.
 */
export const envelopeLayout: NestingLayout = {
  fields: {
    kind: "string",
    entityType: "string",
    entityId: "string",
    shardId: "int32",
    settingsKey: "string",
    hopCount: "int32",
    coordinator: "string?",
    askTimeoutMs: "number?",
    senderless: "boolean",
    deliveryAttempt: "int32",
    traceparent: "string?",
  },
  nestedField: "message",
  decodeHere: (fields) => fields.hopCount === 1,
};

/**
 * The wire layout of {@link DirectEnvelope} (docs/protocol.md §8.8): the v2 fields (the settings key as its digest, the
 * coordinator as its uid), then the plan generation the sender names. A wire name of its own, so coordinator routing's
 * envelope v2 (and its fingerprint) stays as it was.
 */
export const directEnvelopeLayout: NestingLayout = {
  // The v2 fields in their order, with the settings key as its digest and the coordinator as its uid (about 150 bytes
  // fewer to write and read per direct delivery), then the generation.
  fields: {
    kind: "string",
    entityType: "string",
    entityId: "string",
    shardId: "int32",
    settingsDigest: "number",
    hopCount: "int32",
    coordinatorUid: "string",
    askTimeoutMs: "number?",
    senderless: "boolean",
    deliveryAttempt: "int32",
    traceparent: "string?",
    generation: "number",
  },
  nestedField: "message",
  // A direct envelope is always read by the owner it is delivered to.
  decodeHere: () => true,
};

/** The direct envelope's fields that a batch's header carries once, or that are the same for every direct envelope. */
const batchHeaderFields: ReadonlySet<string> = new Set(["entityType", "settingsDigest", "hopCount", "coordinatorUid"]);

/**
 * The per-envelope layout of a direct batch (docs/protocol.md §8.8 "Batches"): the direct envelope's own layout, in its
 * order, without the entity type, settings digest and coordinator uid, which the batch header carries once, and the hop
 * count, which is 2 for every direct envelope. Derived from {@link directEnvelopeLayout}, so a field added there is
 * carried per envelope here too. The generation stays per envelope: a caller's grants for one owner's shards were taken
 * under different plans, and a batch split at every change of it would hold few envelopes after any plan change. The
 * batch's codec (direct-batch-codec.ts) writes these from each envelope.
 */
export const directBatchEntryLayout: NestingLayout = {
  ...directEnvelopeLayout,
  fields: Object.fromEntries(
    Object.entries(directEnvelopeLayout.fields).filter(([name]) => !batchHeaderFields.has(name)),
  ),
};
