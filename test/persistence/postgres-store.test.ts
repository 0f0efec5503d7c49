import { freshPostgresStore } from "./pg-fixture.ts";
import { storeContract } from "./store-contract.ts";

storeContract("postgres", async () => {
  const { store, dispose } = await freshPostgresStore("contract");
  return { store, dispose };
});
