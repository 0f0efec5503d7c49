import type { ActorContext, SpawnOptions } from "./actor-context.ts";
import type { ActorRef, AskOptions, Class } from "./actor-ref.ts";
import type { ActorSystem } from "./actor-system.ts";
import type { UniqueAddress } from "./address.ts";
import { askVia } from "./ask.ts";
import type { AbstractBehavior, BehaviorSource } from "./behavior.ts";
import type { Cancellable, TimeoutTarget } from "./clock.ts";
import type { Runnable } from "./dispatcher.ts";
import {
  InvalidArgumentError,
  InvalidMessageError,
  MailboxOverflowError,
  requireDurationMs,
  typeNameOf,
} from "./errors.ts";
import type { Logger } from "./logger.ts";
import { Envelope, Mailbox } from "./mailbox.ts";
import type { MailboxBudget } from "./mailbox-budget.ts";
import { ActorPath } from "./path.ts";
import { defaultSupervisorStrategy, restartAllowed, type SupervisorStrategy } from "./supervision.ts";
import {
  DrainAndStop,
  RECEIVE_TIMEOUT,
  type Signal,
  Stop,
  type SystemMessage,
  Terminated,
  Unwatch,
  Watch,
} from "./system-messages.ts";
import { describe } from "./untrusted.ts";

/** How many messages one actor handles per dispatcher run before others get a turn. */
const throughput = 64;

/** The actor's own bookkeeping queued in its mailbox (timer and receive-timeout firings), never a user's letter. */
abstract class InternalFire {}

/** A keyed timer's firing, queued in the mailbox so it is handled in order with ordinary messages. */
class TimerFire extends InternalFire {
  constructor(
    readonly key: string,
    readonly generation: number,
  ) {
    super();
  }
}

/** A receive-timeout firing; stale ones (from before the latest setReceiveTimeout) are recognised by generation. */
class ReceiveTimeoutFire extends InternalFire {
  constructor(readonly generation: number) {
    super();
  }
}

/**
 * A watched actor's termination, queued behind the messages already in the mailbox, so a watcher sees everything the
 * watched actor sent before it stopped first, then `Terminated`.
 */
class TerminatedFire extends InternalFire {
  constructor(readonly signal: Terminated) {
    super();
  }
}

/** Returned by {@link ActorCell.unwrapFire} when a firing carries nothing for `receive`. */
const noMessage: unique symbol = Symbol("noMessage");

interface TimerEntry {
  readonly generation: number;
  readonly message: unknown;
  readonly intervalMs: number | null;
  handle: Cancellable;
}

// Lifecycle state in the low two bits of `flags`, then one bit per condition: an idle actor is one small object.
const stateMask = 3;
const stateNew = 0;
const stateRunning = 1;
const stateStopping = 2;
const stateStopped = 3;
/** A Promise returned by the behavior (or a restart waiting for children) is pending: nothing else runs meanwhile. */
const flagBusy = 4;
/** Queued on the dispatcher. */
const flagScheduled = 8;
/** STOP or DRAIN_AND_STOP arrived: later messages are dead letters. */
const flagClosed = 16;
/** A restart waits for the old children to stop. */
const flagRestarting = 32;
/**
 * The parent watches this actor. A parent's watch of its own child is recorded here instead of in a watcher table
 * reached through a queued Watch: sharding's daemon watches every entity it hosts, and that table, its key and the
 * system queue behind it were a fifth of an idle entity's memory.
 */
const flagParentWatches = 64;
/**
 * The mailbox is bounded; its capacity sits in the bits from {@link capacityShift} up. In the flags rather than a
 * field, so a bounded actor costs no more memory than an unbounded one, and `enqueue` tests this bit together with
 * flagClosed: an unbounded mailbox pays nothing per message for the feature.
 */
const flagBounded = 128;
/**
 * The actor counts its queued messages in a shared {@link MailboxBudget} (kept in the rare extras). A flag, so an
 * actor without one tests nothing extra: `enqueue` folds it into its one rare-path test, `run` checks it once per run.
 */
const flagBudgeted = 256;
const capacityShift = 9;
/** Largest mailbox capacity: shifted into the flags it must keep them a small integer (31 bits in V8). */
export const mailboxCapacityMax = 1_000_000;

