import { idleSweepHalvingFloorMs } from "./constants.ts";
import type { EntityTypeState } from "./entity-type-state.ts";
import { asError } from "./errors.ts";
import type { ShardingContext } from "./sharding-context.ts";

/**
 * Passivates the type's entities idle for `idleTimeoutMs` (the `idleTimeout` setting), sweeping every half of it
 * (every `idleTimeoutMs` below the halving floor); the timer is kept in `state.idleTimer` so stop can cancel it.
 */
export function scheduleIdleSweep(ctx: ShardingContext, state: EntityTypeState, idleTimeoutMs: number): void {
  const every = idleTimeoutMs < idleSweepHalvingFloorMs ? idleTimeoutMs : idleTimeoutMs / 2;
  state.idleTimer = ctx.system.scheduler.scheduleOnce(every, () => {
    if (ctx.stopped) return;
    try {
      ctx.counters.idlePassivations += state.provider.passivateIdle(ctx.system.scheduler.now(), idleTimeoutMs);
    } catch (error) {
      ctx.system.log.warn({ error: asError(error).message, type: state.provider.name }, "idle sweep failed; stopped");
      return;
    }
    scheduleIdleSweep(ctx, state, idleTimeoutMs);
  });
}
