// Remoting benchmark: two OS processes on loopback (`npm run bench:remote`).
// The ceiling is measured in the same run: raw length-prefixed frames carrying the very envelope bytes a Movie tell
// produces, packed into 64 KiB writes over a plain socket. Movie's figures sit beside it. Results go to
// bench/results/remote.json. Counts are bounded so the whole run takes well under a minute.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { cpus } from "node:os";
import { createInterface } from "node:readline";
import { AbstractBehavior, type ActorContext, type ActorRef, ActorSystem, RealScheduler } from "../src/actor/index.ts";
import { FrameKind, userEnvelopeBytesBound, userHeaderEnd, writeUserEnvelope } from "../src/remote/envelope.ts";
import { FrameDecoder, MessageRegistry, type RemoteActorRef } from "../src/remote/index.ts";

const clock = new RealScheduler();
const tellCount = Number(process.env.MOVIE_BENCH_TELLS ?? 300_000);
const tellWindow = 50_000;
const ackEvery = 10_000;
const sequentialAsks = Number(process.env.MOVIE_BENCH_ASKS ?? 5_000);
const parallelAsks = Number(process.env.MOVIE_BENCH_PARALLEL_ASKS ?? 50_000);
const inFlight = 100;
const payloadText = "x".repeat(64);

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
/** Asks the sink for its count and CPU time now (the baseline of a round). */
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
MessageRegistry.register(Tick, { name: "bench.tick" });
MessageRegistry.register(Ack, { name: "bench.ack" });
MessageRegistry.register(Probe, { name: "bench.probe" });
MessageRegistry.register(Req, { name: "bench.req" });
MessageRegistry.register(Res, { name: "bench.res" });

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
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  system.spawn(new Sink(), "sink");
  system.spawn(new Responder(), "responder");
  // Raw sink: counts frames, answers a 4-byte count every ackEvery frames. The JSON variant also parses each
  // payload, the serialization floor any JSON wire format pays.
  const sinkServer = (parse: boolean) =>
    createServer((socket) => {
      socket.setNoDelay(true);
      const decoder = new FrameDecoder();
      let count = 0;
      socket.on("data", (chunk: Buffer) => {
        for (const frame of decoder.push(chunk)) {
          if (parse) JSON.parse(frame.toString("utf8", userHeaderEnd(frame)));
          if (++count % ackEvery === 0) {
            const out = Buffer.allocUnsafe(8);
            out.writeUInt32BE(count);
            out.writeUInt32BE(cpuMicros() % 2 ** 32, 4);
            socket.write(out);
          }
        }
      });
    });
  const rawSink = sinkServer(false);
  const rawJsonSink = sinkServer(true);
  // Raw echo: sends every frame straight back (the raw round trip).
  const rawEcho = createServer((socket) => {
    socket.setNoDelay(true);
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      const frames = decoder.push(chunk);
      if (frames.length === 0) return;
      const out: Buffer[] = [];
      for (const frame of frames) {
        const header = Buffer.allocUnsafe(4);
        header.writeUInt32BE(frame.length);
        out.push(header, Buffer.from(frame));
      }
      socket.write(Buffer.concat(out));
    });
  });
  await Promise.all([
    new Promise<void>((r) => rawSink.listen(0, "127.0.0.1", r)),
    new Promise<void>((r) => rawJsonSink.listen(0, "127.0.0.1", r)),
    new Promise<void>((r) => rawEcho.listen(0, "127.0.0.1", r)),
  ]);
  const port = (s: typeof rawSink): number => (s.address() as { port: number }).port;
  process.stdout.write(
    `${JSON.stringify({ address: remoting.selfAddress.address.toString(), rawSink: port(rawSink), rawJsonSink: port(rawJsonSink), rawEcho: port(rawEcho) })}\n`,
  );
  process.stdin.resume();
  process.stdin.on("end", () => process.exit(0));
}

// ---------------------------------------------------------------- parent process

function envelopeFrame(recipient: string, sender: string, senderUid: string, type: string, payload: string): Buffer {
  const recipientBytes = Buffer.from(recipient);
  const buf = Buffer.alloc(userEnvelopeBytesBound(recipientBytes, sender, senderUid, type, payload));
  const end = writeUserEnvelope(buf, 0, FrameKind.user, recipientBytes, sender, senderUid, type, payload);
  return Buffer.from(buf.subarray(0, end));
}