/**
 * Validates a mailbox capacity setting.
 * @throws InvalidArgumentError unless a whole number 1..1,000,000
 */
export function requireMailboxCapacity(argument: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > mailboxCapacityMax) {
    throw new InvalidArgumentError(
      argument,
      `${typeof value === "number" ? value : typeof value}; expected a whole number of messages 1..${mailboxCapacityMax}`,
    );
  }
  return value;
}

/**
 * What few actors ever need — children, watchers, timers, receive timeout, restart history, drain bookkeeping, system
 * messages — lives here, allocated on first use, so an idle actor does not pay for it.
 */
class CellExtras {
  systemQueue: SystemMessage[] | null = null;
  childCells: Map<string, ActorCell<unknown>> | null = null;
  /** Messages still to process before a DRAIN_AND_STOP stops the actor; -1 when not draining. */
  drainRemaining = -1;
  watchers: Map<string, ActorRef<unknown>> | null = null;
  /** Watched actors by {@link watchKey}. */
  watching: Map<ActorRef<unknown> | string, ActorRef<unknown>> | null = null;
  timers: Map<string, TimerEntry> | null = null;
  timerGeneration = 0;
  receiveTimeoutMs: number | null = null;
  receiveTimeoutHandle: Cancellable | null = null;
  /** Bumped by every handled message and every setReceiveTimeout: a firing from an older generation is stale. */
  receiveTimeoutGeneration = 0;
  restartTimesMs: number[] | null = null;
  terminatedWaiters: (() => void)[] | null = null;
  /** The shared count this actor's queued messages are part of (flagBudgeted). */
  budget: MailboxBudget | null = null;
}

/**
 * What a watcher keys a watched actor by: a local actor's one ref (an incarnation: a child re-created under the same
 * name while the old one's Terminated is still queued is another actor), else the path text (remote refs are
 * re-created per message, and their Terminated carries a ref of its own).
 */
function watchKey(ref: ActorRef<unknown>): ActorRef<unknown> | string {
  return ref instanceof LocalActorRef ? ref : ref.path.toString();
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return value !== undefined && value !== null && typeof (value as PromiseLike<unknown>).then === "function";
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(`a non-Error was thrown: ${describe(value)}`);
}

/**
 * The running state of one local actor: mailbox, behavior, flags, and (rarely) children, watchers and timers. It is
 * also the behavior's {@link ActorContext}, so an idle actor costs this object, its ref and its name.
 */
export class ActorCell<T> implements Runnable, ActorContext<T>, TimeoutTarget {
  readonly ref: LocalActorRef<T>;
  private flags = stateNew;
  private behavior: AbstractBehavior<T> | null = null;
  private mailbox: Mailbox | null = null;
  private currentSender: ActorRef<unknown> | null = null;
  /** The node a message in progress came from (remote deliveries), as a field: every remote message sets it. */
  private currentOrigin: UniqueAddress | null = null;
  private cachedPath: ActorPath | null = null;
  private rare: CellExtras | null = null;

  constructor(
    readonly system: ActorSystem,
    readonly parent: ActorCell<unknown> | null,
    /** The last path element. */
    readonly name: string,
    private readonly source: BehaviorSource<T>,
    private readonly supervision: SupervisorStrategy | undefined,
    /** Validated (requireMailboxCapacity), or undefined for an unbounded mailbox. */
    mailboxCapacity?: number,
    budget?: MailboxBudget,
  ) {
    this.ref = new LocalActorRef(this);
    if (mailboxCapacity !== undefined) this.flags = flagBounded | (mailboxCapacity << capacityShift);
    if (budget !== undefined) {
      this.extras().budget = budget;
      this.flags |= flagBudgeted;
    }
  }

  private extras(): CellExtras {
    if (this.rare === null) this.rare = new CellExtras();
    return this.rare;
  }

  private get state(): number {
    return this.flags & stateMask;
  }

  private setState(state: number): void {
    this.flags = (this.flags & ~stateMask) | state;
  }

  private get busy(): boolean {
    return (this.flags & flagBusy) !== 0;
  }

  private setBusy(busy: boolean): void {
    this.flags = busy ? this.flags | flagBusy : this.flags & ~flagBusy;
  }

  private get closed(): boolean {
    return (this.flags & flagClosed) !== 0;
  }

