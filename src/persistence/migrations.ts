/**
 * Versioned schema migrations (REFERENCE §4.4): versions contiguous from 1, each with a name and a checksum, recorded
 * in `movie_schema_migration`. The backends supply the SQL; the rules for reading the history live here, pure.
 */
import { createHash } from "node:crypto";
import {
  InvalidMigrationHistoryError,
  MigrationChecksumMismatchError,
  UnsupportedSchemaVersionError,
} from "./errors.ts";

/** The schema version this build writes and understands. */
export const CURRENT_SCHEMA_VERSION = 7;

/** The names of migrations 1..7, shared by both SQL backends. */
export const MIGRATION_NAMES: readonly string[] = [
  "core-persistence-schema",
  "event-query-and-projection-schema",
  "transactional-outbox-schema",
  "cluster-shard-fencing-schema",
  "append-hot-path-without-stream-read",
  "drop-append-one-resolve",
  "append-at-zero-after-retention",
];

/** One migration: version, name, checksum and the SQL statements it runs in one transaction. */
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

/** SHA-256 (hex) of `movie:persistence:migration:<v>:<name>:v1`. */
export function migrationChecksum(version: number, name: string): string {
  return createHash("sha256").update(`movie:persistence:migration:${version}:${name}:v1`).digest("hex");
}

/** Builds the migration list from per-version statements (index 0 is version 1). */
export function buildMigrations(statements: readonly (readonly string[])[]): Migration[] {
  return statements.map((sql, i) => ({
    version: i + 1,
    name: MIGRATION_NAMES[i]!,
    checksum: migrationChecksum(i + 1, MIGRATION_NAMES[i]!),
    statements: sql,
  }));
}

/**
 * Checks the applied history against the known migrations and returns the ones still to run, in order.
 * @throws UnsupportedSchemaVersionError, InvalidMigrationHistoryError, MigrationChecksumMismatchError
 */
export function pendingMigrations(known: readonly Migration[], applied: readonly AppliedMigration[]): Migration[] {
  const versions = applied.map((m) => m.version).sort((a, b) => a - b);
  const newest = versions.length === 0 ? 0 : versions[versions.length - 1]!;
  if (newest > known.length) throw new UnsupportedSchemaVersionError(newest, known.length);
  versions.forEach((v, i) => {
    if (v !== i + 1) throw new InvalidMigrationHistoryError(versions);
  });
  for (const row of applied) {
    const expected = known[row.version - 1]!;
    if (row.checksum !== expected.checksum) {
      throw new MigrationChecksumMismatchError(row.version, expected.checksum, row.checksum);
    }
  }
  return known.slice(newest);
}
