import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ActorSystem,
  Behaviors,
  DuplicateActorNameError,
  InvalidActorNameError,
  InvalidArgumentError,
  InvalidMessageError,
  isValidActorName,
  STOP,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { testSystem } from "./support.ts";

test("spawning a duplicate name throws DuplicateActorNameError; the name is free once the actor stopped", async (t) => {
  const system = testSystem(t);
  const first = system.spawn(Behaviors.ignore<string>(), "orders");
  assert.throws(
    () => system.spawn(Behaviors.ignore<string>(), "orders"),
    (error: unknown) =>
      error instanceof DuplicateActorNameError &&
      error.name === "DuplicateActorNameError" &&
      error.actorName === "orders" &&
      /already exists under movie:\/\/test-\d+\/user/.test(error.message),
  );
  first.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "orders"]) === null);
  system.spawn(Behaviors.ignore<string>(), "orders");
});

test("invalid actor names throw InvalidActorNameError", (t) => {
  const system = testSystem(t);
  for (const bad of ["", "a/b", "$reserved", "with space", "hash#tag", "x".repeat(256), "tab\t"]) {
    assert.throws(() => system.spawn(Behaviors.ignore<string>(), bad), InvalidActorNameError, JSON.stringify(bad));
    assert.equal(isValidActorName(bad), false);
  }
  for (const good of ["a", "order-42", "Order_1.v2", "x".repeat(255), "user@host:1"]) assert.ok(isValidActorName(good));
});

test("telling undefined or null throws InvalidMessageError", (t) => {
  const system = testSystem(t);
  const ref = system.spawn(Behaviors.ignore<unknown>());
  for (const target of [ref, system.deadLetters, system.actorSelection(`${system.address}/user/missing`)]) {
    assert.throws(() => target.tell(undefined), InvalidMessageError);
    assert.throws(() => target.tell(null), InvalidMessageError);
  }
  assert.equal(system.deadLetterCount, 0);
});

test("invalid actor system names throw InvalidArgumentError", () => {
  for (const bad of ["", "with space", "-dash-first", "a/b", "x".repeat(65), "dot.ted"]) {
    assert.throws(() => ActorSystem.create(bad), InvalidArgumentError, JSON.stringify(bad));
  }
  assert.throws(() => ActorSystem.create(42 as unknown as string), InvalidArgumentError);
});
