import { createHmac, timingSafeEqual } from "node:crypto";
import { UniqueAddress } from "../actor/index.ts";
import { describe } from "../actor/untrusted.ts";
import { HandshakeError } from "./errors.ts";

/**
 * The association handshake, as pure functions over plain JSON documents (the shell sends them as handshake frames).
 *
 *   client → server  hello      { version, system, cluster, from, toSystem, nonce }
 *   server → client  challenge  { version, system, cluster, from, nonce, proof }   or reject { reason, detail }
 *   client → server  confirm    { proof }
 *   server → client  accepted   {}                                               or reject
 *
 * With a shared secret each side proves knowledge of it with HMAC-SHA256 over both nonces and both identities (with a
 * role label, so one side's proof can never be replayed as the other's); the secret itself is never sent. Without a
 * secret the proofs are empty and the handshake still checks version, system name and cluster name (docs/protocol.md §3.2).
 *
 * Every step is total: the peer's document is untrusted JSON, so fields are type-checked before use and error texts
 * name them with `describe` (never `String()` or interpolation, which run a value's own `toString`).
 */

/**
 * Largest handshake frame either side accepts, in bytes (4 KiB): a step is a few hundred bytes, and the cap applies
 * before the frame is buffered or parsed, so an unauthenticated peer cannot make a node hold or parse megabytes.
 */
export const handshakeFrameBytesMax = 4 * 1024;

/**
 * Version of the wire protocol; peers with another version are refused. 2: per-connection header ids (kind
 * userCompressed) and a payload-format byte in every written-out header (binary codecs).
 */
export const protocolVersion = 2;

/** What one side states about itself in the handshake. */
export interface HandshakeIdentity {
  readonly system: string;
  readonly cluster: string;
  readonly uniqueAddress: UniqueAddress;
}

/** The client's first step. */
export interface Hello {
  readonly step: "hello";
  readonly version: number;
  readonly system: string;
  readonly cluster: string;
  readonly from: string;
  readonly toSystem: string;
  readonly nonce: string;
}

/** The server's answer to a valid hello. */
export interface Challenge {
  readonly step: "challenge";
  readonly version: number;
  readonly system: string;
  readonly cluster: string;
  readonly from: string;
  readonly nonce: string;
  readonly proof: string;
}

/** The client's proof. */
export interface Confirm {
  readonly step: "confirm";
  readonly proof: string;
}

/** A refusal, sent before closing so the other side can log why. */
export interface Reject {
  readonly step: "reject";
  readonly reason: HandshakeError["reason"];
  readonly detail: string;
}

/**
 * A failed handshake step: the error to log and the reject to send before closing, or null when the peer's document
 * was itself a refusal (it is not answered; `error.byPeer` is set and `error.reason` is the peer's).
 */
export interface StepFailure {
  readonly ok: false;
  readonly error: HandshakeError;
  readonly reply: Reject | null;
}

/** Result of a handshake step: the document to send next and the authenticated peer, or the failure. */
export type StepResult<Next> = { readonly ok: true; readonly next: Next; readonly peer: UniqueAddress } | StepFailure;

/** The client's hello to a server expected to run system `toSystem`. */
export function makeHello(local: HandshakeIdentity, toSystem: string, nonce: string): Hello {
  return {
    step: "hello",
    version: protocolVersion,
    system: local.system,
    cluster: local.cluster,
    from: local.uniqueAddress.toString(),
    toSystem,
    nonce,
  };
}

/** Server side: checks a hello and builds the challenge (with the server's proof). */
export function answerHello(
  local: HandshakeIdentity,
  secret: string | null,
  hello: unknown,
  nonce: string,
): StepResult<Challenge> {
  const doc = asRecord(hello);
  if (doc === null || doc.step !== "hello" || typeof doc.nonce !== "string" || typeof doc.from !== "string") {
    return fail("malformed", "expected a hello");
  }
  const common = checkCommon(local, doc);
  if (common !== null) return common;
  if (doc.toSystem !== local.system) {
    return fail("systemName", `the client expected system ${describe(doc.toSystem)}, this is "${local.system}"`);
  }
  const peer = parsePeer(doc.from, doc.system);
  if (peer === null) return fail("malformed", `bad unique address ${describe(doc.from)}`);
  const proof = prove(secret, "server", doc.nonce, nonce, local.uniqueAddress.toString(), doc.from);
  return {
    ok: true,
    peer,
    next: {
      step: "challenge",
      version: protocolVersion,
      system: local.system,
      cluster: local.cluster,
      from: local.uniqueAddress.toString(),
      nonce,
      proof,
    },
  };
}

