import assert from "node:assert/strict";
import { test } from "node:test";
import { Behaviors, LocalActorRef, UniqueAddress } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { testSystem } from "./support.ts";

test("context.origin is the peer a delivered message came from, and null for local tells", async (t) => {
  const system = testSystem(t);
  const seen: [string, string | null, string | null][] = [];
  const ref = system.spawn(
    Behaviors.receive<string>(async (message, context) => {
      await Promise.resolve();
      seen.push([message, context.origin?.toString() ?? null, context.sender?.path.toString() ?? null]);
    }),
  );
  const peer = UniqueAddress.parse("movie.tcp://other@127.0.0.1:2552#abc123");
  const sender = system.spawn(Behaviors.ignore<unknown>(), "sender");
  assert.ok(ref instanceof LocalActorRef);
  ref.tell("local");
  ref.deliver("remote", sender, peer);
  ref.tell("local again", sender);
  await eventually(() => seen.length === 3, { describe: () => seen });
  assert.deepEqual(seen, [
    ["local", null, null],
    ["remote", peer.toString(), sender.path.toString()],
    ["local again", null, sender.path.toString()],
  ]);
});
