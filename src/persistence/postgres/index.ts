/** The PostgreSQL persistence backend (`movie/persistence/postgres`); the only module that loads `pg`. */
export {
  isPostgresConnectionError,
  PostgresStore,
  type PostgresStoreOptions,
  validatePostgresUri,
} from "./postgres-store.ts";
export { MIGRATION_LOCK_KEY, postgresMigrationSql, postgresMigrations } from "./schema.ts";
