/** Which bound refused an inbound socket. */
export type InboundLimit = "maxInboundConnections" | "maxUnauthenticatedConnections" | "maxUnauthenticatedPerIp";

/** The bounds {@link InboundLimits} enforces (ResolvedRemotingSettings has them). */
export interface InboundLimitSettings {
  readonly maxInboundConnections: number;
  readonly maxUnauthenticatedConnections: number;
  readonly maxUnauthenticatedPerIp: number;
}

/**
 * Counts a listener's inbound sockets, all of them and those not yet authenticated (in total and per remote IP), and
 * says whether one more may be accepted. Pure bookkeeping: the caller closes what it refuses. A socket is keyed by
 * its remote `ip:port` (unique among live TCP connections to one listener, and the same for a TLS socket and the TCP
 * socket below it).
 */
export class InboundLimits {
  /** Keys of open sockets → their remote IP while unauthenticated, null once authenticated. */
  private readonly open = new Map<string, string | null>();
  private readonly unauthenticatedPerIp = new Map<string, number>();
  private unauthenticated = 0;

  constructor(private readonly settings: InboundLimitSettings) {}

  /** Sockets open now (tests, stats). */
  get size(): number {
    return this.open.size;
  }

  /** Takes the new socket `key` from `ip` into account, or returns the bound it would break (nothing is counted then). */
  accept(key: string, ip: string): InboundLimit | null {
    const s = this.settings;
    if (this.open.size >= s.maxInboundConnections) return "maxInboundConnections";
    if (this.unauthenticated >= s.maxUnauthenticatedConnections) return "maxUnauthenticatedConnections";
    const fromIp = this.unauthenticatedPerIp.get(ip) ?? 0;
    if (fromIp >= s.maxUnauthenticatedPerIp) return "maxUnauthenticatedPerIp";
    this.open.set(key, ip);
    this.unauthenticatedPerIp.set(ip, fromIp + 1);
    this.unauthenticated++;
    return null;
  }

  /** The socket `key` passed the handshake: it no longer counts as unauthenticated. */
  authenticated(key: string): void {
    const ip = this.open.get(key);
    if (ip === undefined || ip === null) return;
    this.open.set(key, null);
    this.leaveHandshake(ip);
  }

  /** The socket `key` closed (idempotent). */
  closed(key: string): void {
    const ip = this.open.get(key);
    if (ip === undefined) return;
    this.open.delete(key);
    if (ip !== null) this.leaveHandshake(ip);
  }

  private leaveHandshake(ip: string): void {
    this.unauthenticated--;
    const fromIp = this.unauthenticatedPerIp.get(ip)!;
    if (fromIp <= 1) this.unauthenticatedPerIp.delete(ip);
    else this.unauthenticatedPerIp.set(ip, fromIp - 1);
  }
}
