/** The SQLite persistence backend (`movie/persistence/sqlite`); the only module that loads better-sqlite3. */

export { SQLITE_NOW_MS, sqliteMigrations } from "./schema.ts";
export { SqliteStore, type SqliteStoreOptions } from "./sqlite-store.ts";
