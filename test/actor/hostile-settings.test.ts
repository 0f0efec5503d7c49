// Settings and names given as values whose toString is not a function (what a config loader could hand over) are
// refused with the layer's typed error, whose text names the value by kind; String() would throw a TypeError first.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  ActorSystem,
  InvalidActorNameError,
  InvalidArgumentError,
  silentLogger,
} from "../../src/actor/index.ts";
import { ClusterConfigurationError } from "../../src/cluster/index.ts";
import { MessageRegistrationError, MessageRegistry } from "../../src/remote/index.ts";

const hostile = { toString: 1, valueOf: 1 } as unknown as number;

test("hostile remoting, cluster and actor settings are refused with typed errors", async (t) => {
  const system = ActorSystem.create("hostile-settings", { logger: silentLogger });
  t.after(() => system.terminate());
  await assert.rejects(system.enableRemoting({ host: "127.0.0.1", port: hostile }), (e: Error) => {
    return e instanceof InvalidArgumentError && /an object/.test(e.message);
  });
  await assert.rejects(
    system.enableRemoting({ host: hostile as unknown as string, port: 0 }),
    (e: Error) => e instanceof InvalidArgumentError && /an object/.test(e.message),
  );
  class Idle extends AbstractBehavior<string> {
    receive(): void {}
  }
  assert.throws(
    () => system.spawn(new Idle(), hostile as unknown as string),
    (e: Error) => e instanceof InvalidActorNameError && /an object/.test(e.message),
  );
  assert.throws(
    () => new MessageRegistry().register(hostile as never),
    (e: Error) => e instanceof MessageRegistrationError && /an object/.test(e.message),
  );
  await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  await assert.rejects(
    system.enableCluster({ gossipInterval: hostile }),
    (e: Error) => e instanceof ClusterConfigurationError && /an object/.test(e.message),
  );
});
