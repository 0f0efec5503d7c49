// Module resolve hook of the in-process mutation runner (in-process-runner.mjs): `node:test` resolves to the
// collecting shim (node-test-shim.mjs), every other specifier as before (tsx's hooks included).
export async function resolve(specifier, context, nextResolve) {
  if (specifier === "node:test") {
    return { url: new URL("./node-test-shim.mjs", import.meta.url).href, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
