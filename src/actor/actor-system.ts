import { ActorCell, LocalActorRef, requireMailboxCapacity } from "./actor-cell.ts";
import type { ActorContext, SpawnOptions } from "./actor-context.ts";
import type { ActorRef, AskOptions, Class } from "./actor-ref.ts";
import { Address } from "./address.ts";
import { askVia, PendingAsks, type PromiseActorRef } from "./ask.ts";
import { AbstractBehavior, type BehaviorSource } from "./behavior.ts";
import { RealScheduler, type Scheduler, TimeoutQueue } from "./clock.ts";
import { type DeadLetter, DeadLetterOffice } from "./dead-letters.ts";
import { Dispatcher } from "./dispatcher.ts";
import {
  ActorSystemTerminatedError,
  DuplicateActorNameError,
  InvalidActorNameError,
  InvalidArgumentError,
  InvalidMessageError,
} from "./errors.ts";
import type { Extension, ExtensionId } from "./extension.ts";
import { ConsoleLogger, type Logger } from "./logger.ts";
import { ActorPath, isValidActorName } from "./path.ts";
import { ReplyNames } from "./reply-names.ts";
import type { SupervisorStrategy } from "./supervision.ts";
import { type SystemMessage, Terminated, Watch } from "./system-messages.ts";
import { describe } from "./untrusted.ts";

/** Options of {@link ActorSystem.create}. */
export interface ActorSystemOptions {
  /** Clock and timers; defaults to the real ones. Tests pass a `ManualScheduler`. */
  scheduler?: Scheduler;
  /** Where the runtime logs; defaults to warnings and errors on stderr (`MOVIE_LOG_LEVEL` changes the level). */
  logger?: Logger;
  /** Strategy for failures of top-level actors (those spawned with `system.spawn`); default restart. */
  guardianSupervision?: SupervisorStrategy;
  /**
   * Mailbox capacity (messages, 1..1,000,000) of every actor under `/user` that does not set its own in
   * `SpawnOptions.mailboxCapacity`; default unbounded. Infrastructure actors under `/system` stay unbounded.
   */
  mailboxCapacity?: number;
}

/** Resolves paths that are not local to this system (installed by remoting). */
export type RemoteRefResolver = (path: ActorPath) => ActorRef<unknown>;

const systemNamePattern = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

class GuardianBehavior extends AbstractBehavior<unknown> {
  constructor(override readonly supervisorStrategy: SupervisorStrategy | undefined) {
    super();
  }
  receive(): void {}
}

/** A ref to a path where no actor lives: everything sent to it is a dead letter; watching it terminates at once. */
class DeadLetterRef implements ActorRef<unknown> {
  constructor(
    private readonly system: ActorSystem,
    readonly path: ActorPath,
  ) {}
  tell(message: unknown, sender?: ActorRef<unknown> | null): void {
    if (message === undefined || message === null) throw new InvalidMessageError("tell needs a message value");
    this.system.deadLetterOffice.publish(message, sender ?? null, this.path.toString());
  }
  ask<R>(message: unknown, replyType: Class<R>, timeoutMs: number, options?: AskOptions): Promise<R> {
    return askVia(this.system, this, message, replyType, timeoutMs, options);
  }
  sendSystem(message: SystemMessage): void {
    if (message instanceof Watch) message.watcher.sendSystem(new Terminated(this));
  }
}

/**
 * A tree of actors in one process: `/user` holds what `spawn` creates, `/system` the infrastructure (remoting,
 * cluster, sharding daemons), `/temp` the reply actors of pending asks. Several systems can run side by side.
 */
export class ActorSystem {
  /** @internal */ readonly dispatcher = new Dispatcher();
  /**
   * @internal Messages remoting delivered into local mailboxes (those with an origin) and not yet processed or
   * dead-lettered; remoting stops reading its sockets above a bound (read backpressure).
   */
  inboundBacklog = 0;
  /** @internal */ readonly deadLetterOffice = new DeadLetterOffice();
  /** The clock and timers every part of the system uses. */
  readonly scheduler: Scheduler;
  /** @internal Ask timeouts: many deadlines on few scheduler timers. */
  readonly timeouts: TimeoutQueue;
  /** @internal */ readonly pendingAsks = new PendingAsks();
  /** Where the runtime and every layer above it log. */
  readonly log: Logger;
  /** A ref whose every message is a dead letter. */
  readonly deadLetters: ActorRef<unknown>;
  private currentAddress: Address;
  private readonly userGuardian: ActorCell<unknown>;
  private readonly systemGuardian: ActorCell<unknown>;
  private readonly temps = new Map<string, PromiseActorRef<unknown>>();
  private nameCounter = 0;
  private readonly replyNames = new ReplyNames();
  private terminating: Promise<void> | null = null;
  private terminatedFlag = false;
  private resolveTerminated!: () => void;
  /** Resolves once {@link ActorSystem.terminate} has finished. */
  readonly whenTerminated: Promise<void>;
  private remoteResolver: RemoteRefResolver | null = null;
  /** @internal The `mailboxCapacity` option, validated. */
  readonly defaultMailboxCapacity: number | undefined;
  private overflowLogged = false;
  private readonly extensions = new Map<string, Extension>();
  private readonly extensionOrder: Extension[] = [];

