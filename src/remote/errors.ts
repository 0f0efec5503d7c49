/** Errors raised by remoting. Each has a stable `name` and carries the fields a caller acts on. */

/** A message type that has no entry in the MessageRegistry (on send, or a type name received from a peer). */
export class UnknownMessageTypeError extends Error {
  override readonly name = "UnknownMessageTypeError";
  constructor(readonly typeName: string) {
    super(
      `Message type "${typeName}" is not registered; call MessageRegistry.register(${typeName}) on every node before sending it`,
    );
  }
}

/** A registration that conflicts with an earlier one: the name is bound to another class, or the class to another name. */
export class MessageRegistrationError extends Error {
  override readonly name = "MessageRegistrationError";
  constructor(
    readonly typeName: string,
    detail: string,
  ) {
    super(`Cannot register message type "${typeName}": ${detail}`);
  }
}

/** The byte stream of a connection broke the framing rules (zero length or a frame above `maxFrameBytes`). */
export class FramingError extends Error {
  override readonly name = "FramingError";
  constructor(
    readonly frameBytes: number,
    readonly maxFrameBytes: number,
  ) {
    super(
      frameBytes === 0
        ? "Malformed frame: zero length; the stream cannot be trusted and the connection is closed"
        : `Frame of ${frameBytes} bytes exceeds maxFrameBytes ${maxFrameBytes}; the connection is closed`,
    );
  }
}

/** An outgoing message whose encoded envelope is larger than `maxFrameBytes`; nothing was sent. */
export class MessageTooLargeError extends Error {
  override readonly name = "MessageTooLargeError";
  constructor(
    readonly typeName: string,
    readonly frameBytes: number,
    readonly maxFrameBytes: number,
  ) {
    super(
      `Message ${typeName} encodes to ${frameBytes} bytes, above maxFrameBytes ${maxFrameBytes}; send smaller messages or raise maxFrameBytes on every node`,
    );
  }
}

/**
 * An outgoing message whose class declares binary `fields` (MessageRegistry.register) holds a value its declared type
 * cannot carry (a string in a `"number"` field, null in a non-nullable one, a lone surrogate, …); nothing was sent.
 */
export class MessageEncodeError extends Error {
  override readonly name = "MessageEncodeError";
  constructor(
    readonly typeName: string,
    /** The declared field that could not be encoded. */
    readonly field: string,
    /** What the declaration expects, e.g. "a number". */
    readonly expected: string,
    /** What the message held instead. */
    readonly actual: string,
  ) {
    super(
      `Cannot encode ${typeName}.${field}: expected ${expected}, got ${actual}; fix the value or declare the field with another type (add ? for null/undefined)`,
    );
  }
}

/** A well-framed envelope that could not be decoded (bad header, bad JSON, a failing `fromJSON` or schema). */
export class EnvelopeDecodeError extends Error {
  override readonly name = "EnvelopeDecodeError";
  constructor(
    readonly reason: "undecodable" | "unknownType" | "schemaInvalid",
    detail: string,
    /** The registered wire name of the message that failed to decode, when the registry knew it. */
    readonly typeName: string | null = null,
  ) {
    super(`Dropped an inbound envelope (${reason}): ${detail}`);
  }
}

/** The remote actor failed while handling an ask; `remoteClass` is the remote error's class name. */
export class RemoteAskError extends Error {
  override readonly name = "RemoteAskError";
  constructor(
    readonly target: string,
    readonly remoteClass: string,
    readonly remoteMessage: string,
  ) {
    super(`Remote actor ${target} failed with ${remoteClass}: ${remoteMessage}`);
  }
}

/**
 * Another name for {@link RemoteAskError} (the name the remoting issue uses): the same class, usable as a value
 * (`error instanceof RemoteAskFailedError`) and as a type (`let e: RemoteAskFailedError`). Errors it names still
 * report `name === "RemoteAskError"`.
 */
export const RemoteAskFailedError = RemoteAskError;
/** The instance type of {@link RemoteAskFailedError}, which is {@link RemoteAskError}. */
export type RemoteAskFailedError = RemoteAskError;

/** A remote message could not be sent: no connection (at-most-once, never replayed), or the peer's node uid changed. */
export class RemoteDeliveryError extends Error {
  override readonly name = "RemoteDeliveryError";
  constructor(
    readonly target: string,
    readonly reason:
      | "disconnected"
      | "staleUid"
      | "quarantined"
      | "stopped"
      | "overflow"
      /** The target's address was only named by a peer (a sender or watcher path); this node never dials those. */
      | "unknownAddress"
      /** `maxAssociations` associations exist and none could be expired. */
      | "associationLimit",
  ) {
    super(
      `Could not deliver to ${target} (${reason}); remote delivery is at-most-once, so retry at the application level if needed`,
    );
  }
}

/**
 * A peer failed the handshake (version, system or cluster name, secret, timeout, or a malformed reply). When the peer
 * refused this node (`byPeer`), `reason` is the reason the peer sent and the message reads "peer refused: <reason>".
 * `identity`: with TLS, the peer's certificate does not name the address it claims (or was dialled at).
 * `incarnationClaim`: the peer claims a host:port whose known incarnation (another uid) is still alive.
 * `quarantined`: the peer's incarnation was quarantined (membership downed it) or replaced; it never gets back in and
 * should restart with a new uid. A node that older peers refuse this way reads it as `malformed` (unknown reason).
 */
export class HandshakeError extends Error {
  override readonly name = "HandshakeError";
  constructor(
    readonly reason:
      | "version"
      | "systemName"
      | "clusterName"
      | "authentication"
      | "timeout"
      | "malformed"
      | "closed"
      | "identity"
      | "incarnationClaim"
      | "quarantined",
    detail: string,
    /** True when the peer refused this node (its reject message named `reason`), false when this node refused. */
    readonly byPeer = false,
  ) {
    super(`Remoting handshake failed (${byPeer ? `peer refused: ${reason}` : reason}): ${detail}`);
  }
}

/** `Remoting.get(system)` on a system whose remoting was not enabled. */
export class RemotingNotEnabledError extends Error {
  override readonly name = "RemotingNotEnabledError";
  constructor(readonly systemName: string) {
    super(
      `Remoting is not enabled on actor system ${systemName}; call await system.enableRemoting({ host, port }) first`,
    );
  }
}

/**
 * `enableRemoting` settings that would expose the node: a non-loopback host with neither `secret` nor `tls` (anyone
 * who reaches the port could message every actor). `field` names the setting to add.
 */
export class RemotingConfigurationError extends Error {
  override readonly name = "RemotingConfigurationError";
  constructor(
    readonly field: "secret" | "tls" | "insecure",
    detail: string,
  ) {
    super(`Remoting configuration refused: ${detail}`);
  }
}

/**
 * A connection remoting closed because it broke a bound: no whole frame within `heartbeatTimeout` (`"idle"`: a silent
 * peer, or half a frame and a stall), or replies the peer did not read above `maxBufferedBytes` (`"overflow"`). Kept
 * as the connection's failure and logged; the peer may connect again.
 */
export class ConnectionBoundError extends Error {
  override readonly name = "ConnectionBoundError";
  constructor(
    readonly reason: "idle" | "overflow",
    /** The peer, as this node knows it (UniqueAddress text, or the socket's remote address). */
    readonly peer: string,
    detail: string,
  ) {
    super(`Closed the connection to ${peer} (${reason}): ${detail}`);
  }
}
