// typeNameOf names a value's class in error texts (AskTimeoutError, MailboxOverflowError, routing refusals) and must
// never run or read what a peer's decoded payload may carry.
import assert from "node:assert/strict";
import { test } from "node:test";
import { typeNameOf } from "../../src/actor/index.ts";

class Order {}

test("typeNameOf reads the prototype's constructor, never the value's own fields or code", () => {
  assert.equal(typeNameOf(new Order()), "Order");
  assert.equal(typeNameOf({}), "Object");
  assert.equal(typeNameOf(Object.create(null)), "Object");
  assert.equal(typeNameOf(null), "null");
  assert.equal(typeNameOf("x"), "string");
  // A parsed JSON object with a "constructor" key of a hostile shape.
  const hostile = JSON.parse('{"constructor":{"name":{"toString":1}}}') as unknown;
  assert.equal(typeNameOf(hostile), "Object");
  const withName = JSON.parse('{"constructor":{"name":"Admin"}}') as unknown;
  assert.equal(typeNameOf(withName), "Object", "an own constructor key is data, not the class");
  const trap = new Proxy(
    {},
    {
      get() {
        throw new Error("trap ran");
      },
      getPrototypeOf() {
        throw new Error("trap ran");
      },
    },
  );
  assert.equal(typeNameOf(trap), "Object");
  for (const value of [hostile, withName, trap]) assert.equal(typeof typeNameOf(value), "string");
});
