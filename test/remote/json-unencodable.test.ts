// A message without declared fields that JSON.stringify cannot encode is refused at tell with MessageEncodeError
// (counted in stats.unencodable), never an untyped RangeError/TypeError: a Ping that arrived from a peer with a
// 20,000-deep `n` is delivered (JSON.parse takes that depth), and an actor echoing it back must get the typed error.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { MessageEncodeError } from "../../src/remote/index.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";

let a: Node;
let b: Node;
before(async () => {
  a = await startNode("unencodable-a");
  b = await startNode("unencodable-b");
  b.system.spawn(new EchoBehavior(), "echo");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("tell of a JSON message too deep or cyclic for JSON.stringify throws MessageEncodeError and counts it", async () => {
  const echo = a.system.actorSelection(`${b.system.address}/user/echo`);
  assert.equal((await echo.ask(new Ping(1), Pong, 5000)).n, 1);
  const ref = a.remoting.refFor(`${b.system.address}/user/echo`);
  let deep: unknown = [];
  for (let i = 0; i < 20_000; i++) deep = [deep];
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const u0 = a.remoting.stats.unencodable;
  for (const n of [deep, cyclic]) {
    assert.throws(
      () => ref.tell(new Ping(n as number)),
      (e: unknown) => e instanceof MessageEncodeError && e.typeName === "test.ping",
    );
  }
  assert.equal(a.remoting.stats.unencodable, u0 + 2);
  // Nothing was written: the connection carries the next message as before.
  assert.equal((await echo.ask(new Ping(2), Pong, 5000)).n, 2);
});
