import type { ActorContext, SpawnOptions } from "./actor-context.ts";
import type { ActorRef, AskOptions, Class } from "./actor-ref.ts";
import type { ActorSystem } from "./actor-system.ts";
import type { UniqueAddress } from "./address.ts";
import { askVia } from "./ask.ts";
import type { AbstractBehavior, BehaviorSource } from "./behavior.ts";
import type { Cancellable } from "./clock.ts";
import type { Runnable } from "./dispatcher.ts";
import { InvalidMessageError, requireDurationMs } from "./errors.ts";
import type { Logger } from "./logger.ts";
import { Mailbox } from "./mailbox.ts";
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

/** How many messages one actor handles per dispatcher run before others get a turn. */
const throughput = 64;

/** A keyed timer's firing, queued in the mailbox so it is handled in order with ordinary messages. */
class TimerFire {
  constructor(
    readonly key: string,
    readonly generation: number,
  ) {}
}

/** A receive-timeout firing; stale ones (from before the latest message) are recognised by generation. */
class ReceiveTimeoutFire {
  constructor(readonly generation: number) {}
}

interface TimerEntry {
  readonly generation: number;
  readonly message: unknown;
  readonly intervalMs: number | null;
  handle: Cancellable;
}

type CellState = "new" | "running" | "stopping" | "stopped";

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return value !== undefined && value !== null && typeof (value as PromiseLike<unknown>).then === "function";
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}

/**
 * The running state of one local actor: mailbox, behavior, children, watchers and timers. It is also the behavior's
 * {@link ActorContext}, so an idle actor costs one object plus its ref (the mailbox buffer and the rare tables are
 * allocated on first use).
 */
export class ActorCell<T> implements Runnable, ActorContext<T> {
  readonly ref: LocalActorRef<T>;
  private state: CellState = "new";
  private behavior: AbstractBehavior<T> | null = null;
  private mailbox: Mailbox | null = null;
  private systemQueue: SystemMessage[] | null = null;
  /** True while a Promise returned by the behavior is pending: nothing else runs meanwhile. */
  private busy = false;
  private scheduled = false;
  /** False once STOP or DRAIN_AND_STOP arrived: later messages are dead letters. */
  private accepting = true;
  /** Messages still to process before a DRAIN_AND_STOP stops the actor; -1 when not draining. */
  private drainRemaining = -1;
  private childCells: Map<string, ActorCell<unknown>> | null = null;
  private watchers: Map<string, ActorRef<unknown>> | null = null;
  private watching: Map<string, ActorRef<unknown>> | null = null;
  private timers: Map<string, TimerEntry> | null = null;
  private timerGeneration = 0;
  private receiveTimeoutMs: number | null = null;
  private receiveTimeoutHandle: Cancellable | null = null;
  private receiveTimeoutGeneration = 0;
  private lastActivityMs = 0;
  private restartTimesMs: number[] | null = null;
  private restarting = false;
  private terminatedWaiters: (() => void)[] | null = null;
  private currentSender: ActorRef<unknown> | null = null;
  private currentOrigin: UniqueAddress | null = null;
  private cachedPath: ActorPath | null = null;

