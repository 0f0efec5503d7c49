/**
 * A small TCP proxy the soak places on every link it may want to break: between each ordered pair of nodes (A dials B
 * through A→B's proxy) and in front of PostgreSQL. Loopback only, no root. Three modes:
 * - `open`: bytes flow both ways;
 * - `paused`: every connection's reads stop in both directions (the peers see a silent, live TCP connection) and new
 *   connections wait, unconnected, until `open` (a paused database or a frozen network);
 * - `cut`: every connection is closed and new ones are accepted and then held silently, reading and dropping what they
 *   send (a partition: SYNs are answered, nothing gets through), until `open` closes them so peers reconnect fresh;
 *   with `refuse` new connections are closed at once instead (a database that is down).
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

export type ProxyMode = "open" | "paused" | "cut";

interface Pipe {
  readonly client: Socket;
  upstream: Socket | null;
}

export class TcpProxy {
  private mode: ProxyMode = "open";
  private refuse = false;
  private readonly pipes = new Set<Pipe>();
  private readonly server: Server;
  /** Local ports of the proxy's connections to the target (PostgreSQL's pg_stat_activity.client_port of each). */
  readonly upstreamPorts = new Set<number>();
  port = 0;

  constructor(
    readonly name: string,
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {
    this.server = createServer((client) => this.accept(client));
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(0, "127.0.0.1", () => resolve());
    });
    const address = this.server.address();
    this.port = typeof address === "object" && address !== null ? address.port : 0;
    return this.port;
  }

  get current(): ProxyMode {
    return this.mode;
  }

  /** Closes every connection (both ends), whatever the mode. */
  reset(): void {
    for (const pipe of [...this.pipes]) this.close(pipe);
  }

  /** Switches mode; see the file comment. */
  set(mode: ProxyMode, options: { refuse?: boolean } = {}): void {
    const previous = this.mode;
    this.mode = mode;
    this.refuse = options.refuse ?? false;
    if (mode === "cut") {
      this.reset();
    } else if (mode === "paused") {
      for (const pipe of this.pipes) {
        pipe.client.pause();
        pipe.upstream?.pause();
      }
    } else if (previous === "cut") {
      // Held connections never reached the target: close them so the dialler reconnects through the open proxy.
      this.reset();
    } else if (previous === "paused") {
      for (const pipe of [...this.pipes]) {
        if (pipe.upstream === null) this.connectUpstream(pipe);
        pipe.client.resume();
        pipe.upstream?.resume();
      }
    }
  }

  async close(): Promise<void>;
  close(pipe: Pipe): void;
  close(pipe?: Pipe): Promise<void> | void {
    if (pipe !== undefined) {
      this.pipes.delete(pipe);
      pipe.client.destroy();
      pipe.upstream?.destroy();
      return;
    }
    this.reset();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    client.on("error", () => undefined);
    client.setNoDelay(true);
    if (this.mode === "cut" && this.refuse) {
      client.destroy();
      return;
    }
    const pipe: Pipe = { client, upstream: null };
    this.pipes.add(pipe);
    client.on("close", () => this.close(pipe));
    if (this.mode === "cut") {
      client.on("data", () => undefined); // a black hole: read and drop
      return;
    }
    client.on("data", (chunk) => pipe.upstream?.write(chunk));
    if (this.mode === "paused") {
      client.pause();
      return;
    }
    this.connectUpstream(pipe);
  }

  private connectUpstream(pipe: Pipe): void {
    const upstream = tcpConnect({ host: this.targetHost, port: this.targetPort });
    pipe.upstream = upstream;
    upstream.setNoDelay(true);
    upstream.on("error", () => undefined);
    let localPort: number | undefined;
    upstream.once("connect", () => {
      localPort = upstream.localPort;
      if (localPort !== undefined) this.upstreamPorts.add(localPort);
    });
    upstream.on("data", (chunk) => pipe.client.write(chunk));
    upstream.on("close", () => {
      if (localPort !== undefined) this.upstreamPorts.delete(localPort);
      this.close(pipe);
    });
  }
}
