// Remoting benchmark: two OS processes on loopback (`npm run bench:remote`).
// The ceiling is measured in the same run: raw length-prefixed frames carrying the very envelope bytes a Movie tell
// produces, packed into 64 KiB writes over a plain socket. Movie's figures sit beside it. Results go to
// bench/results/remote.json. Counts are bounded so the whole run takes well under a minute.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { createInterface } from "node:readline";
import { AbstractBehavior, type ActorContext, type ActorRef, ActorSystem } from "../src/actor/index.ts";
import { compressedHeaderBytes } from "../src/remote/envelope.ts";
import { MessageRegistry, type RemoteActorRef } from "../src/remote/index.ts";
import {
  clock,
  envelopeFrame,
  listenLoopback,
  payloadText,
  pct,
  rawEchoServer,
  rawRoundTrips,
  rawSinkServer,
  rawTell,
} from "./support/raw-frames.ts";
import { benchTls, makeBenchCertificates } from "./support/tls.ts";

const tellCount = Number(process.env.MOVIE_BENCH_TELLS ?? 1_500_000);
const tellWindow = 50_000;
const ackEvery = 10_000;
const sequentialAsks = Number(process.env.MOVIE_BENCH_ASKS ?? 5_000);
const parallelAsks = Number(process.env.MOVIE_BENCH_PARALLEL_ASKS ?? 50_000);
const inFlight = 100;

/** The benchmark's wire types (64-byte payload, as the original's standard lane). */
class Tick {
  constructor(
    readonly seq: number,
    readonly payload: string,
  ) {}
}
class Ack {
  constructor(
    readonly count: number,
    /** The receiver's CPU time (user + system) when it acknowledged, in µs. */
    readonly cpuMicros: number,
  ) {}
}
/** Asks the sink for its count and its process's CPU time now (the baseline and end of a measured round). */
class Probe {}
class Req {
  constructor(
    readonly seq: number,
    readonly payload: string,
  ) {}
}
class Res {
  constructor(readonly seq: number) {}
}
// The hot types declare binary fields (MOVIE_BENCH_JSON=1 measures the JSON payload instead).
const binary = process.env.MOVIE_BENCH_JSON !== "1";
// MOVIE_BENCH_TLS=1: both Movie nodes run inside mutual TLS (the integrity option); the raw ceiling stays plain TCP,
// so the ratio to it shows what TLS costs on the hot path. Results then go to bench/results/remote-tls.json.
const withTls = process.env.MOVIE_BENCH_TLS === "1";
/** Remoting settings of both benchmark nodes (certificates from the dir the parent made, with TLS). */
function benchSettings(): { host: string; port: number; tls?: ReturnType<typeof benchTls> } {
  const dir = process.env.MOVIE_BENCH_TLS_DIR;
  return withTls && dir !== undefined
    ? { host: "127.0.0.1", port: 0, tls: benchTls(dir) }
    : { host: "127.0.0.1", port: 0 };
}
const tickType = MessageRegistry.register(Tick, {
  name: "bench.tick",
  ...(binary ? { fields: { seq: "number", payload: "string" } } : {}),
});
MessageRegistry.register(Ack, { name: "bench.ack" });
MessageRegistry.register(Probe, { name: "bench.probe" });
const reqType = MessageRegistry.register(Req, {
  name: "bench.req",
  ...(binary ? { fields: { seq: "number", payload: "string" } } : {}),
});
MessageRegistry.register(Res, { name: "bench.res", ...(binary ? { fields: { seq: "number" } } : {}) });

class Sink extends AbstractBehavior<unknown> {
  private count = 0;
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Probe) ctx.sender?.tell(new Ack(this.count, cpuMicros()));
    else if (++this.count % ackEvery === 0) ctx.sender?.tell(new Ack(this.count, cpuMicros()));
  }
}
class Responder extends AbstractBehavior<unknown> {
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Req) ctx.sender?.tell(new Res(message.seq));
  }
}

/** This process's CPU time so far (user + system), in µs: per-message cost that host load does not distort much. */
function cpuMicros(): number {
  const { user, system } = process.cpuUsage();
  return user + system;
}

