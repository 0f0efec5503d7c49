// An int32 field whose value is a received JSON object must be refused with MessageEncodeError at send, not throw
// whatever its conversion to a number throws (found by the fuzz suite's re-send check).
import assert from "node:assert/strict";
import { test } from "node:test";
import { compileCodec } from "../../src/remote/codec.ts";
import { MessageEncodeError } from "../../src/remote/errors.ts";

test("an int32 field holding an object with a non-function toString, or a deep array, is refused typed", () => {
  const codec = compileCodec("test.int32", { i: "int32" });
  const deep = JSON.parse(`${"[".repeat(20_000)}${"]".repeat(20_000)}`) as unknown;
  for (const i of [JSON.parse('{"toString":1}'), JSON.parse('{"valueOf":{},"toString":{}}'), deep, "1", null]) {
    assert.throws(
      () => codec.measure({ i }),
      (e: unknown) => e instanceof MessageEncodeError && e.field === "i",
    );
  }
  assert.equal(codec.measure({ i: -5 }), 4);
});