  // ---- ActorContext ----

  get self(): ActorRef<T> {
    return this.ref;
  }
  get sender(): ActorRef<unknown> | null {
    return this.currentSender;
  }
  get origin(): UniqueAddress | null {
    return this.currentOrigin;
  }
  get log(): Logger {
    return this.system.log;
  }
  get mailboxSize(): number {
    return this.mailbox?.size ?? 0;
  }
  /** The path elements below the root, e.g. `["user", "a", "b"]`. */
  get elements(): readonly string[] {
    if (this.parent === null) return [this.name];
    return [...this.parent.elements, this.name];
  }
  get path(): ActorPath {
    const address = this.system.address;
    if (this.cachedPath === null || this.cachedPath.address !== address) {
      this.cachedPath = new ActorPath(address, this.elements);
    }
    return this.cachedPath;
  }
  get children(): readonly ActorRef<unknown>[] {
    const cells = this.rare?.childCells;
    return cells === null || cells === undefined ? [] : [...cells.values()].map((c) => c.ref);
  }
  get isTerminated(): boolean {
    return this.state === stateStopped;
  }

  spawn<C>(behavior: BehaviorSource<C>, name?: string, options?: SpawnOptions): ActorRef<C> {
    return this.spawnChild(behavior, name, options).ref;
  }

  /** @internal Creates and starts a child cell. */
  spawnChild<C>(
    behavior: BehaviorSource<C>,
    name: string | undefined,
    options: SpawnOptions | undefined,
  ): ActorCell<C> {
    const requested = options?.mailboxCapacity;
    const capacity =
      requested !== undefined
        ? requireMailboxCapacity("mailboxCapacity", requested)
        : this.system.defaultMailboxCapacity !== undefined && this.inUserTree()
          ? this.system.defaultMailboxCapacity
          : undefined;
    const extras = this.extras();
    const childName = this.system.claimChildName(this.path, extras.childCells, name);
    const child = new ActorCell<C>(
      this.system,
      this as ActorCell<unknown>,
      childName,
      behavior,
      options?.supervision,
      capacity,
      options?.mailboxBudget,
    );
    if (extras.childCells === null) extras.childCells = new Map();
    extras.childCells.set(childName, child as ActorCell<unknown>);
    if (this.state >= stateStopping) child.requestStop();
    child.scheduleRun();
    return child;
  }

  /** True for `/user` and the actors under it (where the system's default mailbox capacity applies). */
  private inUserTree(): boolean {
    let cell: ActorCell<unknown> = this as ActorCell<unknown>;
    while (cell.parent !== null) cell = cell.parent;
    return cell.name === "user";
  }

  /** The mailbox capacity, or null when unbounded. */
  get mailboxCapacity(): number | null {
    return (this.flags & flagBounded) === 0 ? null : this.flags >>> capacityShift;
  }

  /** @internal Looks up a live child by name. */
  childNamed(name: string): ActorCell<unknown> | undefined {
    return this.rare?.childCells?.get(name);
  }

  stop(child: ActorRef<unknown>): void {
    if (!(child instanceof LocalActorRef)) return;
    const cell = child.cell;
    if (cell.parent === (this as ActorCell<unknown>) || cell === (this as ActorCell<unknown>)) cell.requestStop();
  }

  watch(ref: ActorRef<unknown>): void {
    const key = watchKey(ref);
    const extras = this.extras();
    if (extras.watching === null) extras.watching = new Map();
    if (extras.watching.has(key)) return;
    extras.watching.set(key, ref);
    const child = this.ownChild(ref);
    if (child !== null) child.setParentWatches(true);
    else ref.sendSystem(new Watch(this.ref));
  }

  unwatch(ref: ActorRef<unknown>): void {
    const key = watchKey(ref);
    if (this.rare?.watching?.delete(key) !== true) return;
    const child = this.ownChild(ref);
    if (child !== null) child.setParentWatches(false);
    else ref.sendSystem(new Unwatch(this.ref));
  }

  /** The cell of `ref` when it is a child of this actor, else null. */
  private ownChild(ref: ActorRef<unknown>): ActorCell<unknown> | null {
    return ref instanceof LocalActorRef && ref.cell.parent === (this as ActorCell<unknown>) ? ref.cell : null;
  }

