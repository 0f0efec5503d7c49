// The wire fuzz suite (issue 15): a node in another OS process takes hostile connections before the handshake, hostile
// frames after a valid one (without and with a secret), and dials a hostile server; every dictionary value at every
// field of every JSON document (a stride of the sweep, shifted by the seed), then random and mutated frames. It must
// never exit, its counters must account for every frame, no prototype may be polluted, and it must still answer asks.
// Seeds are printed; replay one with `npm run fuzz -- --seed N --stride 4` (the long run: --frames 1000000).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { seedOfDate } from "../fixtures/prng.ts";
import { type CampaignResult, runCampaign, startTarget, type Target } from "../fuzz/harness.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";

const targets: Target[] = [];
const peers: Node[] = [];
after(async () => {
  await Promise.all(targets.map((t) => t.node.shutdown(10_000)));
  await Promise.all(peers.map((p) => p.system.terminate()));
});

function summary(result: CampaignResult): string {
  return result.findings
    .slice(0, 5)
    .map((f) => `${f.what}: ${f.detail.slice(0, 1500)}\n  last frames: ${f.frames.slice(-5).join(" | ")}`)
    .join("\n");
}

async function campaign(name: string, seed: number, secret: string | null): Promise<void> {
  console.log(
    `fuzz ${name}: seed ${seed} (replay: npm run fuzz -- --seed ${seed} --stride 4${secret === null ? "" : ` --secret ${secret}`})`,
  );
  const target = await startTarget({ secret, maxFrameBytes: 1024 * 1024 });
  targets.push(target);
  const result = await runCampaign(target, {
    seed,
    frames: 1200,
    batch: 32,
    sweepStride: 4,
    preHandshake: 16,
    hostileServer: 16,
    hugeBytes: 256 * 1024,
    hugeChance: 0.003,
    askEvery: 20,
    budgetMs: 11_000,
    progress: (line) => console.log(`fuzz ${name}: ${line}`),
  });
  const t = result.totals;
  console.log(
    `fuzz ${name}: ${t.frames} frames after the handshake, ${t.preHandshake} connections before it, ${t.hostileServer} to the hostile server, ${t.wellBehavedAsks} asks answered, rejected ${JSON.stringify(result.final.stats.rejected)}`,
  );
  assert.equal(target.node.exited, false, `the target exited; crashes: ${JSON.stringify(target.crashes)}`);
  assert.deepEqual(result.findings, [], summary(result));
  assert.ok(result.totals.frames > 500, `only ${result.totals.frames} frames were sent`);
  assert.ok(t.preHandshake > 0 && t.hostileServer > 0, "every phase ran");
  assert.ok(result.totals.wellBehavedAsks >= 2, "the well-behaved asks were answered");
  assert.deepEqual(result.final.pollution, []);
  // Sharding envelopes got past the decoder to the node's checks (refused there: the fuzzer is no member the node
  // routes for), not only into the malformed counters (about 110 of 780 in the seeded campaign). Too few direct ones
  // pass every check to assert on them here; their decoder's refusals are tested field by field in envelope-codec.
  const sharding = result.final.sharding;
  const malformed = Object.values(sharding.malformedEnvelopes).reduce((a, b) => a + b, 0);
  console.log(`fuzz ${name}: sharding rejected ${sharding.rejectedEnvelopes}, ${malformed} of them undecodable`);
  assert.ok(sharding.rejectedEnvelopes > malformed + 20, `sharding: ${JSON.stringify(sharding)}`);
  // A real node, as a well-behaved peer, still gets its answer.
  const peer = await startNode(`fuzz-peer-${name}`, secret === null ? {} : { secret });
  peers.push(peer);
  const echo = peer.system.actorSelection(`${target.info.address}/user/echo`);
  assert.equal((await echo.ask(new Ping(7), Pong, 5000)).n, 7);
}

test("fuzz: no hostile frame or connection ends a node, every frame is counted, no prototype is polluted (no secret)", async () => {
  await campaign("plain", 0x5eed, null);
});

test("fuzz: the same with a shared secret, seeded by the date", async () => {
  await campaign("secret", seedOfDate(new Date()), "fuzz-secret");
});
