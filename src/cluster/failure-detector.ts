/**
 * The heartbeat failure detector (docs/protocol.md §4.8): a peer is unreachable when more than `heartbeatTimeoutMs` has
 * passed on the monotonic clock since its last heartbeat ack; the first observation of a peer starts its timer, and
 * an ack makes it reachable again. It only records observations: it never changes a member's status.
 */

/** What this node has observed of one peer. */
export interface PeerObservation {
  /** Monotonic time of the last ack, or of the first observation before any ack. */
  readonly lastAckMs: number;
  readonly unreachable: boolean;
}

/** Observations by peer key (unique address string). */
export type DetectorState = ReadonlyMap<string, PeerObservation>;

/** An empty detector. */
export const emptyDetector: DetectorState = new Map();

/** Starts watching peers in `monitored` that are new (their timer starts now) and forgets peers no longer in it. */
export function observePeers(state: DetectorState, monitored: ReadonlySet<string>, nowMs: number): DetectorState {
  let changed = false;
  const next = new Map<string, PeerObservation>();
  for (const [key, obs] of state) {
    if (monitored.has(key)) next.set(key, obs);
    else changed = true;
  }
  for (const key of monitored) {
    if (!next.has(key)) {
      next.set(key, { lastAckMs: nowMs, unreachable: false });
      changed = true;
    }
  }
  return changed ? next : state;
}

/** Records a heartbeat ack from a watched peer: it is reachable again and its timer restarts. */
export function recordAck(state: DetectorState, key: string, nowMs: number): DetectorState {
  if (!state.has(key)) return state;
  const next = new Map(state);
  next.set(key, { lastAckMs: nowMs, unreachable: false });
  return next;
}

/** Marks every watched peer unreachable whose last ack is more than `timeoutMs` old. */
export function checkTimeouts(state: DetectorState, nowMs: number, timeoutMs: number): DetectorState {
  let next: Map<string, PeerObservation> | null = null;
  for (const [key, obs] of state) {
    if (!obs.unreachable && nowMs - obs.lastAckMs > timeoutMs) {
      next ??= new Map(state);
      next.set(key, { ...obs, unreachable: true });
    }
  }
  return next ?? state;
}

/** {@link unreachableKeys} per detector state: a state is never changed in place, every change makes a new map. */
const unreachableOfState = new WeakMap<DetectorState, ReadonlySet<string>>();

/**
 * The keys of peers currently seen as unreachable. Computed once per detector state (the leader, convergence and the
 * snapshot each ask for it on every membership step, and most steps do not change the detector).
 */
export function unreachableKeys(state: DetectorState): ReadonlySet<string> {
  let keys = unreachableOfState.get(state);
  if (keys === undefined) {
    const found = new Set<string>();
    for (const [key, obs] of state) if (obs.unreachable) found.add(key);
    keys = found;
    unreachableOfState.set(state, keys);
  }
  return keys;
}