  /**
   * The parent's watch, applied at once rather than queued: the parent runs in this same process, and a watch of an
   * actor that already stopped answers with Terminated just as a queued Watch would.
   */
  private setParentWatches(watches: boolean): void {
    if (!watches) {
      this.flags &= ~flagParentWatches;
    } else if (this.state === stateStopped) {
      this.parent!.ref.sendSystem(new Terminated(this.ref));
    } else {
      this.flags |= flagParentWatches;
    }
  }

  setReceiveTimeout(timeoutMs: number | null): void {
    if (timeoutMs !== null) requireDurationMs("receive timeout", timeoutMs, { positive: true });
    if (timeoutMs === null && this.rare === null) return;
    const extras = this.extras();
    extras.receiveTimeoutGeneration++;
    extras.receiveTimeoutMs = timeoutMs;
    if (timeoutMs === null) {
      extras.receiveTimeoutHandle?.cancel();
      extras.receiveTimeoutHandle = null;
      return;
    }
    this.armReceiveTimeout(extras);
  }

  startSingleTimer(key: string, message: T, delayMs: number): void {
    this.startTimer(key, message, requireDurationMs("timer delay", delayMs), null);
  }

  startTimerAtFixedRate(key: string, message: T, intervalMs: number): void {
    this.startTimer(key, message, intervalMs, requireDurationMs("timer interval", intervalMs, { positive: true }));
  }

  cancelTimer(key: string): void {
    const timers = this.rare?.timers;
    const entry = timers?.get(key);
    if (entry === undefined) return;
    entry.handle.cancel();
    timers!.delete(key);
  }

  isTimerActive(key: string): boolean {
    return this.rare?.timers?.has(key) === true;
  }

  // ---- delivery ----

  /** @internal Enqueues a user message (or a dead letter once the actor stopped accepting). */
  enqueue(message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    const flags = this.flags;
    // One test for all rare conditions (closed, bounded, budgeted), so an open unbounded mailbox pays a single branch.
    if ((flags & (flagClosed | flagBounded | flagBudgeted)) !== 0) {
      if ((flags & flagClosed) !== 0) {
        // Timer and receive-timeout firings are the actor's own bookkeeping, not letters anyone sent.
        if (message instanceof InternalFire) return;
        this.system.deadLetterOffice.publish(message, sender, this.path.toString());
        return;
      }
      // The actor's own firings are never refused: there is at most one per timer, watch and receive timeout.
      if (
        (flags & flagBounded) !== 0 &&
        (this.mailbox?.size ?? 0) >= flags >>> capacityShift &&
        !(message instanceof InternalFire)
      ) {
        this.overflow(message, sender);
        return;
      }
      // Every queued item counts (firings too), so the budget always equals what its actors hold.
      if ((flags & flagBudgeted) !== 0) this.rare!.budget!.count++;
    }
    let mailbox = this.mailbox;
    if (mailbox === null) mailbox = this.mailbox = new Mailbox();
    if (origin === null) {
      mailbox.push(sender === null ? message : new Envelope(message, sender, null));
    } else {
      mailbox.push(new Envelope(message, sender, origin));
      this.system.inboundBacklog++;
    }
    if ((flags & (flagScheduled | flagBusy)) === 0) {
      this.flags = flags | flagScheduled;
      this.system.dispatcher.schedule(this);
    }
  }

  /** A full bounded mailbox refuses `message`: the ask behind it fails at once, then it is a counted dead letter. */
  private overflow(message: unknown, sender: ActorRef<unknown> | null): void {
    const recipient = this.path.toString();
    const capacity = this.flags >>> capacityShift;
    // The ask first: a dead-letter listener (sharding's persistent provider) may fail it with an error of its own.
    sender?.failAsk?.(new MailboxOverflowError(recipient, capacity, typeNameOf(message)));
    this.system.deadLetterOffice.publish(message, sender, recipient, true);
    this.system.noteMailboxOverflow(recipient, capacity);
  }