async function openSocket(port: number): Promise<Socket> {
  const socket = connect({ host: "127.0.0.1", port });
  socket.setNoDelay(true);
  await new Promise<void>((r) => socket.once("connect", () => r()));
  return socket;
}

/**
 * Raw ceiling for tells: frames packed into 64 KiB writes, respecting socket backpressure. With `header`, every frame
 * is built from a freshly stringified Tick behind that header (the JSON floor) instead of copying `frame`.
 */
async function rawTell(port: number, frame: Buffer, count: number, header: Buffer | null = null): Promise<TellRound> {
  const socket = await openSocket(port);
  let acked = 0;
  let serverCpu = 0;
  let serverCpu0 = 0;
  let waiter: (() => void) | null = null;
  let pendingAck = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    pendingAck = Buffer.concat([pendingAck, chunk]);
    while (pendingAck.length >= 8) {
      acked = pendingAck.readUInt32BE(0);
      serverCpu = pendingAck.readUInt32BE(4);
      if (acked === ackEvery) serverCpu0 = serverCpu;
      pendingAck = pendingAck.subarray(8);
    }
    waiter?.();
  });
  const perChunk = Math.floor((64 * 1024) / frame.length);
  const started = clock.now();
  const clientCpu0 = cpuMicros();
  let sent = 0;
  while (sent < count) {
    const n = Math.min(perChunk, count - sent);
    const chunk = Buffer.allocUnsafe(n * frame.length + 1024);
    let o = 0;
    for (let i = 0; i < n; i++) {
      if (header === null) {
        o += frame.copy(chunk, o);
      } else {
        const at = o;
        o += 4;
        o += header.copy(chunk, o);
        o += chunk.write(JSON.stringify(new Tick(sent + i, payloadText)), o, "utf8");
        chunk.writeUInt32BE(o - at - 4, at);
      }
    }
    sent += n;
    if (!socket.write(chunk.subarray(0, o))) await new Promise<void>((r) => socket.once("drain", () => r()));
  }
  while (acked < count) await new Promise<void>((r) => (waiter = r));
  const elapsedMs = clock.now() - started;
  const clientCpu = cpuMicros() - clientCpu0;
  socket.destroy();
  // The server's first acknowledgement of this socket comes after ackEvery frames: scale its CPU to the whole round.
  const serverPerMsg = (serverCpu - serverCpu0) / (count - ackEvery);
  return { rate: (count / elapsedMs) * 1000, clientCpuPerMsg: clientCpu / count, serverCpuPerMsg: serverPerMsg };
}

/** Raw round trip: one frame out, the same frame back, in series. Returns sorted latencies in ms and CPU µs per trip. */
async function rawRoundTrips(
  port: number,
  frame: Buffer,
  count: number,
): Promise<{ latencies: number[]; cpuPerTrip: number }> {
  const socket = await openSocket(port);
  const decoder = new FrameDecoder();
  let resolve: (() => void) | null = null;
  socket.on("data", (chunk: Buffer) => {
    if (decoder.push(chunk).length > 0) resolve?.();
  });
  const latencies: number[] = [];
  const cpu0 = cpuMicros();
  for (let i = 0; i < count; i++) {
    const t0 = clock.now();
    const done = new Promise<void>((r) => (resolve = r));
    socket.write(frame);
    await done;
    latencies.push(clock.now() - t0);
  }
  const cpuPerTrip = (cpuMicros() - cpu0) / count;
  socket.destroy();
  return { latencies: latencies.sort((x, y) => x - y), cpuPerTrip };
}

/** One tell round: throughput, and CPU µs per message on the sending and the receiving process. */
interface TellRound {
  rate: number;
  clientCpuPerMsg: number;
  serverCpuPerMsg: number;
}

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

