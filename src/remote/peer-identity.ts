import { isIP } from "node:net";
import { TLSSocket } from "node:tls";
import type { Address } from "../actor/index.ts";

/**
 * Binding a handshake's claimed address to the peer's TLS certificate. With TLS, the CA vouches for the certificate;
 * this check makes the certificate vouch for the address, so a node holding a valid certificate for one address
 * cannot claim another (the hello's or challenge's `from` is otherwise only a claim). The rule:
 *
 * - A certificate with any `movie.tcp://` URI subjectAltName binds its holder to exactly those addresses
 *   (`movie.tcp://system@host:port`, compared as text): one per node, port included.
 * - Otherwise its IP and DNS subjectAltNames bind it to every port on those hosts (an IP host needs an IP entry, a
 *   host name a DNS entry; `*.example.com` matches one leftmost label). The subject's CN is never used.
 */

/** The subjectAltName entries of a certificate that identity uses. */
export interface CertificateNames {
  readonly ips: readonly string[];
  readonly dns: readonly string[];
  readonly uris: readonly string[];
}

/** Entries looked at per certificate; a certificate with more is judged on these (a CA does not issue such). */
const maxNames = 64;

/**
 * Parses Node's `subjectaltname` text (`DNS:a, IP Address:1.2.3.4, URI:movie.tcp://s@h:1`; a value with a comma or
 * quote is written as a JSON string). Total: anything unparseable ends the list.
 */
export function parseSubjectAltName(text: unknown): CertificateNames {
  const ips: string[] = [];
  const dns: string[] = [];
  const uris: string[] = [];
  if (typeof text !== "string") return { ips, dns, uris };
  let i = 0;
  for (let n = 0; n < maxNames && i < text.length; n++) {
    const colon = text.indexOf(":", i);
    if (colon < 0) break;
    const type = text.slice(i, colon);
    let value: string;
    let end: number;
    if (text[colon + 1] === '"') {
      end = closingQuote(text, colon + 2);
      if (end < 0) break;
      try {
        const parsed: unknown = JSON.parse(text.slice(colon + 1, end + 1));
        if (typeof parsed !== "string") break;
        value = parsed;
      } catch {
        break;
      }
      end++;
    } else {
      end = text.indexOf(", ", colon + 1);
      if (end < 0) end = text.length;
      value = text.slice(colon + 1, end);
    }
    if (type === "IP Address") ips.push(normalizeIp(value));
    else if (type === "DNS") dns.push(value.toLowerCase());
    else if (type === "URI") uris.push(value);
    i = text.startsWith(", ", end) ? end + 2 : text.length;
  }
  return { ips, dns, uris };
}

function closingQuote(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === '"') return i;
  }
  return -1;
}

/** IPv6 in one spelling (Node writes certificate IPv6 entries uncompressed), IPv4 as is. */
function normalizeIp(ip: string): string {
  if (isIP(ip) !== 6) return ip;
  try {
    return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  } catch {
    return ip;
  }
}

/** True when `names` bind their holder to `address` (see the rule above). */
export function certificateNamesAddress(names: CertificateNames, address: Address): boolean {
  const movieUris = names.uris.filter((uri) => uri.startsWith("movie.tcp://"));
  if (movieUris.length > 0) return movieUris.includes(address.toString());
  const host = address.host;
  if (host === null) return false;
  if (isIP(host) !== 0) return names.ips.includes(normalizeIp(host));
  const name = host.toLowerCase();
  return names.dns.some((entry) => entry === name || wildcardMatches(entry, name));
}

function wildcardMatches(pattern: string, name: string): boolean {
  if (!pattern.startsWith("*.") || pattern.length < 4) return false;
  const dot = name.indexOf(".");
  return dot > 0 && name.slice(dot) === pattern.slice(1);
}

/** At most a few names, each cut short, for an error message. */
function describeNames(names: CertificateNames): string {
  const all = [
    ...names.uris.map((v) => `URI:${v}`),
    ...names.ips.map((v) => `IP:${v}`),
    ...names.dns.map((v) => `DNS:${v}`),
  ];
  if (all.length === 0) return "no subjectAltName";
  const shown = all.slice(0, 4).map((v) => (v.length > 80 ? `${v.slice(0, 80)}…` : v));
  return all.length > 4 ? `${shown.join(", ")} and ${all.length - 4} more` : shown.join(", ");
}

/**
 * For a TLS socket: why the peer's certificate does not name `claimed` (the detail of an `identity` refusal), else
 * null (also null for a plain socket, where there is no certificate to bind to).
 */
export function certificateMismatch(socket: unknown, claimed: Address): string | null {
  if (!(socket instanceof TLSSocket)) return null;
  let text: unknown;
  try {
    text = socket.getPeerCertificate(false)?.subjectaltname;
  } catch {
    text = undefined;
  }
  const names = parseSubjectAltName(text);
  if (certificateNamesAddress(names, claimed)) return null;
  return `the peer claims ${claimed} but its certificate names ${describeNames(names)}; issue each node a certificate whose subjectAltName is its host's IP or DNS name, or the URI ${claimed}`;
}