  /** @internal Enqueues a system message; system messages run before queued user messages. */
  enqueueSystem(message: SystemMessage): void {
    if (this.state === stateStopped) {
      if (message instanceof Watch) message.watcher.sendSystem(new Terminated(this.ref));
      return;
    }
    const extras = this.extras();
    // Both stops close the mailbox the moment they are sent, so whatever is told afterwards is a dead letter even
    // while a message is still in progress; a drain counts exactly what was queued before it (sharding's handoff).
    if (message instanceof Stop) {
      this.flags |= flagClosed;
    } else if (message instanceof DrainAndStop && !this.closed && this.state < stateStopping) {
      this.flags |= flagClosed;
      extras.drainRemaining = this.mailbox?.size ?? 0;
    }
    if (extras.systemQueue === null) extras.systemQueue = [];
    extras.systemQueue.push(message);
    this.scheduleRun();
  }

  /** @internal Stops the actor after its current message. */
  requestStop(): void {
    this.enqueueSystem(new Stop());
  }

  /** @internal Resolves once the actor and its children stopped and watchers were told. */
  whenTerminated(): Promise<void> {
    if (this.state === stateStopped) return Promise.resolve();
    return new Promise((resolve) => {
      const extras = this.extras();
      if (extras.terminatedWaiters === null) extras.terminatedWaiters = [];
      extras.terminatedWaiters.push(resolve);
    });
  }

  private scheduleRun(): void {
    const flags = this.flags;
    if ((flags & (flagScheduled | flagBusy)) === 0 && (flags & stateMask) !== stateStopped) {
      this.flags = flags | flagScheduled;
      this.system.dispatcher.schedule(this);
    }
  }

  private hasSystemMessages(): boolean {
    const queue = this.rare?.systemQueue;
    return queue !== null && queue !== undefined && queue.length > 0;
  }

  run(): void {
    this.flags &= ~flagScheduled;
    if (this.busy || this.state === stateStopped) return;
    if (this.state === stateNew) {
      this.start();
      if (this.busy) return;
    }
    if (this.hasSystemMessages() && this.runSystemMessages()) return;
    if ((this.flags & (stateMask | flagRestarting)) !== stateRunning) return;
    const mailbox = this.mailbox;
    if (mailbox === null) return;
    let processed = 0;
    let paused = false;
    while (mailbox.size > 0 && processed < throughput) {
      const item = mailbox.shift();
      processed++;
      if (item instanceof Envelope) {
        if (item.origin !== null) this.system.inboundBacklog--;
        this.handleMessage(item.message, item.sender, item.origin);
      } else this.handleMessage(item, null, null);
      if ((this.flags & (stateMask | flagBusy)) !== stateRunning) {
        paused = true;
        break;
      }
      if (this.rare !== null && this.hasSystemMessages()) break;
    }
    // Once per run rather than per message; a stop inside the run subtracted what it drained itself.
    if ((this.flags & flagBudgeted) !== 0) this.rare!.budget!.count -= processed;
    if (paused) return;
    if (mailbox.size > 0 || this.hasSystemMessages()) this.scheduleRun();
  }

  private start(): void {
    this.setState(stateRunning);
    this.behavior = this.instantiate();
    this.runPreStart();
  }

  private runPreStart(): void {
    const behavior = this.behavior!;
    // Most behaviors have no preStart: skip the closure then (spawning a million actors notices).
    if (behavior.preStart !== undefined) this.invoke(() => behavior.preStart!(this), null, "preStart");
  }

  private instantiate(): AbstractBehavior<T> {
    return typeof this.source === "function" ? this.source() : this.source;
  }

  /** Runs system messages in order; returns true when processing must pause (busy or stopping). */
  private runSystemMessages(): boolean {
    const extras = this.extras();
    const queue = extras.systemQueue;
    if (queue === null) return false;
    // A read index instead of shift(): a queue of ~100k Terminated (a parent watching that many children) lives in
    // V8's large-object space, where every shift() copies the whole array, so draining it was quadratic.
    let head = 0;
    while (head < queue.length) {
      const message = queue[head++]!;
      if (message instanceof Stop) {
        queue.splice(0, head);
        this.beginStop();
        return true;
      }
      if (message instanceof DrainAndStop) {
        if (this.state === stateRunning && extras.drainRemaining === 0) {
          queue.splice(0, head);
          this.beginStop();
          return true;
        }
      } else if (message instanceof Watch) {
        this.addWatcher(message.watcher);
      } else if (message instanceof Unwatch) {
        extras.watchers?.delete(message.watcher.path.toString());
      } else if (message instanceof Terminated) {
        if (extras.watching?.has(watchKey(message.ref)) === true && this.state === stateRunning) {
          this.enqueue(new TerminatedFire(message), null, null);
        }
      }
    }
    queue.length = 0;
    return false;
  }

