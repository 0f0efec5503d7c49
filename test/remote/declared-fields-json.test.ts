// A class that declares binary `fields` can still receive a JSON payload (a hand-built envelope or a hostile peer).
// Such a payload must fit the declaration: otherwise the delivered instance could not be sent on (found by the fuzzer:
// `{"n":"x"}` for `n: "number"` was delivered, and re-sending it threw MessageEncodeError).
import assert from "node:assert/strict";
import { test } from "node:test";
import { EnvelopeDecodeError, MessageRegistry } from "../../src/remote/index.ts";
import { decodePayload } from "../../src/remote/message-registry.ts";

class Typed {
  constructor(
    readonly n: number,
    readonly s: string,
  ) {}
}

const registry = new MessageRegistry(null);
const entry = registry.register(Typed, { name: "test.declared-json", fields: { n: "number", s: "string" } });

function json(text: string): unknown {
  const buf = Buffer.from(text);
  return decodePayload(entry, false, 0, buf, 0, buf.length);
}

test("a JSON payload that fits the declared fields is delivered as an instance", () => {
  const m = json('{"n":1,"s":"a"}');
  assert.ok(m instanceof Typed);
  assert.equal((m as Typed).n, 1);
});

test("a JSON payload with a value its declared field cannot carry is refused as undecodable, naming the field", () => {
  for (const text of ['{"n":"x","s":"a"}', '{"n":1,"s":{"toString":1}}', '{"s":"a"}', '{"n":1,"s":"\\ud800"}']) {
    assert.throws(
      () => json(text),
      (e: unknown) =>
        e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /declared fields/.test(e.message),
      text,
    );
  }
});
