import { Address, UniqueAddress } from "../../src/actor/index.ts";
import type { ShardingMember } from "../../src/sharding/index.ts";

/** A member `movie.tcp://<system>@127.0.0.1:<port>#<uid>`. */
export function member(
  system: string,
  options: { port?: number; uid?: string; status?: string; roles?: string[] } = {},
): ShardingMember {
  return {
    uniqueAddress: new UniqueAddress(Address.tcp(system, "127.0.0.1", options.port ?? 2551), options.uid ?? "1"),
    status: options.status ?? "Up",
    roles: options.roles ?? [],
  };
}

/** Shorthand for the address of `member(system)`. */
export function addr(system: string, port = 2551, uid = "1"): UniqueAddress {
  return new UniqueAddress(Address.tcp(system, "127.0.0.1", port), uid);
}

/** Shard counts per owner system name. */
export function countsBySystem(plan: ReadonlyMap<number, UniqueAddress>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const owner of plan.values()) out[owner.address.system] = (out[owner.address.system] ?? 0) + 1;
  return out;
}

/** The plan as [shard, system] pairs, for readable equality checks. */
export function bySystem(plan: ReadonlyMap<number, UniqueAddress>): [number, string][] {
  return [...plan].sort((a, b) => a[0] - b[0]).map(([s, o]) => [s, o.address.system]);
}