  private addWatcher(watcher: ActorRef<unknown>): void {
    if (watcher.path.equals(this.path)) return;
    const extras = this.extras();
    if (extras.watchers === null) extras.watchers = new Map();
    extras.watchers.set(watcher.path.toString(), watcher);
  }

  private handleMessage(message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    let rare = this.rare;
    if (rare !== null && rare.drainRemaining > 0) rare.drainRemaining--;
    if (message instanceof InternalFire) {
      message = this.unwrapFire(message);
      if (message === noMessage) {
        if (!this.busy) this.afterMessage();
        return;
      }
      rare = this.rare;
    }
    if (rare !== null && rare.receiveTimeoutMs !== null) rare.receiveTimeoutGeneration++;
    this.currentSender = sender;
    this.currentOrigin = origin;
    let result: void | Promise<void>;
    try {
      result = this.behavior!.receive(message as T, this);
    } catch (error) {
      this.onFailure(asError(error), sender);
      this.endMessage();
      return;
    }
    if (result !== undefined && isThenable(result)) {
      this.awaitReceive(result, sender);
      return;
    }
    this.endMessage();
  }

  /** Keeps the actor busy until an async receive settles; only then does the next message start (per-actor FIFO). */
  private awaitReceive(result: PromiseLike<unknown>, sender: ActorRef<unknown> | null): void {
    this.setBusy(true);
    result.then(
      () => {
        this.setBusy(false);
        this.endMessage();
        this.scheduleRun();
      },
      (error: unknown) => {
        this.setBusy(false);
        this.onFailure(asError(error), sender);
        this.endMessage();
        this.scheduleRun();
      },
    );
  }

  /** Turns a firing into the timer's message, or handles a receive timeout; {@link noMessage} when nothing remains. */
  private unwrapFire(fire: InternalFire): unknown {
    const extras = this.extras();
    if (fire instanceof TimerFire) {
      const entry = extras.timers?.get(fire.key);
      if (entry === undefined || entry.generation !== fire.generation) return noMessage;
      if (entry.intervalMs === null) extras.timers!.delete(fire.key);
      return entry.message;
    }
    if (fire instanceof TerminatedFire) {
      // Still watched? An unwatch after the termination was queued drops it.
      if (extras.watching?.delete(watchKey(fire.signal.ref)) === true) this.deliverSignal(fire.signal);
      return noMessage;
    }
    if (
      fire instanceof ReceiveTimeoutFire &&
      fire.generation === extras.receiveTimeoutGeneration &&
      extras.receiveTimeoutMs !== null
    ) {
      this.deliverSignal(RECEIVE_TIMEOUT);
    }
    return noMessage;
  }

  private endMessage(): void {
    this.currentSender = null;
    this.currentOrigin = null;
    const rare = this.rare;
    if (rare !== null) {
      // Idle time counts from the end of a message, so a long async receive is not mistaken for idleness.
      if (rare.receiveTimeoutMs !== null) this.armReceiveTimeout(rare);
      this.afterMessage();
    }
  }

  /** Stops a draining actor once it handled everything that was queued before DRAIN_AND_STOP. */
  private afterMessage(): void {
    const rare = this.rare;
    if (rare !== null && rare.drainRemaining === 0 && this.state === stateRunning) {
      rare.drainRemaining = -1;
      this.beginStop();
    }
  }

  private deliverSignal(signal: Signal): void {
    const behavior = this.behavior;
    if (behavior?.receiveSignal === undefined) return;
    this.invoke(() => behavior.receiveSignal!(signal, this), null, "receiveSignal");
  }

