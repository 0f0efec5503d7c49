// The soak's client workload, run inside each node process against that node's sharded refs. Every operation is
// recorded before it is sent (invoke) and once its outcome is known (ok / fail / info), in the history format of
// docs/soak.md. Ambiguous writes are retried with the same OperationId until acknowledged or the retry budget ends.
import type { ShardedEntityRef } from "../../src/sharding/index.ts";
import {
  Append,
  AppendAck,
  CounterAck,
  type CounterCommand,
  CounterReply,
  Increment,
  type ListCommand,
  ListReply,
  type MailboxMessage,
  Note,
  Ping,
  Pong,
  ReadCounter,
  ReadList,
} from "./entities.ts";
import { Rng } from "./rng.ts";

/** One history record (docs/soak.md, "history.jsonl"). */
export interface HistoryRecord {
  readonly process: string;
  readonly type: "invoke" | "ok" | "fail" | "info";
  readonly f: "append" | "read" | "incr" | "read-counter" | "tell" | "ask";
  readonly key: string;
  readonly value: unknown;
  readonly time: number;
  readonly error?: string;
  readonly attempts?: number;
}

/** The keys the clients use (see keySpace in settings.ts). */
export interface KeySpace {
  readonly lists: readonly string[];
  readonly counters: readonly string[];
  readonly mailboxes: readonly string[];
}

/** What a worker needs from its node. */
export interface WorkloadContext {
  readonly list: (key: string) => ShardedEntityRef<ListCommand>;
  readonly counter: (key: string) => ShardedEntityRef<CounterCommand>;
  readonly mailbox: (key: string) => ShardedEntityRef<MailboxMessage>;
  readonly record: (record: HistoryRecord) => void;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
}

export interface WorkerOptions {
  readonly process: string;
  readonly seed: number;
  readonly keys: KeySpace;
  /** Pause between operations (ms). */
  readonly thinkMs: number;
  /** Timeout of one ask (ms). */
  readonly askTimeoutMs: number;
  /** How long a write keeps being retried with its OperationId before it is recorded `info` (ms). */
  readonly retryBudgetMs: number;
  readonly active: () => boolean;
}

/**
 * Errors that prove an attempt did not take effect: refused before any entity saw it (routing failed closed, a lease
 * or handoff barrier, an overflowing shard mailbox), or refused by the store's fence or revision check. Anything
 * else (a timeout, a lost connection, a failure after delivery) leaves the attempt ambiguous.
 */
const definiteErrors = new Set([
  "NoShardOwnerError",
  "ShardLeaseUnavailableError",
  "ShardHandoffInProgressError",
  "ShardMailboxOverflowError",
  "StaleShardOwnerError",
  "ConcurrentWriteError",
]);

function errorName(error: unknown): string {
  if (error instanceof Error) {
    const remote = (error as { remoteClass?: unknown }).remoteClass;
    return typeof remote === "string" ? `${error.name}(${remote})` : error.name;
  }
  return typeof error;
}

export function isDefiniteFailure(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const remote = (error as { remoteClass?: unknown }).remoteClass;
  return definiteErrors.has(typeof remote === "string" ? remote : error.name);
}

/** Runs one client process until `active()` turns false; the operation in flight then completes (or is retried out). */
export async function runWorker(ctx: WorkloadContext, o: WorkerOptions): Promise<number> {
  const rng = new Rng(o.seed);
  let n = 0;
  let ops = 0;
  const rec = (type: HistoryRecord["type"], f: HistoryRecord["f"], key: string, value: unknown, extra = {}) =>
    ctx.record({ process: o.process, type, f, key, value, time: ctx.now(), ...extra });

  /** A write retried under one OperationId: ok once acknowledged, fail when every attempt was definitely refused. */
  async function write(f: "append" | "incr", key: string, value: string, attempt: () => Promise<unknown>) {
    rec("invoke", f, key, value);
    const deadline = ctx.now() + o.retryBudgetMs;
    let definite = true;
    let attempts = 0;
    let last = "";
    for (;;) {
      attempts++;
      try {
        const reply = await attempt();
        rec("ok", f, key, value, { attempts, ...(f === "incr" ? { count: (reply as CounterAck).count } : {}) });
        return;
      } catch (error) {
        if (!isDefiniteFailure(error)) definite = false;
        last = errorName(error);
      }
      if (ctx.now() >= deadline) break;
      await ctx.sleep(250);
    }
    rec(definite ? "fail" : "info", f, key, value, { attempts, error: last });
  }

  while (o.active()) {
    const r = rng.next();
    n++;
    ops++;
    if (r < 0.4) {
      const key = rng.pick(o.keys.lists);
      const value = `${o.process}#${n}`;
      await write("append", key, value, () =>
        ctx.list(key).ask(new Append(value, `op-${value}`), AppendAck, o.askTimeoutMs),
      );
    } else if (r < 0.52) {
      const key = rng.pick(o.keys.lists);
      rec("invoke", "read", key, null);
      try {
        const reply = await ctx.list(key).ask(new ReadList(), ListReply, o.askTimeoutMs);
        rec("ok", "read", key, reply.values);
      } catch (error) {
        // A read has no effect: whatever happened to it, it is a failed read.
        rec("fail", "read", key, null, { error: errorName(error) });
      }
    } else if (r < 0.7) {
      const key = rng.pick(o.keys.counters);
      const op = `op-${o.process}#${n}`;
      await write("incr", key, op, () => ctx.counter(key).ask(new Increment(op), CounterAck, o.askTimeoutMs));
    } else if (r < 0.75) {
      const key = rng.pick(o.keys.counters);
      rec("invoke", "read-counter", key, null);
      try {
        const reply = await ctx.counter(key).ask(new ReadCounter(false), CounterReply, o.askTimeoutMs);
        rec("ok", "read-counter", key, reply.count);
      } catch (error) {
        rec("fail", "read-counter", key, null, { error: errorName(error) });
      }
    } else if (r < 0.88) {
      const key = rng.pick(o.keys.mailboxes);
      rec("invoke", "tell", key, n);
      try {
        ctx.mailbox(key).tell(new Note(o.process, n));
        rec("ok", "tell", key, n);
      } catch (error) {
        rec("fail", "tell", key, n, { error: errorName(error) });
      }
    } else {
      const key = rng.pick(o.keys.mailboxes);
      rec("invoke", "ask", key, n);
      try {
        const reply = await ctx.mailbox(key).ask(new Ping(o.process, n), Pong, o.askTimeoutMs);
        rec("ok", "ask", key, reply.n);
      } catch (error) {
        // The Ping may have been delivered and its Pong lost: ambiguous, unless it was refused before delivery.
        rec(isDefiniteFailure(error) ? "fail" : "info", "ask", key, n, { error: errorName(error) });
      }
    }
    await ctx.sleep(o.thinkMs);
  }
  return ops;
}