// ---------------------------------------------------------------- child process

async function child(): Promise<void> {
  const system = ActorSystem.create("bench-server");
  const remoting = await system.enableRemoting(benchSettings());
  system.spawn(new Sink(), "sink");
  system.spawn(new Responder(), "responder");
  // Raw sink: counts frames, answers a 4-byte count every ackEvery frames. The JSON variant also parses each
  // payload, the serialization floor any JSON wire format pays. Raw echo: sends every frame straight back.
  const [rawSink, rawJsonSink, rawEcho] = await Promise.all([
    listenLoopback(rawSinkServer(false, ackEvery)),
    listenLoopback(rawSinkServer(true, ackEvery)),
    listenLoopback(rawEchoServer()),
  ]);
  process.stdout.write(
    `${JSON.stringify({ address: remoting.selfAddress.address.toString(), rawSink, rawJsonSink, rawEcho })}\n`,
  );
  process.stdin.resume();
  process.stdin.on("end", () => process.exit(0));
}

// ---------------------------------------------------------------- parent process

class AckCollector extends AbstractBehavior<unknown> {
  acked = 0;
  cpuMicros = 0;
  waiter: (() => void) | null = null;
  receive(message: unknown): void {
    if (message instanceof Ack) {
      this.acked = message.count;
      this.cpuMicros = message.cpuMicros;
      this.waiter?.();
    }
  }
}

/** A round's result with the CPU µs per message it cost this process (client) and the other one (server). */
interface Measured<T> {
  value: T;
  clientCpuPerMsg: number;
  serverCpuPerMsg: number;
}

/**
 * Runs one round of `count` messages and charges it the CPU time both processes spent meanwhile; the server's comes
 * from a Probe before and after (two tiny messages, negligible beside a round).
 */
async function measured<T>(
  probe: { sink: ActorRef<unknown>; acks: AckCollector; ackRef: ActorRef<unknown> },
  count: number,
  run: () => Promise<T>,
): Promise<Measured<T>> {
  const serverCpu = async (): Promise<number> => {
    const answered = new Promise<void>((r) => (probe.acks.waiter = r));
    probe.sink.tell(new Probe(), probe.ackRef);
    await answered;
    return probe.acks.cpuMicros;
  };
  const server0 = await serverCpu();
  const client0 = cpuMicros();
  const value = await run();
  const client = cpuMicros() - client0;
  const server = (await serverCpu()) - server0;
  return { value, clientCpuPerMsg: client / count, serverCpuPerMsg: server / count };
}

async function movieTell(sink: ActorRef<unknown>, acks: AckCollector, ackRef: ActorRef<unknown>, count: number) {
  const base = acks.acked;
  const started = clock.now();
  let sent = 0;
  while (sent < count) {
    while (sent < count && sent - (acks.acked - base) < tellWindow) {
      sink.tell(new Tick(sent, payloadText), ackRef);
      sent++;
    }
    await new Promise<void>((r) => (acks.waiter = r));
  }
  while (acks.acked - base < count) await new Promise<void>((r) => (acks.waiter = r));
  return (count / (clock.now() - started)) * 1000;
}

async function movieSequentialAsks(responder: ActorRef<unknown>, count: number) {
  const latencies: number[] = [];
  const started = clock.now();
  for (let i = 0; i < count; i++) {
    const t0 = clock.now();
    await responder.ask(new Req(i, payloadText), Res, 5_000);
    latencies.push(clock.now() - t0);
  }
  const rate = (count / (clock.now() - started)) * 1000;
  return { rate, latencies: latencies.sort((x, y) => x - y) };
}

