import type { UniqueAddress } from "../../actor/index.ts";
import { handoffBufferCountMax, handoffSettlingRoundsMax, reconcileIntervalMs } from "../constants.ts";
import { ClusterShardingConfigurationError, NoShardOwnerError } from "../errors.ts";

/**
 * The coordinator's handoff of one shard (docs/protocol.md §9), as a pure state machine over deliveries of type `D`:
 *
 *   passivating ──passivated──▶ preparing ──prepared──▶ completing ──completed──▶ done (buffer flushed FIFO)
 *        │                          │                        │
 *        └──────── failed ──────────┴───────── failed ───────┴──▶ waiting (retry after 100 ms) ──attempt──▶ …
 *   any phase ──abort (coordinator changed / next owner not Up)──▶ aborted (buffer rejected: NoShardOwnerError)
 *   waiting / completing ──settling (gossip re-converging, still our term)──▶ same phase, checked again in 100 ms
 *   waiting / completing ──settling for the 21st round in a row (2 s)──▶ aborted
 *
 * While it runs, new traffic for the shard is buffered here (at most 1,024 deliveries; more are rejected), so no
 * message reaches two owners and per-entity order survives the move.
 */
export type HandoffPhase = "passivating" | "preparing" | "completing" | "waiting" | "done" | "aborted";

/** One running handoff. */
export interface HandoffState<D> {
  readonly entityType: string;
  readonly shardId: number;
  readonly previous: UniqueAddress | null;
  readonly next: UniqueAddress | null;
  readonly phase: HandoffPhase;
  /** Accepted deliveries waiting for the new owner, oldest first. */
  readonly buffer: readonly D[];
  /** Attempts started (1 after the first). */
  readonly attempts: number;
  /** Consecutive settling rounds so far (reset when an attempt finds this node the coordinator again). */
  readonly settlingRounds: number;
}

/** What the shell learns before each attempt. */
export interface AttemptCheck {
  /** This node is still the coordinator (and author of the plan). */
  readonly stillCoordinator: boolean;
  /**
   * Not the elected coordinator only because gossip has not re-converged yet (no member unreachable, this node is
   * still the lowest Up member and author of the plan), as happens while a leave spreads. The handoff then waits
   * instead of aborting, so accepted deliveries are not rejected over a brief flicker; an unreachable member or a
   * different coordinator still aborts.
   */
  readonly settling?: boolean;
  /** The next owner is null or an Up member. */
  readonly nextOwnerUp: boolean;
  /** The previous owner is a member that is not Down or Removed (else passivation is skipped). */
  readonly previousReachable: boolean;
}

/** Inputs of {@link handoffStep}. */
export type HandoffInput<D> =
  | ({ readonly kind: "attempt" } & AttemptCheck)
  | { readonly kind: "buffer"; readonly delivery: D }
  | { readonly kind: "passivated" }
  | { readonly kind: "prepared" }
  | { readonly kind: "completed" }
  /** The shell could not complete now only because gossip is re-converging (see {@link AttemptCheck.settling}). */
  | { readonly kind: "settling" }
  /** The settling wait of a completing handoff is over: try to complete again. */
  | { readonly kind: "retryComplete" }
  | { readonly kind: "failed"; readonly error: Error }
  | { readonly kind: "abort" };

/** Effects of {@link handoffStep}. */
export type HandoffEffect<D> =
  | { readonly kind: "passivate"; readonly owner: UniqueAddress; readonly next: UniqueAddress | null }
  | { readonly kind: "prepare"; readonly owner: UniqueAddress }
  | { readonly kind: "complete"; readonly next: UniqueAddress | null }
  | { readonly kind: "dispatch"; readonly delivery: D; readonly owner: UniqueAddress }
  | { readonly kind: "reject"; readonly delivery: D; readonly error: Error }
  | { readonly kind: "scheduleAttempt"; readonly afterMs: number }
  | { readonly kind: "scheduleRetryComplete"; readonly afterMs: number }
  | { readonly kind: "scheduleReconcile"; readonly afterMs: number }
  | { readonly kind: "failedAttempt"; readonly error: Error }
  | { readonly kind: "finished"; readonly outcome: "done" | "aborted" };

/** A handoff that has not started its first attempt (the shell sends it `attempt` at once). */
export function newHandoff<D>(
  entityType: string,
  shardId: number,
  previous: UniqueAddress | null,
  next: UniqueAddress | null,
): HandoffState<D> {
  return { entityType, shardId, previous, next, phase: "waiting", buffer: [], attempts: 0, settlingRounds: 0 };
}

/** True while the handoff still holds its shard (it buffers traffic and blocks another handoff of the shard). */
export function isActive(state: HandoffState<unknown>): boolean {
  return state.phase !== "done" && state.phase !== "aborted";
}

