import { RealScheduler, type Scheduler } from "../../actor/index.ts";
import {
  ConcurrentWriteError,
  OperationConflictError,
  ProjectionBehindRetentionError,
  ProjectionCheckpointConflictError,
  ProjectionRebuildSupersededError,
  StaleShardOwnerError,
  StoreClosedError,
  UnsafeRetentionError,
} from "../errors.ts";
import {
  type CheckedEventQuery,
  checkEventQuery,
  checkOffset,
  checkProjectionControlChange,
  checkProjectionName,
  checkTags,
  defaultProjectionControl,
  type EventPage,
  type EventQuery,
  entityTypeOf,
  type FeedEvent,
  feedPage,
  matchesQuery,
  type ProjectionBatchRequest,
  type ProjectionControl,
  type ProjectionControlChange,
  type ProjectionTransaction,
} from "../feed.ts";
import { eventsFingerprint, stateFingerprint } from "../fingerprint.ts";
import {
  type ShardLeaseKey,
  type ShardLeaseToken,
  validateLeaseKey,
  validateLeaseRequest,
  validateLeaseToken,
} from "../lease.ts";
import { OperationId } from "../operation-id.ts";
import {
  type ClaimedOutboxRow,
  checkClaim,
  checkClaimRefs,
  checkFailure,
  checkOffsets,
  checkOwner,
  type OutboxClaim,
  type OutboxClaimRef,
  type OutboxClaimRequest,
  type OutboxCounts,
  type OutboxFailure,
  type OutboxSettleResult,
  type ParkedOutboxRow,
} from "../outbox-claim.ts";
import { checkOutbox, type OutboxDestination, type OutboxRecord } from "../outbox-message.ts";
import {
  type AppendEventsRequest,
  checkAppend,
  checkFence,
  checkPersistenceId,
  checkRecord,
  checkSequence,
  type DeleteStateRequest,
  type PersistenceStore,
  type ReplyRecord,
  type RetentionResult,
  type SaveStateRequest,
  type SnapshotRecord,
  type StateRecord,
  type StoredEvent,
  TOMBSTONE_MANIFEST,
  type WriteResult,
} from "../store.ts";

interface Operation {
  readonly fingerprint: string;
  readonly revision: number;
  /** The reply recorded with an append (reply-with-effects). */
  readonly reply?: ReplyRecord | null;
}

interface Stream {
  revision: number;
  events: StoredEvent[];
  readonly operations: Map<string, Operation>;
}

interface DurableRow {
  record: StateRecord | null;
  readonly operations: Map<string, Operation>;
}

/** An outbox row (the columns of persistence_outbox that the contract uses). */
interface OutboxRow {
  readonly offset: number;
  readonly messageId: string;
  readonly persistenceId: string;
  readonly destination: OutboxDestination;
  readonly manifest: string;
  readonly payload: string;
  /** The shard its sender wrote it under (the write's fence key), or null for an unfenced write. */
  readonly senderShard: ShardLeaseKey | null;
  /** The lease epoch of its current (or last) claim; null for a row without a shard. */
  claimEpoch: number | null;
  delivered: boolean;
  parked: boolean;
  attempts: number;
  leaseOwner: string | null;
  /** Not claimable before this time (a claim's end or a retry's backoff). */
  leaseUntilMs: number;
  lastError: string | null;
  deliveredAtMs: number | null;
  readonly createdAtMs: number;
}

interface LeaseRow {
  owner: string;
  epoch: number;
  untilMs: number;
}

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /** The "database clock" for leases: its `wallNow()` (epoch ms); default the real clock. */
  scheduler?: Scheduler;
}

/**
 * The in-process backend: the full store contract (revisions, operation ids, snapshots, retention, tombstones, leases
 * and fencing) over maps. Each call is atomic because nothing awaits inside it. For tests and single-process use.
 */
export class MemoryStore implements PersistenceStore {
  readonly backendName = "memory" as const;
  private readonly streams = new Map<string, Stream>();
  private readonly snapshots = new Map<string, SnapshotRecord>();
  private readonly states = new Map<string, DurableRow>();
  private readonly leases = new Map<string, LeaseRow>();
  private readonly scheduler: Scheduler;
  /** The feed in offset order (offsets start at 1 and never repeat, also across retention). */
  private feed: FeedEvent[] = [];
  private lastOffset = 0;
  private readonly feedListeners = new Set<() => void>();
  private readonly checkpoints = new Map<string, number>();
  private readonly controls = new Map<string, ProjectionControl>();
  /** Projection batches run one at a time (the memory store's transactions). */
  private projectionQueue: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** The outbox in offset order. */
  private outbox: OutboxRow[] = [];
  private lastOutboxOffset = 0;

