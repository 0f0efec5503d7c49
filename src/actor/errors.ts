import { classNameOf, describe } from "./untrusted.ts";

/** Errors raised by the actor runtime. Each has a stable `name` and carries the fields a caller acts on. */

/** An ask got no reply within its timeout. */
export class AskTimeoutError extends Error {
  override readonly name = "AskTimeoutError";
  constructor(
    readonly target: string,
    readonly messageType: string,
    readonly timeoutMs: number,
  ) {
    super(`Ask of ${messageType} to ${target} timed out after ${timeoutMs} ms; raise the timeout or check the target`);
  }
}

/** An ask was cancelled through its AbortSignal before a reply arrived. */
export class AskCancelledError extends Error {
  override readonly name = "AskCancelledError";
  constructor(
    readonly target: string,
    readonly messageType: string,
  ) {
    super(`Ask of ${messageType} to ${target} was cancelled by its AbortSignal`);
  }
}

/** An ask's reply was not an instance of the expected reply class. */
export class AskReplyTypeError extends Error {
  override readonly name = "AskReplyTypeError";
  constructor(
    readonly target: string,
    readonly expectedType: string,
    readonly actualType: string,
  ) {
    super(`Ask to ${target} expected a reply of type ${expectedType} but received ${actualType}`);
  }
}

/** An actor name is empty, too long, contains `/`, `#` or whitespace, or starts with `$`. */
export class InvalidActorNameError extends Error {
  override readonly name = "InvalidActorNameError";
  constructor(readonly actorName: string) {
    super(
      `Invalid actor name "${actorName}": use 1-255 letters, digits or -_.:~+=@!,;'()*% and do not start with $ or contain / # or spaces`,
    );
  }
}

/**
 * A message reached a bounded mailbox that was full: it went to dead letters instead (counted in
 * `ActorSystem.mailboxOverflowCount`), and an ask carrying it rejects with this error.
 */
export class MailboxOverflowError extends Error {
  override readonly name = "MailboxOverflowError";
  constructor(
    /** The recipient's path. */
    readonly recipient: string,
    /** Its mailbox capacity (messages). */
    readonly capacity: number,
    /** The class name of the refused message. */
    readonly messageType: string,
  ) {
    super(
      `Mailbox of ${recipient} is full (${capacity} messages); the ${messageType} was not delivered: the actor is not keeping up, so slow the sender and retry later, or raise its mailboxCapacity`,
    );
  }
}

/** A sibling with the same name is still alive. */
export class DuplicateActorNameError extends Error {
  override readonly name = "DuplicateActorNameError";
  constructor(
    readonly parentPath: string,
    readonly actorName: string,
  ) {
    super(`An actor named "${actorName}" already exists under ${parentPath}; pick another name or stop it first`);
  }
}

/** A message that cannot be sent: `undefined` or `null`. */
export class InvalidMessageError extends Error {
  override readonly name = "InvalidMessageError";
  constructor(detail: string) {
    super(`Invalid message: ${detail}`);
  }
}

/** A setting or argument outside its allowed range (a negative timeout, a zero interval, …). */
export class InvalidArgumentError extends Error {
  override readonly name: string = "InvalidArgumentError";
  constructor(
    readonly argument: string,
    detail: string,
  ) {
    super(`Invalid ${argument}: ${detail}`);
  }
}

/** The actor system has terminated (or is terminating) and cannot spawn. */
export class ActorSystemTerminatedError extends Error {
  override readonly name = "ActorSystemTerminatedError";
  constructor(readonly systemName: string) {
    super(`Actor system ${systemName} is terminated; create a new ActorSystem`);
  }
}

/** Validates a duration argument in milliseconds: finite and not negative (or strictly positive when asked). */
export function requireDurationMs(argument: string, value: number, options: { positive?: boolean } = {}): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0 || (options.positive === true && value === 0)) {
    throw new InvalidArgumentError(
      argument,
      `${describe(value)} ms; expected a finite number ${options.positive === true ? "above 0" : "of 0 or more"}`,
    );
  }
  return value;
}

/**
 * The class name of a value, for error texts: its prototype's constructor's name ("Object" for a plain, null-prototype
 * or nameless one), else its `typeof`. Never runs the value's code nor reads its own fields, so a decoded remote
 * payload with a `constructor` key of any shape (or a Proxy) cannot make an error text throw.
 */
export function typeNameOf(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "object") return classNameOf(value as object) ?? "Object";
  return typeof value;
}

/**
 * A settings object has a key no setting of that name exists for: usually a typo or a setting given at the wrong
 * level (`enableCluster({ heartbeatInterval })` instead of `failureDetector: { heartbeatInterval }`), which would
 * otherwise be silently ignored. `suggestion` is the setting probably meant, when one is close.
 */
export class UnknownSettingError extends InvalidArgumentError {
  override readonly name = "UnknownSettingError";
  constructor(
    /** Whose settings, e.g. `enableCluster` or `Database.configure`. */
    readonly settings: string,
    /** The unknown key as a path, e.g. `failureDetector.heartbeatInterva`. */
    readonly key: string,
    /** The known setting probably meant, as a path, or null. */
    readonly suggestion: string | null,
  ) {
    super(
      `${settings} setting ${JSON.stringify(key.length > 100 ? `${key.slice(0, 100)}...` : key)}`,
      `no such setting${suggestion === null ? "" : `; did you mean "${suggestion}"?`} (unknown settings are refused rather than ignored)`,
    );
  }
}
