/**
 * Remoting: `import { MessageRegistry, Remoting } from "movie/remote"`, then `await system.enableRemoting({ host, port })`.
 * TCP transport with length-prefixed frames, authenticated associations, a message registry, remote tell and ask.
 */
import "./enable-remoting.ts";

export type { AssociationState, SendMode } from "./association.ts";
export { backoffDefaults, backoffDelayMs } from "./backoff.ts";
export type { FieldList, FieldSpec, FieldType } from "./codec.ts";
export {
  ConnectionBoundError,
  EnvelopeDecodeError,
  FramingError,
  HandshakeError,
  MessageEncodeError,
  MessageRegistrationError,
  MessageTooLargeError,
  RemoteAskError,
  RemoteAskFailedError,
  RemoteDeliveryError,
  RemotingConfigurationError,
  RemotingNotEnabledError,
  UnknownMessageTypeError,
} from "./errors.ts";
export { defaultMaxFrameBytes, encodeFrame, FrameDecoder, frameHeaderBytes } from "./frame.ts";
export {
  type MessageClass,
  type MessageRegistration,
  MessageRegistry,
  type RegisterOptions,
} from "./message-registry.ts";
export {
  DecodedMessage,
  decodeNested,
  EncodedMessage,
  encodeNested,
  type NestedMessage,
  type NestingClass,
  type NestingLayout,
  registerNesting,
} from "./nested-message.ts";
export { RemoteActorRef } from "./remote-actor-ref.ts";
export {
  type AssociationEvent,
  type InboundRejection,
  type PeerAuthorizer,
  type PeerInfo,
  Remoting,
  remotingId,
} from "./remoting.ts";
export { type RemotingSettings, resolveRemotingSettings } from "./settings.ts";
export type { StandardSchemaResult, StandardSchemaV1 } from "./standard-schema.ts";
export type { RejectReason, RemotingStats } from "./stats.ts";
export type { RemoteStopPolicy } from "./system-authorization.ts";