  private constructor(
    readonly name: string,
    options: ActorSystemOptions,
  ) {
    this.scheduler = options.scheduler ?? new RealScheduler();
    this.defaultMailboxCapacity =
      options.mailboxCapacity === undefined
        ? undefined
        : requireMailboxCapacity("mailboxCapacity", options.mailboxCapacity);
    this.timeouts = new TimeoutQueue(this.scheduler);
    this.log = options.logger ?? new ConsoleLogger(undefined, { system: name });
    this.currentAddress = Address.local(name);
    this.deadLetters = new DeadLetterRef(this, new ActorPath(this.currentAddress, ["deadLetters"]));
    this.whenTerminated = new Promise((resolve) => {
      this.resolveTerminated = resolve;
    });
    this.userGuardian = new ActorCell<unknown>(
      this,
      null,
      "user",
      new GuardianBehavior(options.guardianSupervision),
      undefined,
    );
    this.systemGuardian = new ActorCell<unknown>(this, null, "system", new GuardianBehavior(undefined), undefined);
    this.userGuardian.run();
    this.systemGuardian.run();
  }

  /**
   * Creates an actor system called `name` (letters, digits, `-`, `_`; it appears in every actor path).
   * @throws InvalidArgumentError for an invalid name or mailbox capacity
   */
  static create(name: string, options: ActorSystemOptions = {}): ActorSystem {
    if (typeof name !== "string" || !systemNamePattern.test(name)) {
      throw new InvalidArgumentError(
        "actor system name",
        `${describe(name)}; use 1-64 letters, digits, - or _, starting with a letter or digit`,
      );
    }
    return new ActorSystem(name, options);
  }

  /** This system's address: `movie://name`, or `movie.tcp://name@host:port` once remoting is enabled. */
  get address(): Address {
    return this.currentAddress;
  }

  /** True once terminate has finished. */
  get isTerminated(): boolean {
    return this.terminatedFlag;
  }

  /** Number of dead letters so far. */
  get deadLetterCount(): number {
    return this.deadLetterOffice.count;
  }

  /** Messages refused by a full bounded mailbox so far (each is also a dead letter). */
  get mailboxOverflowCount(): number {
    return this.deadLetterOffice.overflowCount;
  }

  /** @internal Logs the first mailbox overflow of this system (later ones are only counted). */
  noteMailboxOverflow(recipient: string, capacity: number): void {
    if (this.overflowLogged) return;
    this.overflowLogged = true;
    this.log.warn(
      { actor: recipient, capacity },
      "a bounded mailbox is full: messages to it go to dead letters (mailboxOverflowCount counts them; logged once)",
    );
  }

  /** Calls `listener` for every dead letter; returns the unsubscribe function. */
  onDeadLetter(listener: (letter: DeadLetter) => void): () => void {
    return this.deadLetterOffice.subscribe(listener);
  }

  /** Number of asks waiting for their reply (each holds one temporary reply actor). */
  get pendingAskCount(): number {
    return this.pendingAsks.size;
  }

  /**
   * Starts a top-level actor under `/user`.
   * @throws InvalidActorNameError, DuplicateActorNameError, ActorSystemTerminatedError, InvalidArgumentError (a bad
   *   `mailboxCapacity`)
   */
  spawn<T>(behavior: BehaviorSource<T>, name?: string, options?: SpawnOptions): ActorRef<T> {
    if (this.terminating !== null) throw new ActorSystemTerminatedError(this.name);
    return this.userGuardian.spawnChild(behavior, name, options).ref;
  }

  /**
   * Starts an infrastructure actor under `/system` (remoting, cluster and sharding daemons live there).
   * @throws InvalidActorNameError, DuplicateActorNameError, ActorSystemTerminatedError
   */
  spawnSystemActor<T>(behavior: BehaviorSource<T>, name: string, options?: SpawnOptions): ActorRef<T> {
    if (this.terminatedFlag) throw new ActorSystemTerminatedError(this.name);
    return this.systemGuardian.spawnChild(behavior, name, options).ref;
  }

  /**
   * @internal Starts an infrastructure actor under `/system` like {@link spawnSystemActor} and returns its context,
   * usable at once (before its first message is processed), for an extension that spawns children under it: sharding
   * hosts its entity actors under its daemon from the first route.
   * @throws InvalidActorNameError, DuplicateActorNameError, ActorSystemTerminatedError
   */
  spawnSystemContext<T>(behavior: BehaviorSource<T>, name: string, options?: SpawnOptions): ActorContext<T> {
    if (this.terminatedFlag) throw new ActorSystemTerminatedError(this.name);
    return this.systemGuardian.spawnChild(behavior, name, options);
  }

