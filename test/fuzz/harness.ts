/**
 * The fuzz campaign against a target node in another OS process: hostile connections before the handshake, hostile
 * frames after a valid one (the fuzzer as client), a hostile server the target dials (hostile challenges and
 * accepts, then hostile frames and ask failures on the target's own outbound connection), a well-behaved ask at
 * intervals, and after every batch a check that the target's counters account for every frame. Shared by
 * test/remote/fuzz.test.ts and scripts/fuzz.ts.
 */
import { writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NodeProcess } from "../../examples/support/node-process.ts";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { FrameKind, PayloadFormat } from "../../src/remote/envelope.ts";
import * as handshake from "../../src/remote/handshake.ts";
import type { RemotingStats } from "../../src/remote/stats.ts";
import type { ShardingStats } from "../../src/sharding/index.ts";
import { Prng } from "../fixtures/prng.ts";
import { deepValues, smallJson } from "./dictionary.ts";
import {
  acceptedTemplate,
  challengeTemplate,
  controlFrame,
  type FuzzContext,
  frame,
  framingFrame,
  type GenFrame,
  handshakeFrame,
  helloTemplate,
  nextFrame,
  rejectTemplate,
  sweepFrames,
  sweepHandshakes,
  type TargetInfo,
  userHeader,
} from "./frames.ts";
import type { Json } from "./json.ts";
import { clientHandshake, confirmValid, fuzzIdentity, openPeer, PeerSocket, serverChallenge } from "./peer.ts";

/** A crash the target reported before it exited. */
export interface Crash {
  readonly kind: string;
  readonly name: string;
  readonly message: string;
  readonly stack: string;
}

/** The target's report for the `stats` command. */
export interface TargetStats {
  readonly stats: RemotingStats;
  /** The target's sharding counters (docs/protocol.md §16.2): what the sharding envelopes that decoded came to. */
  readonly sharding: ShardingStats;
  readonly pollution: string[];
  readonly seen: {
    messages: number;
    badPrototype: number;
    unsendable: number;
    resendFailed: number;
    samples: string[];
  };
  /** What the connection guard logged (an error name and text per kind: logged once each). */
  readonly guardReports: string[];
  /** /user/echo: pings seen, replies sent, replies whose tell threw (by error name) and samples of those. */
  readonly echo: { pings: number; replied: number; replyFailed: Record<string, number>; samples: string[] };
  readonly members: number;
  readonly memory: NodeJS.MemoryUsage;
}

/** A running target. */
export interface Target {
  readonly node: NodeProcess<{ id: number; target: TargetInfo }>;
  readonly info: TargetInfo;
  readonly secret: string | null;
  readonly crashes: Crash[];
  /** The last frames sent before a crash or hang, for the report. */
  readonly recent: string[];
}

/** Forks the target node (test/fuzz/target-node.ts) and waits until its one-node cluster is up. */
export async function startTarget(options: { secret: string | null; maxFrameBytes: number }): Promise<Target> {
  const node = new NodeProcess<{ id: number; target: TargetInfo }>(
    "fuzz-target",
    new URL("./target-node.ts", import.meta.url).pathname,
    [],
    {
      execArgv: ["--import", "tsx"],
      env: {
        FUZZ_SECRET: options.secret ?? "",
        FUZZ_MAX_FRAME_BYTES: String(options.maxFrameBytes),
        MOVIE_LOG_LEVEL: "silent",
      },
      requestTimeoutMs: 30_000,
    },
  );
  const crashes: Crash[] = [];
  node.process.on("message", (m: { id?: number; crash?: Crash } | null) => {
    if (m !== null && typeof m === "object" && m.id === -1 && m.crash !== undefined) crashes.push(m.crash);
  });
  const ready = await node.ready;
  return { node, info: ready.target, secret: options.secret, crashes, recent: [] };
}

/** Asks the target for its counters and checks. */
export async function targetStats(target: Target): Promise<TargetStats> {
  return await target.node.request<TargetStats>({ type: "stats" }, 20_000);
}

/** The counters every inbound frame's outcome moves (see `predict` in frames.ts). */
export function outcomeOf(s: RemotingStats): number {
  let n = s.delivered + s.deadLetters + s.systemDelivered + s.systemDuplicates;
  for (const v of Object.values(s.rejected)) n += v;
  return n;
}

/** One accounting problem or crash, with what reproduces it. */
export interface Finding {
  readonly what: string;
  readonly detail: string;
  readonly frames: readonly string[];
}

/** Running totals of a campaign. */
export interface Totals {
  frames: number;
  bytes: number;
  connections: number;
  batches: number;
  preHandshake: number;
  hostileServer: number;
  unexpectedCloses: number;
  wellBehavedAsks: number;
  byKind: Record<string, number>;
}

