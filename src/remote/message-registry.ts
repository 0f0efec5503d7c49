import { typeNameOf } from "../actor/index.ts";
import { describe, errorText, instanceFromFields } from "../actor/untrusted.ts";
import { compileCodec, type FieldList, fieldListProblem, type PayloadCodec } from "./codec.ts";
import { readPayload } from "./envelope.ts";
import {
  EnvelopeDecodeError,
  MessageEncodeError,
  MessageRegistrationError,
  UnknownMessageTypeError,
} from "./errors.ts";
import { isStandardSchema, type StandardSchemaV1 } from "./standard-schema.ts";

/** A class that can cross the wire: constructed by `new`, optionally rebuilt by a static `fromJSON`. */
export type MessageClass = (abstract new (
  ...args: never
) => object) & {
  /** Rebuilds an instance from its decoded wire JSON (untrusted: check every field). */
  fromJSON?: (json: unknown) => unknown;
};

/** Options of {@link MessageRegistry.register}. */
export interface RegisterOptions {
  /** The wire name; default the class name. Use a stable dotted name (`movie.cluster.gossip.v1`) for protocol types. */
  name?: string;
  /** A Standard Schema (zod, valibot, …) that inbound JSON must pass before the instance is rebuilt. Must be synchronous. */
  schema?: StandardSchemaV1;
  /**
   * Opt-in binary payload codec: the fields to send, in wire order, with their types (`FieldType`), e.g.
   * `{ orderId: "string", lines: "int32", note: "string?" }` Numbers and strings are written
   * straight into the output buffer and read back without JSON, which is several times cheaper than the default JSON
   * payload. Only the declared fields travel; decoding rebuilds the instance from them exactly as it would from JSON
   * (`fromJSON`, `schema` and prototype assignment behave the same). Every node must declare the same list for the
   * name (a receiver with another list drops the envelope as undecodable, counted); a value the declared type cannot
   * carry throws `MessageEncodeError` at send. Without `fields` the payload is the instance's JSON.
   */
  fields?: FieldList;
}

/** One registered wire type. */
export interface MessageRegistration {
  readonly name: string;
  readonly type: MessageClass;
  readonly schema: StandardSchemaV1 | null;
  /** The compiled binary codec when the class declared `fields`, else null (JSON payload). */
  readonly codec: PayloadCodec | null;
  /** @internal True when decoding may skip `schema` and `fromJSON` (the codec builds the instance directly). */
  readonly direct: boolean;
  /**
   * @internal True for a protocol container registered with a hand-written codec ({@link MessageRegistry.registerCodec}:
   * an envelope, a batch of envelopes): it carries messages and is never itself carried inside another message.
   */
  readonly container: boolean;
}

/**
 * Maps wire names to message classes and back. `MessageRegistry.register(...)` fills the process-wide default (as the
 * seed describes); `new MessageRegistry(MessageRegistry.default)` gives a per-system registry that also sees the
 * default. Encoding writes the instance's own JSON (`JSON.stringify`, so `toJSON` is honoured); decoding rebuilds a
 * real instance (so `instanceof` works) through `static fromJSON(json)` when the class has one, else by prototype and
 * field assignment.
 */
export class MessageRegistry {
  /** The process-wide registry that every system's remoting consults. */
  static readonly default: MessageRegistry = new MessageRegistry(null);

  private readonly byName = new Map<string, MessageRegistration>();
  private readonly byType = new Map<MessageClass, MessageRegistration>();
  private lastType: unknown;
  private lastEntry: MessageRegistration | undefined;

  constructor(private readonly parent: MessageRegistry | null = MessageRegistry.default ?? null) {}

  /**
   * Registers `type` in the process-wide default registry (idempotent for the same name and class).
   * @throws MessageRegistrationError when the name is bound to another class or the class to another name
   */
  static register(type: MessageClass, options: RegisterOptions = {}): MessageRegistration {
    return MessageRegistry.default.register(type, options);
  }

  /**
   * Registers `type` here (idempotent for the same name and class).
   * @throws MessageRegistrationError when the name is bound to another class, the class to another name, the name is
   * empty or longer than 1,024 characters, `schema` is not a Standard Schema v1 object, `fields` is not a valid field
   * list, or the class is registered again with different `fields`
   */
  register(type: MessageClass, options: RegisterOptions = {}): MessageRegistration {
    if (typeof type !== "function") throw new MessageRegistrationError(describe(type), "expected a class");
    const name = options.name ?? type.name;
    if (typeof name !== "string" || name.length === 0 || name.length > 1024) {
      throw new MessageRegistrationError(describe(name), "the name must be 1-1024 characters; pass { name }");
    }
    if (options.schema !== undefined && !isStandardSchema(options.schema)) {
      throw new MessageRegistrationError(name, "schema is not a Standard Schema v1 object (no ~standard.validate)");
    }
    if (options.fields !== undefined) {
      const problem = fieldListProblem(options.fields) ?? memberFieldProblem(type, options.fields);
      if (problem !== null) throw new MessageRegistrationError(name, problem);
    }
    const byType = this.existing(type, name);
    if (byType !== undefined) {
      const before = byType.codec === null ? "" : JSON.stringify(byType.codec.fields);
      const now = options.fields === undefined ? before : JSON.stringify(compileCodec(name, options.fields).fields);
      if (before !== now) throw new MessageRegistrationError(name, "the class is already registered with other fields");
      return byType;
    }
    const schema = options.schema ?? null;
    const direct = options.fields !== undefined && schema === null && typeof type.fromJSON !== "function";
    // A direct codec builds instances of the class itself; otherwise it builds the plain object fromJSON/schema take.
    const codec =
      options.fields === undefined
        ? null
        : compileCodec(name, options.fields, direct ? (type.prototype as object) : Object.prototype);
    return this.add({ name, type, schema, codec, direct, container: false });
  }

