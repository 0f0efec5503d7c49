import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext, type ActorRef } from "../../src/actor/index.ts";
import { ReplyNames } from "../../src/actor/reply-names.ts";
import { headerTableSize } from "../../src/remote/header-table.ts";
import type { RemoteActorRef } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";

/** Remembers the sender of every Ping without replying (the ask stays pending until the test replies). */
class Holder extends AbstractBehavior<unknown> {
  readonly senders: ActorRef<unknown>[] = [];
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Ping && ctx.sender !== null) this.senders.push(ctx.sender);
  }
}

let asker: Node;
let server: Node;
let attacker: Node;

before(async () => {
  [asker, server, attacker] = await Promise.all([startNode("asker"), startNode("server"), startNode("attacker")]);
});
after(async () => {
  await Promise.all([asker.system.terminate(), server.system.terminate(), attacker.system.terminate()]);
});

test("reply names are `$` and 128 random bits, distinct across many asks", () => {
  const names = new ReplyNames();
  const seen = new Set<string>();
  for (let i = 0; i < 20_000; i++) {
    const name = names.next();
    assert.match(name, /^\$[A-Za-z0-9_-]{22}$/);
    assert.equal(Buffer.from(name.slice(1), "base64url").length, 16);
    seen.add(name);
  }
  assert.equal(seen.size, 20_000);
});

test("a peer that saw one reply name and replies to guessed neighbours and `$N` names completes no ask", async () => {
  const attackerHolder = new Holder();
  attacker.system.spawn(attackerHolder, "trap");
  const serverHolder = new Holder();
  server.system.spawn(serverHolder, "slow");

  // The attacker is asked once, so it sees a real reply name of the asker.
  const bait = asker.system.actorSelection(`${attacker.system.address}/user/trap`).ask(new Ping(0), Pong, 5_000);
  await eventually(() => attackerHolder.senders.length === 1, { what: "the bait ask at the attacker" });
  const seenName = attackerHolder.senders[0]!.path.name;
  assert.match(seenName, /^\$[A-Za-z0-9_-]{22}$/, "a reply name is 128 random bits");

  // The victim's ask, pending at the server.
  const victim = asker.system.actorSelection(`${server.system.address}/user/slow`).ask(new Ping(1), Pong, 5_000);
  await eventually(() => serverHolder.senders.length === 1, { what: "the victim ask at the server" });
  const victimName = serverHolder.senders[0]!.path.name;
  assert.notEqual(victimName, seenName);

  // Guesses: the sequential names a counter would give ($0…$1kk in base 36), and neighbours of the name it saw.
  const guesses = new Set<string>();
  for (let i = 0; i < 2048; i++) guesses.add(`$${i.toString(36)}`);
  const asNumber = Number.parseInt(seenName.slice(1), 36);
  if (Number.isFinite(asNumber)) for (let d = -16; d <= 16; d++) guesses.add(`$${(asNumber + d).toString(36)}`);
  const seenBytes = Buffer.from(seenName.slice(1), "base64url");
  for (let d = 1; d <= 16; d++) {
    const next = Buffer.from(seenBytes);
    next[15] = (next[15]! + d) & 0xff;
    guesses.add(`$${next.toString("base64url")}`);
  }
  const deliveredBefore = asker.remoting.stats.delivered + asker.remoting.stats.deadLetters;
  for (const guess of guesses) {
    const guessed = attacker.system.actorSelection(`${asker.system.address}/temp/${guess}`);
    guessed.tell(new Pong(666));
    // And an ask failure, which would reject the ask instead.
    attacker.remoting.sendAskFailure(guessed as RemoteActorRef, new Error("spoofed failure"));
  }
  await eventually(
    () => asker.remoting.stats.delivered + asker.remoting.stats.deadLetters >= deliveredBefore + 2 * guesses.size,
    {
      what: "every spoofed reply processed at the asker",
      describe: () => asker.remoting.stats,
    },
  );

  // The real reply still completes the ask, with the server's value, not the attacker's.
  serverHolder.senders[0]!.tell(new Pong(1));
  const reply = await victim;
  assert.equal(reply.n, 1, "the ask got the real reply, not a spoofed one");
  attackerHolder.senders[0]!.tell(new Pong(0));
  assert.equal((await bait).n, 0);
});

test("reply actors' headers are still one-off: more asks than the header table holds evict no header id", async () => {
  server.system.spawn(new EchoBehavior(), "echo");
  const echo = asker.system.actorSelection(`${server.system.address}/user/echo`);
  const before = { asker: asker.remoting.stats.headerEvictions, server: server.remoting.stats.headerEvictions };
  const count = headerTableSize + 500;
  for (let i = 0; i < count; i += 250) {
    const replies = await Promise.all(Array.from({ length: 250 }, (_, j) => echo.ask(new Ping(i + j), Pong, 5_000)));
    for (const [j, reply] of replies.entries()) assert.equal(reply.n, i + j);
  }
  assert.equal(asker.remoting.stats.headerEvictions, before.asker, "no ask took a header id at the asker");
  assert.equal(server.remoting.stats.headerEvictions, before.server, "no reply took a header id at the server");
});
