// Fault test with real OS processes: a member killed with SIGKILL (no leave, no goodbye).
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { eventually } from "../fixtures/eventually.ts";
import { allUp, describe, startClusterNodes, terminateAll } from "./fixtures/nodes.ts";

interface ProcessView {
  address: string;
  status: string;
  converged: boolean;
  members: { address: string; status: string }[];
  unreachable: string[];
}

interface ClusterProcess {
  readonly child: ChildProcess;
  readonly views: ProcessView[];
  readonly ready: Promise<ProcessView>;
}

// With a shared secret, down can be invoked on any node and is forwarded to the leader, wherever it runs.
const secret = "process-test-secret";
const script = fileURLToPath(new URL("./fixtures/cluster-process.ts", import.meta.url));

function startProcess(seedPort: number): ClusterProcess {
  const child = spawn(process.execPath, ["--import", "tsx", script, String(seedPort)], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, MOVIE_LOG_LEVEL: "silent", MOVIE_TEST_SECRET: secret },
  });
  const views: ProcessView[] = [];
  const ready = new Promise<ProcessView>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`cluster process exited early with ${code}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const view = JSON.parse(line) as ProcessView & { kind: string };
      views.push(view);
      if (view.kind === "ready") resolve(view);
    });
  });
  return { child, views, ready };
}

test("a member SIGKILLed in its own process is unreachable everywhere until downed, then Removed", async () => {
  const nodes = await startClusterNodes(2, { secret });
  const seedPort = nodes[0]!.port;
  const victim = startProcess(seedPort);
  const witness = startProcess(seedPort);
  try {
    const [victimReady] = await Promise.all([victim.ready, witness.ready]);
    const lastView = () => witness.views.at(-1)!;
    await eventually(() => nodes.every((n) => allUp(n, 4)), {
      what: "4 members Up",
      describe: describe(nodes),
      timeoutMs: 20_000,
    });
    await eventually(
      () =>
        lastView().converged && lastView().members.length === 4 && lastView().members.every((m) => m.status === "Up"),
      { what: "the witness process sees 4 Up", describe: lastView },
    );
    victim.child.kill("SIGKILL");
    await eventually(
      () =>
        nodes.every((n) => n.cluster.snapshot().unreachable.some((u) => String(u) === victimReady.address)) &&
        lastView().unreachable.includes(victimReady.address),
      { what: "victim unreachable on every survivor", describe: describe(nodes) },
    );
    for (const n of nodes) {
      const record = n.cluster.snapshot().members.find((m) => String(m.uniqueAddress) === victimReady.address);
      assert.equal(record?.status, "Up", "reachability never changes a status");
    }
    assert.equal(lastView().members.find((m) => m.address === victimReady.address)?.status, "Up");
    assert.equal(nodes[1]!.cluster.down(victimReady.address), true);
    await eventually(() => nodes.every((n) => allUp(n, 3)), {
      what: "victim removed in-process",
      describe: describe(nodes),
    });
    await eventually(
      () => lastView().members.length === 3 && !lastView().members.some((m) => m.address === victimReady.address),
      { what: "victim removed in the witness process", describe: lastView },
    );
  } finally {
    victim.child.kill("SIGKILL");
    witness.child.stdin!.end();
    await new Promise((resolve) =>
      witness.child.exitCode === null ? witness.child.once("exit", resolve) : resolve(null),
    );
    await terminateAll(nodes);
  }
});
