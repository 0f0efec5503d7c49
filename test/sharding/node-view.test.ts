// The node core elects the coordinators every routed and forwarded message needs once per membership view object, and
// follows every new view.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem, Address, UniqueAddress } from "../../src/index.ts";
import type { ShardingMember } from "../../src/sharding/allocation/strategy.ts";
import type { ShardingClusterSnapshot } from "../../src/sharding/membership.ts";
import { newNodeState, step } from "../../src/sharding/node/node-core.ts";

const node = (port: number) => new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", port), `u${port}`);
const [a, b, c] = [node(2551), node(2552), node(2553)];
const up = (address: UniqueAddress, status = "Up"): ShardingMember =>
  ({ uniqueAddress: address, status, roles: [] }) as unknown as ShardingMember;

/** A view whose member list counts its reads, so a test can tell an election from a cached answer. */
function view(
  members: ShardingMember[],
  options: { converged?: boolean; unreachable?: UniqueAddress[] } = {},
): ShardingClusterSnapshot & { reads: number } {
  return {
    self: c,
    reads: 0,
    get members() {
      this.reads++;
      return members;
    },
    unreachable: options.unreachable ?? [],
    converged: options.converged ?? true,
  };
}

test("elections run once per view object and follow every new view", async () => {
  let current = view([up(a), up(b), up(c)]);
  // The shell hands the node core every membership snapshot it reads before an input; the core elects once per view.
  const state = newNodeState(c);
  const seen = () => step(state, { kind: "view", snapshot: current }, 0)[0].view;
  const ctx = {
    routingCoordinator: () => seen().routing,
    acceptingCoordinator: () => seen().accepting,
    electedCoordinator: () => seen().elected,
    isUpMember: (node: UniqueAddress) => seen().up.has(node.toString()),
  };
  const system = ActorSystem.create("ctx-test");
  try {
    assert.ok(ctx.routingCoordinator()?.equals(a));
    assert.ok(ctx.acceptingCoordinator()?.equals(a));
    assert.ok(ctx.electedCoordinator()?.equals(a));
    assert.equal(ctx.isUpMember(b), true);
    const readsAfterFirst = current.reads;
    assert.ok(readsAfterFirst > 0, "the first question elects");
    for (let i = 0; i < 100; i++) {
      ctx.routingCoordinator();
      ctx.acceptingCoordinator();
      ctx.isUpMember(b);
    }
    assert.equal(current.reads, readsAfterFirst, "the same view is not elected again");

    // b unreachable: nobody routes or accepts (fail closed), though b is still an Up member.
    current = view([up(a), up(b), up(c)], { unreachable: [b] });
    assert.equal(ctx.routingCoordinator(), null);
    assert.equal(ctx.acceptingCoordinator(), null);
    assert.equal(ctx.isUpMember(b), true);

    // Re-converging after a change, nobody unreachable: routing waits, the followed coordinator is still accepted.
    current = view([up(a, "Leaving"), up(b), up(c)], { converged: false });
    assert.equal(ctx.routingCoordinator(), null);
    assert.equal(ctx.electedCoordinator(), null);
    assert.ok(ctx.acceptingCoordinator()?.equals(b), "Leaving does not count: b is the lowest Up member");
    assert.equal(ctx.isUpMember(a), false);

    // This node not Up: it routes nowhere, while the others' coordinator is still elected.
    current = view([up(a), up(b), up(c, "Joining")]);
    assert.equal(ctx.routingCoordinator(), null);
    assert.ok(ctx.electedCoordinator()?.equals(a));
    assert.equal(ctx.isUpMember(c), false);
  } finally {
    await system.terminate();
  }
});
