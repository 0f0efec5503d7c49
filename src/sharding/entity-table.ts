import type { ActorRef } from "../actor/index.ts";
import { type DRAIN_AND_STOP, STOP } from "../actor/index.ts";

/** What a provider keeps per live entity actor. */
export interface TableEntity {
  readonly ref: ActorRef<unknown>;
  readonly shardId: number;
  lastActivityMs: number;
}

/**
 * The live entity actors of one provider (ordinary or persistent): entity id → actor, actor ref → entity id, and
 * who waits for which actor to terminate. One copy of this bookkeeping, so both providers stop, drain and forget
 * entities the same way.
 */
export class EntityTable<E extends TableEntity> {
  private readonly entities = new Map<string, E>();
  // Keyed by the ref itself: an entity is a local actor, whose one ref its Terminated carries back, so no path string
  // is built per entity (and a re-created entity, a new ref, never collides with the old one's entry).
  private readonly byRef = new Map<ActorRef<unknown>, string>();
  private readonly terminationWaiters = new Map<ActorRef<unknown>, (() => void)[]>();
  private counter = 0;

  get size(): number {
    return this.entities.size;
  }

  /** Live entities per shard (only shards with at least one), for inspection. */
  countsByShard(): Map<number, number> {
    const counts = new Map<number, number>();
    for (const entity of this.entities.values()) counts.set(entity.shardId, (counts.get(entity.shardId) ?? 0) + 1);
    return counts;
  }

  get(entityId: string): E | undefined {
    return this.entities.get(entityId);
  }

  /** A child actor name unique under the host: a counter, then the (URI-encoded, truncated) entity id. */
  childName(entityId: string, idCharsMax: number, suffix = ""): string {
    return `${(this.counter++).toString(36)}-${encodeURIComponent(entityId).slice(0, idCharsMax)}${suffix}`;
  }

  add(entityId: string, entity: E): void {
    this.entities.set(entityId, entity);
    this.byRef.set(entity.ref, entityId);
  }

  /** Forgets `entity` (if it is still the live one for its id) and sends it `signal`. */
  stop(entityId: string, entity: E, signal: typeof STOP | typeof DRAIN_AND_STOP = STOP): void {
    if (this.entities.get(entityId) === entity) this.entities.delete(entityId);
    entity.ref.sendSystem(signal);
  }

  /**
   * Stops every entity `which` selects; returns how many, and a Promise of their termination when `wait` is set
   * (collected before the signal is sent, so none is missed).
   */
  stopWhere(
    which: (entity: E) => boolean,
    signal: typeof STOP | typeof DRAIN_AND_STOP = STOP,
    wait = false,
  ): { stopped: number; terminated: Promise<void> } {
    const waits: Promise<void>[] = [];
    let stopped = 0;
    for (const [id, entity] of [...this.entities]) {
      if (!which(entity)) continue;
      if (wait) waits.push(this.terminationOf(entity.ref));
      this.stop(id, entity, signal);
      stopped++;
    }
    return { stopped, terminated: Promise.all(waits).then(() => undefined) };
  }

  /**
   * Records that `ref` terminated and wakes its waiters; returns its entity when it was still the live one for its
   * id (a restarted or replaced entity keeps its id with a new ref: only the mapping that is still this ref drops).
   */
  terminated(ref: ActorRef<unknown>): E | undefined {
    const id = this.byRef.get(ref);
    this.byRef.delete(ref);
    const entity = id === undefined ? undefined : this.entities.get(id);
    const live = id !== undefined && entity?.ref === ref;
    if (live) this.entities.delete(id);
    const waiters = this.terminationWaiters.get(ref);
    this.terminationWaiters.delete(ref);
    for (const w of waiters ?? []) w();
    return live ? entity : undefined;
  }

  private terminationOf(ref: ActorRef<unknown>): Promise<void> {
    if (!this.byRef.has(ref)) return Promise.resolve();
    return new Promise((resolve) => {
      const list = this.terminationWaiters.get(ref) ?? [];
      list.push(resolve);
      this.terminationWaiters.set(ref, list);
    });
  }
}