/** Advances a handoff by one input. Inputs that do not fit the phase are ignored (stale replies of an old attempt). */
export function handoffStep<D>(state: HandoffState<D>, input: HandoffInput<D>): [HandoffState<D>, HandoffEffect<D>[]] {
  if (!isActive(state)) {
    if (input.kind === "buffer") {
      return [state, [{ kind: "reject", delivery: input.delivery, error: noOwner(state) }]];
    }
    return [state, []];
  }
  switch (input.kind) {
    case "buffer": {
      if (state.buffer.length >= handoffBufferCountMax) {
        const error = new ClusterShardingConfigurationError(
          `Shard handoff buffer is full for ${state.entityType}/${state.shardId}; slow down or retry after the handoff`,
        );
        return [state, [{ kind: "reject", delivery: input.delivery, error }]];
      }
      return [{ ...state, buffer: [...state.buffer, input.delivery] }, []];
    }
    case "attempt": {
      if (state.phase !== "waiting") return [state, []];
      if (!input.stillCoordinator && input.settling === true && input.nextOwnerUp) {
        return settle(state, { kind: "scheduleAttempt", afterMs: reconcileIntervalMs });
      }
      if (!input.stillCoordinator || !input.nextOwnerUp) return abort(state);
      const attempts = state.attempts + 1;
      if (state.previous !== null && input.previousReachable) {
        return [
          { ...state, phase: "passivating", attempts, settlingRounds: 0 },
          [{ kind: "passivate", owner: state.previous, next: state.next }],
        ];
      }
      return prepareOrComplete({ ...state, attempts, settlingRounds: 0 });
    }
    case "passivated":
      if (state.phase !== "passivating") return [state, []];
      return prepareOrComplete(state);
    case "prepared":
      if (state.phase !== "preparing") return [state, []];
      return [{ ...state, phase: "completing" }, [{ kind: "complete", next: state.next }]];
    case "settling":
      if (state.phase !== "completing") return [state, []];
      return settle(state, { kind: "scheduleRetryComplete", afterMs: reconcileIntervalMs });
    case "retryComplete":
      if (state.phase !== "completing") return [state, []];
      return [state, [{ kind: "complete", next: state.next }]];
    case "completed": {
      if (state.phase !== "completing") return [state, []];
      const effects: HandoffEffect<D>[] = state.buffer.map((delivery) =>
        state.next === null
          ? { kind: "reject", delivery, error: noOwner(state) }
          : { kind: "dispatch", delivery, owner: state.next },
      );
      effects.push({ kind: "finished", outcome: "done" }, { kind: "scheduleReconcile", afterMs: reconcileIntervalMs });
      return [{ ...state, phase: "done", buffer: [] }, effects];
    }
    case "failed":
      if (state.phase === "waiting") return [state, []];
      return [
        { ...state, phase: "waiting" },
        [
          { kind: "failedAttempt", error: input.error },
          { kind: "scheduleAttempt", afterMs: reconcileIntervalMs },
        ],
      ];
    case "abort":
      return abort(state);
  }
}

function prepareOrComplete<D>(state: HandoffState<D>): [HandoffState<D>, HandoffEffect<D>[]] {
  if (state.next !== null) return [{ ...state, phase: "preparing" }, [{ kind: "prepare", owner: state.next }]];
  return [{ ...state, phase: "completing" }, [{ kind: "complete", next: null }]];
}

/**
 * One more round of waiting for convergence, or an abort once {@link handoffSettlingRoundsMax} rounds passed in a row:
 * convergence that never returns (a member that stays Leaving without gossip settling) must not hold accepted
 * deliveries forever, and the callers' asks are better failed with NoShardOwnerError than left to time out.
 */
function settle<D>(state: HandoffState<D>, wait: HandoffEffect<D>): [HandoffState<D>, HandoffEffect<D>[]] {
  if (state.settlingRounds >= handoffSettlingRoundsMax) return abort(state);
  return [{ ...state, settlingRounds: state.settlingRounds + 1 }, [wait]];
}

function abort<D>(state: HandoffState<D>): [HandoffState<D>, HandoffEffect<D>[]] {
  const effects: HandoffEffect<D>[] = state.buffer.map((delivery) => ({
    kind: "reject",
    delivery,
    error: noOwner(state),
  }));
  effects.push({ kind: "finished", outcome: "aborted" }, { kind: "scheduleReconcile", afterMs: reconcileIntervalMs });
  return [{ ...state, phase: "aborted", buffer: [] }, effects];
}

function noOwner(state: HandoffState<unknown>): NoShardOwnerError {
  return new NoShardOwnerError(state.entityType, state.shardId);
}
