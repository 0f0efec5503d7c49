/** The in-memory persistence backend. */
export { MemoryStore, type MemoryStoreOptions } from "./memory-store.ts";
