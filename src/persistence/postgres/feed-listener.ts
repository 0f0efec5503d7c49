/**
 * The PostgreSQL feed wake-up: one `LISTEN movie_event_feed` connection per store while anyone follows the feed. A
 * notification is only a hint (a reader still polls every `pollIntervalMs`), but a reader with a long poll depends on
 * it, so the connection must not stay lost:
 *
 * ```
 *            want                  LISTEN done (wake all: poll once)
 *   idle ───────────▶ connecting ─────────────────────────────▶ listening ──┐ heartbeat every heartbeatIntervalMs
 *    ▲                  ▲    │ lost (error, end, connect timeout)   │  ▲    │ (SELECT 1 within heartbeatTimeoutMs)
 *    │ unwant (any)     │    ▼                                      │  └────┘
 *    │                  └─ waiting ◀────────────────────────────────┘ lost (error, end, heartbeat failed)
 *    │           retry after backoff (minBackoffMs doubling to maxBackoffMs)
 * ```
 *
 * Every reconnect wakes every subscriber once it listens again: commits made while no connection listened sent
 * notifications nobody received. The heartbeat finds a half-open connection (a NAT or proxy that forgot it, a
 * failover behind a virtual address), which otherwise never errors and never delivers. The decisions are the pure
 * {@link feedListenerStep}; {@link FeedListener} performs its effects with `pg`.
 */

import type pg from "pg";
import type { Cancellable, Scheduler } from "../../actor/index.ts";
import { describe } from "../../actor/untrusted.ts";
import { PersistenceConfigurationError } from "../errors.ts";

/** Timing of the LISTEN connection; every field in milliseconds. */
export interface FeedListenerSettings {
  /** Longest wait for the connection and its LISTEN; default 5,000. */
  readonly connectTimeoutMs: number;
  /** Pause between heartbeats (`SELECT 1`) of a listening connection; default 10,000. */
  readonly heartbeatIntervalMs: number;
  /** A heartbeat not answered within this counts the connection lost; default 5,000. */
  readonly heartbeatTimeoutMs: number;
  /** First reconnect delay after a loss, doubled per consecutive failure; default 100. */
  readonly minBackoffMs: number;
  /** Longest reconnect delay; default 5,000. */
  readonly maxBackoffMs: number;
}

/** The defaults of {@link FeedListenerSettings}. */
export const defaultFeedListenerSettings: FeedListenerSettings = {
  connectTimeoutMs: 5_000,
  heartbeatIntervalMs: 10_000,
  heartbeatTimeoutMs: 5_000,
  minBackoffMs: 100,
  maxBackoffMs: 5_000,
};

/**
 * Fills in and validates listener settings (each a whole number of milliseconds, 1..600,000; min ≤ max backoff).
 * @throws PersistenceConfigurationError naming the field
 */
export function feedListenerSettings(partial: Partial<FeedListenerSettings> = {}): FeedListenerSettings {
  const settings = { ...defaultFeedListenerSettings, ...partial };
  for (const field of Object.keys(defaultFeedListenerSettings) as (keyof FeedListenerSettings)[]) {
    const value: unknown = settings[field];
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > 600_000) {
      throw new PersistenceConfigurationError(
        `feedListener.${field}`,
        `${describe(value)}; expected whole milliseconds 1..600000`,
      );
    }
  }
  if (settings.minBackoffMs > settings.maxBackoffMs) {
    throw new PersistenceConfigurationError(
      "feedListener.minBackoffMs",
      `${settings.minBackoffMs} is above maxBackoffMs ${settings.maxBackoffMs}`,
    );
  }
  return settings;
}

/** Where the listener is. `generation` names the current connection attempt; older ones' reports are ignored. */
export interface FeedListenerState {
  readonly phase: "idle" | "connecting" | "listening" | "waiting";
  readonly generation: number;
  /** Consecutive losses since the last successful LISTEN (sets the backoff). */
  readonly failures: number;
}

