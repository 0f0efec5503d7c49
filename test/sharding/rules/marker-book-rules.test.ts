// The owner's marker book of the direct route (src/sharding/node/direct-route.ts, docs/protocol.md §8.8) as rules: a
// marker counts for exactly the handoff (coordinator and token) and shard it names; at most four handoffs are kept
// per shard, the oldest forgotten first (a marker may arrive before its passivate, so a few are kept, but a sender
// cannot grow the book without bound); a new drain gate keeps only its own handoff's markers; a drained shard forgets.
import assert from "node:assert/strict";
import { test } from "node:test";
import { type DrainGate, MarkerBook } from "../../../src/sharding/node/direct-route.ts";

const gate = (coordinator: string, token: number): DrainGate => ({ coordinator, token, waitFor: [], sinceMs: 0 });

test("marker book: a marker counts for the shard, coordinator, token and member it names, and no other", () => {
  const book = new MarkerBook();
  book.add(3, "a", 42, "b");
  assert.equal(book.has(3, gate("a", 42), "b"), true);
  assert.equal(book.has(3, gate("a", 42), "c"), false, "another member");
  assert.equal(book.has(3, gate("a", 43), "b"), false, "another handoff of the same coordinator");
  assert.equal(book.has(3, gate("e", 42), "b"), false, "another coordinator's handoff with the same token");
  assert.equal(book.has(4, gate("a", 42), "b"), false, "another shard");
  book.add(3, "a", 42, "c");
  assert.equal(book.has(3, gate("a", 42), "b") && book.has(3, gate("a", 42), "c"), true, "one set, both members");
});

test("marker book: at most four handoffs per shard are kept, the oldest forgotten first; other shards keep theirs", () => {
  const book = new MarkerBook();
  book.add(9, "a", 1, "b");
  for (let token = 1; token <= 4; token++) book.add(3, "a", token, "b");
  for (let token = 1; token <= 4; token++) assert.equal(book.has(3, gate("a", token), "b"), true, `token ${token}`);
  book.add(3, "a", 2, "c");
  assert.equal(book.has(3, gate("a", 1), "b"), true, "a marker for a kept handoff adds no set");
  book.add(3, "a", 5, "b");
  assert.equal(book.has(3, gate("a", 1), "b"), false, "the fifth handoff pushes out the first");
  for (let token = 2; token <= 5; token++) assert.equal(book.has(3, gate("a", token), "b"), true, `token ${token}`);
  assert.equal(book.has(3, gate("a", 2), "c"), true);
  assert.equal(book.has(9, gate("a", 1), "b"), true, "shard 9 is bounded on its own");
});

test("marker book: a drain gate keeps only its own handoff's markers of that shard; forget drops the shard's; unknown shards are a no-op", () => {
  const book = new MarkerBook();
  book.add(3, "a", 1, "b");
  book.add(3, "a", 2, "b");
  book.add(3, "e", 2, "b");
  book.add(4, "a", 1, "b");
  book.keepOnly(3, gate("a", 2));
  assert.equal(book.has(3, gate("a", 2), "b"), true, "the gate's own handoff stays");
  assert.equal(book.has(3, gate("a", 1), "b"), false);
  assert.equal(book.has(3, gate("e", 2), "b"), false, "same token, another coordinator: forgotten");
  assert.equal(book.has(4, gate("a", 1), "b"), true, "another shard untouched");
  book.keepOnly(7, gate("a", 1));
  book.forget(7);
  book.forget(3);
  assert.equal(book.has(3, gate("a", 2), "b"), false);
  assert.equal(book.has(4, gate("a", 1), "b"), true);
  // Forgotten sets make room: four new handoffs fit again.
  for (let token = 10; token < 14; token++) book.add(3, "a", token, "b");
  assert.equal(book.has(3, gate("a", 10), "b"), true);
});
