// The soak checker (scripts/soak/checker) on hand-made histories: a clean run passes, and each planted violation is
// caught by the check that names it.
import assert from "node:assert/strict";
import { test } from "node:test";
import { judge } from "../../scripts/soak/checker/judge.ts";
import { realTimeInversions } from "../../scripts/soak/checker/prefix-order.ts";
import type { DeliveryLine, EventRow, HistoryLine, RunData } from "../../scripts/soak/checker/types.ts";

const h = (
  process: string,
  type: HistoryLine["type"],
  f: string,
  key: string,
  value: unknown,
  time: number,
): HistoryLine => ({
  process,
  type,
  f,
  key,
  value,
  time,
});
const row = (
  key: string,
  seq: number,
  value: string,
  epoch: number | null,
  writeOrder: number,
  shard = 3,
): EventRow => ({
  key,
  seq,
  value,
  shard,
  epoch,
  writeOrder,
});
const delivery = (n: number, time: number, from = "p1"): DeliveryLine => ({
  entity: "m0",
  from,
  n,
  kind: "tell",
  node: "n1.0",
  time,
});

/** p1 appends a then b to l0; p2 reads both, increments c0 and reads it; p1 tells 1 and asks 2 of m0. */
function clean(): RunData {
  return {
    history: [
      h("p1", "invoke", "append", "l0", "a", 0),
      h("p1", "ok", "append", "l0", "a", 10),
      h("p1", "invoke", "append", "l0", "b", 20),
      { ...h("p1", "ok", "append", "l0", "b", 30), attempts: 3 },
      h("p2", "invoke", "read", "l0", null, 35),
      h("p2", "ok", "read", "l0", ["a", "b"], 40),
      h("p2", "invoke", "incr", "c0", "op1", 50),
      h("p2", "ok", "incr", "c0", "op1", 60),
      h("p2", "invoke", "read-counter", "c0", null, 61),
      h("p2", "ok", "read-counter", "c0", 1, 62),
      h("p1", "invoke", "tell", "m0", 1, 70),
      h("p1", "ok", "tell", "m0", 1, 70),
      h("p1", "invoke", "ask", "m0", 2, 71),
      h("p1", "ok", "ask", "m0", 2, 75),
    ],
    deliveries: [delivery(1, 71), { ...delivery(2, 72), kind: "ask" }],
    faults: [{ kind: "kill", target: "n1", start: 5, end: 25, recovered: 45 }],
    events: [row("l0", 1, "a", 1, 1), row("l0", 2, "b", 1, 2)],
    counters: [{ key: "c0", count: 1, ops: ["op1"] }],
    entityLists: { l0: ["a", "b"] },
    entityCounters: { c0: { count: 1, ops: ["op1"] } },
    // The read model holds both list events once; slice 0 of 1's checkpoint rose to the latest offset; each append's
    // outbox message took effect once at tally l0.
    projection: {
      name: "soak-lists",
      slices: 1,
      readModel: [
        { key: "l0", seq: 1, value: "a", times: 1 },
        { key: "l0", seq: 2, value: "b", times: 1 },
      ],
      checkpoints: [{ name: "soak-lists/slice-0-of-1", offset: 7 }],
      latestOffset: 7,
      samples: [
        { time: 10, name: "soak-lists/slice-0-of-1", offset: 0 },
        { time: 20, name: "soak-lists/slice-0-of-1", offset: 5 },
        { time: 30, name: "soak-lists/slice-0-of-1", offset: 7 },
      ],
    },
    outbox: {
      pending: 0,
      parked: 0,
      delivered: 2,
      tallies: [
        { key: "l0", value: "b" },
        { key: "l0", value: "a" },
      ],
    },
  };
}

const checksOf = (data: RunData) => new Set(judge(data).violations.map((v) => v.check));

function planted(name: string, expected: string, change: (d: RunData) => RunData): void {
  test(`soak checker catches ${name}`, () => {
    const found = checksOf(change(clean()));
    assert.ok(found.has(expected), `expected a ${expected} violation, got ${[...found].join(", ") || "none"}`);
  });
}

test("soak checker: a clean hand-made history has no violation, and its counts add up", () => {
  const j = judge(clean());
  assert.deepEqual(j.violations, []);
  assert.equal(j.lists.counts.appendsOk, 2);
  assert.equal(j.lists.counts.appendsOkAfterRetry, 1, "b was acknowledged on its third attempt");
  assert.equal(j.lists.counts.reads, 1);
  assert.equal(j.counters.counts.incrementsOk, 1);
  assert.equal(j.mailboxes.counts.delivered, 2);
  assert.equal(j.mailboxes.counts.asksAnswered, 1);
  assert.deepEqual(j.operations.append, { ok: 2, fail: 0, info: 0 });
  assert.equal(j.projection.counts.applied, 2);
  assert.equal(j.projection.counts.samples, 3);
  assert.equal(j.outbox.counts.tookEffect, 2);
  // The only acknowledged writes are at 10, 30 and 60 ms: the longest gap overlapping the kill's 5..45 ms is 30..60.
  assert.equal(j.availability.byKind.kill?.longestOutageMs, 30);
});

