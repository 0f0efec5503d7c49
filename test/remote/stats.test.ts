import assert from "node:assert/strict";
import { test } from "node:test";
import type { RemotingStats } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping } from "./fixtures/messages.ts";
import { Collector, startNode } from "./fixtures/nodes.ts";

/** The traffic counters of `now` minus those of `before`. */
function traffic(before: RemotingStats, now: RemotingStats) {
  return {
    framesIn: now.framesIn - before.framesIn,
    framesOut: now.framesOut - before.framesOut,
    bytesIn: now.bytesIn - before.bytesIn,
    bytesOut: now.bytesOut - before.bytesOut,
  };
}

test("stats: each association that comes up counts one handshake per side; frames and bytes are counted both ends", async () => {
  const a = await startNode("stats-a");
  const b = await startNode("stats-b");
  try {
    assert.equal(a.remoting.stats.handshakesOk, 0);
    assert.equal(b.remoting.stats.handshakesOk, 0);
    const gotB: unknown[] = [];
    const gotA: unknown[] = [];
    b.system.spawn(new Collector(gotB), "inbox");
    a.system.spawn(new Collector(gotA), "inbox");
    const toB = a.system.actorSelection(`${b.system.address}/user/inbox`);
    toB.tell(new Ping(0));
    await eventually(() => gotB.length === 1, { what: "A's association to B up" });
    // A dialled B: one handshake completed at A (client) and one at B (server); B has not dialled A.
    assert.equal(a.remoting.stats.handshakesOk, 1);
    assert.equal(b.remoting.stats.handshakesOk, 1);

    const a0 = a.remoting.stats;
    const b0 = b.remoting.stats;
    const count = 200;
    const text = "x".repeat(100);
    for (let i = 1; i <= count; i++) toB.tell(new Ping(i, text));
    await eventually(() => gotB.length === count + 1, { what: `${count} tells at B`, describe: () => gotB.length });
    // Each tell is one frame: a 4-byte length, at least a kind byte, and the JSON payload (its smallest is i = 1).
    const leastFrameBytes = 4 + 1 + Buffer.byteLength(JSON.stringify(new Ping(1, text)));
    const sent = traffic(a0, a.remoting.stats);
    const received = traffic(b0, b.remoting.stats);
    assert.ok(sent.framesOut >= count, `A framesOut +${sent.framesOut} for ${count} tells`);
    assert.ok(sent.bytesOut >= count * leastFrameBytes, `A bytesOut +${sent.bytesOut} for ${count} tells`);
    assert.ok(received.framesIn >= count, `B framesIn +${received.framesIn} for ${count} tells`);
    assert.ok(received.bytesIn >= count * leastFrameBytes, `B bytesIn +${received.bytesIn} for ${count} tells`);
    // Plausible, not inflated: a repeated header travels as a short id, so a frame is well under 200 bytes here.
    assert.ok(received.bytesIn < count * (leastFrameBytes + 200), `B bytesIn +${received.bytesIn}`);
    // Everything A wrote is what B read, frame for frame and byte for byte (a heartbeat may be on its way meanwhile).
    await eventually(
      () => {
        const out = traffic(a0, a.remoting.stats);
        const into = traffic(b0, b.remoting.stats);
        return out.framesOut === into.framesIn && out.bytesOut === into.bytesIn;
      },
      {
        what: "A's frames and bytes out equal to B's in",
        timeoutMs: 3000,
        describe: () => ({ a: traffic(a0, a.remoting.stats), b: traffic(b0, b.remoting.stats) }),
      },
    );

    // B dials A for its own tells: a second association, one more handshake on each side.
    b.system.actorSelection(`${a.system.address}/user/inbox`).tell(new Ping(1));
    await eventually(() => gotA.length === 1, { what: "B's association to A up" });
    assert.equal(a.remoting.stats.handshakesOk, 2);
    assert.equal(b.remoting.stats.handshakesOk, 2);
    assert.equal(a.remoting.stats.handshakesFailed + b.remoting.stats.handshakesFailed, 0);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});
