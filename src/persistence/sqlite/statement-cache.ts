import type { Database as SqliteDatabase, Statement } from "better-sqlite3";

/**
 * Prepared statements of one SQLite connection, keyed by their SQL text. A projection handler runs the same few
 * statements once per event: preparing each call was most of an exactly-once batch's cost (docs/persistence-feed.md,
 * "Figures"). Bounded: past `capacity` distinct texts the oldest prepared one is dropped, so a handler that builds SQL
 * text per event (values interpolated) costs what it did before and does not grow the cache.
 */
export class StatementCache {
  private readonly statements = new Map<string, Statement>();

  constructor(
    private readonly db: SqliteDatabase,
    readonly capacity = 128,
  ) {}

  /**
   * The prepared statement of `sql` on this connection (prepared on first use).
   * @throws what better-sqlite3's prepare throws (a syntax error, more than one statement); nothing is cached then
   */
  get(sql: string): Statement {
    const cached = this.statements.get(sql);
    if (cached !== undefined) return cached;
    const statement = this.db.prepare(sql);
    if (this.statements.size >= this.capacity) {
      const oldest = this.statements.keys().next();
      if (oldest.done !== true) this.statements.delete(oldest.value);
    }
    this.statements.set(sql, statement);
    return statement;
  }

  /** How many statements are cached. */
  get size(): number {
    return this.statements.size;
  }
}
