import type { ActorSystem } from "./actor-system.ts";

/** Something an extension may do when its system terminates. */
export interface Extension {
  /** Runs when the system terminates, in reverse order of registration. */
  stop?(): void | Promise<void>;
}

/** Identifies one kind of extension; `ActorSystem.extension(id)` creates it once per system. */
export interface ExtensionId<E extends Extension> {
  readonly key: string;
  /** Creates the extension for `system`; called once per system. */
  create(system: ActorSystem): E;
}
