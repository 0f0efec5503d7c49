import { compareStrings } from "../actor/index.ts";
import { checkSettingKeys, type SettingsShape, type SettingsShapeOf } from "../actor/settings-keys.ts";
import { describe } from "../actor/untrusted.ts";
import { ClusterSingletonConfigurationError } from "./errors.ts";

/** Options of `ClusterSingleton.init`; durations in milliseconds. */
export interface ClusterSingletonOptions {
  /** Only members with all of these roles may own the singleton; default none (any member). */
  readonly roles?: readonly string[];
  /** How often each node checks whether the singleton needs (re)activating, in ms; default 250. */
  readonly activationInterval?: number;
  /** How long one eager activation may take, in ms; default 2,000. */
  readonly activationTimeout?: number;
}

/** Every key of {@link ClusterSingletonOptions}. */
const singletonOptionsShape = {
  roles: true,
  activationInterval: true,
  activationTimeout: true,
} as const satisfies SettingsShapeOf<ClusterSingletonOptions>;

/** Validated singleton settings: roles de-duplicated and sorted, durations in ms. */
export interface ClusterSingletonSettings {
  readonly roles: readonly string[];
  readonly activationIntervalMs: number;
  readonly activationTimeoutMs: number;
}

/** Defaults of {@link ClusterSingletonOptions} (docs/protocol.md §12). */
export const singletonDefaults = { activationIntervalMs: 250, activationTimeoutMs: 2_000 } as const;

/** Delay before a node's first activation attempt, in ms (later attempts follow every activation interval). */
export const firstActivationDelayMs = 1;

/**
 * Validates `options` for singleton `name` and fills in the defaults.
 * @throws ClusterSingletonConfigurationError when a role is empty or not a string, or a duration is not a positive
 *   finite number
 */
export function resolveSingletonSettings(
  name: string,
  options: ClusterSingletonOptions = {},
  shape: SettingsShape = singletonOptionsShape,
): ClusterSingletonSettings {
  checkSettingKeys(`singleton ${JSON.stringify(name)}`, options, shape);
  const roles = options.roles ?? [];
  if (!Array.isArray(roles)) {
    throw new ClusterSingletonConfigurationError(name, "roles", "roles must be an array of role names");
  }
  for (const role of roles) {
    if (typeof role !== "string" || role.trim().length === 0) {
      throw new ClusterSingletonConfigurationError(
        name,
        "roles",
        `role names must not be empty (got ${JSON.stringify(role)})`,
      );
    }
  }
  return {
    roles: [...new Set(roles)].sort(compareStrings),
    activationIntervalMs: positiveMs(
      name,
      "activationInterval",
      options.activationInterval,
      singletonDefaults.activationIntervalMs,
    ),
    activationTimeoutMs: positiveMs(
      name,
      "activationTimeout",
      options.activationTimeout,
      singletonDefaults.activationTimeoutMs,
    ),
  };
}

/** Options of the persistent singleton initializers, on top of {@link ClusterSingletonOptions}. */
export interface PersistentSingletonOptions extends ClusterSingletonOptions {
  /** The persistent entity's id (its persistence id is `<EntityType>:<entityId>`); required, not empty. */
  readonly entityId: string;
  /** Shard lease duration in ms; default 10,000. */
  readonly leaseDuration?: number;
  /** Shard lease renewal interval in ms, below `leaseDuration`; default 3,000. */
  readonly leaseRenewInterval?: number;
}

/** Every key of {@link PersistentSingletonOptions}. */
const persistentSingletonOptionsShape = {
  ...singletonOptionsShape,
  entityId: true,
  leaseDuration: true,
  leaseRenewInterval: true,
} as const satisfies SettingsShapeOf<PersistentSingletonOptions>;

/** Validated persistent singleton settings. */
export interface PersistentSingletonSettings extends ClusterSingletonSettings {
  readonly entityId: string;
  readonly leaseDurationMs: number;
  readonly leaseRenewIntervalMs: number;
}

/**
 * Validates persistent singleton options and fills in the defaults (lease 10 s, renewal 3 s).
 * @throws ClusterSingletonConfigurationError when the entity id is empty, a duration is not positive, or the renewal
 *   interval is not below the lease duration
 */
export function resolvePersistentSingletonSettings(
  name: string,
  options: PersistentSingletonOptions,
): PersistentSingletonSettings {
  const base = resolveSingletonSettings(name, options, persistentSingletonOptionsShape);
  if (typeof options.entityId !== "string" || options.entityId.length === 0) {
    throw new ClusterSingletonConfigurationError(name, "entityId", "a persistent singleton needs a non-empty entityId");
  }
  const leaseDurationMs = positiveMs(name, "leaseDuration", options.leaseDuration, 10_000);
  const leaseRenewIntervalMs = positiveMs(name, "leaseRenewInterval", options.leaseRenewInterval, 3_000);
  if (leaseRenewIntervalMs >= leaseDurationMs) {
    throw new ClusterSingletonConfigurationError(
      name,
      "leaseRenewInterval",
      `leaseRenewInterval (${leaseRenewIntervalMs} ms) must be shorter than leaseDuration (${leaseDurationMs} ms)`,
    );
  }
  return { ...base, entityId: options.entityId, leaseDurationMs, leaseRenewIntervalMs };
}

/** The deterministic text of the singleton settings (not the lease), identical on every node with the same settings. */
export function singletonSettingsKey(settings: ClusterSingletonSettings): string {
  // No "|": the sharding settings key that embeds this joins its parts with it.
  return `roles=${JSON.stringify(settings.roles)};activationInterval=${settings.activationIntervalMs};activationTimeout=${settings.activationTimeoutMs}`;
}

function positiveMs(name: string, field: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new ClusterSingletonConfigurationError(
      name,
      field,
      `${field} must be a positive number of milliseconds (got ${describe(value)})`,
    );
  }
  return value;
}