/** Client side: checks the challenge (and the server's proof) and builds the confirm. */
export function answerChallenge(
  local: HandshakeIdentity,
  secret: string | null,
  expectedSystem: string,
  hello: Hello,
  challenge: unknown,
): StepResult<Confirm> {
  const doc = asRecord(challenge);
  if (doc !== null && doc.step === "reject") return peerRefused(doc);
  if (
    doc === null ||
    doc.step !== "challenge" ||
    typeof doc.nonce !== "string" ||
    typeof doc.from !== "string" ||
    typeof doc.proof !== "string"
  ) {
    return fail("malformed", "expected a challenge");
  }
  const common = checkCommon(local, doc);
  if (common !== null) return common;
  if (doc.system !== expectedSystem) {
    return fail("systemName", `expected system "${expectedSystem}", the server runs ${describe(doc.system)}`);
  }
  const peer = parsePeer(doc.from, doc.system);
  if (peer === null) return fail("malformed", `bad unique address ${describe(doc.from)}`);
  if (secret !== null) {
    const expected = prove(secret, "server", hello.nonce, doc.nonce, doc.from, hello.from);
    if (!sameProof(expected, doc.proof)) return fail("authentication", "the server does not know the shared secret");
  }
  return {
    ok: true,
    peer,
    next: { step: "confirm", proof: prove(secret, "client", hello.nonce, doc.nonce, hello.from, doc.from) },
  };
}

/** Server side: checks the client's proof. */
export function checkConfirm(
  local: HandshakeIdentity,
  secret: string | null,
  hello: Hello,
  challenge: Challenge,
  confirm: unknown,
): { ok: true } | StepFailure {
  const doc = asRecord(confirm);
  if (doc !== null && doc.step === "reject") return peerRefused(doc);
  if (doc === null || doc.step !== "confirm" || typeof doc.proof !== "string") {
    return fail("malformed", "expected a confirm");
  }
  if (secret !== null) {
    const expected = prove(secret, "client", hello.nonce, challenge.nonce, hello.from, local.uniqueAddress.toString());
    if (!sameProof(expected, doc.proof)) return fail("authentication", "the client does not know the shared secret");
  }
  return { ok: true };
}

/**
 * Client side: checks the server's answer to the confirm. A reject carries the server's reason through; anything but
 * accepted or reject is malformed.
 */
export function checkAccepted(accepted: unknown): { ok: true } | StepFailure {
  const doc = asRecord(accepted);
  if (doc !== null && doc.step === "accepted") return { ok: true };
  if (doc !== null && doc.step === "reject") return peerRefused(doc);
  return fail("malformed", "expected accepted");
}

function checkCommon(local: HandshakeIdentity, doc: Record<string, unknown>): StepResult<never> | null {
  if (doc.version !== protocolVersion) {
    return fail("version", `peer speaks protocol ${describe(doc.version)}, this node ${protocolVersion}`);
  }
  if (typeof doc.system !== "string") return fail("malformed", "missing system name");
  if ((doc.cluster ?? "") !== local.cluster) {
    return fail("clusterName", `peer is in cluster ${describe(doc.cluster)}, this node in "${local.cluster}"`);
  }
  return null;
}

function parsePeer(text: string, system: unknown): UniqueAddress | null {
  try {
    const peer = UniqueAddress.parse(text);
    if (!peer.address.isRemote || peer.address.system !== system) return null;
    return peer;
  } catch {
    return null;
  }
}

function prove(
  secret: string | null,
  role: "server" | "client",
  clientNonce: string,
  serverNonce: string,
  prover: string,
  verifier: string,
): string {
  if (secret === null) return "";
  return createHmac("sha256", secret)
    .update(`movie-remoting-v${protocolVersion}\n${role}\n${clientNonce}\n${serverNonce}\n${prover}\n${verifier}`)
    .digest("hex");
}

function sameProof(expected: string, actual: string): boolean {
  const a = Buffer.from(expected, "utf8");
  const b = Buffer.from(actual, "utf8");
  return a.length === b.length && timingSafeEqual(a, b);
}

function asRecord(value: unknown): Record<string, unknown> | null {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : null;
}

const reasons: readonly HandshakeError["reason"][] = [
  "version",
  "systemName",
  "clusterName",
  "authentication",
  "timeout",
  "malformed",
  "closed",
  "identity",
  "incarnationClaim",
  "quarantined",
];

function asReason(value: unknown): HandshakeError["reason"] {
  return reasons.includes(value as HandshakeError["reason"]) ? (value as HandshakeError["reason"]) : "malformed";
}

/** The peer's reject: its reason (one this node does not know reads as malformed) and detail; not answered. */
function peerRefused(doc: Record<string, unknown>): StepFailure {
  return { ok: false, error: new HandshakeError(asReason(doc.reason), refusalDetail(doc.detail), true), reply: null };
}

/** The detail of the peer's reject as this node logs it: a string cut to 200 characters, else what kind it was. */
function refusalDetail(detail: unknown): string {
  if (typeof detail !== "string") return `(no detail: ${describe(detail)})`;
  return detail.length > 200 ? `${detail.slice(0, 200)}…` : detail;
}

function fail(reason: HandshakeError["reason"], detail: string): StepFailure & { readonly reply: Reject } {
  return { ok: false, error: new HandshakeError(reason, detail), reply: { step: "reject", reason, detail } };
}
