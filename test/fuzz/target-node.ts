// The fuzz target: a node in its own OS process (forked with IPC by the harness) running remoting, a one-node cluster
// and sharding, with the fuzz classes registered, /user/echo (answers Ping) and /user/sink (checks what it gets).
// `node --import tsx target-node.ts` with FUZZ_SECRET (optional) and FUZZ_MAX_FRAME_BYTES in the environment.
// It reports an uncaught exception or unhandled rejection over IPC ({ crash }) and then exits, so a crash is seen with
// its stack; it never catches one to carry on.
import { AbstractBehavior, type ActorContext, ActorSystem, silentLogger } from "../../src/actor/index.ts";
import "../../src/cluster/index.ts";
import { MessageEncodeError, MessageTooLargeError } from "../../src/remote/index.ts";
import { ClusterSharding, ShardingSettings } from "../../src/sharding/index.ts";
import { Ping, Pong } from "../remote/fixtures/messages.ts";
import { FzPlain, registerFuzzTypes } from "./types.ts";

function send(message: unknown): void {
  process.send?.(message);
}

function describeError(error: unknown): { name: string; message: string; stack: string } {
  try {
    if (error instanceof Error) return { name: error.name, message: error.message, stack: error.stack ?? "" };
    return {
      name: typeof error,
      message: Object.prototype.toString.call(error),
      stack: new Error("thrown").stack ?? "",
    };
  } catch {
    return { name: "unprintable", message: "", stack: "" };
  }
}

process.on("uncaughtException", (error) => {
  send({ id: -1, crash: { kind: "uncaughtException", ...describeError(error) } });
  setImmediate(() => process.exit(70));
});
process.on("unhandledRejection", (reason) => {
  send({ id: -1, crash: { kind: "unhandledRejection", ...describeError(reason) } });
  setImmediate(() => process.exit(71));
});

registerFuzzTypes();

/** Own keys (and their values) of the built-in prototypes at start, to detect pollution. */
const watched: Record<string, object> = {
  Object: Object.prototype,
  Array: Array.prototype,
  Function: Function.prototype,
  String: String.prototype,
  Number: Number.prototype,
  Boolean: Boolean.prototype,
  Error: Error.prototype,
  Promise: Promise.prototype,
};
const baseline = new Map<string, Map<PropertyKey, unknown>>();
for (const [name, proto] of Object.entries(watched)) {
  const keys = new Map<PropertyKey, unknown>();
  for (const key of Reflect.ownKeys(proto)) {
    const d = Object.getOwnPropertyDescriptor(proto, key)!;
    keys.set(key, d.value ?? d.get);
  }
  baseline.set(name, keys);
}

function pollution(): string[] {
  const found: string[] = [];
  for (const [name, proto] of Object.entries(watched)) {
    const keys = baseline.get(name)!;
    const now = Reflect.ownKeys(proto);
    for (const key of now) {
      const d = Object.getOwnPropertyDescriptor(proto, key)!;
      if (!keys.has(key)) found.push(`${name}.prototype gained ${String(key)}`);
      else if ((d.value ?? d.get) !== keys.get(key)) found.push(`${name}.prototype.${String(key)} changed`);
    }
    if (now.length < keys.size) found.push(`${name}.prototype lost keys`);
  }
  if (Object.getPrototypeOf(Object.prototype) !== null) found.push("Object.prototype has a prototype");
  return found;
}

/** What the sink saw: messages, ones whose prototype is not a registered class's, ones that can no longer be sent. */
const seen = { messages: 0, badPrototype: 0, unsendable: 0, resendFailed: 0, samples: [] as string[] };

function check(message: unknown): void {
  seen.messages++;
  const proto = message === null || typeof message !== "object" ? null : Object.getPrototypeOf(message);
  let registered = false;
  try {
    registered = proto !== null && remoting.registry.registrationOf(message).type.prototype === proto;
  } catch {
    registered = false;
  }
  if (registered) {
    resend(message);
    return;
  }
  // Either the prototype was swapped (a "__proto__" key), or an own "constructor" key hides the class, so the instance
  // can no longer be sent on.
  if (message !== null && typeof message === "object" && Object.hasOwn(message, "constructor")) seen.unsendable++;
  else seen.badPrototype++;
  if (seen.samples.length < 10) {
    let keys = "";
    try {
      keys = Object.keys(message as object).join(",");
    } catch {
      keys = "?";
    }
    seen.samples.push(`keys ${keys}`);
  }
}

/**
 * Sends what arrived on to a peer that is never up (the message is encoded, then dropped while disconnected): a
 * received instance must stay sendable, whatever keys its payload had.
 */
function resend(message: unknown): void {
  try {
    system.actorSelection("movie.tcp://void@127.0.0.1:1/user/void").tell(message);
  } catch (error) {
    // A value the class's declared fields cannot carry (it came as JSON) is refused at send, typed: that is the
    // documented behaviour. Anything else (the class no longer found, an untyped error) is a finding.
    if (error instanceof MessageEncodeError) return;
    seen.resendFailed++;
    if (seen.samples.length < 10)
      seen.samples.push(`resend: ${describeError(error).stack.split("\n").slice(0, 6).join(" <")}`);
  }
}

class Sink extends AbstractBehavior<unknown> {
  receive(message: unknown): void {
    check(message);
  }
}

