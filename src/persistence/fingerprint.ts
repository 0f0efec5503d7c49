import { createHash, type Hash } from "node:crypto";
import type { EventRecord } from "./store.ts";

// Every field is length-prefixed so that ("ab","c") and ("a","bc") hash differently (docs/protocol.md §13.1).
function field(hash: Hash, text: string): void {
  const bytes = Buffer.from(text, "utf8");
  const prefix = Buffer.allocUnsafe(4);
  prefix.writeUInt32BE(bytes.length, 0);
  hash.update(prefix);
  hash.update(bytes);
}

/** SHA-256 (hex) over the manifest and payload of each event, each length-prefixed: the content identity of an append. */
export function eventsFingerprint(events: readonly EventRecord[]): string {
  const hash = createHash("sha256");
  for (const event of events) {
    field(hash, event.manifest);
    field(hash, event.payload);
  }
  return hash.digest("hex");
}

/** SHA-256 (hex) over manifest, payload (or "nil") and the deleted flag: the content identity of a state write. */
export function stateFingerprint(manifest: string, payload: string | null, deleted: boolean): string {
  const hash = createHash("sha256");
  field(hash, manifest);
  field(hash, payload ?? "nil");
  field(hash, deleted ? "1" : "0");
  return hash.digest("hex");
}