/** What happened to the listener. */
export type FeedListenerInput =
  | { readonly kind: "want" }
  | { readonly kind: "unwant" }
  | { readonly kind: "listening"; readonly generation: number }
  | { readonly kind: "lost"; readonly generation: number }
  | { readonly kind: "retry" }
  | { readonly kind: "heartbeat-due"; readonly generation: number }
  | { readonly kind: "heartbeat-ok"; readonly generation: number };

/** What the shell does. */
export type FeedListenerEffect =
  | { readonly kind: "open"; readonly generation: number; readonly timeoutMs: number }
  | { readonly kind: "close"; readonly generation: number }
  | { readonly kind: "wake" }
  | { readonly kind: "schedule-retry"; readonly afterMs: number }
  | { readonly kind: "schedule-heartbeat"; readonly generation: number; readonly afterMs: number }
  | { readonly kind: "heartbeat"; readonly generation: number; readonly timeoutMs: number };

/** The state before anyone subscribed. */
export const idleFeedListener: FeedListenerState = { phase: "idle", generation: 0, failures: 0 };

/** The reconnect delay after `failures` consecutive losses (≥ 1). */
export function reconnectDelayMs(settings: FeedListenerSettings, failures: number): number {
  return Math.min(settings.maxBackoffMs, settings.minBackoffMs * 2 ** Math.min(failures - 1, 30));
}

/** One decision of the listener (pure). */
export function feedListenerStep(
  state: FeedListenerState,
  input: FeedListenerInput,
  settings: FeedListenerSettings,
): [FeedListenerState, FeedListenerEffect[]] {
  const current = "generation" in input && input.generation === state.generation;
  switch (input.kind) {
    case "want":
      if (state.phase !== "idle") return [state, []];
      return connect(state, state.failures);
    case "unwant":
      if (state.phase === "idle") return [state, []];
      return [
        { phase: "idle", generation: state.generation, failures: 0 },
        state.phase === "waiting" ? [] : [{ kind: "close", generation: state.generation }],
      ];
    case "retry":
      return state.phase === "waiting" ? connect(state, state.failures) : [state, []];
    case "listening":
      if (!current || state.phase !== "connecting") return [state, []];
      return [
        { phase: "listening", generation: state.generation, failures: 0 },
        [
          // Commits made before this LISTEN (or while no connection listened) sent notifications nobody received.
          { kind: "wake" },
          { kind: "schedule-heartbeat", generation: state.generation, afterMs: settings.heartbeatIntervalMs },
        ],
      ];
    case "lost": {
      if (!current || (state.phase !== "connecting" && state.phase !== "listening")) return [state, []];
      const failures = state.failures + 1;
      return [
        { phase: "waiting", generation: state.generation, failures },
        [
          { kind: "close", generation: state.generation },
          { kind: "schedule-retry", afterMs: reconnectDelayMs(settings, failures) },
        ],
      ];
    }
    case "heartbeat-due":
      if (!current || state.phase !== "listening") return [state, []];
      return [state, [{ kind: "heartbeat", generation: state.generation, timeoutMs: settings.heartbeatTimeoutMs }]];
    case "heartbeat-ok":
      if (!current || state.phase !== "listening") return [state, []];
      return [
        state,
        [{ kind: "schedule-heartbeat", generation: state.generation, afterMs: settings.heartbeatIntervalMs }],
      ];
  }

  function connect(from: FeedListenerState, failures: number): [FeedListenerState, FeedListenerEffect[]] {
    const generation = from.generation + 1;
    return [
      { phase: "connecting", generation, failures },
      [{ kind: "open", generation, timeoutMs: settings.connectTimeoutMs }],
    ];
  }
}

/**
 * Ends a LISTEN client without waiting for the server: `end()` says goodbye, and the socket is destroyed as well, since
 * on a half-open connection the goodbye is never answered and the open socket would keep the process alive.
 */