test("soak checker: ambiguous writes are resolved from the final state and counted, not flagged", () => {
  const d = clean();
  const j = judge({
    ...d,
    history: [
      ...d.history,
      h("p3", "invoke", "append", "l0", "c", 80),
      h("p3", "info", "append", "l0", "c", 90),
      h("p3", "invoke", "append", "l0", "d", 91), // never completed: its node was killed
      h("p4", "invoke", "incr", "c0", "op2", 92),
      h("p4", "info", "incr", "c0", "op2", 99),
    ],
    events: [...d.events, row("l0", 3, "c", 1, 3)],
    entityLists: { l0: ["a", "b", "c"] },
    // The committed one is projected and its outbox message takes effect like any other.
    projection: {
      ...d.projection!,
      readModel: [...d.projection!.readModel, { key: "l0", seq: 3, value: "c", times: 1 }],
    },
    outbox: { ...d.outbox!, tallies: [...d.outbox!.tallies, { key: "l0", value: "c" }] },
  });
  assert.deepEqual(j.violations, []);
  assert.equal(j.lists.counts.infoCommitted, 1);
  assert.equal(j.lists.counts.infoNotCommitted, 1);
  assert.equal(j.counters.counts.infoNotCommitted, 1);
});

const withProjection = (d: RunData, change: (p: NonNullable<RunData["projection"]>) => object): RunData => ({
  ...d,
  projection: { ...d.projection!, ...change(d.projection!) },
});
const withOutbox = (d: RunData, change: (o: NonNullable<RunData["outbox"]>) => object): RunData => ({
  ...d,
  outbox: { ...d.outbox!, ...change(d.outbox!) },
});
planted("a list event applied twice to the read model", "projection-applied-twice", (d) =>
  withProjection(d, (p) => ({ readModel: p.readModel.map((r) => (r.seq === 2 ? { ...r, times: 2 } : r)) })),
);
planted("a list event missing from the read model", "projection-missing", (d) =>
  withProjection(d, (p) => ({ readModel: p.readModel.slice(0, 1) })),
);
planted("a read model row of no committed event", "projection-extra", (d) =>
  withProjection(d, (p) => ({ readModel: [...p.readModel, { key: "l0", seq: 3, value: "zzz", times: 1 }] })),
);
planted("a checkpoint that went back", "projection-checkpoint-back", (d) =>
  withProjection(d, (p) => ({ samples: [...p.samples, { time: 25, name: "soak-lists/slice-0-of-1", offset: 3 }] })),
);
planted("a slice behind the feed at the end", "projection-behind", (d) =>
  withProjection(d, () => ({ latestOffset: 9 })),
);
planted("an outbox message that took effect twice", "outbox-duplicate", (d) =>
  withOutbox(d, (o) => ({ tallies: [...o.tallies, { key: "l0", value: "a" }] })),
);
planted("an outbox message that never took effect", "outbox-missing", (d) =>
  withOutbox(d, (o) => ({ tallies: o.tallies.slice(0, 1) })),
);
planted("an effect no committed append sent", "outbox-extra", (d) =>
  withOutbox(d, (o) => ({ tallies: [...o.tallies, { key: "l1", value: "a" }] })),
);
planted("outbox rows left parked", "outbox-undelivered", (d) => withOutbox(d, () => ({ parked: 1 })));

