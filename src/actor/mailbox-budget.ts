/**
 * A count of messages waiting in the mailboxes of a group of actors, shared by all of them (sharding keeps one per
 * shard on its owner, so the entities of one shard are bounded together). The actors only count: a cell spawned with
 * a budget adds one for each message it queues and subtracts what it took out at the end of each mailbox run (or
 * when a stop drains it), so `count` is the number of messages queued and not yet started in the group; whoever
 * delivers into the group compares it with `capacity` before a send. A message that is running (an async handler
 * in progress) is no longer counted.
 */
export class MailboxBudget {
  /** Messages queued in the group's mailboxes and not yet started. */
  count = 0;

  constructor(
    /** Most messages the group may hold; whoever delivers refuses at this count. */
    readonly capacity: number,
  ) {}

  /** True when another message would exceed {@link capacity}. */
  get full(): boolean {
    return this.count >= this.capacity;
  }
}
