import type { NestingLayout } from "../../remote/index.ts";

/**
 * The wire layout of {@link ShardingEnvelope}: its own fields, in wire order, and the user message nested in it.
 * Remoting's nesting codec (`registerNesting`) writes the envelope and the nested message into the outgoing frame in
 * one pass and reads them back without JSON:
 *
 * `[u32 n][nested message: n bytes][envelope fields]`, the nested message being absent (n = 0) for control kinds, else
 * `[u16 m][wire name: m bytes UTF-8][u8 format][u32 fingerprint, binary format only][payload]`.
 *
 * Decoding leaves the payload encoded (remoting's `EncodedMessage`): the coordinator forwards it as it came, and the
 * node that delivers it decodes it once (`decodeNested`), where an invalid payload is counted as such
 * (`malformedEnvelopes.payload`) rather than dropping the whole envelope.
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
};

/**
 * The wire layout of {@link DirectEnvelope} (docs/protocol.md §8.8): the v2 fields, then the plan generation the sender
 * names. A wire name of its own, so coordinator routing's envelope v2 (and its fingerprint) stays as it was.
 */
export const directEnvelopeLayout: NestingLayout = {
  fields: { ...envelopeLayout.fields, generation: "number" },
  nestedField: "message",
};
