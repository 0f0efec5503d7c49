// Seeded simulation: random partitions (blackholes), heals and crashes over the membership core, with invariants
// checked after every tick. The seed is in every failure message.
import assert from "node:assert/strict";
import { test } from "node:test";
import { statusPrecedence } from "../../src/cluster/member.ts";
import { Sim, type SimNode } from "./sim.ts";

function rng(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test("random partitions and crashes never change a status, never resurrect, and heal to one converged view", () => {
  for (let seed = 1; seed <= 25; seed++) {
    const random = rng(seed);
    const sim = new Sim({ seed, fanout: 2, heartbeatTimeoutMs: 300 });
    const nodes: SimNode[] = [];
    for (let i = 0; i < 5; i++) nodes.push(sim.start(2551 + i, [2551]));
    assert.ok(
      sim.until(() => sim.allUp(nodes)),
      `seed ${seed}: initial convergence`,
    );
    const seen = new Map<string, number>(); // viewer|subject → highest precedence seen
    const check = (phase: string) => {
      for (const viewer of sim.live()) {
        for (const [key, m] of viewer.state.members) {
          const k = `${viewer.self}|${key}`;
          const p = statusPrecedence(m.status);
          const before = seen.get(k) ?? -1;
          assert.ok(p >= before, `seed ${seed} ${phase}: ${key} went back from ${before} to ${p} on ${viewer.self}`);
          seen.set(k, p);
          if (phase === "chaos") {
            assert.ok(m.status === "Up", `seed ${seed}: ${key} became ${m.status} with no leave or down`);
          }
        }
      }
    };
    const pairs: [SimNode, SimNode][] = [];
    const crashed: SimNode[] = [];
    for (let tick = 0; tick < 120; tick++) {
      const r = random();
      if (r < 0.08) {
        const a = nodes[Math.floor(random() * nodes.length)]!;
        const b = nodes[Math.floor(random() * nodes.length)]!;
        if (a !== b) {
          sim.blackhole(a, b);
          pairs.push([a, b]);
        }
      } else if (r < 0.14 && pairs.length > 0) {
        const [a, b] = pairs.splice(Math.floor(random() * pairs.length), 1)[0]!;
        sim.unblackhole(a, b);
      } else if (r < 0.155 && crashed.length === 0) {
        const victim = nodes[1 + Math.floor(random() * (nodes.length - 1))]!;
        sim.crash(victim);
        crashed.push(victim);
      }
      sim.advance(sim.tickMs);
      check("chaos");
    }
    for (const [a, b] of pairs) sim.unblackhole(a, b);
    const survivors = nodes.filter((n) => !crashed.includes(n));
    assert.ok(
      sim.until(() => survivors.every((n) => sim.snapshot(n).unreachable.length === crashed.length)),
      `seed ${seed}: heal ${JSON.stringify(sim.describe())}`,
    );
    for (const victim of crashed) {
      const leader = survivors.find((n) => sim.snapshot(n).leader?.equals(n.self))!;
      assert.equal(sim.input(leader, { kind: "down", target: victim.self }), true, `seed ${seed}: down`);
    }
    let ok = false;
    for (let i = 0; i < 400 && !ok; i++) {
      sim.advance(sim.tickMs);
      check("recovery");
      ok = sim.allUp(survivors);
    }
    assert.ok(ok, `seed ${seed}: final convergence ${JSON.stringify(sim.describe(survivors))}`);
    for (const victim of crashed) {
      for (const n of survivors) assert.equal(n.state.members.get(String(victim.self))?.status, "Removed");
    }
  }
});