/** Options of a campaign. */
export interface CampaignOptions {
  readonly seed: number;
  /** Post-handshake frames to send in total. */
  readonly frames: number;
  /** Frames per fenced batch. */
  readonly batch: number;
  /** Connections before the handshake, and to the hostile server. */
  readonly preHandshake: number;
  readonly hostileServer: number;
  /** Biggest huge value in bytes and its chance per value. */
  readonly hugeBytes: number;
  readonly hugeChance: number;
  /** The systematic sweep (every dictionary value at every field): every `sweepStride`-th case from the seed. */
  readonly sweepStride: number;
  /** Sweep cases to skip before and after the handshake (to resume past a crash when hunting for more). */
  readonly skipPre?: number;
  readonly skipPost?: number;
  /** A well-behaved ask every this many batches. */
  readonly askEvery: number;
  /** Called every few seconds with a progress line. */
  readonly progress?: (line: string) => void;
  /** Stop early (wall-clock budget), in ms. */
  readonly budgetMs?: number;
}

/** The outcome of a campaign. */
export interface CampaignResult {
  readonly totals: Totals;
  readonly findings: Finding[];
  /** Batches during which the node closed the connection (not a failure: where a guard refused a frame). */
  readonly closes: Finding[];
  readonly final: TargetStats;
  /** How far the sweeps got (sweep cases before and after the handshake, skipped ones included). */
  readonly position: { pre: number; post: number };
}

class Accounting {
  framesIn = 0;
  outcomeLo = 0;
  outcomeHi = 0;
  /** Slack allowed in framesIn for closed-early batches. */
  framesInSlack = 0;
}

/**
 * Runs one campaign against `target`. Findings collect what broke (a crash, a counter that does not account for the
 * frames, pollution, a missing answer); the caller asserts there are none.
 */
