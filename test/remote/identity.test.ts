// Every inbound envelope is stamped with the authenticated peer of its connection (ctx.origin), never with anything
// the envelope itself claims: a peer that writes another node's path and uid as the sender is still itself.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext } from "../../src/actor/index.ts";
import { compileCodec } from "../../src/remote/codec.ts";
import { FrameKind, PayloadFormat, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { MessageRegistry } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { binaryPayload, compressedFrame, definingFrame } from "./fixtures/frames.ts";
import { Ping } from "./fixtures/messages.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

/** A binary-coded type (its frames take the compressed fast path once their header is known). */
class Claim {
  constructor(readonly n: number) {}
}
const claimFields = { n: "number" } as const;

/** What one delivery looked like to the recipient. */
interface Seen {
  n: number;
  origin: string | null;
  sender: string | null;
}

/** Records, for every message, ctx.origin and the sender path it came with. */
class OriginRecorder extends AbstractBehavior<unknown> {
  constructor(readonly seen: Seen[]) {
    super();
  }
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    const n = message instanceof Claim || message instanceof Ping ? message.n : -1;
    this.seen.push({ n, origin: ctx.origin?.toString() ?? null, sender: ctx.sender?.path.toString() ?? null });
  }
}

let a: Node;
let b: Node;
const seen: Seen[] = [];

before(async () => {
  const registry = new MessageRegistry();
  registry.register(Claim, { name: "test.claim", fields: claimFields });
  a = await startNode("id-a", { registry });
  b = await startNode("id-b", { registry });
  b.system.spawn(new OriginRecorder(seen), "recorder");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("a real peer's envelopes carry its own UniqueAddress as ctx.origin", async () => {
  seen.length = 0;
  a.system.actorSelection(`${b.system.address}/user/recorder`).tell(new Claim(1));
  await eventually(() => seen.length === 1, { what: "A's message", describe: () => seen });
  assert.equal(seen[0]!.origin, a.remoting.selfAddress.toString());
});

test("a peer claiming another node's sender path and uid is stamped with its own authenticated address", async () => {
  seen.length = 0;
  const raw = await rawPeer(b, { handshake: true, port: 7 });
  try {
    const self = raw.identity.uniqueAddress.toString();
    const victim = a.remoting.selfAddress;
    const claimed = `${a.system.address}/user/boss`;
    // A JSON envelope with its header written out (the general receive path).
    const buf = Buffer.alloc(300);
    const end = writeUserEnvelope(
      buf,
      0,
      FrameKind.user,
      Buffer.from("/user/recorder"),
      claimed,
      victim.uid,
      "test.ping",
      '{"n":1}',
    );
    raw.socket.write(buf.subarray(0, end));
    // A binary envelope defining header id 1, then one that only names id 1 (the compressed fast path).
    const codec = compileCodec("test.claim", claimFields);
    raw.socket.write(
      definingFrame(
        1,
        {
          recipient: "/user/recorder",
          sender: claimed,
          senderUid: victim.uid,
          typeName: "test.claim",
          format: PayloadFormat.binary,
          fingerprint: codec.fingerprint,
        },
        binaryPayload(codec, new Claim(2)),
      ),
    );
    await eventually(() => seen.length === 2, { what: "the defining frame", describe: () => seen });
    raw.socket.write(compressedFrame(1, binaryPayload(codec, new Claim(3))));
    await eventually(() => seen.length === 3, { what: "all three claims", describe: () => seen });
    assert.deepEqual(
      seen.map((s) => s.n),
      [1, 2, 3],
    );
    for (const s of seen) {
      assert.equal(s.origin, self, `message ${s.n}: origin is the raw peer, not the node it names`);
      assert.notEqual(s.origin, victim.toString());
    }
    // The claimed sender path is only a reply address; it does not change who sent it.
    assert.equal(seen[0]!.sender, claimed);
  } finally {
    raw.socket.destroy();
  }
});
