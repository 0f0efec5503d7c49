// The main job as a test: `npm start` (examples/sharding-demo.ts) runs three node processes, moves a leaving
// backend's shards and checks every order itself, and that every parcel reserved its stock in a second entity type
// exactly once through the outbox; it exits 0 only when those checks passed.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { eventually } from "../fixtures/eventually.ts";

test("the sharding demo (npm start) runs end to end and verifies every order after the graceful leave", async () => {
  const child = spawn(process.execPath, ["--import", "tsx", "examples/sharding-demo.ts"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, MOVIE_LOG_LEVEL: "error" },
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  let exitCode: number | null = null;
  let exited = false;
  child.on("exit", (code) => {
    exitCode = code;
    exited = true;
  });
  try {
    await eventually(() => exited, {
      what: "the demo to finish",
      timeoutMs: 90_000,
      intervalMs: 100,
      describe: () => output.split("\n").slice(-8),
    });
  } finally {
    if (!exited) child.kill("SIGTERM");
  }
  // CI shows only the start of a long failure message, so the lines that say why come first.
  const lines = output.trimEnd().split("\n");
  assert.equal(
    exitCode,
    0,
    `the demo exited with ${exitCode}; its last lines:\n${lines.slice(-12).join("\n")}\n--- whole output ---\n${output}`,
  );
  assert.match(output, /OK: every order's event-sourced state survived the move intact/);
  assert.match(output, /0 failed to answer, 0 not exactly parcels 1\.\.n in order, 0 acknowledged parcels missing/);
  // Each parcel reserved one item in the Stock entity type through the outbox, exactly once, across the leave.
  const stock =
    /stock reserved through the outbox: (\d+) reservations over 8 SKUs for (\d+) persisted parcels; 0 missing, 0 reserved twice, 0 without a parcel \(outbox: 0 pending, 0 parked/.exec(
      output,
    );
  assert.ok(stock !== null, "the stock line reports every parcel reserved once");
  assert.equal(stock[1], stock[2]);
  assert.ok(Number(stock[1]) > 0, "parcels were reserved");
  // The backend that is not the coordinator leaves; the other one ends up with every shard.
  const leaver = /(backend-\d) leaves the cluster gracefully/.exec(output)?.[1];
  assert.ok(leaver !== undefined, "a backend left");
  const stayer = leaver === "backend-1" ? "backend-2" : "backend-1";
  assert.match(output, new RegExp(`shards: ${stayer}=64 \\|`), `${stayer} ends up with every shard`);
});
