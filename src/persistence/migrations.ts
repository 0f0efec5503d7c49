/**
 * Versioned schema migrations (docs/protocol.md §13.2): versions contiguous from 1, each with a name and a checksum, recorded
 * in `movie_schema_migration`. The backends supply the SQL; the rules for reading the history live here, pure.
 */
import { createHash } from "node:crypto";
import {
  InvalidMigrationHistoryError,
  MigrationChecksumMismatchError,
  UnsupportedSchemaVersionError,
} from "./errors.ts";

/** The schema version this build writes and understands. */
export const CURRENT_SCHEMA_VERSION = 16;

/** The names of the migrations, shared by both SQL backends. */
export const MIGRATION_NAMES: readonly string[] = [
  "core-persistence-schema",
  "event-query-and-projection-schema",
  "transactional-outbox-schema",
  "cluster-shard-fencing-schema",
  "append-hot-path-without-stream-read",
  "drop-append-one-resolve",
  "append-at-zero-after-retention",
  "event-journal-shard-epoch",
  "event-feed-offsets-and-tags",
  "outbox-dispatch",
  "operation-replies",
  "sqlite-event-offset-on-journal-row",
  "feed-lock-per-schema",
  "projection-control",
  "outbox-shard-claims",
  "postgres-event-offset-on-journal-row",
];

/** One migration: version, name, checksum ({@link migrationChecksum}) and the SQL statements it runs in one transaction. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly checksum: string;
  readonly statements: readonly string[];
}

/** A row of `movie_schema_migration`. */
export interface AppliedMigration {
  readonly version: number;
  readonly name: string;
  readonly checksum: string;
}

/**
 * SHA-256 (hex) of a migration's version, name and statements, each statement length-prefixed so that no two
 * different lists of statements hash alike. Any edit of an applied migration's SQL changes it.
 */
export function migrationChecksum(version: number, name: string, statements: readonly string[]): string {
  const hash = createHash("sha256").update(
    `movie:persistence:migration:v2\n${version}\n${name}\n${statements.length}\n`,
  );
  for (const sql of statements)
    hash
      .update(`${Buffer.byteLength(sql)}:`)
      .update(sql)
      .update("\n");
  return hash.digest("hex");
}

/**
 * The checksum builds before the statement hash recorded: SHA-256 (hex) of `movie:persistence:migration:<v>:<name>:v1`,
 * version and name only. Accepted once per row and rewritten (see {@link planMigrations}).
 */
export function legacyMigrationChecksum(version: number, name: string): string {
  return createHash("sha256").update(`movie:persistence:migration:${version}:${name}:v1`).digest("hex");
}

/** Builds the migration list from per-version statements (index 0 is version 1). */
export function buildMigrations(statements: readonly (readonly string[])[]): Migration[] {
  return statements.map((sql, i) => ({
    version: i + 1,
    name: MIGRATION_NAMES[i]!,
    checksum: migrationChecksum(i + 1, MIGRATION_NAMES[i]!, sql),
    statements: sql,
  }));
}

/** What opening a store must do with the recorded history. */
export interface MigrationPlan {
  /** Migrations still to run, in order. */
  readonly pending: readonly Migration[];
  /**
   * Applied migrations whose row holds the {@link legacyMigrationChecksum} of an earlier build (same version and
   * name): the store checks that {@link schemaObjects} of the applied history exist, then rewrites each row to the
   * statement checksum, once.
   */
  readonly rebaseline: readonly Migration[];
  /** The newest applied version (0 for an empty database). */
  readonly appliedThrough: number;
}

/**
 * Checks the applied history against the known migrations.
 * @throws UnsupportedSchemaVersionError, InvalidMigrationHistoryError, MigrationChecksumMismatchError (a recorded
 *   checksum that is neither this build's statement checksum nor the earlier builds' one for the same name)
 */
export function planMigrations(known: readonly Migration[], applied: readonly AppliedMigration[]): MigrationPlan {
  const versions = applied.map((m) => m.version).sort((a, b) => a - b);
  const newest = versions.length === 0 ? 0 : versions[versions.length - 1]!;
  if (newest > known.length) throw new UnsupportedSchemaVersionError(newest, known.length);
  versions.forEach((v, i) => {
    if (v !== i + 1) throw new InvalidMigrationHistoryError(versions);
  });
  const rebaseline: Migration[] = [];
  for (const row of applied) {
    const expected = known[row.version - 1]!;
    if (row.checksum === expected.checksum) continue;
    if (row.name === expected.name && row.checksum === legacyMigrationChecksum(expected.version, expected.name)) {
      rebaseline.push(expected);
      continue;
    }
    throw new MigrationChecksumMismatchError(row.version, expected.checksum, row.checksum);
  }
  rebaseline.sort((a, b) => a.version - b.version);
  return { pending: known.slice(newest), rebaseline, appliedThrough: newest };
}

/** A table, index or function a migration creates. */
export interface SchemaObject {
  readonly kind: "table" | "index" | "function";
  readonly name: string;
}

const createPattern =
  /^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(TABLE|INDEX|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)/i;
const dropPattern = /^\s*DROP\s+(TABLE|INDEX|FUNCTION)\s+(?:IF\s+EXISTS\s+)?(\w+)/i;

/**
 * The objects that migrations 1..`throughVersion` leave behind: what each statement creates, minus what a later one
 * drops (read from the statements' leading CREATE/DROP). A database whose history says it ran them must have them.
 */
export function schemaObjects(known: readonly Migration[], throughVersion: number): SchemaObject[] {
  const objects = new Map<string, SchemaObject>();
  for (const migration of known.slice(0, throughVersion)) {
    for (const sql of migration.statements) {
      const created = createPattern.exec(sql);
      if (created !== null) {
        const kind = created[1]!.toLowerCase() as SchemaObject["kind"];
        const name = created[2]!.toLowerCase();
        objects.set(`${kind}:${name}`, { kind, name });
        continue;
      }
      const dropped = dropPattern.exec(sql);
      if (dropped !== null) objects.delete(`${dropped[1]!.toLowerCase()}:${dropped[2]!.toLowerCase()}`);
    }
  }
  return [...objects.values()];
}

/**
 * Refuses a re-baseline when the applied history's objects are not all there (`present` holds `kind:name` of every
 * object the database has): the legacy checksum proves only a version and a name, the objects that the statements
 * create are the evidence that this history ran.
 * @throws MigrationChecksumMismatchError naming the first legacy row and every missing object
 */
export function checkRebaseline(known: readonly Migration[], plan: MigrationPlan, present: ReadonlySet<string>): void {
  const first = plan.rebaseline[0];
  if (first === undefined) return;
  const missing = schemaObjects(known, plan.appliedThrough)
    .filter((o) => !present.has(`${o.kind}:${o.name}`))
    .map((o) => `${o.kind} ${o.name}`);
  if (missing.length > 0) {
    throw new MigrationChecksumMismatchError(
      first.version,
      first.checksum,
      legacyMigrationChecksum(first.version, first.name),
      missing,
    );
  }
}
