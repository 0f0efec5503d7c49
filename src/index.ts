/** The actor runtime: `import { ActorSystem, AbstractBehavior, STOP } from "movie"`. */
export * from "./actor/index.ts";
