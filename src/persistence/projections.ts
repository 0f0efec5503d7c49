import type { ActorSystem, Extension, ExtensionId } from "../actor/index.ts";
import { Database } from "./database.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";
import { type Projection, ProjectionRunner, type ProjectionRunOptions, type ProjectionStats } from "./projection.ts";

/**
 * The projections of an actor system: `Projections.get(system).start(definition)` runs a projection against the
 * system's store (Database.get(system).store); `stats` lists every running one. Stopped with the system.
 */
export class Projections implements Extension {
  private static readonly id: ExtensionId<Projections> = {
    key: "movie.persistence.projections",
    create: (s) => new Projections(s),
  };
  private readonly runners = new Map<string, ProjectionRunner>();

  private constructor(readonly system: ActorSystem) {}

  /** The Projections extension of `system`. */
  static get(system: ActorSystem): Projections {
    return system.extension(Projections.id);
  }

  /**
   * Starts `definition` from its checkpoint.
   * @throws InvalidPersistenceRequestError for a malformed definition, or a name already running here
   */
  start(definition: Projection, options: ProjectionRunOptions = {}): ProjectionRunner {
    const running = this.runners.get(definition?.name);
    if (running !== undefined && running.status !== "stopped" && running.status !== "stale") {
      throw new InvalidPersistenceRequestError("projection name", `"${definition.name}" is already running here`);
    }
    const runner = ProjectionRunner.start(definition, Database.get(this.system).store, this.system.scheduler, options);
    this.runners.set(definition.name, runner);
    return runner;
  }

  /**
   * Lists `runner`, started elsewhere (a slice of a sharded projection on the node that owns it), in `get` and
   * `stats` until the returned function is called. It replaces an entry of the same name: the instance of a new
   * lease epoch starts while the previous epoch's instance is still finishing its batch (and commits nothing more).
   */
  attach(runner: ProjectionRunner): () => void {
    this.runners.set(runner.name, runner);
    return () => {
      if (this.runners.get(runner.name) === runner) this.runners.delete(runner.name);
    };
  }

  /** The running projection called `name`, if any. */
  get(name: string): ProjectionRunner | undefined {
    return this.runners.get(name);
  }

  /** Every projection started here: lag, events/s, last error, status. */
  get stats(): ProjectionStats[] {
    return [...this.runners.values()].map((r) => r.stats);
  }

  /** Stops every projection. */
  async stop(): Promise<void> {
    await Promise.all([...this.runners.values()].map((r) => r.stop()));
  }
}