  /** Runs a hook that may return a Promise; failures go to supervision like a failed message. */
  private invoke(hook: () => void | Promise<void>, sender: ActorRef<unknown> | null, what: string): void {
    let result: void | Promise<void>;
    try {
      result = hook();
    } catch (error) {
      this.log.debug({ actor: this.path.toString(), hook: what }, "actor hook failed");
      this.onFailure(asError(error), sender);
      return;
    }
    if (isThenable(result)) {
      this.setBusy(true);
      result.then(
        () => {
          this.setBusy(false);
          this.afterMessage();
          this.scheduleRun();
        },
        (error: unknown) => {
          this.setBusy(false);
          this.onFailure(asError(error), sender);
          this.afterMessage();
          this.scheduleRun();
        },
      );
    }
  }

  private onFailure(error: Error, sender: ActorRef<unknown> | null): void {
    sender?.failAsk?.(error);
    if (this.state !== stateRunning) return;
    const strategy = this.supervision ?? this.parent?.behavior?.supervisorStrategy ?? defaultSupervisorStrategy;
    this.system.log.warn(
      { actor: this.path.toString(), error, strategy: strategy.kind },
      "actor failed while handling a message",
    );
    if (strategy.kind === "resume") return;
    if (strategy.kind === "stop") {
      this.beginStop();
      return;
    }
    const extras = this.extras();
    const decision = restartAllowed(strategy, extras.restartTimesMs ?? [], this.system.scheduler.now());
    extras.restartTimesMs = decision.recent;
    if (!decision.allowed) {
      this.system.log.error({ actor: this.path.toString(), error }, "actor exceeded its restart limit and stops");
      this.beginStop();
      return;
    }
    this.restart(error);
  }

  private restart(error: Error): void {
    try {
      this.behavior?.preRestart?.(this, error);
    } catch (hookError) {
      this.log.warn({ actor: this.path.toString(), error: hookError }, "preRestart failed");
    }
    this.cancelAllTimers();
    const children = this.childCellList();
    this.flags |= flagRestarting;
    const finish = (): void => {
      this.flags &= ~flagRestarting;
      if (this.state !== stateRunning) return;
      this.behavior = this.instantiate();
      this.runPreStart();
      this.scheduleRun();
    };
    if (children.length === 0) {
      finish();
      return;
    }
    this.setBusy(true);
    for (const child of children) child.requestStop();
    Promise.all(children.map((c) => c.whenTerminated())).then(() => {
      this.setBusy(false);
      finish();
    });
  }

  private childCellList(): ActorCell<unknown>[] {
    const cells = this.rare?.childCells;
    return cells === null || cells === undefined ? [] : [...cells.values()];
  }

  private beginStop(): void {
    if (this.state >= stateStopping) return;
    this.setState(stateStopping);
    this.flags |= flagClosed;
    if (this.rare !== null) this.rare.drainRemaining = -1;
    this.cancelAllTimers();
    this.setReceiveTimeout(null);
    this.flushToDeadLetters();
    const children = this.childCellList();
    for (const child of children) child.requestStop();
    if (children.length === 0) {
      this.finishStop();
    } else {
      Promise.all(children.map((c) => c.whenTerminated())).then(() => this.finishStop());
    }
  }

  private finishStop(): void {
    const done = (): void => {
      this.setState(stateStopped);
      this.flushToDeadLetters();
      this.behavior = null;
      this.mailbox = null;
      this.parent?.childTerminated(this as ActorCell<unknown>);
      const terminated = new Terminated(this.ref);
      if ((this.flags & flagParentWatches) !== 0) this.parent!.ref.sendSystem(terminated);
      const extras = this.rare;
      if (extras === null) return;
      // A Watch queued behind the Stop that ended the actor still deserves its Terminated.
      const unprocessed = extras.systemQueue;
      extras.systemQueue = null;
      if (unprocessed !== null)
        for (const message of unprocessed) if (message instanceof Watch) this.addWatcher(message.watcher);
      if (extras.watchers !== null) for (const watcher of extras.watchers.values()) watcher.sendSystem(terminated);
      extras.watchers = null;
      if (extras.watching !== null) {
        for (const watched of extras.watching.values()) watched.sendSystem(new Unwatch(this.ref));
      }
      extras.watching = null;
      const waiters = extras.terminatedWaiters;
      extras.terminatedWaiters = null;
      if (waiters !== null) for (const resolve of waiters) resolve();
    };
    let result: Promise<void> | undefined;
    try {
      result = this.behavior?.postStop?.(this) as Promise<void> | undefined;
    } catch (error) {
      this.log.warn({ actor: this.path.toString(), error }, "postStop failed");
    }
    if (isThenable(result)) {
      result.then(done, (error: unknown) => {
        this.log.warn({ actor: this.path.toString(), error }, "postStop failed");
        done();
      });
    } else {
      done();
    }
  }