async function movieTell(
  sink: ActorRef<unknown>,
  acks: AckCollector,
  ackRef: ActorRef<unknown>,
  count: number,
): Promise<TellRound> {
  const probed = new Promise<void>((r) => (acks.waiter = r));
  sink.tell(new Probe(), ackRef);
  await probed;
  const base = acks.acked;
  const serverCpu0 = acks.cpuMicros;
  const clientCpu0 = cpuMicros();
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
  const rate = (count / (clock.now() - started)) * 1000;
  return {
    rate,
    clientCpuPerMsg: (cpuMicros() - clientCpu0) / count,
    serverCpuPerMsg: (acks.cpuMicros - serverCpu0) / count,
  };
}

async function movieSequentialAsks(responder: ActorRef<unknown>, count: number) {
  const latencies: number[] = [];
  const cpu0 = cpuMicros();
  const started = clock.now();
  for (let i = 0; i < count; i++) {
    const t0 = clock.now();
    await responder.ask(new Req(i, payloadText), Res, 5_000);
    latencies.push(clock.now() - t0);
  }
  const rate = (count / (clock.now() - started)) * 1000;
  return { rate, latencies: latencies.sort((x, y) => x - y), cpuPerAsk: (cpuMicros() - cpu0) / count };
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

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function parent(): Promise<void> {
  const profile =
    process.env.MOVIE_BENCH_PROFILE === undefined
      ? []
      : ["--cpu-prof", `--cpu-prof-dir=${process.env.MOVIE_BENCH_PROFILE}`];
  const proc = spawn(process.execPath, [...profile, "--import", "tsx", new URL(import.meta.url).pathname, "--child"], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, MOVIE_LOG_LEVEL: "error" },
  });
  const line = await new Promise<string>((r) => createInterface({ input: proc.stdout! }).once("line", r));
  const info = JSON.parse(line) as { address: string; rawSink: number; rawJsonSink: number; rawEcho: number };

  const system = ActorSystem.create("bench-client");
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  const acks = new AckCollector();
  const ackRef = system.spawn(acks, "acks");
  const sink = system.actorSelection(`${info.address}/user/sink`);
  const responder = system.actorSelection(`${info.address}/user/responder`);

  // The exact bytes Movie writes for one Tick from /user/acks.
  const tickFrame = envelopeFrame(
    (sink as RemoteActorRef).path.localPart,
    ackRef.path.toString(),
    remoting.selfAddress.uid,
    "bench.tick",
    JSON.stringify(new Tick(123456, payloadText)),
  );
  const tickHeader = tickFrame.subarray(4, 4 + userHeaderEnd(tickFrame.subarray(4)));
  const reqFrame = envelopeFrame(
    (responder as RemoteActorRef).path.localPart,
    `${system.address}/temp/$abc`,
    remoting.selfAddress.uid,
    "bench.req",
    JSON.stringify(new Req(1234, payloadText)),
  );

  // Warm up both paths (JIT, connections).
  await rawTell(info.rawSink, tickFrame, 50_000);
  await rawTell(info.rawJsonSink, tickFrame, 50_000, tickHeader);
  await movieTell(sink, acks, ackRef, 50_000);
  await rawRoundTrips(info.rawEcho, reqFrame, 500);
  await movieSequentialAsks(responder, 500);

  // Alternate ceiling and Movie in rounds and keep medians, so load from other processes on the host hits both alike.
  const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? 5);
  // Receivers acknowledge every ackEvery messages, so each round is a whole number of those.
  const perRound = Math.max(1, Math.ceil(tellCount / rounds / ackEvery)) * ackEvery;
  const rawTells: TellRound[] = [];
  const rawJsonTells: TellRound[] = [];
  const movieTells: TellRound[] = [];
  let rawRtt: number[] = [];
  let seqLatencies: number[] = [];
  const seqRates: number[] = [];
  const rawTripCpu: number[] = [];
  const askCpu: number[] = [];
  for (let round = 0; round < rounds; round++) {
    rawTells.push(await rawTell(info.rawSink, tickFrame, perRound));
    rawJsonTells.push(await rawTell(info.rawJsonSink, tickFrame, perRound, tickHeader));
    movieTells.push(await movieTell(sink, acks, ackRef, perRound));
    const trips = await rawRoundTrips(info.rawEcho, reqFrame, Math.ceil(sequentialAsks / rounds));
    rawRtt = rawRtt.concat(trips.latencies);
    rawTripCpu.push(trips.cpuPerTrip);
    const seqRound = await movieSequentialAsks(responder, Math.ceil(sequentialAsks / rounds));
    seqLatencies = seqLatencies.concat(seqRound.latencies);
    seqRates.push(seqRound.rate);
    askCpu.push(seqRound.cpuPerAsk);
  }
  rawRtt.sort((x, y) => x - y);
  seqLatencies.sort((x, y) => x - y);
  const rates = (rounds: TellRound[]) => median(rounds.map((r) => r.rate));
  const cpu = (rounds: TellRound[], side: "clientCpuPerMsg" | "serverCpuPerMsg") =>
    +median(rounds.map((r) => r[side])).toFixed(3);
  const rawTellRate = rates(rawTells);
  const rawJsonTellRate = rates(rawJsonTells);
  const movieTellRate = rates(movieTells);
  const seq = { rate: median(seqRates), latencies: seqLatencies };
  const par = await movieParallelAsks(responder, parallelAsks, inFlight);
  const stats = remoting.stats;

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
    { metric: "CPU per tell, sender: raw", value: cpu(rawTells, "clientCpuPerMsg"), unit: "µs", ratio: "" },
    { metric: "CPU per tell, sender: raw + JSON", value: cpu(rawJsonTells, "clientCpuPerMsg"), unit: "µs", ratio: "" },
    { metric: "CPU per tell, sender: movie", value: cpu(movieTells, "clientCpuPerMsg"), unit: "µs", ratio: "" },
    { metric: "CPU per tell, receiver: raw", value: cpu(rawTells, "serverCpuPerMsg"), unit: "µs", ratio: "" },
    {
      metric: "CPU per tell, receiver: raw + JSON",
      value: cpu(rawJsonTells, "serverCpuPerMsg"),
      unit: "µs",
      ratio: "",
    },
    { metric: "CPU per tell, receiver: movie", value: cpu(movieTells, "serverCpuPerMsg"), unit: "µs", ratio: "" },
    { metric: "raw round trip p50 (ceiling)", value: +pct(rawRtt, 50).toFixed(3), unit: "ms", ratio: "1.00" },
    { metric: "raw round trip p99", value: +pct(rawRtt, 99).toFixed(3), unit: "ms", ratio: "" },
    { metric: "raw round trips, 1 in flight", value: Math.round(rawRttRate), unit: "rt/s", ratio: "" },
    {
      metric: "movie ask p50 (1 in flight)",
      value: +pct(seq.latencies, 50).toFixed(3),
      unit: "ms",
      ratio: (pct(seq.latencies, 50) / pct(rawRtt, 50)).toFixed(2),
    },
    { metric: "CPU per round trip, caller: raw", value: +median(rawTripCpu).toFixed(2), unit: "µs", ratio: "" },
    { metric: "CPU per ask, caller: movie", value: +median(askCpu).toFixed(2), unit: "µs", ratio: "" },
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
    `remoting, two processes on loopback; ${cpus().length} CPUs, Node ${process.version}; ${tellCount} tells of a ${tickFrame.length}-byte frame, ${sequentialAsks} sequential asks, ${parallelAsks} asks at ${inFlight} in flight`,
  );
  console.table(rows);
  const targets = {
    tellAtLeastHalfOfCeiling: movieTellRate >= 0.5 * rawTellRate,
    tellVersusJsonFloor: +(movieTellRate / rawJsonTellRate).toFixed(2),
    askP50AtMostTwiceRawRoundTrip: pct(seq.latencies, 50) <= 2 * pct(rawRtt, 50),
  };
  console.log("targets", targets);
  mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
  writeFileSync(
    new URL("./results/remote.json", import.meta.url),
    `${JSON.stringify(
      {
        bench: "remote",
        node: process.version,
        cpus: cpus().length,
        workload: { tellCount, tellWindow, sequentialAsks, parallelAsks, inFlight, frameBytes: tickFrame.length },
        rows,
        rounds: { rawTells, rawJsonTells, movieTells, seqRates, rawTripCpu, askCpu },
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