planted("a lost acknowledged append", "lost", (d) => ({ ...d, events: d.events.slice(0, 1), entityLists: null }));
planted("a duplicated list value", "duplicate", (d) => ({ ...d, events: [...d.events, row("l0", 3, "b", 1, 3)] }));
planted("a value never invoked", "never-invoked", (d) => ({ ...d, events: [...d.events, row("l0", 3, "zzz", 1, 3)] }));
planted("a failed append that happened", "fail-happened", (d) => ({
  ...d,
  history: [...d.history, h("p1", "invoke", "append", "l0", "c", 80), h("p1", "fail", "append", "l0", "c", 90)],
  events: [...d.events, row("l0", 3, "c", 1, 3)],
}));
planted("a client's appends out of acknowledgement order", "client-order", (d) => ({
  ...d,
  events: [row("l0", 1, "b", 1, 1), row("l0", 2, "a", 1, 2)],
}));
planted("a stale read (misses an append acknowledged before it began)", "linearizability", (d) => ({
  ...d,
  history: d.history.map((l) => (l.f === "read" && l.type === "ok" ? { ...l, value: ["a"] } : l)),
}));
planted("a read from the future (sees an append invoked after it finished)", "linearizability", (d) => ({
  ...d,
  history: [h("p9", "invoke", "read", "l0", null, 1), h("p9", "ok", "read", "l0", ["a", "b"], 2), ...d.history],
}));
planted("a read that is no prefix of the final list", "read-prefix", (d) => ({
  ...d,
  history: d.history.map((l) => (l.f === "read" && l.type === "ok" ? { ...l, value: ["b"] } : l)),
}));
planted("a final entity read that differs from the database", "final-read", (d) => ({
  ...d,
  entityLists: { l0: ["a"] },
}));
planted("a journal sequence gap", "journal", (d) => ({
  ...d,
  events: [row("l0", 1, "a", 1, 1), row("l0", 3, "b", 1, 2)],
}));
planted("a row committed under an older epoch after a newer one", "stale-epoch", (d) => ({
  ...d,
  events: [row("l0", 1, "a", 2, 1), row("l0", 2, "b", 1, 2)],
}));
planted("a stale-epoch commit across two entities of one shard", "stale-epoch", (d) => ({
  ...d,
  history: [...d.history, h("p5", "invoke", "append", "l9", "x", 1), h("p5", "ok", "append", "l9", "x", 2)],
  events: [row("l9", 1, "x", 5, 1), ...d.events.map((e) => ({ ...e, writeOrder: e.writeOrder! + 1 }))],
  entityLists: null,
}));
planted("an event row without an epoch", "unfenced", (d) => ({
  ...d,
  events: [row("l0", 1, "a", null, 1), d.events[1]!],
}));
planted("a lost acknowledged increment", "lost", (d) => ({
  ...d,
  counters: [{ key: "c0", count: 0, ops: [] }],
  entityCounters: null,
}));
planted("an increment applied twice", "duplicate", (d) => ({
  ...d,
  counters: [{ key: "c0", count: 2, ops: ["op1", "op1"] }],
}));
planted("a counter whose count disagrees with its operations", "counter-state", (d) => ({
  ...d,
  counters: [{ key: "c0", count: 5, ops: ["op1"] }],
}));
planted("a failed increment that happened", "fail-happened", (d) => ({
  ...d,
  history: [...d.history, h("p2", "invoke", "incr", "c0", "op2", 80), h("p2", "fail", "incr", "c0", "op2", 90)],
  counters: [{ key: "c0", count: 2, ops: ["op1", "op2"] }],
  entityCounters: null,
}));
planted("a stale counter read", "linearizability", (d) => ({
  ...d,
  history: d.history.map((l) => (l.f === "read-counter" && l.type === "ok" ? { ...l, value: 0 } : l)),
}));
planted("a counter read above every increment", "read-range", (d) => ({
  ...d,
  history: d.history.map((l) => (l.f === "read-counter" && l.type === "ok" ? { ...l, value: 7 } : l)),
}));
planted("a numbered tell delivered twice", "duplicate-delivery", (d) => ({
  ...d,
  deliveries: [...d.deliveries, delivery(1, 80)],
}));
planted("a sender's messages delivered out of order", "sender-order", (d) => ({
  ...d,
  deliveries: [{ ...delivery(2, 71), kind: "ask" }, delivery(1, 72)],
}));
planted("a delivery never sent", "never-sent", (d) => ({ ...d, deliveries: [...d.deliveries, delivery(99, 80)] }));
planted("an ask answered with another number", "ask-answer", (d) => ({
  ...d,
  history: d.history.map((l) => (l.f === "ask" && l.type === "ok" ? { ...l, value: 3 } : l)),
}));
planted("a completion without an invocation", "history", (d) => ({
  ...d,
  history: [...d.history, h("p7", "ok", "read", "l0", [], 99)],
}));

test("prefix order: pairs that cannot be ordered are found, reads of one prefix are free among themselves", () => {
  const op = (rank: number, invoke: number, complete: number, label: string) => ({ rank, invoke, complete, label });
  assert.deepEqual(realTimeInversions([op(1, 4.5, 5, "w0"), op(2, 6, 7, "r1"), op(2, 3, 4, "r1'")]).length, 1);
  assert.deepEqual(realTimeInversions([op(2, 6, 7, "r1"), op(2, 0, 1, "r1'"), op(1, 0, 8, "w0")]), []);
  assert.deepEqual(
    realTimeInversions([op(3, 0, Infinity, "w1"), op(1, 10, 11, "w0")]).map(([x, y]) => [x.label, y.label]),
    [],
  );
  assert.deepEqual(
    realTimeInversions([op(1, 10, 11, "w0"), op(3, 0, 5, "w1")]).map(([x, y]) => [x.label, y.label]),
    [["w0", "w1"]],
  );
});

test("soak checker: a delivery by a node after it was downed is counted apart; before its down it is ordered", () => {
  const d = clean();
  const late = { ...delivery(1, 80), node: "n2.0" };
  const paused = (at: number) => ({
    kind: "pause-owner",
    target: "n2",
    start: 60,
    end: 90,
    recovered: 95,
    selfExited: true,
    downed: { node: "n2.0", at },
  });
  const after = judge({ ...d, deliveries: [{ ...delivery(2, 71), kind: "ask" }, late], faults: [paused(75)] });
  assert.deepEqual(after.violations, []);
  assert.equal(after.mailboxes.counts.staleOwnerDeliveries, 1);
  const before = judge({ ...d, deliveries: [{ ...delivery(2, 71), kind: "ask" }, late], faults: [paused(85)] });
  assert.deepEqual(
    before.violations.map((v) => v.check),
    ["sender-order"],
  );
});
