// A class registered with MessageRegistry only (remoting) and then persisted is refused with an error that says
// exactly what to register where, naming the class and what it is to the entity (event, state, snapshot).
import assert from "node:assert/strict";
import { test } from "node:test";
import { PersistenceCodec, UnknownManifestError } from "../../src/persistence/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";

class ParcelAdded {
  constructor(readonly parcel: string) {}
}
class OrderState {
  constructor(readonly parcels: string[]) {}
}

function refusal(role: string, fragment: RegExp) {
  return (error: unknown) => {
    assert.ok(error instanceof UnknownManifestError, `expected UnknownManifestError, got ${String(error)}`);
    assert.equal(error.role, role);
    assert.match(error.message, fragment);
    assert.match(
      error.message,
      /call Database\.get\(system\)\.codec\.register\((ParcelAdded|OrderState)\) on every node/,
    );
    assert.match(error.message, /MessageRegistry\.register \(from movie\/remote\) is a separate registry/);
    return true;
  };
}

test("an event, state or snapshot class missing from the codec is named with the call that registers it", () => {
  MessageRegistry.register(ParcelAdded); // what a user does for remoting, which does not cover persistence
  const codec = new PersistenceCodec();
  assert.throws(() => codec.encode(new ParcelAdded("p"), "event"), refusal("event", /^the event class ParcelAdded/));
  assert.throws(
    () => codec.copy(new OrderState([])),
    refusal("state", /^the state class OrderState \(command handlers receive a codec copy of the state/),
  );
  assert.throws(() => codec.encode(new OrderState([]), "snapshot"), refusal("snapshot", /a snapshot stores/));
  codec.register(ParcelAdded).register(OrderState);
  assert.deepEqual(codec.copy(new OrderState(["p"])), new OrderState(["p"]));
  assert.equal(codec.encode(new ParcelAdded("p"), "event").manifest, "ParcelAdded");
});