  constructor(options: MemoryStoreOptions = {}) {
    this.scheduler = options.scheduler ?? new RealScheduler();
  }

  async appendEvents(request: AppendEventsRequest): Promise<WriteResult> {
    this.open();
    const append = checkAppend(request);
    this.checkFenceNow(append.fence);
    const fingerprint = eventsFingerprint(append.events);
    const stream = this.stream(append.persistenceId);
    const previous = stream.operations.get(append.operationId);
    if (previous !== undefined) {
      if (previous.fingerprint !== fingerprint) {
        throw new OperationConflictError(append.persistenceId, append.operationId);
      }
      // A recorded reply only when there is one: a duplicate's result is otherwise what it always was.
      const reply = previous.reply ?? null;
      return reply === null
        ? { revision: previous.revision, duplicate: true }
        : { revision: previous.revision, duplicate: true, reply };
    }
    if (stream.revision !== append.expectedRevision) {
      throw new ConcurrentWriteError(append.persistenceId, append.expectedRevision, stream.revision);
    }
    const revision = append.expectedRevision + append.events.length;
    const entityType = entityTypeOf(append.persistenceId);
    append.events.forEach((event, i) => {
      const sequenceNr = append.expectedRevision + 1 + i;
      stream.events.push({ sequenceNr, manifest: event.manifest, payload: event.payload });
      this.feed.push({
        offset: ++this.lastOffset,
        persistenceId: append.persistenceId,
        entityType,
        sequenceNr,
        manifest: event.manifest,
        payload: event.payload,
        tags: append.tagged ? [...checkTags("event.tags", event.tags)].sort() : [],
      });
    });
    stream.revision = revision;
    stream.operations.set(append.operationId, { fingerprint, revision, reply: append.reply });
    this.insertOutbox(append.persistenceId, append.outbox, append.fence);
    if (append.events.length > 0) this.notifyFeed();
    return { revision, duplicate: false };
  }

