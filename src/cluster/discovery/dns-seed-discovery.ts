/**
 * Seeds from DNS: the A/AAAA records of a name (a Kubernetes headless service's name answers every ready pod's IP;
 * the port is given) or its SRV records (each names a target host and a port; the targets are resolved to
 * addresses). Through node:dns's Resolver, so `servers` can point at a specific DNS server.
 */

import { Resolver } from "node:dns/promises";
import { isIP } from "node:net";
import { ClusterConfigurationError } from "../errors.ts";
import type { SeedDiscovery } from "./seed-discovery.ts";

/** Most seeds one answer yields (a bigger answer is cut, sorted first so every node cuts alike). */
const seedsMax = 64;

/** Options of {@link DnsSeedDiscovery}. */
export interface DnsSeedDiscoveryOptions {
  /** The name to resolve: `orders.shop.svc.cluster.local`, or `_movie._tcp.orders.shop.svc.cluster.local` for SRV. */
  readonly name: string;
  /** `"srv"`, or the address records to read: `"a"`, `"aaaa"`, `"a+aaaa"` (default). */
  readonly records?: "srv" | "a" | "aaaa" | "a+aaaa";
  /** The remoting port of every seed, for address records (SRV records carry their own). */
  readonly port?: number;
  /** DNS servers as `ip` or `ip:port` (default: the system's). */
  readonly servers?: readonly string[];
  /** Per-query timeout, ms (default 2,000). */
  readonly timeout?: number;
}

function hostPort(ip: string, port: number): string {
  return isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** Seeds from DNS records (see the module comment). */
export class DnsSeedDiscovery implements SeedDiscovery {
  private readonly resolver: Resolver;
  private readonly records: "srv" | "a" | "aaaa" | "a+aaaa";

  /** @throws ClusterConfigurationError for a missing name, a port outside 1-65535, or invalid servers */
  constructor(private readonly options: DnsSeedDiscoveryOptions) {
    if (typeof options?.name !== "string" || options.name.length === 0 || options.name.length > 253) {
      throw new ClusterConfigurationError("discovery.name", "expected a DNS name");
    }
    this.records = options.records ?? "a+aaaa";
    if (
      this.records !== "srv" &&
      !(Number.isSafeInteger(options.port) && options.port! >= 1 && options.port! <= 65535)
    ) {
      throw new ClusterConfigurationError("discovery.port", "address records need the seeds' port (1-65535)");
    }
    this.resolver = new Resolver({ timeout: options.timeout ?? 2_000, tries: 2 });
    if (options.servers !== undefined) {
      try {
        this.resolver.setServers([...options.servers]);
      } catch (error) {
        throw new ClusterConfigurationError("discovery.servers", error instanceof Error ? error.message : "invalid");
      }
    }
  }

  /** The seeds the records name now; rejects when the name does not resolve. */
  async resolve(): Promise<readonly string[]> {
    const found: string[] = [];
    if (this.records === "srv") {
      const records = (await this.resolver.resolveSrv(this.options.name)).slice(0, seedsMax);
      for (const r of records) {
        if (isIP(r.name) !== 0) {
          found.push(hostPort(r.name, r.port));
          continue;
        }
        for (const ip of await this.addresses(r.name, "a+aaaa")) found.push(hostPort(ip, r.port));
      }
    } else {
      for (const ip of await this.addresses(this.options.name, this.records))
        found.push(hostPort(ip, this.options.port!));
    }
    return [...new Set(found)].sort().slice(0, seedsMax);
  }

  private async addresses(name: string, records: "a" | "aaaa" | "a+aaaa"): Promise<string[]> {
    const out: string[] = [];
    let lastError: unknown = null;
    if (records !== "aaaa") {
      try {
        out.push(...(await this.resolver.resolve4(name)));
      } catch (error) {
        lastError = error;
      }
    }
    if (records !== "a") {
      try {
        out.push(...(await this.resolver.resolve6(name)));
      } catch (error) {
        lastError = error;
      }
    }
    if (out.length === 0 && lastError !== null) throw lastError;
    return out;
  }
}