export async function runCampaign(target: Target, options: CampaignOptions): Promise<CampaignResult> {
  // One independent stream per phase, so how far a time-bounded phase got never changes what the next one sends.
  const root = new Prng(options.seed);
  const preRng = root.fork();
  const rng = root.fork();
  const serverRng = root.fork();
  const askRng = root.fork();
  const findings: Finding[] = [];
  const closes: Finding[] = [];
  const position = { pre: 0, post: 0 };
  const totals: Totals = {
    frames: 0,
    bytes: 0,
    connections: 0,
    batches: 0,
    preHandshake: 0,
    hostileServer: 0,
    unexpectedCloses: 0,
    wellBehavedAsks: 0,
    byKind: {},
  };
  const started = Date.now();
  let lastProgress = started;
  /** Whether `share` of the wall-clock budget is used up (the sweeps take at most 60 %, the rest is random). */
  const overBudget = (share = 1) => options.budgetMs !== undefined && Date.now() - started > options.budgetMs * share;
  const crashed = (): boolean => {
    if (target.crashes.length === 0 && !target.node.exited) return false;
    return true;
  };
  const reportCrash = (frames: readonly string[]): void => {
    const crash = target.crashes[0];
    findings.push({
      what: "crash",
      detail: crash === undefined ? "the target exited without a report" : `${crash.kind}: ${crash.stack}`,
      frames,
    });
  };

  const baseline = await targetStats(target);
  let before = baseline;
  const { host, port } = parseHostPort(target.info.address);
  let uidCounter = 0;
  const nextIdentity = (p: number) => {
    const n = uidCounter++;
    return fuzzIdentity(
      p,
      `fz${options.seed.toString(16)}x${n.toString(16)}`,
      `127.0.${1 + ((n >> 8) % 254)}.${1 + (n % 254)}`,
    );
  };

  // The well-behaved peer: a correct ask on its own connection, answered with a Pong.
  const wellBehaved = async (): Promise<void> => {
    const s0 = await targetStats(target);
    const t0 = Date.now();
    try {
      await wellBehavedAsk();
    } catch (error) {
      // The node's view, so the cause shows in the finding: did the ping reach the echo, did it answer, did the node
      // close the connection as idle (no Pong within heartbeatTimeout), over a bound, or on an error?
      const message = (error as Error).message;
      if (crashed()) throw error;
      const s1 = await targetStats(target);
      const d = (k: keyof RemotingStats) => (s1.stats[k] as number) - (s0.stats[k] as number);
      const view = {
        ms: Date.now() - t0,
        delivered: d("delivered"),
        deadLetters: d("deadLetters"),
        handshakesOk: d("handshakesOk"),
        handshakesFailed: d("handshakesFailed"),
        idleTimeouts: d("idleTimeouts"),
        overflowClosed: d("overflowClosed"),
        incarnationClaimsRefused: d("incarnationClaimsRefused"),
        droppedOverflow: d("droppedOverflow"),
        echoPings: s1.echo.pings - s0.echo.pings,
        echoReplied: s1.echo.replied - s0.echo.replied,
        echoReplyFailed: s1.echo.replyFailed,
      };
      throw new Error(`${message}; the node saw: ${JSON.stringify(view)}`);
    }
  };
  const wellBehavedAsk = async (): Promise<void> => {
    const peer = await openPeer(host, port);
    const identity = nextIdentity(2);
    totals.connections++;
    try {
      await clientHandshake(peer, identity, target.info.system, target.secret);
      const n = 1 + askRng.int(1_000_000);
      const sender = Buffer.from(`${identity.uniqueAddress.address}/temp/$wb${n}`);
      const head = userHeader({
        kind: FrameKind.user,
        headerId: 0,
        recipient: Buffer.from("/user/echo"),
        sender,
        senderUid: Buffer.alloc(0),
        typeName: Buffer.from("test.ping"),
        format: PayloadFormat.json,
        fingerprint: 0,
      });
      peer.write(frame(Buffer.concat([head, Buffer.from(JSON.stringify({ n, text: "" }))])));
      await peer.until(() => peer.pongs.includes(n), 10_000, "the well-behaved ask's Pong");
      if (!peer.pongs.includes(n)) throw new Error("the connection closed before the Pong");
      totals.wellBehavedAsks++;
    } finally {
      peer.destroy();
      await peer.whenClosed;
    }
  };

  /** Frames the fuzzer's sockets received since the last check (the node's frames that did not go to itself). */
  let receivedSinceCheck = 0;
  const cum = { framesHi: 0, outcomeHi: 0, received: 0, handshakeFrames: 0 };
  const check = async (labels: readonly string[], expect: Accounting): Promise<boolean> => {
    if (crashed()) {
      reportCrash(labels);
      return false;
    }
    const now = await targetStats(target);
    const b = before.stats;
    const a = now.stats;
    const dFrames = a.framesIn - b.framesIn;
    const dOutcome = outcomeOf(a) - outcomeOf(b);
    cum.framesHi += expect.framesIn + expect.framesInSlack;
    cum.outcomeHi += expect.outcomeHi;
    cum.received += receivedSinceCheck;
    receivedSinceCheck = 0;
    // Lower bounds per batch: a frame the node handled without counting shows here, in the batch that sent it.
    // Upper bounds over the whole run: the node can reach itself (a hostile claim naming its own host:port makes it
    // dial itself; every frame it writes on that link it also reads), bounded by what it wrote that did not come to
    // the fuzzer, and frames it wrote late move between batches.
    const self =
      Math.max(0, a.framesOut - baseline.stats.framesOut - cum.received) +
      2 * (a.connectAttempts - baseline.stats.connectAttempts);
    const framesCum = a.framesIn - baseline.stats.framesIn - cum.handshakeFrames;
    const outcomeCum = outcomeOf(a) - outcomeOf(baseline.stats);
    const framesOk = dFrames >= expect.framesIn && framesCum <= cum.framesHi + self;
    const outcomeOk = dOutcome >= expect.outcomeLo && outcomeCum <= cum.outcomeHi + self;
    if (!framesOk || !outcomeOk) {
      findings.push({
        what: "accounting",
        detail: `framesIn +${dFrames} (at least ${expect.framesIn}; ${framesCum} in all, at most ${cum.framesHi} + ${self} self), outcome counters +${dOutcome} (at least ${expect.outcomeLo}; ${outcomeCum} in all, at most ${cum.outcomeHi} + ${self}); before ${JSON.stringify(b)} after ${JSON.stringify(a)}`,
        frames: labels,
      });
    }
    if (a.rejected.internal > b.rejected.internal) {
      const names: Record<string, number> = {};
      for (const [k, v] of Object.entries(a.internalErrors))
        if (v !== b.internalErrors[k]) names[k] = v - (b.internalErrors[k] ?? 0);
      findings.push({
        what: "internal error",
        detail: `the connection guard caught ${a.rejected.internal - b.rejected.internal} unexpected error(s) ${JSON.stringify(names)}: a frame no check refused; the guard logged: ${now.guardReports.join(" / ")}`,
        frames: labels,
      });
    }
    if (now.pollution.length > 0 && before.pollution.length === 0) {
      findings.push({ what: "pollution", detail: now.pollution.join("; "), frames: labels });
    }
    if (
      now.seen.badPrototype > before.seen.badPrototype ||
      now.seen.unsendable > before.seen.unsendable ||
      now.seen.resendFailed > before.seen.resendFailed
    ) {
      findings.push({
        what:
          now.seen.badPrototype > before.seen.badPrototype
            ? "swapped prototype"
            : now.seen.unsendable > before.seen.unsendable
              ? "unsendable instance"
              : "re-sending a received message threw",
        detail: now.seen.samples.join("; "),
        frames: labels,
      });
    }
    before = now;
    return true;
  };

  const progress = (phase: string): void => {
    if (options.progress === undefined || Date.now() - lastProgress < 3000) return;
    lastProgress = Date.now();
    const secs = (Date.now() - started) / 1000;
    options.progress(
      `${phase}: ${totals.frames} frames (${Math.round(totals.frames / secs)}/s), ${totals.connections} connections, ${findings.length} findings, ${secs.toFixed(0)} s`,
    );
  };

  // ---- before the handshake ------------------------------------------------------------------------------------
  {
    const expect = new Accounting();
    const labels: string[] = [];
    // Before the handshake a frame above the handshake cap is refused unread (counted as oversize), else decoded.
    const countHandshakeFrame = (bytes: Buffer): void => {
      if (bytes.length - 4 > handshakeFrameBytesMax) {
        expect.outcomeLo++;
        expect.outcomeHi++;
      } else expect.framesIn++;
    };
    const one = async (r: Prng): Promise<void> => {
      const peer = await openPeer(host, port);
      totals.connections++;
      totals.preHandshake++;
      const identity = nextIdentity(3);
      const template = helloTemplate(target.info, identity.uniqueAddress.toString(), "aabb");
      const mode = r.int(10);
      let label: string;
      if (mode === 0) {
        const f = framingFrame({ rng: r, target: target.info } as FuzzContext);
        peer.write(f.bytes);
        expect.outcomeLo++;
        expect.outcomeHi++;
        label = `pre ${f.label}`;
      } else if (mode === 1) {
        // Not a handshake frame at all, or a truncated one (the node waits for the rest until its timeout).
        const f = nextFrame({
          rng: r,
          target: target.info,
          self: identity.uniqueAddress.toString(),
          hugeBytes: 0,
          hugeChance: 0,
          seq: 1,
          definedIds: [],
          temps: [],
        } as FuzzContext);
        if (r.chance(0.5)) {
          peer.write(f.bytes);
          countHandshakeFrame(f.bytes);
          label = `pre non-handshake ${f.label}`;
        } else {
          const cut = Math.max(1, r.int(f.bytes.length));
          peer.write(f.bytes.subarray(0, cut));
          // A length over the cap is refused as soon as its four bytes are in.
          if (cut >= 4 && f.bytes.length - 4 > handshakeFrameBytesMax) {
            expect.outcomeLo++;
            expect.outcomeHi++;
          }
          label = `pre truncated ${f.label}`;
        }
      } else {
        const hello = handshakeFrame(r, template, 0.3, options.hugeBytes, options.hugeChance);
        peer.write(hello.bytes);
        countHandshakeFrame(hello.bytes);
        label = `pre hello ${hello.label}`;
        const challenge = await peer.nextHandshake(5000).catch(() => null);
        if (challenge !== null && challenge.step === "challenge") {
          // Past the hello: a hostile confirm (or, without a secret, maybe a valid one).
          const confirm = handshakeFrame(
            r,
            { step: "confirm", proof: "00" },
            0.3,
            options.hugeBytes,
            options.hugeChance,
          );
          peer.write(confirm.bytes);
          countHandshakeFrame(confirm.bytes);
          label += ` confirm ${confirm.label}`;
          const accepted = await peer.nextHandshake(5000).catch(() => null);
          if (accepted?.step === "accepted") peer.destroy();
        }
      }
      labels.push(label);
      target.recent.push(label);
      if (target.recent.length > 20) target.recent.shift();
      // The node decides every connection: it refuses, times out, or accepted (then this side closed).
      await Promise.race([peer.whenClosed, new Promise((r2) => setTimeout(r2, 5000))]);
      if (!peer.closed) {
        findings.push({
          what: "handshake never decided",
          detail: "the node kept a connection open for 5 s",
          frames: [label],
        });
        peer.destroy();
      }
    };
    const handshakes0 = before.stats.handshakesOk + before.stats.handshakesFailed;
    const connections0 = totals.connections;
    const pool = 4;
    // The sweep first: each hostile hello and confirm of the dictionary, every sweepStride-th.
    const sweepIdentity = nextIdentity(3);
    const cases = sweepHandshakes(target.info, sweepIdentity.uniqueAddress.toString(), sweepValues)
      .filter((_, i) => i % options.sweepStride === options.seed % options.sweepStride)
      .slice(options.skipPre ?? 0);
    const sweepOne = async (c: (typeof cases)[number]): Promise<void> => {
      const peer = await openPeer(host, port);
      totals.connections++;
      totals.preHandshake++;
      labels.push(c.label);
      target.recent.splice(0, target.recent.length, c.label);
      let hello = c.bytes;
      if (c.step === "confirm") {
        const identity = nextIdentity(3);
        hello = controlFrame(
          FrameKind.handshake,
          Buffer.from(JSON.stringify(helloTemplate(target.info, identity.uniqueAddress.toString(), "aabb"))),
        );
      }
      peer.write(hello);
      countHandshakeFrame(hello);
      const challenge = await peer.nextHandshake(5000).catch(() => null);
      if (challenge?.step === "challenge") {
        // After a hostile hello that passed: a confirm without a proof, which every node refuses.
        const confirm =
          c.step === "confirm" ? c.bytes : controlFrame(FrameKind.handshake, Buffer.from('{"step":"confirm"}'));
        peer.write(confirm);
        countHandshakeFrame(confirm);
        const accepted = await peer.nextHandshake(5000).catch(() => null);
        if (accepted?.step === "accepted") peer.destroy();
      }
      await Promise.race([peer.whenClosed, sleep(5000)]);
      if (!peer.closed) {
        findings.push({
          what: "handshake never decided",
          detail: "the node kept a connection open for 5 s",
          frames: [c.label],
        });
        peer.destroy();
      }
    };
    for (let i = 0; i < cases.length && !overBudget(0.25) && !crashed(); i += pool) {
      position.pre = (options.skipPre ?? 0) + i + pool;
      await Promise.all(cases.slice(i, i + pool).map(sweepOne));
      progress("sweep before handshake");
    }
    for (let i = 0; i < options.preHandshake && !overBudget(0.3) && !crashed(); i += pool) {
      const n = Math.min(pool, options.preHandshake - i);
      await Promise.all(Array.from({ length: n }, () => one(preRng.fork())));
      if (crashed()) break;
      progress("before handshake");
    }
    await sleep(50);
    if (await check(labels, expect)) {
      const decided = before.stats.handshakesOk + before.stats.handshakesFailed - handshakes0;
      const opened = totals.connections - connections0;
      if (decided < opened) {
        findings.push({
          what: "accounting",
          detail: `${opened} connections before the handshake, but handshakesOk + handshakesFailed rose by ${decided}`,
          frames: labels.slice(-20),
        });
      }
    }
  }

  // ---- after a valid handshake: the fuzzer as client -----------------------------------------------------------
  let sent = 0;
  let session: { peer: PeerSocket; ctx: FuzzContext } | null = null;
  const newSession = async (): Promise<{ peer: PeerSocket; ctx: FuzzContext }> => {
    const peer = await openPeer(host, port);
    totals.connections++;
    const identity = nextIdentity(1);
    await clientHandshake(peer, identity, target.info.system, target.secret);
    // The handshake's own two frames.
    before = { ...before, stats: { ...before.stats, framesIn: before.stats.framesIn + 2 } };
    cum.handshakeFrames += 2;
    const ctx: FuzzContext = {
      rng: rng.fork(),
      target: target.info,
      self: identity.uniqueAddress.toString(),
      hugeBytes: options.hugeBytes,
      hugeChance: options.hugeChance,
      seq: 1,
      definedIds: [],
      temps: [],
    };
    return { peer, ctx };
  };

  const runBatch = async (peer: PeerSocket, ctx: FuzzContext, frames: GenFrame[], closing: boolean): Promise<void> => {
    const expect = new Accounting();
    let heartbeats = 0;
    for (const f of frames) {
      expect.framesIn += f.framesIn;
      expect.outcomeLo += f.outcome[0];
      expect.outcomeHi += f.outcome[1];
      heartbeats += f.heartbeats;
      totals.bytes += f.bytes.length;
      const k = f.label.split(" ")[0]!;
      totals.byKind[k] = (totals.byKind[k] ?? 0) + 1;
    }
    const labels = frames.map((f) => f.label);
    target.recent.splice(0, target.recent.length, ...labels.slice(-20));
    const replies0 = peer.heartbeatReplies;
    const received0 = peer.receivedFrames;
    if (!closing) {
      expect.framesIn++;
      heartbeats++;
    }
    peer.write(Buffer.concat([...frames.map((f) => f.bytes), ...(closing ? [] : [probe])]));
    totals.frames += frames.length;
    totals.batches++;
    const deadline = 20_000;
    try {
      if (closing) await peer.until(() => false, deadline, "the node to close after a framing error");
      else
        await peer.until(
          () => peer.heartbeatReplies - replies0 >= heartbeats,
          deadline,
          "the batch's heartbeat replies",
        );
    } catch (error) {
      if (!crashed()) findings.push({ what: "no answer", detail: (error as Error).message, frames: labels });
    }
    if (!closing && peer.closed && peer.heartbeatReplies - replies0 < heartbeats) {
      // Closed before the probe was answered: the chunks read so far were counted, any prefix of them handled.
      totals.unexpectedCloses++;
      expect.framesInSlack = expect.framesIn - 1;
      expect.framesIn = 1;
      expect.outcomeLo = 0;
      if (closes.length < 50)
        closes.push({ what: "closed", detail: "the node closed the connection in this batch", frames: labels });
    }
    receivedSinceCheck += peer.receivedFrames - received0;
    const n0 = findings.length;
    await check(labels, expect);
    if (findings.length > n0)
      findings[findings.length - 1] = {
        ...findings[findings.length - 1]!,
        detail: `${findings[findings.length - 1]!.detail} received ${JSON.stringify(peer.received)}`,
      };
    for (const t of peer.askSenders.splice(0)) ctx.temps.push(t);
    if (!closing && peer.closed && findings.length > n0 && findings[findings.length - 1]!.what === "internal error") {
      await bisect(frames);
    }
  };

  /** Finds the frame of `frames` whose prefix makes the node close the connection; saves it for a reproduction. */
  const bisect = async (frames: GenFrame[]): Promise<void> => {
    const s0 = (await targetStats(target)).stats;
    const closesWith = async (sent: GenFrame[]): Promise<boolean> => {
      const { peer } = await newSession();
      peer.write(Buffer.concat([...sent.map((f) => f.bytes), probe]));
      const hb = sent.reduce((n, f) => n + f.heartbeats, 1);
      await peer.until(() => peer.heartbeatReplies >= hb, 10_000, "replay").catch(() => undefined);
      const closed = peer.closed && peer.heartbeatReplies < hb;
      peer.destroy();
      await peer.whenClosed;
      return closed;
    };
    let lo = 1;
    let hi = frames.length;
    if (await closesWith(frames)) {
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (await closesWith(frames.slice(0, mid))) hi = mid;
        else lo = mid + 1;
      }
      const culprit = frames[lo - 1]!;
      const alone = await closesWith([culprit]);
      const file = join(tmpdir(), `fuzz-culprit-${options.seed}-${totals.batches}.bin`);
      writeFileSync(file, culprit.bytes);
      findings.push({
        what: "internal error culprit",
        detail: `frame ${lo} of the batch${alone ? " (alone, too)" : " (only after the frames before it)"}: ${culprit.label}; bytes in ${file}`,
        frames: frames.slice(0, lo).map((f) => f.label),
      });
    } else {
      findings.push({
        what: "internal error culprit",
        detail: "not reproduced on a fresh connection",
        frames: frames.map((f) => f.label),
      });
    }
    // The replays are not accounted frame by frame: their counts join the expectations as they are.
    const s1 = await targetStats(target);
    cum.framesHi += s1.stats.framesIn - s0.framesIn;
    cum.outcomeHi += outcomeOf(s1.stats) - outcomeOf(s0);
    cum.received += s1.stats.framesOut - s0.framesOut;
    before = s1;
  };

  // The sweep after the handshake: every dictionary value at every field of every frame kind's JSON.
  {
    let sweep: Generator<GenFrame> | null = null;
    let done = false;
    while (!done && !crashed() && !overBudget(0.6)) {
      if (session === null || session.peer.closed) {
        session?.peer.destroy();
        session = await newSession();
      }
      if (sweep === null) {
        sweep = sweepFrames(session.ctx, sweepValues, options.seed, options.sweepStride);
        for (let i = 0; i < (options.skipPost ?? 0); i++) sweep.next();
        position.post = options.skipPost ?? 0;
      }
      const frames: GenFrame[] = [];
      for (let i = 0; i < options.batch; i++) {
        const next = sweep.next();
        if (next.done === true) {
          done = true;
          break;
        }
        frames.push(next.value);
      }
      position.post += frames.length;
      if (frames.length > 0) await runBatch(session.peer, session.ctx, frames, false);
      progress("sweep after handshake");
    }
  }

  while (sent < options.frames && !crashed() && !overBudget(0.85)) {
    if (session === null || session.peer.closed) {
      session?.peer.destroy();
      session = await newSession();
    }
    const { peer, ctx } = session;
    const n = Math.min(options.batch, options.frames - sent);
    const frames = Array.from({ length: n }, () => nextFrame(ctx));
    await runBatch(peer, ctx, frames, false);
    sent += n;
    const ending = rng.int(100);
    if (!peer.closed && ending < 2) {
      // A framing error ends the stream: sent alone, after the fence.
      await runBatch(peer, ctx, [framingFrame(ctx)], true);
      sent++;
    } else if (!peer.closed && ending < 4) {
      // A partial frame left behind by a peer that goes away.
      const f = nextFrame(ctx);
      peer.write(f.bytes.subarray(0, Math.max(1, rng.int(f.bytes.length))));
      peer.destroy();
      await peer.whenClosed;
    } else if (ending < 7) {
      peer.destroy();
      await peer.whenClosed;
    }
    if (totals.batches % options.askEvery === 0) {
      await wellBehaved().catch((error: Error) => {
        if (!crashed()) findings.push({ what: "ask failed", detail: error.message, frames: target.recent.slice() });
      });
      await check(["well-behaved ask"], { framesIn: 3, outcomeLo: 1, outcomeHi: 1, framesInSlack: 0 });
    }
    progress("after handshake");
  }
  session?.peer.destroy();
  if (session !== null) await session.peer.whenClosed;

  // ---- a hostile server the target dials ------------------------------------------------------------------------
  if (!crashed() && options.hostileServer > 0) {
    // The hostile server gets what is left of the budget, at least 3 s.
    const left = options.budgetMs === undefined ? 30_000 : Math.max(3000, options.budgetMs - (Date.now() - started));
    const s0 = (await targetStats(target)).stats;
    const conversations0 = totals.hostileServer;
    await hostileServer(target, serverRng, options, totals, findings, Math.min(30_000, left), () =>
      progress("hostile server"),
    );
    if (!crashed()) {
      // Every connection the node dialled and the fake server answered ended in a counted handshake outcome (the
      // node's own refusal or timeout, or a success this side then closed).
      const s1 = (await targetStats(target)).stats;
      const decided = s1.handshakesOk + s1.handshakesFailed - (s0.handshakesOk + s0.handshakesFailed);
      const conversations = totals.hostileServer - conversations0;
      if (decided < conversations) {
        findings.push({
          what: "accounting",
          detail: `the node dialled ${conversations} hostile-server connections, but handshakesOk + handshakesFailed rose by ${decided}`,
          frames: target.recent.slice(),
        });
      }
    }
  }

  // ---- the end ----------------------------------------------------------------------------------------------------
  if (crashed()) reportCrash(target.recent.slice());
  else {
    await wellBehaved().catch((error: Error) =>
      findings.push({ what: "ask failed", detail: error.message, frames: target.recent.slice() }),
    );
  }
  const final = crashed() ? before : await targetStats(target);
  if (final.pollution.length > 0) findings.push({ what: "pollution", detail: final.pollution.join("; "), frames: [] });
  return { totals, findings: dedupe(findings), closes, final, position };
}