  /** @internal Called by a child once it fully stopped: frees its name. */
  childTerminated(child: ActorCell<unknown>): void {
    const cells = this.rare?.childCells;
    if (cells?.get(child.name) === child) cells.delete(child.name);
  }

  private flushToDeadLetters(): void {
    const mailbox = this.mailbox;
    if (mailbox === null || mailbox.size === 0) return;
    const recipient = this.path.toString();
    if ((this.flags & flagBudgeted) !== 0) this.rare!.budget!.count -= mailbox.size;
    mailbox.drain((message, sender, origin) => {
      if (origin !== null) this.system.inboundBacklog--;
      if (message instanceof InternalFire) return;
      this.system.deadLetterOffice.publish(message, sender, recipient);
    });
  }

  private startTimer(key: string, message: T, delayMs: number, intervalMs: number | null): void {
    if (message === undefined || message === null) throw new InvalidMessageError("a timer message must be a value");
    this.cancelTimer(key);
    if (this.state >= stateStopping) return;
    const extras = this.extras();
    if (extras.timers === null) extras.timers = new Map();
    const timers = extras.timers;
    const generation = ++extras.timerGeneration;
    const fire = new TimerFire(key, generation);
    const entry: TimerEntry = { generation, message, intervalMs, handle: { cancel() {} } };
    const arm = (afterMs: number): void => {
      entry.handle = this.system.scheduler.scheduleOnce(afterMs, () => {
        if (timers.get(key) !== entry) return;
        if (intervalMs !== null) arm(intervalMs);
        this.enqueue(fire, null, null);
      });
    };
    arm(delayMs);
    timers.set(key, entry);
  }

  private cancelAllTimers(): void {
    const extras = this.rare;
    if (extras === null || extras.timers === null) return;
    for (const entry of extras.timers.values()) entry.handle.cancel();
    extras.timers = null;
  }

  /**
   * (Re)starts the receive timeout from now. It runs on the system's TimeoutQueue, so every actor with the same
   * timeout shares one scheduler timer and re-arming after each message is a list link, not a setTimeout.
   */
  private armReceiveTimeout(extras: CellExtras): void {
    // Add the new deadline before cancelling the old one, so the shared lane never empties in between.
    const previous = extras.receiveTimeoutHandle;
    extras.receiveTimeoutHandle = this.system.timeouts.schedule(extras.receiveTimeoutMs!, this);
    previous?.cancel();
  }

  /** @internal The receive timeout's deadline passed (the cell is its own {@link TimeoutTarget}: no closure). */
  onTimeout(): void {
    const extras = this.rare;
    if (extras === null) return;
    extras.receiveTimeoutHandle = null;
    if (extras.receiveTimeoutMs === null) return;
    // Inside a message is not idleness: the message's end re-arms; an async hook (preStart) re-arms here.
    this.armReceiveTimeout(extras);
    if (!this.busy) this.enqueue(new ReceiveTimeoutFire(extras.receiveTimeoutGeneration), null, null);
  }
}

/** The ref of a local actor. */
export class LocalActorRef<T> implements ActorRef<T> {
  constructor(/** @internal */ readonly cell: ActorCell<T>) {}

  get path(): ActorPath {
    return this.cell.path;
  }

  tell(message: T, sender?: ActorRef<unknown> | null): void {
    if (message === undefined || message === null) {
      throw new InvalidMessageError("tell needs a message value, got " + message);
    }
    this.cell.enqueue(message, sender ?? null, null);
  }

  /** @internal Delivers a message that arrived over remoting, stamped with the authenticated peer. */
  deliver(message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    this.cell.enqueue(message, sender, origin);
  }

  ask<R>(message: T, replyType: Class<R>, timeoutMs: number, options?: AskOptions): Promise<R> {
    return askVia(this.cell.system, this, message, replyType, timeoutMs, options);
  }

  sendSystem(message: SystemMessage): void {
    this.cell.enqueueSystem(message);
  }

  toString(): string {
    return `ActorRef(${this.path})`;
  }
}
