import { type ActorContext, type ActorRef, MailboxBudget } from "../actor/index.ts";
import { ShardMailboxOverflowError } from "./errors.ts";
import type { MutableShardingStats } from "./stats.ts";

/**
 * The per-shard mailbox bound of one entity type on its owner (`shardMailboxCapacity`): one shared
 * {@link MailboxBudget} per shard, handed to every entity of the shard at spawn (the cells count their queued
 * messages into it), checked before each delivery. Every path into an entity goes through the provider's `deliver`
 * — a first delivery that activates the entity, a persistent entity's commands queued while it recovers, and the
 * retry barrier's flush after a lease wait or a handoff — so all of them meet the same bound.
 */
export class ShardBudgets {
  private readonly budgets = new Map<number, MailboxBudget>();
  /** Shards whose first refusal was logged (at most the shard count). */
  private readonly logged = new Set<number>();

  constructor(
    private readonly entityType: string,
    private readonly capacity: number,
    private readonly host: ActorContext<unknown>,
    private readonly stats: MutableShardingStats,
  ) {}

  /** The shard's budget, for the spawn options of a new entity of `shardId`. */
  of(shardId: number): MailboxBudget {
    let budget = this.budgets.get(shardId);
    if (budget === undefined) {
      budget = new MailboxBudget(this.capacity);
      this.budgets.set(shardId, budget);
    }
    return budget;
  }

  /**
   * Refuses `message` when the shard's entities already hold the bound: a dead letter with reason
   * `mailboxOverflow` to `recipient`, counted in `shardMailboxOverflows`, the shard's first refusal logged.
   * @throws ShardMailboxOverflowError when the shard is full (the caller rejects the delivery and fails an ask)
   */
  admit(shardId: number, message: unknown, sender: ActorRef<unknown> | null, recipient: string): void {
    const budget = this.budgets.get(shardId);
    if (budget === undefined || budget.count < budget.capacity) return;
    this.stats.shardMailboxOverflows++;
    this.host.system.deadLetterOffice.publish(message, sender, recipient, true);
    if (!this.logged.has(shardId)) {
      this.logged.add(shardId);
      this.host.log.warn(
        { entityType: this.entityType, shardId, capacity: this.capacity },
        "a shard's entity mailboxes are full: deliveries to it are refused (shardMailboxOverflows counts them; logged once per shard)",
      );
    }
    throw new ShardMailboxOverflowError(this.entityType, shardId, this.capacity);
  }
}