/** Handshake frames above this are refused unread (a namespace read, so the suite also runs on code without a cap). */
const handshakeFrameBytesMax =
  (handshake as { handshakeFrameBytesMax?: number }).handshakeFrameBytesMax ?? Number.POSITIVE_INFINITY;

/** The dictionary the sweep puts at every field. */
const sweepValues = [...smallJson, ...deepValues];

const probe = controlFrame(FrameKind.heartbeat, Buffer.alloc(0));

/** The target dials fake servers that answer its hello with hostile challenges and accepts, or accept and fuzz. */
async function hostileServer(
  target: Target,
  rng: Prng,
  options: CampaignOptions,
  totals: Totals,
  findings: Finding[],
  budgetMs: number,
  progress: () => void,
): Promise<void> {
  const servers: Server[] = [];
  const sockets: PeerSocket[] = [];
  let remaining = options.hostileServer;
  const labels: string[] = [];
  const fuzzAfter: PeerSocket[] = [];
  const onConnection = (socket: Socket, system: string, serverPort: number): void => {
    const peer = new PeerSocket(socket);
    peer.answerHeartbeats = true;
    peer.server = { system, port: serverPort };
    sockets.push(peer);
    if (remaining <= 0) {
      peer.destroy();
      return;
    }
    remaining--;
    totals.hostileServer++;
    const r = rng.fork();
    void (async () => {
      const hello = await peer.nextHandshake(5000).catch(() => null);
      if (hello === null) return;
      const identity = fuzzIdentity(serverPort, `srv${r.u32().toString(16)}`);
      const self = {
        ...identity,
        system,
        uniqueAddress: fuzzIdentityFor(system, serverPort, identity.uniqueAddress.uid),
      };
      const valid = serverChallenge(self, target.secret, hello);
      const mode = r.int(10);
      let label = "server";
      if (valid === null) label += " (hello not valid)";
      if (mode === 0) {
        const f = handshakeFrame(r, rejectTemplate, 0, options.hugeBytes, options.hugeChance);
        peer.write(f.bytes);
        label += ` reject ${f.label}`;
      } else if (mode === 1) {
        const bytes = r.bytes(1 + r.int(64));
        peer.write(bytes);
        label += " garbage";
      } else if (valid !== null) {
        const template = challengeTemplate(
          valid.challenge.system,
          valid.challenge.from,
          valid.challenge.nonce,
          valid.challenge.proof,
        ) as Json;
        const challenge = handshakeFrame(r, template, 0.4, options.hugeBytes, options.hugeChance);
        peer.write(challenge.bytes);
        label += ` challenge ${challenge.label}`;
        const confirm = await peer.nextHandshake(5000).catch(() => null);
        if (confirm !== null && confirmValid(self, target.secret, valid.hello, valid.challenge, confirm)) {
          const accepted = handshakeFrame(
            r,
            r.chance(0.8) ? acceptedTemplate : rejectTemplate,
            0.5,
            options.hugeBytes,
            options.hugeChance,
          );
          peer.write(accepted.bytes);
          label += ` then ${accepted.label}`;
          if (accepted.valid) fuzzAfter.push(peer);
        }
      }
      labels.push(label);
      target.recent.splice(0, target.recent.length, label);
    })();
  };
  const ports: number[] = [];
  const count = Math.min(16, Math.max(1, Math.ceil(options.hostileServer / 6)));
  for (let i = 0; i < count; i++) {
    const system = `srv${i}`;
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const p = (server.address() as { port: number }).port;
    server.on("connection", (s) => onConnection(s, system, p));
    servers.push(server);
    ports.push(p);
    const dialled = await target.node
      .request({ type: "dial", path: `movie.tcp://${system}@127.0.0.1:${p}/user/x` })
      .then(() => true)
      .catch(() => false);
    if (!dialled) break;
  }
  const started = Date.now();
  while (remaining > 0 && Date.now() - started < budgetMs && !target.node.exited && target.crashes.length === 0) {
    await sleep(100);
    progress();
    // Connections the target opened and the fake server accepted: ask through them and fuzz the replies.
    for (const peer of fuzzAfter.splice(0)) {
      const { system, port } = peer.server!;
      const asked = await target.node
        .request({ type: "askOut", path: `movie.tcp://${system}@127.0.0.1:${port}/user/asked` })
        .then(() => true)
        .catch(() => false);
      if (!asked) break;
      await peer.until(() => peer.askSenders.length > 0, 3000, "the target's ask").catch(() => undefined);
      const ctx: FuzzContext = {
        rng: rng.fork(),
        target: target.info,
        self: `movie.tcp://${system}@127.0.0.1:${port}#srv`,
        hugeBytes: options.hugeBytes,
        hugeChance: options.hugeChance,
        seq: 1,
        definedIds: [],
        temps: peer.askSenders.splice(0),
      };
      const frames = Array.from({ length: options.batch }, () => nextFrame(ctx));
      peer.write(Buffer.concat([...frames.map((f) => f.bytes), probe]));
      totals.frames += frames.length;
      await peer
        .until(() => peer.heartbeatReplies > 0, 10_000, "heartbeat reply")
        .catch((error: Error) => {
          if (!peer.closed && target.crashes.length === 0)
            findings.push({ what: "no answer", detail: error.message, frames: frames.map((f) => f.label) });
        });
      if (target.crashes.length > 0) {
        target.recent.splice(0, target.recent.length, ...frames.map((f) => f.label).slice(-20));
      }
      peer.destroy();
    }
  }
  for (const server of servers) server.close();
  // Every connection the target opened must end: refused, timed out, or closed by this side.
  const deadline = Date.now() + 5000;
  while (sockets.some((s) => !s.closed) && Date.now() < deadline) await sleep(50);
  for (const s of sockets) s.destroy();
  if (target.crashes.length > 0 || target.node.exited) return;
  void labels;
}

function fuzzIdentityFor(system: string, port: number, uid: string): UniqueAddress {
  return new UniqueAddress(Address.tcp(system, "127.0.0.1", port), uid);
}

function parseHostPort(address: string): { host: string; port: number } {
  const at = address.lastIndexOf("@");
  const colon = address.lastIndexOf(":");
  return { host: address.slice(at + 1, colon), port: Number(address.slice(colon + 1)) };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function dedupe(findings: Finding[]): Finding[] {
  const seen = new Set<string>();
  return findings.filter((f) => {
    // The node's view appended to a failed ask varies per ask; the failure itself is the key.
    const key = `${f.what}|${f.detail.split("; the node saw")[0]!.slice(0, 200)}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
