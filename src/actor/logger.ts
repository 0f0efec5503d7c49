/**
 * Logging goes through this small interface, which pino's logger satisfies (`logger.warn({ shard }, "moved")`).
 * The default writes warnings and errors to stderr; `MOVIE_LOG_LEVEL` (debug, info, warn, error, silent) changes it,
 * and the test runner sets it to silent.
 */
export interface Logger {
  /** Logs `message` with `context` fields at debug level. */
  debug(context: object, message: string): void;
  /** Logs `message` with `context` fields at info level. */
  info(context: object, message: string): void;
  /** Logs `message` with `context` fields at warn level. */
  warn(context: object, message: string): void;
  /** Logs `message` with `context` fields at error level. */
  error(context: object, message: string): void;
}

/** Levels in increasing severity; `silent` logs nothing. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const levelRank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

function parseLevel(value: string | undefined): LogLevel {
  return value !== undefined && value in levelRank ? (value as LogLevel) : "warn";
}

/**
 * A logger that writes one line per record (`[movie] level message {json}`) at or above `level` (default `warn`, or
 * `MOVIE_LOG_LEVEL`), merging `bindings` into every record's context, to `write` (default: stderr).
 */
export class ConsoleLogger implements Logger {
  private readonly rank: number;
  constructor(
    level: LogLevel = parseLevel(process.env.MOVIE_LOG_LEVEL),
    private readonly bindings: object = {},
    private readonly writeLine: (line: string) => void = writeToStderr,
  ) {
    this.rank = levelRank[level];
  }
  /** Logs `message` with `context` fields at debug level. */
  debug(context: object, message: string): void {
    this.write("debug", context, message);
  }
  /** Logs `message` with `context` fields at info level. */
  info(context: object, message: string): void {
    this.write("info", context, message);
  }
  /** Logs `message` with `context` fields at warn level. */
  warn(context: object, message: string): void {
    this.write("warn", context, message);
  }
  /** Logs `message` with `context` fields at error level. */
  error(context: object, message: string): void {
    this.write("error", context, message);
  }
  private write(level: LogLevel, context: object, message: string): void {
    if (levelRank[level] < this.rank) return;
    let detail = "";
    try {
      detail = JSON.stringify({ ...this.bindings, ...context }, errorReplacer);
    } catch {
      detail = "{}";
    }
    this.writeLine(`[movie] ${level} ${message} ${detail}\n`);
  }
}

function writeToStderr(line: string): void {
  process.stderr.write(line);
}

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message };
  if (typeof value === "bigint") return value.toString();
  return value;
}

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};
