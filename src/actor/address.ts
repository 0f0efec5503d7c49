/**
 * Where an actor system lives. A local system prints as `movie://system`; once remoting is on, its address is
 * `movie.tcp://system@host:port`. A {@link UniqueAddress} adds the random node uid chosen at start, so a process
 * restarted on the same host and port is a different node (docs/protocol.md §2.2).
 */
export class Address {
  /** Protocol of a system without remoting. */
  static readonly localProtocol = "movie";
  /** Protocol of a system reachable over TCP remoting. */
  static readonly tcpProtocol = "movie.tcp";

  private readonly text: string;

  constructor(
    readonly protocol: string,
    readonly system: string,
    readonly host: string | null = null,
    readonly port: number | null = null,
  ) {
    this.text = host === null ? `${protocol}://${system}` : `${protocol}://${system}@${host}:${port ?? 0}`;
  }

  /** A local (non-remote) address for `system`. */
  static local(system: string): Address {
    return new Address(Address.localProtocol, system);
  }

  /** A TCP remoting address. */
  static tcp(system: string, host: string, port: number): Address {
    return new Address(Address.tcpProtocol, system, host, port);
  }

  /** True when the address names a host and port. */
  get isRemote(): boolean {
    return this.host !== null;
  }

  /** `host:port`, or the empty string for a local address. */
  get hostPort(): string {
    return this.host === null ? "" : `${this.host}:${this.port ?? 0}`;
  }

  /** True when `other` is the same address. */
  equals(other: Address): boolean {
    return this.text === other.text;
  }

  /** The URI form, `movie.tcp://system@host:port` (with `#uid` for a UniqueAddress). */
  toString(): string {
    return this.text;
  }

  /** The same text as toString, so JSON carries the URI. */
  toJSON(): string {
    return this.text;
  }

  /**
   * Parses `protocol://system` or `protocol://system@host:port`.
   * @throws InvalidAddressError when the text is not of either form
   */
  static parse(text: string): Address {
    const match = /^([a-z][a-z0-9.+-]*):\/\/([^@/:#\s]+)(?:@([^/@#\s]*):(\d{1,5}))?$/.exec(text);
    if (match === null) throw new InvalidAddressError(text);
    const [, protocol, system, host, port] = match;
    if (host === undefined) return new Address(protocol!, system!);
    const portNumber = Number(port);
    if (portNumber > 65535) throw new InvalidAddressError(text);
    return new Address(protocol!, system!, host, portNumber);
  }
}

/** A node identity: a remote address plus the node uid chosen when the process started (docs/protocol.md §2.1). */
export class UniqueAddress {
  private readonly text: string;

  constructor(
    readonly address: Address,
    readonly uid: string,
  ) {
    if (uid.length === 0) throw new InvalidAddressError(`${address}#`);
    this.text = `${address}#${uid}`;
  }

  /**
   * Parses `movie.tcp://system@host:port#uid`, splitting at the last `#`.
   * @throws InvalidAddressError when the address or uid is missing
   */
  static parse(text: string): UniqueAddress {
    const at = text.lastIndexOf("#");
    if (at <= 0 || at === text.length - 1) throw new InvalidAddressError(text);
    return new UniqueAddress(Address.parse(text.slice(0, at)), text.slice(at + 1));
  }

  /** True when `other` is the same address. */
  equals(other: UniqueAddress | null | undefined): boolean {
    // The same instance first: the sharding core compares the same few addresses several times per routed message.
    return other != null && (this === other || this.text === other.text);
  }

  /** Orders by address string, then uid string (plain code-unit order), as every tie-break in Movie does. */
  static compare(a: UniqueAddress, b: UniqueAddress): number {
    const byAddress = compareStrings(a.address.toString(), b.address.toString());
    return byAddress !== 0 ? byAddress : compareStrings(a.uid, b.uid);
  }

  /** The URI form, `movie.tcp://system@host:port` (with `#uid` for a UniqueAddress). */
  toString(): string {
    return this.text;
  }

  /** The same text as toString, so JSON carries the URI. */
  toJSON(): string {
    return this.text;
  }
}

/** Plain string order (not locale-aware), the order every node computes identically. */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** An address or unique address string that cannot be parsed. */
export class InvalidAddressError extends Error {
  override readonly name = "InvalidAddressError";
  constructor(readonly text: string) {
    super(`Invalid Movie address "${text}": expected movie://system, movie.tcp://system@host:port or that plus #uid`);
  }
}