  /**
   * A ref for `path`: the live local actor, a dead-letter ref when none lives there, or (for another node's
   * address, once remoting is enabled) a remote ref.
   * @throws InvalidAddressError for text that is not an actor path
   */
  actorSelection(path: string | ActorPath): ActorRef<unknown> {
    const parsed = typeof path === "string" ? ActorPath.parse(path) : path;
    if (this.isLocalAddress(parsed.address)) {
      return this.findLocal(parsed.elements) ?? new DeadLetterRef(this, parsed.withAddress(this.currentAddress));
    }
    if (this.remoteResolver === null) return new DeadLetterRef(this, parsed);
    return this.remoteResolver(parsed);
  }

  /** True when `address` names this system (its local form or its current remote form). */
  isLocalAddress(address: Address): boolean {
    return (
      address.equals(this.currentAddress) ||
      (address.protocol === Address.localProtocol && address.system === this.name)
    );
  }

  /** @internal The live local actor (or pending ask reply actor) at `elements`, or null. */
  findLocal(elements: readonly string[]): ActorRef<unknown> | null {
    if (elements.length === 0) return null;
    const [root, ...rest] = elements;
    if (root === "temp") return rest.length === 1 ? (this.temps.get(rest[0]!) ?? null) : null;
    if (root === "deadLetters" && rest.length === 0) return this.deadLetters;
    let cell: ActorCell<unknown> | undefined =
      root === "user" ? this.userGuardian : root === "system" ? this.systemGuardian : undefined;
    for (const name of rest) {
      if (cell === undefined) return null;
      cell = cell.childNamed(name);
    }
    return cell === undefined || cell.isTerminated ? null : cell.ref;
  }

  /** @internal Installs the resolver for other nodes' paths and this system's remote address. */
  enableRemoteAddressing(address: Address, resolver: RemoteRefResolver): void {
    this.currentAddress = address;
    this.remoteResolver = resolver;
  }

  /**
   * The extension identified by `id`, created on first use. Extensions stop in reverse order of creation when the
   * system terminates.
   */
  extension<E extends Extension>(id: ExtensionId<E>): E {
    const existing = this.extensions.get(id.key);
    if (existing !== undefined) return existing as E;
    if (this.terminating !== null) throw new ActorSystemTerminatedError(this.name);
    const created = id.create(this);
    this.extensions.set(id.key, created);
    this.extensionOrder.push(created);
    return created;
  }

  /** The extension identified by `id` if it was created, else undefined. */
  hasExtension<E extends Extension>(id: ExtensionId<E>): E | undefined {
    return this.extensions.get(id.key) as E | undefined;
  }

  /**
   * Stops every actor — user actors first (children before parents, each `postStop` runs), then extensions in reverse
   * order, then system actors — and resolves when all are stopped. Calling it again returns the same Promise.
   */
  terminate(): Promise<void> {
    if (this.terminating !== null) return this.terminating;
    this.terminating = (async () => {
      this.userGuardian.requestStop();
      await this.userGuardian.whenTerminated();
      for (const extension of [...this.extensionOrder].reverse()) {
        try {
          await extension.stop?.();
        } catch (error) {
          this.log.warn({ error }, "extension failed to stop");
        }
      }
      this.systemGuardian.requestStop();
      await this.systemGuardian.whenTerminated();
      this.pendingAsks.failAll(new ActorSystemTerminatedError(this.name));
      this.terminatedFlag = true;
      this.resolveTerminated();
    })();
    return this.terminating;
  }

  /** @internal */
  rootTerminated(_cell: ActorCell<unknown>): void {}

  /** @internal Validates or generates a child name; generated names start with `$`. */
  claimChildName(
    parentPath: ActorPath,
    siblings: Map<string, ActorCell<unknown>> | null,
    name: string | undefined,
  ): string {
    if (name === undefined) {
      for (;;) {
        const generated = `$${(this.nameCounter++).toString(36)}`;
        if (siblings?.has(generated) !== true) return generated;
      }
    }
    if (typeof name !== "string" || !isValidActorName(name)) throw new InvalidActorNameError(describe(name));
    if (siblings?.has(name) === true) throw new DuplicateActorNameError(parentPath.toString(), name);
    return name;
  }

  /**
   * @internal Names a pending ask's reply actor under `/temp` so it can be found by path; returns the name, 128
   * random bits (see ReplyNames: a reply that guesses no name completes no ask).
   */
  registerTemp(ref: PromiseActorRef<unknown>): string {
    const name = this.replyNames.next();
    this.temps.set(name, ref);
    return name;
  }

  /** @internal */
  unregisterTemp(name: string): void {
    this.temps.delete(name);
  }

  /** @internal */
  tempPath(name: string): ActorPath {
    return new ActorPath(this.currentAddress, ["temp", name]);
  }

  /** The system's name and address, for logs. */
  toString(): string {
    return `ActorSystem(${this.currentAddress})`;
  }
}

export { LocalActorRef };