  constructor(
    readonly system: ActorSystem,
    readonly parent: ActorCell<unknown> | null,
    readonly elements: readonly string[],
    private readonly source: BehaviorSource<T>,
    private readonly supervision: SupervisorStrategy | undefined,
  ) {
    this.ref = new LocalActorRef(this);
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
  get path(): ActorPath {
    const address = this.system.address;
    if (this.cachedPath === null || this.cachedPath.address !== address) {
      this.cachedPath = new ActorPath(address, this.elements);
    }
    return this.cachedPath;
  }
  get name(): string {
    return this.elements[this.elements.length - 1] ?? "";
  }
  get children(): readonly ActorRef<unknown>[] {
    return this.childCells === null ? [] : [...this.childCells.values()].map((c) => c.ref);
  }
  get isTerminated(): boolean {
    return this.state === "stopped";
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
    const childName = this.system.claimChildName(this.path.toString(), this.childCells, name);
    const child = new ActorCell<C>(
      this.system,
      this as ActorCell<unknown>,
      [...this.elements, childName],
      behavior,
      options?.supervision,
    );
    if (this.childCells === null) this.childCells = new Map();
    this.childCells.set(childName, child as ActorCell<unknown>);
    if (this.state === "stopping" || this.state === "stopped") child.requestStop();
    child.scheduleRun();
    return child;
  }

  /** @internal Looks up a live child by name. */
  childNamed(name: string): ActorCell<unknown> | undefined {
    return this.childCells?.get(name);
  }

  stop(child: ActorRef<unknown>): void {
    if (!(child instanceof LocalActorRef)) return;
    const cell = child.cell;
    if (cell.parent === (this as ActorCell<unknown>) || cell === (this as ActorCell<unknown>)) cell.requestStop();
  }

  watch(ref: ActorRef<unknown>): void {
    const key = ref.path.toString();
    if (this.watching === null) this.watching = new Map();
    if (this.watching.has(key)) return;
    this.watching.set(key, ref);
    ref.sendSystem(new Watch(this.ref));
  }

  unwatch(ref: ActorRef<unknown>): void {
    const key = ref.path.toString();
    if (this.watching?.delete(key) === true) ref.sendSystem(new Unwatch(this.ref));
  }

  setReceiveTimeout(timeoutMs: number | null): void {
    this.receiveTimeoutHandle?.cancel();
    this.receiveTimeoutHandle = null;
    this.receiveTimeoutGeneration++;
    if (timeoutMs === null) {
      this.receiveTimeoutMs = null;
      return;
    }
    this.receiveTimeoutMs = requireDurationMs("receive timeout", timeoutMs, { positive: true });
    this.lastActivityMs = this.system.scheduler.now();
    this.armReceiveTimeout(timeoutMs);
  }

  startSingleTimer(key: string, message: T, delayMs: number): void {
    this.startTimer(key, message, requireDurationMs("timer delay", delayMs), null);
  }

  startTimerAtFixedRate(key: string, message: T, intervalMs: number): void {
    this.startTimer(key, message, intervalMs, requireDurationMs("timer interval", intervalMs, { positive: true }));
  }

  cancelTimer(key: string): void {
    const entry = this.timers?.get(key);
    if (entry === undefined) return;
    entry.handle.cancel();
    this.timers!.delete(key);
  }

  isTimerActive(key: string): boolean {
    return this.timers?.has(key) === true;
  }

  // ---- delivery ----

  /** @internal Enqueues a user message (or a dead letter once the actor stopped accepting). */
  enqueue(message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    if (!this.accepting) {
      // Timer and receive-timeout firings are the actor's own bookkeeping, not letters anyone sent.
      if (message instanceof TimerFire || message instanceof ReceiveTimeoutFire) return;
      this.system.deadLetterOffice.publish(message, sender, this.path.toString());
      return;
    }
    if (this.mailbox === null) this.mailbox = new Mailbox();
    this.mailbox.push(message, sender, origin);
    if (!this.scheduled && !this.busy) {
      this.scheduled = true;
      this.system.dispatcher.schedule(this);
    }
  }

  /** @internal Enqueues a system message; system messages run before queued user messages. */
  enqueueSystem(message: SystemMessage): void {
    if (this.state === "stopped") {
      if (message instanceof Watch) message.watcher.sendSystem(new Terminated(this.ref));
      return;
    }
    // Both stops close the mailbox the moment they are sent, so whatever is told afterwards is a dead letter even
    // while a message is still in progress; a drain counts exactly what was queued before it (sharding's handoff).
    if (message instanceof Stop) {
      this.accepting = false;
    } else if (message instanceof DrainAndStop && this.accepting && this.state !== "stopping") {
      this.accepting = false;
      this.drainRemaining = this.mailbox?.size ?? 0;
    }
    if (this.systemQueue === null) this.systemQueue = [];
    this.systemQueue.push(message);
    this.scheduleRun();
  }

  /** @internal Stops the actor after its current message. */
  requestStop(): void {
    this.enqueueSystem(new Stop());
  }

  /** @internal Resolves once the actor and its children stopped and watchers were told. */
  whenTerminated(): Promise<void> {
    if (this.state === "stopped") return Promise.resolve();
    return new Promise((resolve) => {
      if (this.terminatedWaiters === null) this.terminatedWaiters = [];
      this.terminatedWaiters.push(resolve);
    });
  }

  private scheduleRun(): void {
    if (!this.scheduled && !this.busy && this.state !== "stopped") {
      this.scheduled = true;
      this.system.dispatcher.schedule(this);
    }
  }

  run(): void {
    this.scheduled = false;
    if (this.busy || this.state === "stopped") return;
    if (this.state === "new") {
      this.start();
      if (this.busy) return;
    }
    if (this.runSystemMessages()) return;
    if (this.state !== "running" || this.restarting) return;
    const mailbox = this.mailbox;
    if (mailbox === null) return;
    let processed = 0;
    while (mailbox.size > 0 && processed < throughput) {
      const message = mailbox.peekMessage();
      const sender = mailbox.peekSender();
      const origin = mailbox.peekOrigin();
      mailbox.shift();
      processed++;
      this.handleMessage(message, sender, origin);
      if (this.busy || this.state !== "running") return;
      if (this.systemQueue !== null && this.systemQueue.length > 0) break;
    }
    if (mailbox.size > 0 || (this.systemQueue !== null && this.systemQueue.length > 0)) this.scheduleRun();
  }

  private start(): void {
    this.state = "running";
    this.behavior = this.instantiate();
    this.invoke(() => this.behavior!.preStart?.(this), null, "preStart");
  }

  private instantiate(): AbstractBehavior<T> {
    return typeof this.source === "function" ? this.source() : this.source;
  }

  /** Runs system messages in order; returns true when processing must pause (busy or stopping). */
  private runSystemMessages(): boolean {
    const queue = this.systemQueue;
    while (queue !== null && queue.length > 0) {
      const message = queue.shift()!;
      if (message instanceof Stop) {
        this.beginStop();
        return true;
      }
      if (message instanceof DrainAndStop) {
        if (this.state === "running" && this.drainRemaining === 0) {
          this.beginStop();
          return true;
        }
      } else if (message instanceof Watch) {
        if (message.watcher.path.equals(this.path)) continue;
        if (this.watchers === null) this.watchers = new Map();
        this.watchers.set(message.watcher.path.toString(), message.watcher);
      } else if (message instanceof Unwatch) {
        this.watchers?.delete(message.watcher.path.toString());
      } else if (message instanceof Terminated) {
        const key = message.ref.path.toString();
        if (this.watching?.delete(key) === true && this.state === "running") {
          this.deliverSignal(message);
          if (this.busy) return true;
        }
      }
    }
    return false;
  }

  private handleMessage(message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    if (this.drainRemaining > 0) this.drainRemaining--;
    if (message instanceof TimerFire) {
      const entry = this.timers?.get(message.key);
      if (entry === undefined || entry.generation !== message.generation) {
        this.afterMessage();
        return;
      }
      if (entry.intervalMs === null) this.timers!.delete(message.key);
      message = entry.message;
    } else if (message instanceof ReceiveTimeoutFire) {
      if (message.generation === this.receiveTimeoutGeneration && this.receiveTimeoutMs !== null) {
        this.deliverSignal(RECEIVE_TIMEOUT);
      }
      this.afterMessage();
      return;
    }
    if (this.receiveTimeoutMs !== null) this.lastActivityMs = this.system.scheduler.now();
    this.currentSender = sender;
    this.currentOrigin = origin;
    const behavior = this.behavior!;
    let result: void | Promise<void>;
    try {
      result = behavior.receive(message as T, this);
    } catch (error) {
      this.currentSender = null;
      this.currentOrigin = null;
      this.onFailure(asError(error), sender);
      this.afterMessage();
      return;
    }
    if (isThenable(result)) {
      this.busy = true;
      result.then(
        () => {
          this.busy = false;
          this.currentSender = null;
          this.currentOrigin = null;
          this.afterMessage();
          this.scheduleRun();
        },
        (error: unknown) => {
          this.busy = false;
          this.currentSender = null;
          this.currentOrigin = null;
          this.onFailure(asError(error), sender);
          this.afterMessage();
          this.scheduleRun();
        },
      );
      return;
    }
    this.currentSender = null;
    this.currentOrigin = null;
    this.afterMessage();
  }

  private afterMessage(): void {
    if (this.drainRemaining === 0 && this.state === "running") {
      this.drainRemaining = -1;
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
      this.busy = true;
      result.then(
        () => {
          this.busy = false;
          this.scheduleRun();
        },
        (error: unknown) => {
          this.busy = false;
          this.onFailure(asError(error), sender);
          this.scheduleRun();
        },
      );
    }
  }

  private onFailure(error: Error, sender: ActorRef<unknown> | null): void {
    sender?.failAsk?.(error);
    if (this.state !== "running") return;
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
    const decision = restartAllowed(strategy, this.restartTimesMs ?? [], this.system.scheduler.now());
    this.restartTimesMs = decision.recent;
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
    const children = this.childCells === null ? [] : [...this.childCells.values()];
    this.restarting = true;
    const finish = (): void => {
      this.restarting = false;
      if (this.state !== "running") return;
      this.behavior = this.instantiate();
      this.invoke(() => this.behavior!.preStart?.(this), null, "preStart");
      this.scheduleRun();
    };
    if (children.length === 0) {
      finish();
      return;
    }
    this.busy = true;
    for (const child of children) child.requestStop();
    Promise.all(children.map((c) => c.whenTerminated())).then(() => {
      this.busy = false;
      finish();
    });
  }

  private beginStop(): void {
    if (this.state === "stopping" || this.state === "stopped") return;
    this.state = "stopping";
    this.accepting = false;
    this.drainRemaining = -1;
    this.cancelAllTimers();
    this.setReceiveTimeout(null);
    this.flushToDeadLetters();
    const children = this.childCells === null ? [] : [...this.childCells.values()];
    for (const child of children) child.requestStop();
    if (children.length === 0) {
      this.finishStop();
    } else {
      Promise.all(children.map((c) => c.whenTerminated())).then(() => this.finishStop());
    }
  }

  private finishStop(): void {
    const done = (): void => {
      this.state = "stopped";
      this.flushToDeadLetters();
      // A Watch queued behind the Stop that ended the actor still deserves its Terminated.
      const unprocessed = this.systemQueue;
      this.systemQueue = null;
      if (unprocessed !== null) {
        for (const message of unprocessed) {
          if (!(message instanceof Watch) || message.watcher.path.equals(this.path)) continue;
          if (this.watchers === null) this.watchers = new Map();
          this.watchers.set(message.watcher.path.toString(), message.watcher);
        }
      }
      this.behavior = null;
      this.parent?.childTerminated(this as ActorCell<unknown>);
      if (this.parent === null) this.system.rootTerminated(this as ActorCell<unknown>);
      const terminated = new Terminated(this.ref);
      if (this.watchers !== null) for (const watcher of this.watchers.values()) watcher.sendSystem(terminated);
      this.watchers = null;
      if (this.watching !== null)
        for (const watched of this.watching.values()) watched.sendSystem(new Unwatch(this.ref));
      this.watching = null;
      const waiters = this.terminatedWaiters;
      this.terminatedWaiters = null;
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
    if (this.childCells?.get(child.name) === child) this.childCells.delete(child.name);
  }

  private flushToDeadLetters(): void {
    const mailbox = this.mailbox;
    if (mailbox === null || mailbox.size === 0) return;
    const recipient = this.path.toString();
    mailbox.drain((message, sender) => {
      if (message instanceof TimerFire || message instanceof ReceiveTimeoutFire) return;
      this.system.deadLetterOffice.publish(message, sender, recipient);
    });
  }

  private startTimer(key: string, message: T, delayMs: number, intervalMs: number | null): void {
    if (message === undefined || message === null) throw new InvalidMessageError("a timer message must be a value");
    this.cancelTimer(key);
    if (this.state === "stopping" || this.state === "stopped") return;
    if (this.timers === null) this.timers = new Map();
    const generation = ++this.timerGeneration;
    const fire = new TimerFire(key, generation);
    const entry: TimerEntry = { generation, message, intervalMs, handle: { cancel() {} } };
    const arm = (afterMs: number): void => {
      entry.handle = this.system.scheduler.scheduleOnce(afterMs, () => {
        if (this.timers?.get(key) !== entry) return;
        if (intervalMs !== null) arm(intervalMs);
        this.enqueue(fire, null, null);
      });
    };
    arm(delayMs);
    this.timers.set(key, entry);
  }

  private cancelAllTimers(): void {
    if (this.timers === null) return;
    for (const entry of this.timers.values()) entry.handle.cancel();
    this.timers = null;
  }

  private armReceiveTimeout(afterMs: number): void {
    const generation = this.receiveTimeoutGeneration;
    this.receiveTimeoutHandle = this.system.scheduler.scheduleOnce(afterMs, () => {
      if (generation !== this.receiveTimeoutGeneration || this.receiveTimeoutMs === null) return;
      // Messages only stamp lastActivityMs (no timer churn per message); the timer re-arms for the remainder.
      const idleMs = this.system.scheduler.now() - this.lastActivityMs;
      if (idleMs + 0.5 < this.receiveTimeoutMs) {
        this.armReceiveTimeout(this.receiveTimeoutMs - idleMs);
        return;
      }
      this.lastActivityMs = this.system.scheduler.now();
      this.armReceiveTimeout(this.receiveTimeoutMs);
      this.enqueue(new ReceiveTimeoutFire(generation), null, null);
    });
  }
}

/** The ref of a local actor. */
export class LocalActorRef<T> implements ActorRef<T> {
  constructor(/** @internal */ readonly cell: ActorCell<T>) {}

  get path(): ActorPath {
    return this.cell.path;
  }

  tell(message: T, sender?: ActorRef<unknown> | null): void {
    if (message === undefined || message === null)
      throw new InvalidMessageError("tell needs a message value, got " + message);
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
