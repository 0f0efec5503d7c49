import { MemoryStore } from "../../src/persistence/memory/index.ts";
import { storeContract } from "./store-contract.ts";

storeContract("memory", async () => {
  const store = new MemoryStore();
  return { store, dispose: () => store.close() };
});