async function movieParallelAsks(responder: ActorRef<unknown>, count: number, parallel: number) {
  const latencies: number[] = [];
  let next = 0;
  const started = clock.now();
  const worker = async (): Promise<void> => {
    while (next < count) {
      const seq = next++;
      const t0 = clock.now();
      await responder.ask(new Req(seq, payloadText), Res, 10_000);
      latencies.push(clock.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  return { rate: (count / (clock.now() - started)) * 1000, latencies: latencies.sort((x, y) => x - y) };
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

async function parent(): Promise<void> {
  const profile =
    process.env.MOVIE_BENCH_PROFILE === undefined
      ? []
      : ["--cpu-prof", `--cpu-prof-dir=${process.env.MOVIE_BENCH_PROFILE}`];
  const certificates = withTls ? makeBenchCertificates() : null;
  if (certificates !== null) process.env.MOVIE_BENCH_TLS_DIR = certificates.dir;
  const proc = spawn(process.execPath, [...profile, "--import", "tsx", new URL(import.meta.url).pathname, "--child"], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, MOVIE_LOG_LEVEL: "error" },
  });
  const line = await new Promise<string>((r) => createInterface({ input: proc.stdout! }).once("line", r));
  const info = JSON.parse(line) as { address: string; rawSink: number; rawJsonSink: number; rawEcho: number };

  const system = ActorSystem.create("bench-client");
  const remoting = await system.enableRemoting(benchSettings());
  const acks = new AckCollector();
  const ackRef = system.spawn(acks, "acks");
  const sink = system.actorSelection(`${info.address}/user/sink`);
  const responder = system.actorSelection(`${info.address}/user/responder`);

  // The exact bytes Movie writes for one Tick from /user/acks once its header has an id on the connection.
  const tickFrame = envelopeFrame(tickType, new Tick(123456, payloadText), {
    headerId: 1,
    recipient: (sink as RemoteActorRef).path.localPart,
    sender: ackRef.path.toString(),
    senderUid: remoting.selfAddress.uid,
  });
  // The JSON floor: the same 3-byte compressed header, the payload as JSON built and parsed per message.
  const tickJson = {
    header: tickFrame.subarray(4, 4 + compressedHeaderBytes),
    payload: (seq: number) => JSON.stringify(new Tick(seq, payloadText)),
  };
  // An ask's request: its sender is a one-off reply actor, so the header is written out (id 0).
  const reqFrame = envelopeFrame(reqType, new Req(1234, payloadText), {
    headerId: 0,
    recipient: (responder as RemoteActorRef).path.localPart,
    sender: `${system.address}/temp/$abc`,
    senderUid: remoting.selfAddress.uid,
  });

  // Warm up both paths (JIT, connections).
  await rawTell(info.rawSink, tickFrame, 50_000);
  await rawTell(info.rawJsonSink, tickFrame, 50_000, tickJson);
  await movieTell(sink, acks, ackRef, 50_000);
  await rawRoundTrips(info.rawEcho, reqFrame, 500);
  await movieSequentialAsks(responder, 500);

  // Alternate ceiling and Movie in rounds and keep medians, so load from other processes on the host hits both alike.
  const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? 5);
  // Receivers acknowledge every ackEvery messages, so each round is a whole number of those.
  const perRound = Math.max(1, Math.ceil(tellCount / rounds / ackEvery)) * ackEvery;
  const rawTells: number[] = [];
  const rawJsonTells: number[] = [];
  const movieTells: number[] = [];
  let rawRtt: number[] = [];
  let seqLatencies: number[] = [];
  const seqRates: number[] = [];
  // CPU µs per message of each round: [client, server].
  const cpu = { raw: [] as number[][], rawJson: [] as number[][], movie: [] as number[][], trip: [] as number[][] };
  const ask: number[][] = [];
  const probe = { sink, acks, ackRef };
  const perAsk = Math.ceil(sequentialAsks / rounds);
  for (let round = 0; round < rounds; round++) {
    const raw = await measured(probe, perRound, () => rawTell(info.rawSink, tickFrame, perRound));
    rawTells.push(raw.value);
    cpu.raw.push([raw.clientCpuPerMsg, raw.serverCpuPerMsg]);
    const rawJson = await measured(probe, perRound, () => rawTell(info.rawJsonSink, tickFrame, perRound, tickJson));
    rawJsonTells.push(rawJson.value);
    cpu.rawJson.push([rawJson.clientCpuPerMsg, rawJson.serverCpuPerMsg]);
    const movie = await measured(probe, perRound, () => movieTell(sink, acks, ackRef, perRound));
    movieTells.push(movie.value);
    cpu.movie.push([movie.clientCpuPerMsg, movie.serverCpuPerMsg]);
    const trips = await measured(probe, perAsk, () => rawRoundTrips(info.rawEcho, reqFrame, perAsk));
    rawRtt = rawRtt.concat(trips.value);
    cpu.trip.push([trips.clientCpuPerMsg, trips.serverCpuPerMsg]);
    const seqRound = await measured(probe, perAsk, () => movieSequentialAsks(responder, perAsk));
    seqLatencies = seqLatencies.concat(seqRound.value.latencies);
    seqRates.push(seqRound.value.rate);
    ask.push([seqRound.clientCpuPerMsg, seqRound.serverCpuPerMsg]);
  }
  const cpuMedian = (samples: number[][], side: 0 | 1, digits = 3) =>
    +median(samples.map((s) => s[side]!)).toFixed(digits);
  rawRtt.sort((x, y) => x - y);
  seqLatencies.sort((x, y) => x - y);
  const rawTellRate = median(rawTells);
  const rawJsonTellRate = median(rawJsonTells);
  const movieTellRate = median(movieTells);
  const seq = { rate: median(seqRates), latencies: seqLatencies };
  const par = await movieParallelAsks(responder, parallelAsks, inFlight);
  const stats = remoting.stats;

  const cpuOf = (samples: number[][]) => [cpuMedian(samples, 0), cpuMedian(samples, 1)] as const;
  const [rawSend, rawReceive] = cpuOf(cpu.raw);
  const [movieSend, movieReceive] = cpuOf(cpu.movie);
  const cpuRatio = {
    slower: +(Math.max(rawSend, rawReceive) / Math.max(movieSend, movieReceive)).toFixed(2),
    summed: +((rawSend + rawReceive) / (movieSend + movieReceive)).toFixed(2),
  };
  const rawRttRate = (rawRtt.length / rawRtt.reduce((sum, x) => sum + x, 0)) * 1000;
  const rows = [
    { metric: "raw frames tell (ceiling)", value: Math.round(rawTellRate), unit: "msg/s", ratio: "1.00" },
    {
      metric: "raw frames + JSON encode/decode",
      value: Math.round(rawJsonTellRate),
      unit: "msg/s",
      ratio: (rawJsonTellRate / rawTellRate).toFixed(2),
    },
    {
      metric: "movie remote tell",
      value: Math.round(movieTellRate),
      unit: "msg/s",
      ratio: (movieTellRate / rawTellRate).toFixed(2),
    },
    { metric: "CPU per tell, sender: raw", value: cpuMedian(cpu.raw, 0), unit: "µs", ratio: "" },
    { metric: "CPU per tell, sender: raw + JSON", value: cpuMedian(cpu.rawJson, 0), unit: "µs", ratio: "" },
    { metric: "CPU per tell, sender: movie", value: cpuMedian(cpu.movie, 0), unit: "µs", ratio: "" },
    { metric: "CPU per tell, receiver: raw", value: cpuMedian(cpu.raw, 1), unit: "µs", ratio: "" },
    { metric: "CPU per tell, receiver: raw + JSON", value: cpuMedian(cpu.rawJson, 1), unit: "µs", ratio: "" },
    { metric: "CPU per tell, receiver: movie", value: cpuMedian(cpu.movie, 1), unit: "µs", ratio: "" },
    // What the CPU figures predict, steadier than msg/s on a shared host: with a free core per process the slower
    // side sets the pace; when both processes share cores with other work, their sum does.
    { metric: "tell ratio predicted by CPU: slower side", value: cpuRatio.slower, unit: "", ratio: "" },
    { metric: "tell ratio predicted by CPU: both sides", value: cpuRatio.summed, unit: "", ratio: "" },
    { metric: "raw round trip p50 (ceiling)", value: +pct(rawRtt, 50).toFixed(3), unit: "ms", ratio: "1.00" },
    { metric: "raw round trip p99", value: +pct(rawRtt, 99).toFixed(3), unit: "ms", ratio: "" },
    { metric: "raw round trips, 1 in flight", value: Math.round(rawRttRate), unit: "rt/s", ratio: "" },
    {
      metric: "movie ask p50 (1 in flight)",
      value: +pct(seq.latencies, 50).toFixed(3),
      unit: "ms",
      ratio: (pct(seq.latencies, 50) / pct(rawRtt, 50)).toFixed(2),
    },
    {
      metric: "CPU per round trip, caller / echo: raw",
      value: `${cpuMedian(cpu.trip, 0, 1)} / ${cpuMedian(cpu.trip, 1, 1)}`,
      unit: "µs",
      ratio: "",
    },
    {
      metric: "CPU per ask, caller / responder: movie",
      value: `${cpuMedian(ask, 0, 1)} / ${cpuMedian(ask, 1, 1)}`,
      unit: "µs",
      ratio: "",
    },
    { metric: "movie ask p99 (1 in flight)", value: +pct(seq.latencies, 99).toFixed(3), unit: "ms", ratio: "" },
    {
      metric: "movie ask, 1 in flight",
      value: Math.round(seq.rate),
      unit: "asks/s",
      ratio: (seq.rate / rawRttRate).toFixed(2),
    },
    { metric: `movie ask, ${inFlight} in flight`, value: Math.round(par.rate), unit: "asks/s", ratio: "" },
    {
      metric: `movie ask p50 (${inFlight} in flight)`,
      value: +pct(par.latencies, 50).toFixed(3),
      unit: "ms",
      ratio: "",
    },
    {
      metric: `movie ask p99 (${inFlight} in flight)`,
      value: +pct(par.latencies, 99).toFixed(3),
      unit: "ms",
      ratio: "",
    },
    {
      metric: "frames per socket write (client)",
      value: +(stats.framesOut / Math.max(1, stats.writes)).toFixed(1),
      unit: "frames",
      ratio: "",
    },
  ];
  console.log(
    `remoting, two processes on loopback; ${cpus().length} CPUs, Node ${process.version}, load average ${loadavg()
      .map((x) => x.toFixed(2))
      .join(
        " ",
      )}; ${binary ? "binary codec" : "JSON"} payloads${withTls ? " inside mutual TLS" : ""}; ${tellCount} tells of a ${tickFrame.length}-byte frame, ${sequentialAsks} sequential asks, ${parallelAsks} asks at ${inFlight} in flight`,
  );
  console.table(rows);
  const targets = {
    tellRatio: +(movieTellRate / rawTellRate).toFixed(2),
    tellAtLeastHalfOfCeiling: movieTellRate >= 0.5 * rawTellRate,
    tellRatioPredictedByCpu: cpuRatio,
    askP50Ratio: +(pct(seq.latencies, 50) / pct(rawRtt, 50)).toFixed(2),
    tellVersusJsonFloor: +(movieTellRate / rawJsonTellRate).toFixed(2),
    askP50AtMostTwiceRawRoundTrip: pct(seq.latencies, 50) <= 2 * pct(rawRtt, 50),
  };
  console.log("targets", targets);
  mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
  writeFileSync(
    new URL(withTls ? "./results/remote-tls.json" : "./results/remote.json", import.meta.url),
    `${JSON.stringify(
      {
        bench: "remote",
        node: process.version,
        cpus: cpus().length,
        loadAverage: loadavg(),
        payload: binary ? "binary" : "json",
        tls: withTls,
        workload: { tellCount, tellWindow, sequentialAsks, parallelAsks, inFlight, frameBytes: tickFrame.length },
        rows,
        rounds: { rawTells, rawJsonTells, movieTells, seqRates, cpuPerMessage: { ...cpu, ask } },
        targets,
        stats,
      },
      null,
      2,
    )}\n`,
  );
  proc.stdin?.end();
  await system.terminate();
  await new Promise((r) => proc.once("exit", r));
}

if (process.argv.includes("--child")) await child();
else await parent();
