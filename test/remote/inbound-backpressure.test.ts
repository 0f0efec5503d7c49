import assert from "node:assert/strict";
import { test } from "node:test";
import { AbstractBehavior, STOP } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping } from "./fixtures/messages.ts";
import { startNode } from "./fixtures/nodes.ts";

/** Records the Pings it gets; while the gate is shut, every message waits for it to open (the actor is busy). */
class Gated extends AbstractBehavior<unknown> {
  readonly seen: number[] = [];
  private opened: Promise<void>;
  open: () => void = () => {};
  private shut = true;

  constructor() {
    super();
    this.opened = new Promise((resolve) => {
      this.open = () => {
        this.shut = false;
        resolve();
      };
    });
  }

  receive(message: unknown): void | Promise<void> {
    if (message instanceof Ping) this.seen.push(message.n);
    if (this.shut) return this.opened;
  }
}

test("a fast peer flooding a slow actor: the node stops reading past maxInboundBacklog, stays bounded, and delivers everything in order", async () => {
  const maxInboundBacklog = 500;
  // Short heartbeats, so a pause longer than heartbeatTimeout would show as a timeout or a reconnect.
  const heartbeats = { heartbeatInterval: 50, heartbeatTimeout: 300 };
  const slow = await startNode("bp-slow", { maxInboundBacklog, ...heartbeats });
  const fast = await startNode("bp-fast", heartbeats);
  const gated = new Gated();
  try {
    slow.system.spawn(gated, "gated");
    const target = fast.system.actorSelection(`${slow.system.address}/user/gated`);
    const count = 20_000;
    let most = 0;
    const sample = (): void => {
      most = Math.max(most, slow.system.inboundBacklog);
    };
    for (let i = 0; i < count; i++) {
      target.tell(new Ping(i));
      if (i % 500 === 0) {
        sample();
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    await eventually(
      () => {
        sample();
        return slow.remoting.stats.readPauses >= 1 && fast.remoting.stats.framesOut >= count;
      },
      { what: "the slow node paused reading", describe: () => ({ most, slow: slow.remoting.stats }) },
    );
    // Held shut for well over heartbeatTimeout (the fast node's heartbeats go on meanwhile): nothing times out.
    const writes = fast.remoting.stats.writes;
    await eventually(
      () => {
        sample();
        return fast.remoting.stats.writes >= writes + 15;
      },
      { what: "fifteen heartbeat intervals to pass", describe: () => fast.remoting.stats },
    );
    // Checked once per received chunk: one chunk (64 KiB) of these envelopes (14 bytes at least) past the bound at most.
    assert.ok(most <= maxInboundBacklog + (64 * 1024) / 14, `backlog reached ${most}`);
    gated.open();
    await eventually(() => gated.seen.length === count, {
      what: "every message delivered once the actor is fast again",
      describe: () => ({ seen: gated.seen.length, backlog: slow.system.inboundBacklog, stats: slow.remoting.stats }),
    });
    assert.deepEqual(gated.seen.slice(0, 5).concat(gated.seen.slice(-2)), [0, 1, 2, 3, 4, count - 2, count - 1]);
    assert.ok(
      gated.seen.every((n, i) => n === i),
      "in order",
    );
    assert.equal(slow.system.inboundBacklog, 0);
    assert.equal(fast.remoting.stats.heartbeatTimeouts, 0);
    assert.equal(slow.remoting.stats.idleTimeouts, 0);
    assert.equal(fast.remoting.stats.reconnects, 0);
    assert.equal(fast.remoting.stats.droppedOverflow + fast.remoting.stats.droppedWhileDisconnected, 0);
  } finally {
    // A busy actor would hold up termination.
    gated.open();
    await Promise.all([fast.system.terminate(), slow.system.terminate()]);
  }
});

test("the inbound backlog counts only remote messages still queued: processed and dead-lettered ones leave it", async () => {
  const node = await startNode("bp-count");
  const peer = await startNode("bp-count-peer");
  const gated = new Gated();
  try {
    const ref = node.system.spawn(gated, "gated");
    const target = peer.system.actorSelection(`${node.system.address}/user/gated`);
    // Local tells never count; the first of them keeps the actor busy, so everything else waits.
    for (let i = 0; i < 5; i++) ref.tell(new Ping(100 + i));
    for (let i = 0; i < 10; i++) target.tell(new Ping(i));
    await eventually(() => node.system.inboundBacklog === 10, {
      what: "ten remote messages queued",
      describe: () => node.system.inboundBacklog,
    });
    ref.sendSystem(STOP);
    gated.open();
    await eventually(() => node.system.inboundBacklog === 0, {
      what: "the stopped actor's queue dead-lettered",
      describe: () => node.system.inboundBacklog,
    });
  } finally {
    gated.open();
    await Promise.all([peer.system.terminate(), node.system.terminate()]);
  }
});
