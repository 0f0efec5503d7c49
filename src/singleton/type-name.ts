import { InvalidArgumentError } from "../actor/index.ts";

/** Prefix of every singleton's sharding type name (docs/protocol.md §12). */
export const singletonTypePrefix = "movie.singleton.";

/** The entity id of an ordinary (non-persistent) singleton inside its one-shard facade. */
export const ordinarySingletonEntityId = "singleton";

/**
 * The sharding type name that backs singleton `name`: `movie.singleton.<name>`; also the lease key's entity type of a
 * persistent singleton.
 * @throws InvalidArgumentError when `name` is empty
 */
export function singletonTypeName(name: string): string {
  if (typeof name !== "string" || name.length === 0) {
    throw new InvalidArgumentError("singleton name", "singleton name must not be empty");
  }
  return singletonTypePrefix + name;
}
