// JSON from a peer nested deeper than jsonNestingMax is refused before it is parsed: JSON.parse of a 4 MiB frame of
// nested arrays held the event loop for 650 ms on this project's host (a 4 MiB string takes 8 ms), so an
// authenticated peer could stall a node with one frame after another. Payloads and control frames alike; the
// connection stays up and the node keeps serving.
import assert from "node:assert/strict";
import { test } from "node:test";
import { FrameKind, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { MessageRegistry } from "../../src/remote/index.ts";
import { bytesNestTooDeep, jsonNestingMax } from "../../src/remote/json-nesting.ts";
import { eventually } from "../fixtures/eventually.ts";
import { assertAnswersAsk, deepArrayText, rawJsonFrame } from "./fixtures/hostile.ts";
import { EchoBehavior, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

/** Takes any JSON at all, so only the nesting check can refuse it. */
class AnyJson {
  static fromJSON(): AnyJson {
    return new AnyJson();
  }
}
MessageRegistry.register(AnyJson, { name: "test.any-json" });

const bytes = (text: string) => Buffer.from(text, "utf8");
const check = (text: string) => bytesNestTooDeep(bytes(text), 0, Buffer.byteLength(text));

test("the byte scan counts brackets outside strings only, and passes short texts at once", () => {
  assert.equal(check(deepArrayText(jsonNestingMax)), false, "at the bound");
  assert.equal(check(deepArrayText(jsonNestingMax + 1)), true, "one past it");
  const objects = `${'{"a":'.repeat(jsonNestingMax + 1)}1${"}".repeat(jsonNestingMax + 1)}`;
  assert.equal(check(objects), true, "objects nest too");
  const inString = JSON.stringify({ s: "[".repeat(50_000), t: 'x\\"[[[' });
  assert.equal(check(inString), false, "brackets inside strings (and after an escaped quote) are text");
  assert.equal(check(`["é", ${deepArrayText(jsonNestingMax)}]`), true, "multi-byte UTF-8 before the nesting");
  assert.equal(check("[".repeat(2 * jsonNestingMax)), false, "a text of twice the bound is not scanned");
});

test("a deeply nested payload or control frame is refused before parsing; the connection stays up", async () => {
  const node = await startNode("json-nesting");
  const other = await startNode("json-nesting-b");
  node.system.spawn(new EchoBehavior(), "echo");
  const raw = await rawPeer(node, { handshake: true, port: 11 });
  try {
    const before = node.remoting.stats;
    const payload = deepArrayText(2 * 1024 * 1024 - 64);
    const buf = Buffer.alloc(payload.length + 512);
    const end = writeUserEnvelope(
      buf,
      0,
      FrameKind.user,
      Buffer.from("/user/echo"),
      null,
      null,
      "test.any-json",
      payload,
    );
    raw.socket.write(buf.subarray(0, end));
    // A system message that is valid but for a deeply nested extra field (an unwatch of nothing by the peer itself).
    const ref = `${raw.identity.uniqueAddress.address}/user/w`;
    const system = `{"seq":1,"to":"/user/echo","sys":"unwatch","ref":"${ref}","x":${deepArrayText(5_000)}}`;
    raw.socket.write(rawJsonFrame(FrameKind.system, system));
    await eventually(() => node.remoting.stats.rejected.undecodable === before.rejected.undecodable + 2, {
      what: "both frames refused as undecodable",
      describe: () => node.remoting.stats.rejected,
    });
    const after = node.remoting.stats;
    assert.equal(after.delivered, before.delivered, "the user payload was not delivered");
    assert.equal(after.systemDelivered, before.systemDelivered, "the system message was not applied");
    assert.equal(after.rejected.internal, before.rejected.internal);
    assert.equal(raw.isClosed(), false);
    await assertAnswersAsk(node, other);
  } finally {
    raw.socket.destroy();
    await Promise.all([node.system.terminate(), other.system.terminate()]);
  }
});
