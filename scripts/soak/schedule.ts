// The seeded fault schedule: rounds in which every fault kind occurs once, in a seeded order, each with a seeded
// target, duration and quiet gap before it. Pure: the same seed and shape give the same plan.
import { Rng } from "./rng.ts";

/** Every fault the soak injects (docs/soak.md, "Faults"). */
export const faultKinds = [
  "kill",
  "pause-owner",
  "partition",
  "db-pause",
  "db-restart",
  "pg-terminate",
  "leave-rejoin",
  "rolling-restart",
] as const;
export type FaultKind = (typeof faultKinds)[number];

export interface PlannedFault {
  readonly kind: FaultKind;
  /** The node slot the fault targets (index into the harness's slots); -1 for database and whole-cluster faults. */
  readonly target: number;
  /** How long the fault holds (a pause, a partition, a database outage), in ms; 0 when it has no duration. */
  readonly durationMs: number;
  /** Quiet time before the fault starts, in ms. */
  readonly gapBeforeMs: number;
}

export interface ScheduleShape {
  /** Slots that host entities (kill, pause and leave targets). */
  readonly backends: readonly number[];
  /** Every slot (partition targets). */
  readonly slots: readonly number[];
  /** The lease duration: a paused owner stays paused longer than it. */
  readonly leaseDurationMs: number;
  /** Quiet time before each fault is drawn from [min, max) ms. */
  readonly gapMs: readonly [number, number];
}

/** Round `round` of the schedule of `seed`. */
export function planRound(seed: number, round: number, shape: ScheduleShape): PlannedFault[] {
  const rng = new Rng((seed * 7919 + round * 104_729) >>> 0);
  const lease = shape.leaseDurationMs;
  return rng.shuffle(faultKinds).map((kind): PlannedFault => {
    const gapBeforeMs = shape.gapMs[0] + rng.int(Math.max(1, shape.gapMs[1] - shape.gapMs[0]));
    switch (kind) {
      case "kill":
      case "leave-rejoin":
        return { kind, target: rng.pick(shape.backends), durationMs: 0, gapBeforeMs };
      case "pause-owner":
        return { kind, target: rng.pick(shape.backends), durationMs: 2 * lease + rng.int(lease), gapBeforeMs };
      case "partition":
        return { kind, target: rng.pick(shape.slots), durationMs: 5_000 + rng.int(4_000), gapBeforeMs };
      case "db-pause":
        return { kind, target: -1, durationMs: lease + 1_000 + rng.int(3_000), gapBeforeMs };
      case "db-restart":
        return { kind, target: -1, durationMs: 2_000 + rng.int(2_000), gapBeforeMs };
      default:
        return { kind, target: -1, durationMs: 0, gapBeforeMs };
    }
  });
}