  /**
   * @internal Registers a protocol class with a hand-written binary codec that validates and builds instances itself
   * (for a layout a field list cannot express, such as an envelope that nests another registered message). Idempotent
   * for the same name, class and codec fingerprint. A registration inherited from the parent is shadowed here rather
   * than reused: such a codec resolves the names it nests in the registry it was made for, which cannot see this one's.
   * @throws MessageRegistrationError on the same conflicts as {@link register}
   */
  registerCodec(type: MessageClass, name: string, codec: PayloadCodec): MessageRegistration {
    const byType = this.existing(type, name);
    if (byType !== undefined) {
      if (byType.codec?.fingerprint !== codec.fingerprint) {
        throw new MessageRegistrationError(name, "the class is already registered with another codec");
      }
      if (this.byType.get(type) === byType) return byType;
    }
    return this.add({ name, type, schema: null, codec, direct: true, container: true });
  }

  /** The registration `type` already has under `name`, if any. @throws MessageRegistrationError on a conflict */
  private existing(type: MessageClass, name: string): MessageRegistration | undefined {
    const byName = this.lookupName(name);
    const byType = this.lookupType(type);
    if (byName !== undefined && byName.type !== type) {
      throw new MessageRegistrationError(name, `the name is already bound to class ${byName.type.name}`);
    }
    if (byType !== undefined && byType.name !== name) {
      throw new MessageRegistrationError(name, `class ${type.name} is already registered as "${byType.name}"`);
    }
    return byType;
  }

  private add(entry: MessageRegistration): MessageRegistration {
    // A shadowing registration (registerCodec) changes what the class resolves to here: forget the remembered lookup.
    this.lastType = undefined;
    this.byName.set(entry.name, entry);
    this.byType.set(entry.type, entry);
    return entry;
  }

  /** The registration for `type` (exact class, not a subclass), here or in the parent, or undefined. */
  lookupType(type: unknown): MessageRegistration | undefined {
    return this.byType.get(type as MessageClass) ?? this.parent?.lookupType(type);
  }

  /** The registration for wire name `name`, here or in the parent, or undefined. */
  lookupName(name: string): MessageRegistration | undefined {
    return this.byName.get(name) ?? this.parent?.lookupName(name);
  }

  /**
   * The registration of `message`'s class.
   * @throws UnknownMessageTypeError when that class is not registered
   */
  registrationOf(message: unknown): MessageRegistration {
    const type = message === null || typeof message !== "object" ? undefined : (message as object).constructor;
    // Senders repeat themselves, and a registration never changes once made: remember the last class looked up.
    if (type === this.lastType && type !== undefined) return this.lastEntry!;
    const entry = type === undefined ? undefined : this.lookupType(type);
    if (entry === undefined) throw new UnknownMessageTypeError(typeNameOf(message));
    this.lastType = type;
    this.lastEntry = entry;
    return entry;
  }

  /**
   * Rebuilds an instance of the class registered as `name` from parsed JSON, validating with its schema first.
   * @throws EnvelopeDecodeError (reason `unknownType`, `schemaInvalid` or `undecodable`)
   */
  decode(name: string, json: unknown): unknown {
    const entry = this.lookupName(name);
    if (entry === undefined) throw new EnvelopeDecodeError("unknownType", `type "${name}" is not registered`);
    return rebuild(entry, json);
  }
}

/**
 * Decodes a binary payload `buf[at, end)` with the registration's codec and rebuilds the instance (validated by its
 * schema, built by `fromJSON` when it has them, exactly as for a JSON payload).
 * @throws EnvelopeDecodeError (reason `undecodable` or `schemaInvalid`)
 */
export function decodeBinary(entry: MessageRegistration, buf: Buffer, at: number, end: number): unknown {
  const codec = entry.codec!;
  if (entry.direct) return codec.read(buf, at, end, entry.type.prototype as object);
  return rebuild(entry, codec.read(buf, at, end, Object.prototype));
}

/**
 * Decodes the payload `buf[at, end)` of a message registered as `entry`, in the format its sender wrote: binary, with
 * the sender's codec `fingerprint` (a node that declared other fields refuses it rather than misread it), or JSON.
 * Remoting's receive path and sharding's nested messages both decode through here.
 * @throws EnvelopeDecodeError (reason `undecodable` or `schemaInvalid`)
 */
