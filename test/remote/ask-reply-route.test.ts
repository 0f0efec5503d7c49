import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext, type ActorRef } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Fail, Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";

/** Local-only message: answer the held ask now. */
class Release {}

/** Holds the sender of each Ping until told Release, then answers them all. */
class Gate extends AbstractBehavior<unknown> {
  readonly held: { sender: ActorRef<unknown>; n: number }[] = [];
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Ping && ctx.sender !== null) this.held.push({ sender: ctx.sender, n: message.n });
    else if (message instanceof Release) {
      for (const { sender, n } of this.held.splice(0)) sender.tell(new Pong(n), ctx.self);
    }
  }
}

let a: Node;
let b: Node;
let gate: Gate;
let gateRef: ActorRef<unknown>;

before(async () => {
  [a, b] = await Promise.all([startNode("route-a"), startNode("route-b")]);
  b.system.spawn(new EchoBehavior(), "echo");
  gate = new Gate();
  gateRef = b.system.spawn(gate, "gate");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("an ask's reply and its failure go back over the connection the ask came on; the responder dials nothing", async () => {
  const echo = a.system.actorSelection(`${b.system.address}/user/echo`);
  const pong = await echo.ask(new Ping(1), Pong, 3000);
  assert.equal(pong.n, 1);
  await assert.rejects(echo.ask(new Fail("no"), Pong, 3000), /RangeError/);
  // B answered both without an outbound association of its own to A.
  assert.equal(b.remoting.peerInfo(a.remoting.selfAddress)?.state, "none");
  assert.equal(b.remoting.stats.connectAttempts, 0);
});

test("when the ask's connection closed before the reply, the reply takes the responder's own association", async () => {
  const target = a.system.actorSelection(`${b.system.address}/user/gate`);
  const answer = target.ask(new Ping(7), Pong, 10_000);
  await eventually(() => gate.held.length === 1, { what: "the ask held at the gate" });
  const reconnects0 = a.remoting.stats.reconnects;
  // Closes A's connection to B, which is the one the ask came on.
  a.remoting.disconnect(b.remoting.selfAddress);
  await eventually(() => (b.remoting.peerInfo(a.remoting.selfAddress)?.inbound ?? 0) === 0, {
    what: "B to see the inbound connection closed",
  });
  gateRef.tell(new Release());
  assert.equal((await answer).n, 7);
  assert.equal(b.remoting.peerInfo(a.remoting.selfAddress)?.state, "up");
  await eventually(() => a.remoting.stats.reconnects > reconnects0, { what: "A to reconnect" });
});
