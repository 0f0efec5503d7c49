// The registry's decoding is total over any parsed JSON and any validator: a schema that returns nonsense, a fromJSON
// that throws a value whose toString throws, payload keys naming members of the class; and a declared binary field
// that names a member of the class is refused at registration (decoding would assign over it).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  EnvelopeDecodeError,
  MessageEncodeError,
  MessageRegistrationError,
  MessageRegistry,
  type StandardSchemaV1,
  UnknownMessageTypeError,
} from "../../src/remote/index.ts";
import { countInternalError, emptyStats } from "../../src/remote/stats.ts";

class Shape {
  constructor(readonly side: number) {}
  get area(): number {
    return this.side * this.side;
  }
  grow(): number {
    return this.side + 1;
  }
}

function schemaReturning(result: unknown): StandardSchemaV1 {
  return { "~standard": { version: 1, vendor: "test", validate: () => result as never } };
}

function refused(reason: EnvelopeDecodeError["reason"], detail: RegExp): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof EnvelopeDecodeError, `expected EnvelopeDecodeError, got ${String(error)}`);
    assert.equal(error.reason, reason);
    assert.match(error.message, detail);
    return true;
  };
}

test("a schema returning nothing usable or malformed issues refuses the payload as schemaInvalid", () => {
  const results: [unknown, RegExp][] = [
    [null, /returned no result/],
    [undefined, /returned no result/],
    [7, /returned no result/],
    [{ issues: "not an array" }, /failed its schema: invalid/],
    [{ issues: [{ message: JSON.parse('{"toString":1}') }] }, /failed its schema: invalid/],
    [{ issues: [null] }, /failed its schema: invalid/],
  ];
  for (const [i, [result, detail]] of results.entries()) {
    class Checked {}
    const registry = new MessageRegistry(null);
    registry.register(Checked, { name: `t.checked${i}`, schema: schemaReturning(result) });
    assert.throws(() => registry.decode(`t.checked${i}`, {}), refused("schemaInvalid", detail), String(i));
  }
});

test("a schema or fromJSON that throws a value with a bad toString is refused with a described error", () => {
  const hostile = JSON.parse('{"toString":1,"valueOf":1}');
  class Thrower {
    static fromJSON(json: unknown): Thrower {
      throw (json as { x: unknown }).x;
    }
  }
  class Validated {}
  const registry = new MessageRegistry(null);
  registry.register(Thrower, { name: "t.thrower" });
  registry.register(Validated, {
    name: "t.validated",
    schema: {
      "~standard": {
        version: 1,
        vendor: "test",
        validate: (v) => {
          throw (v as { x: unknown }).x;
        },
      },
    },
  });
  assert.throws(
    () => registry.decode("t.thrower", { x: hostile }),
    refused("undecodable", /threw a non-Error \(an object\)/),
  );
  assert.throws(() => registry.decode("t.validated", { x: hostile }), refused("schemaInvalid", /threw/));
  assert.throws(() => registry.decode("t.thrower", { x: null }), refused("undecodable", /threw a non-Error \(null\)/));
});

test("payload keys naming members of the class are skipped; own fields are copied", () => {
  const registry = new MessageRegistry(null);
  registry.register(Shape, { name: "t.shape" });
  const shape = registry.decode(
    "t.shape",
    JSON.parse('{"side":3,"area":1,"grow":1,"constructor":1,"hasOwnProperty":1,"extra":"kept"}'),
  ) as Shape & { extra?: string };
  assert.ok(shape instanceof Shape);
  assert.equal(shape.constructor, Shape);
  assert.equal(shape.area, 9);
  assert.equal(shape.grow(), 4);
  assert.equal(Object.hasOwn(shape, "hasOwnProperty"), false);
  assert.equal(shape.extra, "kept");
  assert.equal(registry.registrationOf(shape).name, "t.shape", "it still resolves to its registration for sending");
});

test("declaring a binary field that names a member of the class is refused at registration", () => {
  const registry = new MessageRegistry(null);
  for (const field of ["area", "grow", "constructor", "toString"]) {
    assert.throws(
      () => registry.register(Shape, { name: "t.shape.bin", fields: { side: "number", [field]: "number" } }),
      (error: unknown) => error instanceof MessageRegistrationError && error.message.includes(`"${field}"`),
      field,
    );
  }
  assert.equal(registry.register(Shape, { name: "t.shape.bin", fields: { side: "number" } }).name, "t.shape.bin");
});

test("refusals at send name a hostile value's class from its prototype, never running its code", () => {
  // What a received JSON value can hold; sending it on must give the typed refusal, not a TypeError from its text.
  class Labelled {
    constructor(readonly label: string) {}
  }
  const registry = new MessageRegistry(null);
  const codec = registry.register(Labelled, { name: "t.labelled", fields: { label: "string" } }).codec!;
  const hostile = JSON.parse('{"constructor":{"name":{"toString":1}}}');
  const refusedAs = (actual: string) => (error: unknown) =>
    error instanceof MessageEncodeError && error.field === "label" && error.actual === actual;
  assert.throws(() => codec.measure({ label: hostile }), refusedAs("Object"));
  assert.throws(() => codec.measure({ label: Object.create(null) }), refusedAs("an object"));
  assert.throws(
    () => registry.registrationOf(hostile),
    (error: unknown) => error instanceof UnknownMessageTypeError && error.typeName === "Object",
  );
});

test("unexpected errors are counted by name in a bounded record that no name can corrupt", () => {
  const stats = emptyStats();
  for (const name of ["__proto__", "constructor", "toString", "TypeError", "TypeError"])
    countInternalError(stats, name);
  assert.equal(stats.rejected.internal, 5);
  assert.equal(Object.getPrototypeOf(stats.internalErrors), null);
  assert.equal(Object.getOwnPropertyDescriptor(stats.internalErrors, "__proto__")?.value, 1, "an own key");
  assert.equal(stats.internalErrors.constructor, 1);
  assert.equal(stats.internalErrors.TypeError, 2);
  for (let i = 0; i < 100; i++) countInternalError(stats, `E${i}`);
  assert.equal(Object.keys(stats.internalErrors).length, 33, "32 names and other");
  assert.equal(stats.internalErrors.other, 100 - (32 - 4));
  assert.equal(stats.rejected.internal, 105);
});