export function decodePayload(
  entry: MessageRegistration,
  binary: boolean,
  fingerprint: number,
  buf: Buffer,
  at: number,
  end: number,
): unknown {
  if (binary) {
    if (entry.codec === null || entry.codec.fingerprint !== fingerprint) {
      throw new EnvelopeDecodeError(
        "undecodable",
        `binary payload of "${entry.name}" was encoded for other fields than declared here (declare the same fields on every node)`,
        entry.name,
      );
    }
    return decodeBinary(entry, buf, at, end);
  }
  const message = rebuild(entry, readPayload(buf, at, entry.name, end));
  if (entry.codec !== null) fitsDeclaredFields(entry, entry.codec, message);
  return message;
}

/**
 * Refuses a message of a class with declared `fields` that arrived as JSON (a hand-built or hostile sender) with a
 * value its declaration cannot carry: delivered, it could not be sent on. Only the JSON path pays for the check.
 * @throws EnvelopeDecodeError (reason `undecodable`) naming the field
 */
function fitsDeclaredFields(entry: MessageRegistration, codec: PayloadCodec, message: unknown): void {
  try {
    codec.measure(message as object);
    codec.checkText(message as object);
  } catch (error) {
    // Any failure means the same (a JSON value too deep to encode again throws a RangeError, not a refusal).
    const why =
      error instanceof MessageEncodeError
        ? `${error.field} is not ${error.expected} (${error.actual})`
        : errorText(error);
    throw new EnvelopeDecodeError(
      "undecodable",
      `JSON payload of "${entry.name}" does not fit its declared fields: ${why}`,
      entry.name,
    );
  }
}

/**
 * Validates and rebuilds one message (shared by every registry). Total over any parsed JSON: a schema or `fromJSON`
 * that throws, or returns something unusable, refuses the envelope like invalid input does. Without `fromJSON` the
 * instance gets the payload's own fields only, never one that names a member of the class (see instanceFromFields).
 */
function rebuild(entry: MessageRegistration, json: unknown): unknown {
  let value = json;
  if (entry.schema !== null) value = validated(entry, entry.schema, json);
  const fromJSON = entry.type.fromJSON;
  if (typeof fromJSON === "function") {
    let built: unknown;
    try {
      built = fromJSON.call(entry.type, value);
    } catch (error) {
      throw new EnvelopeDecodeError("undecodable", `${entry.name}.fromJSON threw ${errorText(error)}`, entry.name);
    }
    if (!(built instanceof entry.type)) {
      throw new EnvelopeDecodeError(
        "undecodable",
        `${entry.name}.fromJSON did not return an instance of its class`,
        entry.name,
      );
    }
    return built;
  }
  const built = instanceFromFields(entry.type.prototype as object, value);
  if (built === "notAnObject") {
    throw new EnvelopeDecodeError("undecodable", `payload of "${entry.name}" is not a JSON object`, entry.name);
  }
  if (built === "protoKey") {
    throw new EnvelopeDecodeError("undecodable", `payload of "${entry.name}" has a __proto__ field`, entry.name);
  }
  return built;
}

/** The value `schema` makes of `json`. @throws EnvelopeDecodeError (reason `schemaInvalid`) */
function validated(entry: MessageRegistration, schema: StandardSchemaV1, json: unknown): unknown {
  let result: unknown;
  try {
    result = schema["~standard"].validate(json);
  } catch (error) {
    throw new EnvelopeDecodeError(
      "schemaInvalid",
      `the schema of "${entry.name}" threw ${errorText(error)}; a validator should return issues instead`,
      entry.name,
    );
  }
  if (result === null || typeof result !== "object") {
    throw new EnvelopeDecodeError("schemaInvalid", `the schema of "${entry.name}" returned no result`, entry.name);
  }
  if (typeof (result as { then?: unknown }).then === "function") {
    throw new EnvelopeDecodeError(
      "schemaInvalid",
      `schema of "${entry.name}" is asynchronous; use a synchronous one`,
      entry.name,
    );
  }
  const settled = result as { readonly value?: unknown; readonly issues?: unknown };
  if (settled.issues !== undefined) {
    const first: unknown = Array.isArray(settled.issues) ? settled.issues[0] : undefined;
    const message: unknown =
      first !== null && typeof first === "object" ? (first as { message?: unknown }).message : undefined;
    throw new EnvelopeDecodeError(
      "schemaInvalid",
      `"${entry.name}" failed its schema: ${typeof message === "string" ? message : "invalid"}`,
      entry.name,
    );
  }
  return settled.value;
}

/**
 * A declared field named like a member of the class (a method, an accessor, `constructor`, `toString`, …), or null:
 * decoding would assign it over that member (a getter-only one throws), and a JSON payload never carries it.
 */
function memberFieldProblem(type: MessageClass, fields: FieldList): string | null {
  const proto = type.prototype as object;
  for (const field of Object.keys(fields)) {
    if (field in proto) return `field "${field}" names a member of the class (a method or accessor); rename the field`;
  }
  return null;
}
