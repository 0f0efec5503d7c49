import type { Class } from "../actor/index.ts";
import { describe, errorText, instanceFromFields } from "../actor/untrusted.ts";
import {
  type CodecRole,
  CorruptPersistentRecordError,
  InvalidPersistenceRequestError,
  UnknownManifestError,
} from "./errors.ts";

/** The manifest of plain JSON values (objects, arrays, strings, numbers, booleans) that are not class instances. */
export const JSON_MANIFEST = "json";

/** A class the codec can rebuild: its instances encode their own JSON fields; `fromJSON` (if present) rebuilds one. */
export type CodecClass<T> = Class<T> & {
  /** Rebuilds an instance from its stored JSON (untrusted: check every field). */
  fromJSON?(json: unknown): T;
};

/** Turns a stored value of an older manifest into a newer one: `{ manifest, json }` is decoded again. */
export type Upcaster = (json: unknown) => { manifest: string; json: unknown };

interface Entry {
  readonly manifest: string;
  readonly cls: CodecClass<unknown>;
}

const upcastDepthMax = 32;

/**
 * JSON (de)serialisation of events, snapshots and durable states with a manifest per type (the class's registered
 * name; default the class name). Old manifests are mapped forward by upcasters. One codec per actor system (owned by
 * `Database`), so systems in one process do not share registrations.
 */
export class PersistenceCodec {
  private readonly byManifest = new Map<string, Entry>();
  private readonly byClass = new Map<unknown, Entry>();
  private readonly upcasters = new Map<string, Upcaster>();

  /**
   * Registers `cls` under `options.manifest` (default `cls.name`). Registering the same pair again is a no-op.
   * @throws InvalidPersistenceRequestError when the manifest is taken by another class or is reserved
   */
  register<T>(cls: CodecClass<T>, options: { manifest?: string } = {}): this {
    const manifest = options.manifest ?? cls.name;
    if (typeof manifest !== "string" || manifest.length === 0 || manifest === JSON_MANIFEST) {
      throw new InvalidPersistenceRequestError("manifest", `${describe(manifest)} is empty or reserved`);
    }
    const existing = this.byManifest.get(manifest);
    if (existing !== undefined) {
      if (existing.cls === cls) return this;
      throw new InvalidPersistenceRequestError("manifest", `"${manifest}" is already registered for another class`);
    }
    const entry = { manifest, cls: cls as CodecClass<unknown> };
    this.byManifest.set(manifest, entry);
    this.byClass.set(cls, entry);
    return this;
  }

  /** Maps values stored under `oldManifest` forward (an upcasting hook for renamed or reshaped types). */
  registerUpcaster(oldManifest: string, upcaster: Upcaster): this {
    this.upcasters.set(oldManifest, upcaster);
    return this;
  }

  /**
   * The manifest and JSON text of `value`.
   * @param role what `value` is to its entity, for the error that names the class to register
   * @throws UnknownManifestError for an instance of an unregistered class
   */
  encode(value: unknown, role: CodecRole = "value"): { manifest: string; payload: string } {
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const entry = this.byClass.get(proto.constructor);
        if (entry === undefined) {
          throw new UnknownManifestError(String(proto.constructor?.name ?? "anonymous class"), role);
        }
        return { manifest: entry.manifest, payload: JSON.stringify(value) };
      }
    }
    return { manifest: JSON_MANIFEST, payload: JSON.stringify(value) };
  }

  /**
   * Rebuilds a stored value: through the class's `fromJSON`, else as an instance carrying the payload's own fields.
   * @throws CorruptPersistentRecordError naming `persistenceId` and `sequenceNr` for bad JSON, an unknown manifest, a
   * failing `fromJSON` or upcaster, or (without `fromJSON`) a payload that is not a JSON object or has a `__proto__`
   * key
   */
  decode(manifest: string, payload: string, persistenceId: string, sequenceNr: number): unknown {
    let json: unknown;
    try {
      json = JSON.parse(payload);
    } catch (error) {
      throw new CorruptPersistentRecordError(
        persistenceId,
        sequenceNr,
        `payload is not JSON (${(error as Error).message})`,
      );
    }
    let current = manifest;
    for (let depth = 0; depth < upcastDepthMax; depth++) {
      const upcaster = this.upcasters.get(current);
      if (upcaster === undefined) break;
      // The upcaster sees stored (untrusted) JSON: whatever it throws or returns, the caller gets the typed error.
      let next: unknown;
      try {
        next = upcaster(json);
      } catch (error) {
        throw new CorruptPersistentRecordError(
          persistenceId,
          sequenceNr,
          `the upcaster of manifest ${current} rejected the payload (${errorText(error)})`,
        );
      }
      const manifestNext = (next as { manifest?: unknown } | null)?.manifest;
      if (next === null || typeof next !== "object" || typeof manifestNext !== "string") {
        throw new CorruptPersistentRecordError(
          persistenceId,
          sequenceNr,
          `the upcaster of manifest ${current} did not return { manifest, json }`,
        );
      }
      current = manifestNext;
      json = (next as { json?: unknown }).json;
    }
    if (current === JSON_MANIFEST) return json;
    const entry = this.byManifest.get(current);
    if (entry === undefined) {
      throw new CorruptPersistentRecordError(persistenceId, sequenceNr, `manifest ${current} is not registered`);
    }
    if (typeof entry.cls.fromJSON === "function") {
      try {
        return entry.cls.fromJSON(json);
      } catch (error) {
        throw new CorruptPersistentRecordError(
          persistenceId,
          sequenceNr,
          `${current}.fromJSON rejected the payload (${errorText(error)})`,
        );
      }
    }
    // Own fields only: a stored "__proto__" key must not swap the instance's prototype, and a key naming a member of
    // the class (a getter-only property, a method, "constructor") is the class's, not data (see instanceFromFields).
    const built = instanceFromFields(entry.cls.prototype as object, json);
    if (built === "notAnObject") {
      throw new CorruptPersistentRecordError(
        persistenceId,
        sequenceNr,
        `the payload of ${current} is not a JSON object; give the class a static fromJSON to rebuild other shapes`,
      );
    }
    if (built === "protoKey") {
      throw new CorruptPersistentRecordError(
        persistenceId,
        sequenceNr,
        `the payload of ${current} has a __proto__ key`,
      );
    }
    return built;
  }

  /** A defensive copy made by encoding and decoding (what a command handler sees of the state). */
  copy<T>(value: T, role: CodecRole = "state"): T {
    const { manifest, payload } = this.encode(value, role);
    return (payload === undefined ? value : this.decode(manifest, payload, "(copy)", 0)) as T;
  }
}
