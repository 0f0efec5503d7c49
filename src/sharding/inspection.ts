import type { UniqueAddress } from "../actor/index.ts";

/** One shard lease as this node keeps it (persistent types), for operators. */
export interface ShardLeaseView {
  readonly shardId: number;
  /** What this node is doing with the lease (the lease book's phase). */
  readonly phase: "acquiring" | "held" | "draining" | "releasing";
  /** The epoch of the token held, or null while acquiring. */
  readonly epoch: number | null;
  /** The lease's expiry on the database clock (epoch ms), or null while acquiring. */
  readonly leaseUntilEpochMs: number | null;
}

/**
 * A read-only view of one sharded type as this node sees it, for operators (the management endpoint, the CLI):
 * a copy, so holding it changes nothing.
 */
export interface ShardingTypeInspection {
  readonly name: string;
  readonly shardCount: number;
  /** The generation of this node's plan (0 before any). */
  readonly generation: number;
  /** The coordinator that authored this node's plan, or null before any plan. */
  readonly planAuthor: UniqueAddress | null;
  /** Where this node routes now (the converged coordinator), or null (routing fails closed). */
  readonly coordinator: UniqueAddress | null;
  /** shard → owner in this node's plan. */
  readonly allocations: ReadonlyMap<number, UniqueAddress>;
  /** Shards whose handoff this node drives (only the coordinator drives any), ascending. */
  readonly handoffs: readonly number[];
  /** Live local entities per shard (shards without any are absent). */
  readonly localEntities: ReadonlyMap<number, number>;
  /** The shard leases this node keeps, or null for a type that is not persistent. */
  readonly leases: readonly ShardLeaseView[] | null;
}