/**
 * What /user/echo did: pings answered, replies whose tell threw (a hostile Ping's `n` the reply cannot carry, e.g. a
 * 20,000-deep array JSON.stringify cannot encode) by error name, and a few samples.
 */
const echo = { pings: 0, replied: 0, replyFailed: {} as Record<string, number>, samples: [] as string[] };

/**
 * The liveness actor the well-behaved asks reach. Unlike the test fixture's echo it never lets a reply's throw out
 * of receive: a throw restarts the actor, and 10 restarts within 60 s (the default supervision) stop it for good, so
 * ten hostile Pings in a minute would silence every later liveness ask (the node then closes the asker's connection
 * as idle after heartbeatTimeout), which is this harness's actor failing, not the node. The throws are counted
 * instead and reported with the stats.
 */
class Echo extends AbstractBehavior<unknown> {
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (!(message instanceof Ping)) return;
    echo.pings++;
    try {
      ctx.sender?.tell(new Pong(message.n), ctx.self);
      echo.replied++;
    } catch (error) {
      const { name, stack } = describeError(error);
      echo.replyFailed[name] = (echo.replyFailed[name] ?? 0) + 1;
      if (echo.samples.length < 5) echo.samples.push(stack.split("\n").slice(0, 4).join(" <"));
      // Refused typed is documented (a reply its payload cannot carry); anything else thrown out of tell is a finding.
      if (!(error instanceof MessageEncodeError) && !(error instanceof MessageTooLargeError)) {
        seen.resendFailed++;
        if (seen.samples.length < 10) seen.samples.push(`echo reply: ${stack.split("\n").slice(0, 6).join(" <")}`);
      }
    }
  }
}

class Entity extends AbstractBehavior<FzPlain> {
  receive(message: FzPlain, ctx: ActorContext<FzPlain>): void {
    check(message);
    ctx.sender?.tell(new Pong(1));
  }
}

const maxFrameBytes = Number(process.env.FUZZ_MAX_FRAME_BYTES ?? 4 * 1024 * 1024);
const secret = process.env.FUZZ_SECRET || undefined;
/** The connection guard's reports (an error no check refused), kept for the harness's findings. */
const guardReports: string[] = [];
const logger = {
  ...silentLogger,
  warn(context: object, message: string): void {
    if (!message.includes("unexpected error") || guardReports.length >= 20) return;
    let text = message;
    try {
      const c = context as { errorName?: unknown; error?: unknown; peer?: unknown };
      text = `${typeof c.errorName === "string" ? c.errorName : "?"}: ${typeof c.error === "string" ? c.error : "?"}`;
    } catch {}
    guardReports.push(text);
  },
};
const system = ActorSystem.create("fuzz", { logger });
const remoting = await system.enableRemoting({
  host: "127.0.0.1",
  port: 0,
  maxFrameBytes,
  handshakeTimeout: 1000,
  ...(secret === undefined ? {} : { secret }),
});
const port = remoting.selfAddress.address.port!;
const cluster = await system.enableCluster({
  seedNodes: [`127.0.0.1:${port}`],
  joinRetryInterval: 50,
  gossipInterval: 100,
});
const shardingOptions = { shardCount: 16 };
const settingsKey = ShardingSettings.create(shardingOptions).key;
ClusterSharding.get(system).init("T", FzPlain, shardingOptions, () => new Entity());
system.spawn(new Echo(), "echo");
system.spawn(new Sink(), "sink");

let asks = 0;
process.on("message", (raw: unknown) => {
  if (raw === null || typeof raw !== "object") return;
  const command = raw as { id: number; type: string; path?: string };
  const reply = (fields: Record<string, unknown>) => send({ id: command.id, ...fields });
  try {
    handle(command, reply);
  } catch (error) {
    // A harness mistake (a bad path), not the node's: answered, never thrown out of the IPC listener.
    reply({ error: describeError(error).message });
  }
});

function handle(
  command: { id: number; type: string; path?: string },
  reply: (fields: Record<string, unknown>) => void,
): void {
  switch (command.type) {
    case "stats":
      reply({
        stats: remoting.stats,
        sharding: ClusterSharding.get(system).stats,
        pollution: pollution(),
        seen,
        guardReports,
        echo,
        members: cluster.snapshot().members.length,
        memory: process.memoryUsage(),
      });
      return;
    case "askOut":
      // An ask whose reply actor the peer learns, so hostile replies and ask failures reach a live one.
      system
        .actorSelection(command.path!)
        .ask(new Ping(++asks), Pong, 2000)
        .catch(() => undefined);
      reply({});
      return;
    case "dial":
      system.actorSelection(command.path!).tell(new Ping(0));
      reply({});
      return;
    case "shutdown":
      reply({ stats: remoting.stats });
      void system.terminate().then(() => process.exit(0));
      return;
    default:
      reply({ error: `unknown command ${command.type}` });
  }
}

await new Promise<void>((resolve) => {
  const poll = (): void => {
    if (cluster.selfStatus === "Up") resolve();
    else setTimeout(poll, 20);
  };
  poll();
});
send({
  id: 0,
  target: {
    uniqueAddress: remoting.selfAddress.toString(),
    address: remoting.selfAddress.address.toString(),
    system: system.name,
    clusterName: cluster.settings.clusterName,
    settingsKey,
    entityType: "T",
    shardCount: shardingOptions.shardCount,
    maxFrameBytes,
  },
});
