export { LocalActorRef } from "./actor-cell.ts";
export type { ActorContext, SpawnOptions } from "./actor-context.ts";
export type { ActorRef, AskOptions, Class } from "./actor-ref.ts";
export { ActorSystem, type ActorSystemOptions, type RemoteRefResolver } from "./actor-system.ts";
export { Address, compareStrings, InvalidAddressError, UniqueAddress } from "./address.ts";
export { askVia } from "./ask.ts";
export { AbstractBehavior, type BehaviorSource, Behaviors } from "./behavior.ts";
export {
  type Cancellable,
  ManualScheduler,
  RealScheduler,
  type Scheduler,
  TimeoutQueue,
  type TimeoutTarget,
} from "./clock.ts";
export type { DeadLetter } from "./dead-letters.ts";
export {
  ActorSystemTerminatedError,
  AskCancelledError,
  AskReplyTypeError,
  AskTimeoutError,
  DuplicateActorNameError,
  InvalidActorNameError,
  InvalidArgumentError,
  InvalidMessageError,
  MailboxOverflowError,
  requireDurationMs,
  typeNameOf,
  UnknownSettingError,
} from "./errors.ts";
export type { Extension, ExtensionId } from "./extension.ts";
export {
  batchSizeBuckets,
  Histogram,
  type HistogramListener,
  type HistogramSnapshot,
  histogramBucketCountMax,
  latencyBucketsSeconds,
  type ReadonlyHistogram,
} from "./histogram.ts";
export { ConsoleLogger, type Logger, type LogLevel, silentLogger } from "./logger.ts";
export { MailboxBudget } from "./mailbox-budget.ts";
export { ActorPath, isValidActorName } from "./path.ts";
export { defaultSupervisorStrategy, SupervisorStrategies, type SupervisorStrategy } from "./supervision.ts";
export {
  DRAIN_AND_STOP,
  DrainAndStop,
  isSystemMessage,
  RECEIVE_TIMEOUT,
  ReceiveTimeout,
  type Signal,
  STOP,
  Stop,
  type SystemMessage,
  Terminated,
  Unwatch,
  Watch,
} from "./system-messages.ts";
