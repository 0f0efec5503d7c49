// A stored payload is untrusted input to decode (a row can be edited, or written by a buggy version): decoding builds
// an instance from the payload's own fields only, so a "__proto__" key cannot swap the instance's prototype, a key
// naming a member of the class (a getter-only property, a method, "constructor") is not assigned over it, and a
// fromJSON that throws something other than an Error still gives the typed error. No prototype is polluted.
import assert from "node:assert/strict";
import { test } from "node:test";
import { CorruptPersistentRecordError, PersistenceCodec } from "../../src/persistence/index.ts";

class Account {
  balance = 0;
  get doubled(): number {
    return this.balance * 2;
  }
  deposit(n: number): void {
    this.balance += n;
  }
}
class Picky {
  static fromJSON(json: unknown): Picky {
    // Local code that rethrows what it was handed: a non-Error, even null.
    throw (json as { toThrow: unknown }).toThrow;
  }
}

const prototypeNamesBefore = Object.getOwnPropertyNames(Object.prototype).sort();

function codec(): PersistenceCodec {
  return new PersistenceCodec().register(Account).register(Picky);
}

function corrupt(detail: RegExp): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof CorruptPersistentRecordError, `expected CorruptPersistentRecordError, got ${error}`);
    assert.equal(error.persistenceId, "acc-1");
    assert.equal(error.sequenceNr, 7);
    assert.match(error.message, detail);
    return true;
  };
}

test('a stored "__proto__" key cannot swap the instance\'s prototype: the record is refused as corrupt', () => {
  const payload = '{"balance":5,"__proto__":{"polluted":true,"deposit":1}}';
  assert.throws(() => codec().decode("Account", payload, "acc-1", 7), corrupt(/__proto__/));
  // Nested __proto__ keys stay plain data of a plain object (JSON.parse makes them own properties).
  const nested = codec().decode("Account", '{"balance":1,"meta":{"__proto__":{"polluted":true}}}', "acc-1", 7);
  assert.equal(Object.getPrototypeOf(nested), Account.prototype);
  assert.equal(({} as { polluted?: unknown }).polluted, undefined);
});

test("keys naming members of the class are not assigned: getters, methods and constructor stay the class's", () => {
  const payload = '{"balance":3,"doubled":99,"deposit":1,"constructor":"x","toString":1}';
  const account = codec().decode("Account", payload, "acc-1", 7) as Account;
  assert.equal(Object.getPrototypeOf(account), Account.prototype);
  assert.ok(account instanceof Account);
  assert.equal(account.balance, 3);
  assert.equal(account.doubled, 6, "the getter, not the stored value");
  account.deposit(1);
  assert.equal(account.balance, 4, "the method, not the stored value");
  assert.equal(account.constructor, Account);
  assert.equal(typeof String(account), "string");
  // It encodes again under its manifest (an own "constructor" would make it unrecognisable).
  assert.equal(codec().encode(account).manifest, "Account");
});

test("a payload that is not a JSON object is refused for a class without fromJSON", () => {
  for (const payload of ["5", "null", "[1,2]", '"text"']) {
    assert.throws(() => codec().decode("Account", payload, "acc-1", 7), corrupt(/not a JSON object/), payload);
  }
});

test("a fromJSON that throws a non-Error (null, an object with a bad toString) gives the typed error", () => {
  for (const thrown of ["null", '{"toString":1}', '"plain text"']) {
    assert.throws(
      () => codec().decode("Picky", `{"toThrow":${thrown}}`, "acc-1", 7),
      corrupt(/Picky\.fromJSON rejected the payload/),
      thrown,
    );
  }
});

test("no stored payload pollutes a prototype", () => {
  const c = codec();
  const hostile = [
    '{"__proto__":{"polluted":1}}',
    '{"constructor":{"prototype":{"polluted":1}}}',
    '{"balance":1,"__proto__":null}',
  ];
  for (const payload of hostile) {
    try {
      c.decode("Account", payload, "acc-1", 7);
    } catch (error) {
      assert.ok(error instanceof CorruptPersistentRecordError);
    }
    c.decode("json", payload, "acc-1", 7);
  }
  assert.deepEqual(Object.getOwnPropertyNames(Object.prototype).sort(), prototypeNamesBefore);
  assert.equal(Object.hasOwn(Account.prototype, "polluted"), false);
  assert.equal(({} as { polluted?: unknown }).polluted, undefined);
});

test("an upcaster that throws (anything) or returns no { manifest, json } gives the typed error", () => {
  const c = codec()
    .registerUpcaster("Account.v0", (json) => {
      throw (json as { toThrow: unknown }).toThrow;
    })
    .registerUpcaster("Account.v00", () => null as unknown as { manifest: string; json: unknown })
    .registerUpcaster("Account.v000", () => ({ manifest: JSON.parse('{"toString":1}'), json: {} }));
  assert.throws(
    () => c.decode("Account.v0", '{"toThrow":null}', "acc-1", 7),
    corrupt(/upcaster of manifest Account\.v0 rejected/),
  );
  assert.throws(() => c.decode("Account.v0", '{"toThrow":{"toString":1}}', "acc-1", 7), corrupt(/a non-Error/));
  assert.throws(() => c.decode("Account.v00", "{}", "acc-1", 7), corrupt(/did not return/));
  assert.throws(() => c.decode("Account.v000", "{}", "acc-1", 7), corrupt(/did not return/));
});
