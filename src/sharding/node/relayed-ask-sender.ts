import type {
  ActorRef,
  AskOptions,
  Cancellable,
  Class,
  SystemMessage,
  TimeoutQueue,
  TimeoutTarget,
} from "../../actor/index.ts";
import type { MutableShardingStats } from "../stats.ts";

/**
 * The asker's ref as an entity sees it on the owner for a relayed ask: the same path and replies, but a failure of
 * the ask (the entity threw, or refused it), or no reply before the ask's timeout, also counts one rejected envelope
 * on this node. The first reply or failure settles it; nothing counts twice.
 */
export class RelayedAskSender implements ActorRef<unknown>, TimeoutTarget {
  private settled = false;
  private deadline: Cancellable | null = null;
  constructor(
    private readonly asker: ActorRef<unknown>,
    private readonly counters: MutableShardingStats,
  ) {}
  get path() {
    return this.asker.path;
  }
  /** Counts a rejection if neither a reply nor a failure passes through within `timeoutMs` (the asker's timeout). */
  armTimeout(timeouts: TimeoutQueue, timeoutMs: number): void {
    if (!this.settled && this.deadline === null) this.deadline = timeouts.schedule(timeoutMs, this);
  }
  onTimeout(): void {
    this.deadline = null;
    this.settle(true);
  }
  private settle(rejected: boolean): void {
    if (this.settled) return;
    this.settled = true;
    this.deadline?.cancel();
    this.deadline = null;
    if (rejected) this.counters.rejectedEnvelopes++;
  }
  tell(message: unknown, sender?: ActorRef<unknown> | null): void {
    this.settle(false);
    this.asker.tell(message, sender);
  }
  ask<R>(message: unknown, replyType: Class<R>, timeoutMs: number, options?: AskOptions): Promise<R> {
    return this.asker.ask(message, replyType, timeoutMs, options);
  }
  sendSystem(message: SystemMessage): void {
    this.asker.sendSystem(message);
  }
  failAsk(error: Error): void {
    this.settle(true);
    this.asker.failAsk?.(error);
  }
}
