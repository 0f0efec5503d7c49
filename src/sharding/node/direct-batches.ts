import type { ActorRef, UniqueAddress } from "../../actor/index.ts";
import { fitsBatchHeader } from "../internal/direct-batch-codec.ts";
import type { DirectEnvelope } from "../internal/messages.ts";
import type { Delivery } from "./node-core.ts";

/** Direct envelopes of one owner and one sender, decided by this node's callers and not written yet. */
export interface PendingDirectBatch {
  readonly to: UniqueAddress;
  readonly sender: ActorRef<unknown> | null;
  /**
   * Whether the header can carry the entity type (internal/direct-batch-codec.ts `fitsBatchHeader`: at most 4,096
   * bytes of UTF-8, no lone surrogate). When not, the envelopes are still kept in order here, and written one by one.
   */
  readonly headerFits: boolean;
  /** What the batch's header carries: every envelope's (checked as each was added). */
  readonly entityType: string;
  readonly settingsDigest: number;
  readonly coordinatorUid: string;
  readonly envelopes: DirectEnvelope[];
  /** The deliveries the envelopes were built for, index for index (a send that fails is reported per delivery). */
  readonly deliveries: Delivery[];
}

/**
 * The direct envelopes this node's callers sent owners (the core's `forward` effects of direct routing), kept until the
 * end of the current microtask and then written as one frame per owner (docs/protocol.md §8.8 "Batches"): a caller's
 * burst of tells costs one frame, one mailbox turn and one sender lookup per owner, not per tell.
 *
 * Nothing is reordered on any link. Per owner, envelopes stay in the order they were decided, and a batch ends when its
 * sender or what its header carries changes (one sender per frame; one entity type, settings digest and coordinator
 * uid per batch) or it is full (`maxEnvelopes`). The shell writes every pending batch
 * ({@link flush}) before anything else it sends (a control message, a marker, an envelope to a coordinator, a
 * non-direct forward), so every message it writes on a link comes after the direct envelopes it decided before.
 * Only writes to different owners' links may swap, and those links have no order between them anyway.
 */
export class DirectSendBatches {
  // Keyed by the owner's UniqueAddress string: one batch per owner incarnation, whichever address object names it.
  private readonly pending = new Map<string, PendingDirectBatch>();
  private scheduled = false;
  // The last entity type asked about, and whether a batch header can carry it (a stream of tells repeats the type).
  private lastType = "";
  private lastTypeFits = true;
  private readonly flushSoon = (): void => {
    this.scheduled = false;
    this.flush();
  };

  constructor(
    private readonly maxEnvelopes: number,
    /** Writes one batch (one envelope alone when it is the only one). Must not throw. */
    private readonly write: (batch: PendingDirectBatch) => void,
    /** Called after a flush that ran outside the shell's steps wrote anything (the shell then runs what it queued). */
    private readonly afterFlush: () => void,
  ) {}

  /**
   * Adds a direct envelope for `to`. Its owner's batch is written first when it has another sender or header (entity
   * type, settings, coordinator), and right after when it is full.
   */
  add(to: UniqueAddress, envelope: DirectEnvelope, delivery: Delivery): void {
    const key = to.toString();
    const sender = delivery.sender;
    let batch = this.pending.get(key);
    if (batch !== undefined && (batch.sender !== sender || !sharesHeader(batch, envelope))) {
      this.pending.delete(key);
      this.write(batch);
      batch = undefined;
    }
    if (batch === undefined) {
      batch = {
        to,
        sender,
        headerFits: this.headerFits(envelope.entityType),
        entityType: envelope.entityType,
        settingsDigest: envelope.settingsDigest,
        coordinatorUid: envelope.coordinatorUid,
        envelopes: [],
        deliveries: [],
      };
      this.pending.set(key, batch);
      if (!this.scheduled) {
        this.scheduled = true;
        queueMicrotask(this.flushSoon);
      }
    }
    batch.envelopes.push(envelope);
    batch.deliveries.push(delivery);
    if (batch.envelopes.length >= this.maxEnvelopes) {
      this.pending.delete(key);
      this.write(batch);
    }
  }

  private headerFits(entityType: string): boolean {
    if (entityType !== this.lastType) {
      this.lastType = entityType;
      this.lastTypeFits = fitsBatchHeader(entityType);
    }
    return this.lastTypeFits;
  }

  /** Whether any envelope waits to be written. */
  get isEmpty(): boolean {
    return this.pending.size === 0;
  }

  /**
   * Writes every pending batch, in the order their owners' first envelopes were decided. `write` reports its own
   * failures; should it throw all the same, the batches after it are still written (and `afterFlush` still runs), and
   * the first error is thrown at the end.
   */
  flush(): void {
    if (this.pending.size === 0) return;
    const batches = [...this.pending.values()];
    this.pending.clear();
    let failure: unknown = null;
    for (let i = 0; i < batches.length; i++) {
      try {
        this.write(batches[i]!);
      } catch (error) {
        failure ??= error;
      }
    }
    this.afterFlush();
    if (failure !== null) throw failure;
  }
}

/** Whether `e` can join `batch`: the batch header carries these once (direct-batch-codec.ts). */
function sharesHeader(batch: PendingDirectBatch, e: DirectEnvelope): boolean {
  return (
    batch.entityType === e.entityType &&
    batch.settingsDigest === e.settingsDigest &&
    batch.coordinatorUid === e.coordinatorUid
  );
}