  async loadEvents(persistenceId: string, afterSeq = 0): Promise<StoredEvent[]> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("afterSeq", afterSeq);
    const stream = this.streams.get(persistenceId);
    return stream === undefined ? [] : stream.events.filter((e) => e.sequenceNr > afterSeq);
  }

  async loadRevision(persistenceId: string): Promise<number> {
    this.open();
    checkPersistenceId(persistenceId);
    return this.streams.get(persistenceId)?.revision ?? 0;
  }

  async saveSnapshot(
    persistenceId: string,
    snapshot: SnapshotRecord,
    fence?: ShardLeaseToken | null,
  ): Promise<boolean> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("snapshot.sequenceNr", snapshot.sequenceNr);
    checkRecord("snapshot", snapshot);
    this.checkFenceNow(checkFence(fence));
    const stored = this.snapshots.get(persistenceId);
    if (stored !== undefined && stored.sequenceNr > snapshot.sequenceNr) return false;
    this.snapshots.set(persistenceId, { ...snapshot });
    return true;
  }

  async loadSnapshot(persistenceId: string): Promise<SnapshotRecord | null> {
    this.open();
    checkPersistenceId(persistenceId);
    return this.snapshots.get(persistenceId) ?? null;
  }

  async deleteSnapshot(persistenceId: string, fence?: ShardLeaseToken | null): Promise<boolean> {
    this.open();
    checkPersistenceId(persistenceId);
    this.checkFenceNow(checkFence(fence));
    return this.snapshots.delete(persistenceId);
  }

  async deleteEventsTo(
    persistenceId: string,
    toSequenceNr: number,
    fence?: ShardLeaseToken | null,
  ): Promise<RetentionResult> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("toSequenceNr", toSequenceNr);
    this.checkFenceNow(checkFence(fence));
    const snapshot = this.snapshots.get(persistenceId);
    if (snapshot === undefined || snapshot.sequenceNr < toSequenceNr) {
      throw new UnsafeRetentionError(persistenceId, toSequenceNr, snapshot?.sequenceNr ?? null);
    }
    let maxOffset = 0;
    for (const e of this.feed) {
      if (e.persistenceId === persistenceId && e.sequenceNr <= toSequenceNr) maxOffset = Math.max(maxOffset, e.offset);
    }
    const lagging = [...this.checkpoints].filter(([, offset]) => offset < maxOffset).sort((a, b) => a[1] - b[1])[0];
    if (lagging !== undefined) {
      throw new ProjectionBehindRetentionError(persistenceId, toSequenceNr, lagging[0], lagging[1]);
    }
    const stream = this.streams.get(persistenceId);
    if (stream === undefined) return { deletedEvents: 0, throughSeq: toSequenceNr };
    const before = stream.events.length;
    stream.events = stream.events.filter((e) => e.sequenceNr > toSequenceNr);
    this.feed = this.feed.filter((e) => e.persistenceId !== persistenceId || e.sequenceNr > toSequenceNr);
    return { deletedEvents: before - stream.events.length, throughSeq: toSequenceNr };
  }

  async saveState(request: SaveStateRequest): Promise<WriteResult> {
    this.open();
    checkRecord("state", request);
    return this.writeState(request, request.manifest, request.payload, false);
  }

  async deleteState(request: DeleteStateRequest): Promise<WriteResult> {
    this.open();
    return this.writeState(request, TOMBSTONE_MANIFEST, null, true);
  }

  async loadState(persistenceId: string): Promise<StateRecord | null> {
    this.open();
    checkPersistenceId(persistenceId);
    return this.states.get(persistenceId)?.record ?? null;
  }

  async acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null> {
    this.open();
    validateLeaseKey(key);
    validateLeaseRequest(owner, durationMs);
    const id = leaseId(key);
    const now = this.nowMs();
    const row = this.leases.get(id);
    if (row === undefined) {
      const created = { owner, epoch: 1, untilMs: now + durationMs };
      this.leases.set(id, created);
      return token(key, created);
    }
    if (row.owner === owner && row.untilMs > now) {
      row.untilMs = now + durationMs;
      return token(key, row);
    }
    if (row.untilMs <= now) {
      row.owner = owner;
      row.epoch += 1;
      row.untilMs = now + durationMs;
      return token(key, row);
    }
    return null;
  }

  async renewShardLease(lease: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null> {
    this.open();
    validateLeaseToken(lease);
    validateLeaseRequest(lease.owner, durationMs);
    const now = this.nowMs();
    const row = this.leases.get(leaseId(lease.key));
    if (row === undefined || row.owner !== lease.owner || row.epoch !== lease.epoch || row.untilMs <= now) return null;
    row.untilMs = now + durationMs;
    return token(lease.key, row);
  }

  async acquireShardLeases(
    keys: readonly ShardLeaseKey[],
    owner: string,
    durationMs: number,
  ): Promise<(ShardLeaseToken | null)[]> {
    this.open();
    for (const key of keys) validateLeaseKey(key);
    validateLeaseRequest(owner, durationMs);
    const tokens: (ShardLeaseToken | null)[] = [];
    for (const key of keys) tokens.push(await this.acquireShardLease(key, owner, durationMs));
    return tokens;
  }

  async renewShardLeases(tokens: readonly ShardLeaseToken[], durationMs: number): Promise<(ShardLeaseToken | null)[]> {
    this.open();
    for (const t of tokens) {
      validateLeaseToken(t);
      validateLeaseRequest(t.owner, durationMs);
    }
    const renewed: (ShardLeaseToken | null)[] = [];
    for (const t of tokens) renewed.push(await this.renewShardLease(t, durationMs));
    return renewed;
  }

  async releaseShardLease(lease: ShardLeaseToken): Promise<boolean> {
    this.open();
    validateLeaseToken(lease);
    const row = this.leases.get(leaseId(lease.key));
    if (row === undefined || row.owner !== lease.owner || row.epoch !== lease.epoch) return false;
    row.untilMs = 0;
    return true;
  }

  async queryEvents(query?: EventQuery): Promise<EventPage> {
    this.open();
    const q = checkEventQuery(query);
    return feedPage(q, this.scanFeed(q));
  }

  async latestOffset(): Promise<number> {
    this.open();
    return this.feed[this.feed.length - 1]?.offset ?? 0;
  }

  onEventsCommitted(listener: () => void): () => void {
    this.feedListeners.add(listener);
    return () => this.feedListeners.delete(listener);
  }

  async loadProjectionOffset(name: string): Promise<number | null> {
    this.open();
    return this.checkpoints.get(checkProjectionName(name)) ?? null;
  }

  async saveProjectionOffset(name: string, offset: number, fence?: ShardLeaseToken | null): Promise<void> {
    this.open();
    checkProjectionName(name);
    checkOffset("offset", offset);
    this.checkFenceNow(checkFence(fence));
    this.checkpoints.set(name, offset);
  }

  async deleteProjectionOffset(name: string): Promise<boolean> {
    this.open();
    return this.checkpoints.delete(checkProjectionName(name));
  }

  async loadProjectionControl(name: string): Promise<ProjectionControl> {
    this.open();
    return this.controls.get(checkProjectionName(name)) ?? defaultProjectionControl;
  }

  async setProjectionControl(name: string, change: ProjectionControlChange): Promise<ProjectionControl> {
    this.open();
    checkProjectionName(name);
    const checked = checkProjectionControlChange(change);
    const now = this.controls.get(name) ?? defaultProjectionControl;
    const next: ProjectionControl = {
      paused: checked.paused ?? now.paused,
      rebuildFrom: checked.rebuildFrom === undefined ? now.rebuildFrom : checked.rebuildFrom,
    };
    this.controls.set(name, next);
    return next;
  }

  runProjectionBatch<R>(request: ProjectionBatchRequest, work: (tx: ProjectionTransaction) => Promise<R>): Promise<R> {
    this.open();
    const name = checkProjectionName(request.name);
    const expected = checkOffset("expectedOffset", request.expectedOffset);
    const next = checkOffset("newOffset", request.newOffset);
    const fence = checkFence(request.fence);
    const rebuild = request.completesRebuildFrom ?? null;
    if (rebuild !== null) checkOffset("completesRebuildFrom", rebuild);
    const tx: ProjectionTransaction = {
      backend: "memory",
      query: () => Promise.reject(new Error("the memory store has no SQL; write the read model elsewhere")),
    };
    const run = this.projectionQueue.then(async () => {
      this.open();
      this.checkFenceNow(fence);
      const actual = this.checkpoints.get(name) ?? 0;
      if (actual !== expected) throw new ProjectionCheckpointConflictError(name, expected, actual);
      const result = await work(tx);
      // The fence again at "commit": a lease lost while the handler ran commits nothing.
      this.checkFenceNow(fence);
      if (rebuild !== null) {
        const control = this.controls.get(name) ?? defaultProjectionControl;
        if (control.rebuildFrom !== rebuild) throw new ProjectionRebuildSupersededError(name, rebuild);
        this.controls.set(name, { ...control, rebuildFrom: null });
      }
      this.checkpoints.set(name, next);
      return result;
    });
    this.projectionQueue = run.catch(() => {});
    return run;
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  private scanFeed(q: CheckedEventQuery): FeedEvent[] {
    // The first index with an offset above afterOffset (offsets ascend).
    let lo = 0;
    let hi = this.feed.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.feed[mid]!.offset <= q.afterOffset) lo = mid + 1;
      else hi = mid;
    }
    const page: FeedEvent[] = [];
    for (let i = lo; i < this.feed.length && page.length < q.limit; i++) {
      const event = this.feed[i]!;
      if (matchesQuery(q, event)) page.push(event);
    }
    return page;
  }

  private notifyFeed(): void {
    for (const listener of this.feedListeners) {
      try {
        listener();
      } catch {
        // A wake-up hint: a listener's failure is its own, never the append's.
      }
    }
  }

  private writeState(
    request: SaveStateRequest | DeleteStateRequest,
    manifest: string,
    payload: string | null,
    deleted: boolean,
  ): WriteResult {
    checkPersistenceId(request.persistenceId);
    checkSequence("expectedRevision", request.expectedRevision);
    const operationId = OperationId.from(request.operationId).value;
    const outbox = checkOutbox(request.outbox);
    this.checkFenceNow(checkFence(request.fence));
    const fingerprint = stateFingerprint(manifest, payload, deleted);
    let row = this.states.get(request.persistenceId);
    if (row === undefined) {
      row = { record: null, operations: new Map() };
      this.states.set(request.persistenceId, row);
    }
    const previous = row.operations.get(operationId);
    if (previous !== undefined) {
      if (previous.fingerprint !== fingerprint) throw new OperationConflictError(request.persistenceId, operationId);
      return { revision: previous.revision, duplicate: true };
    }
    const actual = row.record?.revision ?? 0;
    if (actual !== request.expectedRevision) {
      throw new ConcurrentWriteError(request.persistenceId, request.expectedRevision, actual);
    }
    const revision = actual + 1;
    row.record = { revision, manifest, payload, deleted };
    row.operations.set(operationId, { fingerprint, revision });
    this.insertOutbox(request.persistenceId, outbox, checkFence(request.fence));
    return { revision, duplicate: false };
  }

  async claimOutbox(request: OutboxClaimRequest): Promise<OutboxClaim> {
    this.open();
    const { owner, limit, leaseMs, leases, unsharded } = checkClaim(request);
    const now = this.nowMs();
    // The current epoch of each presented lease the table confirms, by lease key.
    const held = new Map<string, number>();
    const staleLeases: ShardLeaseToken[] = [];
    for (const lease of leases) {
      if (this.leaseHeld(lease, now)) held.set(leaseId(lease.key), lease.epoch);
      else staleLeases.push(lease);
    }
    const rows: ClaimedOutboxRow[] = [];
    for (const row of this.outbox) {
      if (rows.length >= limit) break;
      if (row.delivered || row.parked) continue;
      let epoch: number | null = null;
      if (row.senderShard === null) {
        if (!unsharded || row.leaseUntilMs > now) continue;
      } else {
        const current = held.get(leaseId(row.senderShard));
        if (current === undefined) continue;
        const overtaken = row.leaseOwner !== null && row.claimEpoch !== null && row.claimEpoch < current;
        if (row.leaseUntilMs > now && !overtaken) continue;
        epoch = current;
      }
      row.leaseOwner = owner;
      row.leaseUntilMs = now + leaseMs;
      row.claimEpoch = epoch;
      row.attempts++;
      rows.push({
        offset: row.offset,
        messageId: row.messageId,
        persistenceId: row.persistenceId,
        destination: row.destination,
        manifest: row.manifest,
        payload: row.payload,
        attempts: row.attempts,
        senderShard: row.senderShard,
        claimEpoch: epoch,
      });
    }
    return { rows, staleLeases };
  }

  async completeOutbox(refs: readonly OutboxClaimRef[]): Promise<OutboxSettleResult> {
    this.open();
    let settled = 0;
    let stale = 0;
    for (const ref of checkClaimRefs(refs)) {
      const row = this.outbox.find((r) => r.offset === ref.offset);
      if (row === undefined || row.delivered) continue;
      if (!this.claimCurrent(row, ref.claimEpoch)) {
        stale++;
        continue;
      }
      row.delivered = true;
      row.deliveredAtMs = this.nowMs();
      row.leaseOwner = null;
      settled++;
    }
    return { settled, stale };
  }

  async failOutbox(owner: string, failures: readonly OutboxFailure[]): Promise<OutboxSettleResult> {
    this.open();
    checkOwner(owner);
    const checked = failures.map(checkFailure);
    let settled = 0;
    let stale = 0;
    for (const f of checked) {
      const row = this.outbox.find((r) => r.offset === f.offset);
      if (row === undefined || row.delivered) continue;
      if (!this.claimCurrent(row, f.claimEpoch ?? null)) {
        stale++;
        continue;
      }
      if (row.leaseOwner !== owner) continue;
      row.lastError = f.error;
      row.parked = f.park;
      row.leaseOwner = null;
      row.leaseUntilMs = this.nowMs() + f.retryAfterMs;
      settled++;
    }
    return { settled, stale };
  }

  /**
   * Whether a claim of `row` under `epoch` still stands: a row without a shard always; a sharded one while it is
   * claimed under that epoch and its lease is at that epoch, unexpired.
   */
  private claimCurrent(row: OutboxRow, epoch: number | null): boolean {
    if (row.senderShard === null) return true;
    if (epoch === null || row.claimEpoch !== epoch) return false;
    const lease = this.leases.get(leaseId(row.senderShard));
    return lease !== undefined && lease.epoch === epoch && lease.untilMs > this.nowMs();
  }

  /** Whether the lease table has `lease`'s owner and epoch, unexpired at `now`. */
  private leaseHeld(lease: ShardLeaseToken, now: number): boolean {
    const row = this.leases.get(leaseId(lease.key));
    return row !== undefined && row.owner === lease.owner && row.epoch === lease.epoch && row.untilMs > now;
  }

  async purgeOutbox(olderThanMs: number): Promise<number> {
    this.open();
    checkSequence("olderThanMs", olderThanMs);
    const cutoff = this.nowMs() - olderThanMs;
    const before = this.outbox.length;
    this.outbox = this.outbox.filter((r) => !(r.delivered && r.deliveredAtMs !== null && r.deliveredAtMs <= cutoff));
    return before - this.outbox.length;
  }

  async outboxCounts(): Promise<OutboxCounts> {
    this.open();
    const now = this.nowMs();
    let pending = 0;
    let claimed = 0;
    let retrying = 0;
    let parked = 0;
    let delivered = 0;
    let oldest: number | null = null;
    for (const row of this.outbox) {
      if (row.delivered) delivered++;
      else if (row.parked) parked++;
      else {
        pending++;
        const held = row.leaseOwner !== null && row.leaseUntilMs > now;
        if (held) claimed++;
        else if (row.attempts > 0) retrying++;
        if (oldest === null || row.createdAtMs < oldest) oldest = row.createdAtMs;
      }
    }
    return { pending, claimed, retrying, parked, delivered, oldestPendingAgeMs: oldest === null ? null : now - oldest };
  }

  async parkedOutbox(limit: number): Promise<ParkedOutboxRow[]> {
    this.open();
    checkSequence("limit", limit);
    return this.outbox
      .filter((r) => r.parked && !r.delivered)
      .slice(0, limit)
      .map((r) => ({
        offset: r.offset,
        messageId: r.messageId,
        persistenceId: r.persistenceId,
        attempts: r.attempts,
        lastError: r.lastError ?? "",
      }));
  }

  async retryParkedOutbox(offsets: readonly number[]): Promise<number> {
    this.open();
    const wanted = new Set(checkOffsets(offsets));
    let changed = 0;
    for (const row of this.outbox) {
      if (!wanted.has(row.offset) || row.delivered || !row.parked) continue;
      row.parked = false;
      row.attempts = 0;
      row.leaseUntilMs = 0;
      changed++;
    }
    return changed;
  }

  /** The outbox rows of a write that committed (message ids are unique: a repeated id is not written twice). */
  private insertOutbox(persistenceId: string, records: readonly OutboxRecord[], fence: ShardLeaseToken | null): void {
    for (const record of records) {
      if (this.outbox.some((r) => r.messageId === record.messageId)) continue;
      this.outbox.push({
        offset: ++this.lastOutboxOffset,
        messageId: record.messageId,
        persistenceId,
        destination: record.destination,
        manifest: record.manifest,
        payload: record.payload,
        senderShard: fence === null ? null : { ...fence.key },
        claimEpoch: null,
        delivered: false,
        parked: false,
        attempts: 0,
        leaseOwner: null,
        leaseUntilMs: 0,
        lastError: null,
        deliveredAtMs: null,
        createdAtMs: this.nowMs(),
      });
    }
  }

  private checkFenceNow(fence: ShardLeaseToken | null): void {
    if (fence === null) return;
    const row = this.leases.get(leaseId(fence.key));
    if (row === undefined || row.owner !== fence.owner || row.epoch !== fence.epoch || row.untilMs <= this.nowMs()) {
      throw new StaleShardOwnerError(fence);
    }
  }

  private stream(persistenceId: string): Stream {
    let stream = this.streams.get(persistenceId);
    if (stream === undefined) {
      stream = { revision: 0, events: [], operations: new Map() };
      this.streams.set(persistenceId, stream);
    }
    return stream;
  }

  private nowMs(): number {
    return Math.floor(this.scheduler.wallNow());
  }

  private open(): void {
    if (this.closed) throw new StoreClosedError("memory");
  }
}

function leaseId(key: ShardLeaseKey): string {
  return JSON.stringify([key.clusterName, key.entityType, key.shardId]);
}

function token(key: ShardLeaseKey, row: LeaseRow): ShardLeaseToken {
  return {
    key: { clusterName: key.clusterName, entityType: key.entityType, shardId: key.shardId },
    owner: row.owner,
    epoch: row.epoch,
    leaseUntilEpochMs: row.untilMs,
  };
}
