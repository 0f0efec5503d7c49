import type { ActorRef, AskOptions, Class, SystemMessage } from "../actor/index.ts";

/** The typed handle `init` returns: only the name, so it can be passed around and compared cheaply. */
export class ShardedEntityType<T> {
  /** Phantom field carrying the message type; never set. */
  declare readonly messageType?: T;
  constructor(
    /** The routing name given to `init`. */
    readonly name: string,
  ) {}
}

/**
 * What a router keeps on one {@link ShardedEntityRef} between its tells: the shard of the ref's entity under one
 * registration of its type (a partitioner is pure, so the shard holds while the registration does). Opaque to the ref.
 * @internal
 */
export class EntityRouteMemo {
  /** The registration the shard was computed under (the router's own value), or null before the first tell. */
  registration: unknown = null;
  /** The id the shard is of (a ref's id is readonly to TypeScript only: checked, usually one pointer compare). */
  entityId = "";
  shard = -1;
}

/** The routing operations a {@link ShardedEntityRef} delegates to (implemented by sharding's caller-side router). */
export interface EntityRouter {
  /** Delivers a tell to the entity; `memo`, when given, is the calling ref's own, kept across its tells. */
  route(
    entityType: string,
    entityId: string,
    message: unknown,
    sender: ActorRef<unknown> | null,
    memo?: EntityRouteMemo,
  ): void;
  /** Delivers an ask to the entity and resolves with its reply. */
  routeAsk<R>(
    entityType: string,
    entityId: string,
    message: unknown,
    replyType: Class<R>,
    timeoutMs: number,
    options?: AskOptions,
  ): Promise<R>;
  /** Delivers a passivation (STOP) to the entity. */
  passivate(entityType: string, entityId: string, message: SystemMessage): void;
}

/**
 * A logical reference to one entity: it names (type, id), never a physical actor, so it stays valid across
 * passivation and relocation. Every call routes through the sharding coordinator (docs/protocol.md §8.1).
 */
export class ShardedEntityRef<T> {
  private readonly memo = new EntityRouteMemo();

  constructor(
    readonly entityType: string,
    readonly entityId: string,
    private readonly router: EntityRouter,
  ) {}

  /**
   * Sends `message` to the entity, at most once; `sender` becomes the entity's `context.sender`. The message is the
   * entity's from then on: do not change it after the call (an entity on this node receives the very object, and a
   * direct-routed one may be serialized when the current microtask ends).
   * @throws NoShardOwnerError when there is no converged coordinator (fail closed)
   * @throws InvalidMessageError for undefined or null, or the codec's error for an unregistered message class
   */
  tell(message: T, sender: ActorRef<unknown> | null = null): void {
    this.router.route(this.entityType, this.entityId, message, sender, this.memo);
  }

  /**
   * Sends `message` and resolves with the entity's reply of type `replyType`. Rejects with NoShardOwnerError (no
   * owner), AskTimeoutError after `timeoutMs` (default 30,000), AskCancelledError when `options.signal` aborts, the
   * entity's error when it fails (RemoteAskError across nodes), and ClusterShardingConfigurationError for full
   * handoff buffers or incompatible settings.
   */
  ask<R>(message: T, replyType: Class<R>, timeoutMs = 30_000, options?: AskOptions): Promise<R> {
    return this.router.routeAsk(this.entityType, this.entityId, message, replyType, timeoutMs, options);
  }

  /**
   * `STOP` passivates the entity on its owner; the next message activates a fresh actor through this same ref.
   * @throws UnsupportedSystemMessageError for any other system message
   * @throws NoShardOwnerError when there is no converged coordinator
   */
  sendSystem(message: SystemMessage): void {
    this.router.passivate(this.entityType, this.entityId, message);
  }

  /** `ShardedEntityRef(<type>/<id>)`, for logs. */
  toString(): string {
    return `ShardedEntityRef(${this.entityType}/${this.entityId})`;
  }
}