function closeClient(client: pg.Client): void {
  client.end().catch(() => {});
  // `pg` exposes no destroy(); its connection's stream is the socket (pg 8).
  const stream = (client as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream;
  stream?.destroy?.();
}

/** Counters of a {@link FeedListener}. */
export interface FeedListenerStats {
  /** Connections that reached LISTEN. */
  listens: number;
  /** Connections lost (errors, ends, connect timeouts, failed heartbeats). */
  losses: number;
  /** Heartbeats that failed or timed out (also counted in losses). */
  heartbeatFailures: number;
}

/**
 * The shell: opens `pg` clients from `newClient`, LISTENs on `channel`, calls `onWake` for every notification whose
 * payload is `payload` and once after each successful LISTEN, and performs the core's timers on `scheduler`.
 */
export class FeedListener {
  private state: FeedListenerState = idleFeedListener;
  private client: pg.Client | null = null;
  private readonly timers = new Set<Cancellable>();
  readonly stats: FeedListenerStats = { listens: 0, losses: 0, heartbeatFailures: 0 };

  constructor(
    private readonly newClient: () => pg.Client,
    private readonly channel: string,
    private readonly payload: string,
    private readonly scheduler: Scheduler,
    private readonly settings: FeedListenerSettings,
    private readonly onWake: () => void,
  ) {}

  /** The phase of the connection (for tests and stats). */
  get phase(): FeedListenerState["phase"] {
    return this.state.phase;
  }

  /** Someone follows the feed: listen (a no-op while listening, connecting or waiting to retry). */
  want(): void {
    this.apply({ kind: "want" });
  }

  /** No one follows the feed any more: close the connection and cancel the timers. */
  unwant(): void {
    this.apply({ kind: "unwant" });
    for (const timer of this.timers) timer.cancel();
    this.timers.clear();
  }

  private apply(input: FeedListenerInput): void {
    const [next, effects] = feedListenerStep(this.state, input, this.settings);
    this.state = next;
    for (const effect of effects) this.perform(effect);
  }

  private later(afterMs: number, input: FeedListenerInput): void {
    const timer = this.scheduler.scheduleOnce(afterMs, () => {
      this.timers.delete(timer);
      this.apply(input);
    });
    this.timers.add(timer);
  }

  private perform(effect: FeedListenerEffect): void {
    switch (effect.kind) {
      case "open":
        this.open(effect.generation, effect.timeoutMs);
        return;
      case "close": {
        const client = this.client;
        this.client = null;
        if (client !== null) closeClient(client);
        return;
      }
      case "wake":
        this.onWake();
        return;
      case "schedule-retry":
        this.later(effect.afterMs, { kind: "retry" });
        return;
      case "schedule-heartbeat":
        this.later(effect.afterMs, { kind: "heartbeat-due", generation: effect.generation });
        return;
      case "heartbeat":
        this.heartbeat(effect.generation, effect.timeoutMs);
        return;
    }
  }

  private lost(generation: number): void {
    if (generation === this.state.generation && this.state.phase !== "idle" && this.state.phase !== "waiting") {
      this.stats.losses++;
    }
    this.apply({ kind: "lost", generation });
  }

  private open(generation: number, timeoutMs: number): void {
    const client = this.newClient();
    this.client = client;
    const lost = () => this.lost(generation);
    client.on("error", lost);
    client.on("end", lost);
    client.on("notification", (message) => {
      if (message.channel === this.channel && message.payload === this.payload && this.client === client) {
        this.onWake();
      }
    });
    const deadline = this.scheduler.scheduleOnce(timeoutMs, lost);
    client
      .connect()
      .then(() => client.query(`LISTEN ${this.channel}`))
      .then(
        () => {
          deadline.cancel();
          if (this.client !== client) return;
          this.stats.listens++;
          this.apply({ kind: "listening", generation });
        },
        () => {
          deadline.cancel();
          lost();
        },
      );
  }

  private heartbeat(generation: number, timeoutMs: number): void {
    const client = this.client;
    if (client === null) return;
    let settled = false;
    const failed = () => {
      if (settled) return;
      settled = true;
      this.stats.heartbeatFailures++;
      this.lost(generation);
    };
    const deadline = this.scheduler.scheduleOnce(timeoutMs, failed);
    client.query("SELECT 1").then(
      () => {
        if (settled) return;
        settled = true;
        deadline.cancel();
        this.apply({ kind: "heartbeat-ok", generation });
      },
      () => {
        deadline.cancel();
        failed();
      },
    );
  }
}
