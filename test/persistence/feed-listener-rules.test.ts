// The PostgreSQL feed listener's decisions (src/persistence/postgres/feed-listener.ts), on the pure core: reconnect
// with backoff after every loss, wake every reader after each LISTEN, heartbeat only the current connection, ignore
// reports of connections it already gave up.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type FeedListenerEffect,
  type FeedListenerInput,
  type FeedListenerState,
  feedListenerSettings,
  feedListenerStep,
  idleFeedListener,
  reconnectDelayMs,
} from "../../src/persistence/postgres/feed-listener.ts";

const settings = feedListenerSettings({ minBackoffMs: 100, maxBackoffMs: 1_000, heartbeatIntervalMs: 50 });

function run(inputs: FeedListenerInput[], from: FeedListenerState = idleFeedListener) {
  let state = from;
  const effects: FeedListenerEffect[] = [];
  for (const input of inputs) {
    const [next, out] = feedListenerStep(state, input, settings);
    state = next;
    effects.push(...out);
  }
  return { state, effects };
}

test("want opens; LISTEN done wakes every reader and schedules the heartbeat", () => {
  const { state, effects } = run([{ kind: "want" }, { kind: "want" }, { kind: "listening", generation: 1 }]);
  assert.deepEqual(state, { phase: "listening", generation: 1, failures: 0 });
  assert.deepEqual(effects, [
    { kind: "open", generation: 1, timeoutMs: 5_000 },
    { kind: "wake" },
    { kind: "schedule-heartbeat", generation: 1, afterMs: 50 },
  ]);
});

test("each consecutive loss doubles the reconnect delay up to maxBackoffMs; a LISTEN resets it", () => {
  const inputs: FeedListenerInput[] = [{ kind: "want" }];
  for (let generation = 1; generation <= 6; generation++) inputs.push({ kind: "lost", generation }, { kind: "retry" });
  const { state, effects } = run(inputs);
  const delays = effects.flatMap((e) => (e.kind === "schedule-retry" ? [e.afterMs] : []));
  assert.deepEqual(delays, [100, 200, 400, 800, 1_000, 1_000]);
  assert.deepEqual(state, { phase: "connecting", generation: 7, failures: 6 });
  const after = run(
    [
      { kind: "listening", generation: 7 },
      { kind: "lost", generation: 7 },
    ],
    state,
  );
  assert.deepEqual(after.effects.at(-1), { kind: "schedule-retry", afterMs: 100 });
  assert.equal(reconnectDelayMs(settings, 1_000), 1_000, "no overflow for a long outage");
});

test("a heartbeat runs on the current connection only; its answer schedules the next one", () => {
  const listening = run([{ kind: "want" }, { kind: "listening", generation: 1 }]).state;
  const { effects } = run(
    [
      { kind: "heartbeat-due", generation: 1 },
      { kind: "heartbeat-ok", generation: 1 },
    ],
    listening,
  );
  assert.deepEqual(effects, [
    { kind: "heartbeat", generation: 1, timeoutMs: 5_000 },
    { kind: "schedule-heartbeat", generation: 1, afterMs: 50 },
  ]);
  // A failed heartbeat is a loss like any other: close, then retry.
  const lost = run([{ kind: "lost", generation: 1 }], listening);
  assert.deepEqual(lost.effects, [
    { kind: "close", generation: 1 },
    { kind: "schedule-retry", afterMs: 100 },
  ]);
});

test("reports about an abandoned connection change nothing", () => {
  const reconnecting = run([
    { kind: "want" },
    { kind: "listening", generation: 1 },
    { kind: "lost", generation: 1 },
    { kind: "retry" },
  ]).state;
  assert.deepEqual(reconnecting, { phase: "connecting", generation: 2, failures: 1 });
  for (const stale of [
    { kind: "lost", generation: 1 },
    { kind: "listening", generation: 1 },
    { kind: "heartbeat-due", generation: 1 },
    { kind: "heartbeat-ok", generation: 1 },
    { kind: "retry" },
  ] as FeedListenerInput[]) {
    assert.deepEqual(run([stale], reconnecting), { state: reconnecting, effects: [] }, stale.kind);
  }
});

test("unwant closes an open connection, cancels a pending retry, and the next want starts afresh", () => {
  const open = run([{ kind: "want" }, { kind: "listening", generation: 1 }]).state;
  assert.deepEqual(run([{ kind: "unwant" }], open).effects, [{ kind: "close", generation: 1 }]);
  const waiting = run([{ kind: "lost", generation: 1 }], open).state;
  const idle = run([{ kind: "unwant" }, { kind: "retry" }], waiting);
  assert.deepEqual(idle, { state: { phase: "idle", generation: 1, failures: 0 }, effects: [] });
  assert.deepEqual(run([{ kind: "want" }], idle.state).effects, [{ kind: "open", generation: 2, timeoutMs: 5_000 }]);
});
