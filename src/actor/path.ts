import { Address, InvalidAddressError } from "./address.ts";

/** Names allowed for an actor: no slash, no `#`, no whitespace, not starting with `$` (reserved for generated names). */
const actorNamePattern = /^[A-Za-z0-9_\-.:~+=@!,;'()*%]+$/;

/** True when `name` may be given to a user-spawned actor. */
export function isValidActorName(name: string): boolean {
  return name.length > 0 && name.length <= 255 && actorNamePattern.test(name);
}

/**
 * The hierarchical location of an actor: its system's address and the path elements below the root, such as
 * `movie://shop/user/orders/a` or `movie.tcp://shop@127.0.0.1:2551/system/sharding`.
 */
export class ActorPath {
  private readonly text: string;

  constructor(
    readonly address: Address,
    readonly elements: readonly string[],
  ) {
    this.text = `${address}/${elements.join("/")}`;
  }

  /** The path of a child called `name`. */
  child(name: string): ActorPath {
    return new ActorPath(this.address, [...this.elements, name]);
  }

  /** The last element (the actor's own name). */
  get name(): string {
    return this.elements[this.elements.length - 1] ?? "";
  }

  /** The path without its address: `/user/a/b`. */
  get localPart(): string {
    return `/${this.elements.join("/")}`;
  }

  /** The same path under another address (used when a system becomes remotely reachable). */
  withAddress(address: Address): ActorPath {
    return new ActorPath(address, this.elements);
  }

  /** True when `other` is the same path. */
  equals(other: ActorPath): boolean {
    return this.text === other.text;
  }

  /** The full path URI. */
  toString(): string {
    return this.text;
  }

  /** The same text as toString. */
  toJSON(): string {
    return this.text;
  }

  /**
   * Parses `protocol://system[@host:port]/a/b`.
   * @throws InvalidAddressError when the text is not an actor path
   */
  static parse(text: string): ActorPath {
    const schemeEnd = text.indexOf("://");
    if (schemeEnd < 0) throw new InvalidAddressError(text);
    const slash = text.indexOf("/", schemeEnd + 3);
    const address = Address.parse(slash < 0 ? text : text.slice(0, slash));
    const rest = slash < 0 ? "" : text.slice(slash + 1);
    const elements = rest.length === 0 ? [] : rest.split("/");
    if (elements.some((e) => e.length === 0)) throw new InvalidAddressError(text);
    return new ActorPath(address, elements);
  }
}
