import assert from "node:assert/strict";
import { test } from "node:test";
import { ManualScheduler } from "../../src/actor/index.ts";
import { ReadGate } from "../../src/remote/read-gate.ts";
import { emptyStats } from "../../src/remote/stats.ts";

/** A connection stand-in that records what the gate did to it. */
function fakeConnection() {
  const log: string[] = [];
  return { log, pauseReading: () => log.push("pause"), resumeReading: () => log.push("resume") };
}

test("read gate: pauses a connection above the bound once, polls while paused, resumes everyone at half the bound", () => {
  const scheduler = new ManualScheduler();
  const stats = emptyStats();
  let backlog = 0;
  const gate = new ReadGate(() => backlog, 100, scheduler, stats);
  const a = fakeConnection();
  const b = fakeConnection();
  backlog = 100;
  gate.afterChunk(a);
  assert.deepEqual(a.log, [], "at the bound, not above it");
  backlog = 101;
  gate.afterChunk(a);
  gate.afterChunk(a);
  gate.afterChunk(b);
  assert.deepEqual(a.log, ["pause"]);
  assert.deepEqual(b.log, ["pause"]);
  assert.equal(stats.readPauses, 2);
  backlog = 51;
  scheduler.advance(50);
  assert.deepEqual(a.log, ["pause"], "above half: still paused");
  backlog = 50;
  scheduler.advance(10);
  assert.deepEqual(a.log, ["pause", "resume"]);
  assert.deepEqual(b.log, ["pause", "resume"]);
  // Nothing is polled while nothing is paused; a closed connection is forgotten.
  scheduler.advance(1000);
  backlog = 500;
  gate.afterChunk(a);
  gate.forget(a);
  backlog = 0;
  scheduler.advance(10);
  assert.deepEqual(a.log, ["pause", "resume", "pause"]);
  gate.afterChunk(b);
  assert.deepEqual(b.log, ["pause", "resume"]);
});
