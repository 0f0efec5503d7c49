import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorPath, Address, InvalidAddressError, UniqueAddress } from "../../src/actor/index.ts";

test("local and remote addresses print and parse", () => {
  assert.equal(Address.local("shop").toString(), "movie://shop");
  assert.equal(Address.tcp("shop", "127.0.0.1", 2551).toString(), "movie.tcp://shop@127.0.0.1:2551");
  assert.ok(Address.parse("movie.tcp://shop@127.0.0.1:2551").equals(Address.tcp("shop", "127.0.0.1", 2551)));
  assert.throws(() => Address.parse("shop"), InvalidAddressError);
  assert.throws(() => Address.parse("movie.tcp://shop@h:70000"), InvalidAddressError);
});

test("actor paths print and parse, locally and remotely", () => {
  const local = ActorPath.parse("movie://shop/user/a/b");
  assert.deepEqual(local.elements, ["user", "a", "b"]);
  assert.equal(local.toString(), "movie://shop/user/a/b");
  const remote = ActorPath.parse("movie.tcp://shop@127.0.0.1:2551/system/sharding");
  assert.equal(remote.address.port, 2551);
  assert.equal(remote.localPart, "/system/sharding");
  assert.throws(() => ActorPath.parse("movie://shop/user//b"), InvalidAddressError);
});

test("unique addresses split at the last # and order by address then uid", () => {
  const a = UniqueAddress.parse("movie.tcp://a-sys@127.0.0.1:1#2");
  const b = UniqueAddress.parse("movie.tcp://z-sys@127.0.0.1:1#1");
  const a2 = UniqueAddress.parse("movie.tcp://a-sys@127.0.0.1:1#3");
  assert.equal(a.uid, "2");
  assert.ok(UniqueAddress.compare(a, b) < 0);
  assert.ok(UniqueAddress.compare(a, a2) < 0);
  assert.equal(UniqueAddress.compare(a, UniqueAddress.parse(a.toString())), 0);
  assert.throws(() => UniqueAddress.parse("movie.tcp://a@h:1#"), InvalidAddressError);
});
