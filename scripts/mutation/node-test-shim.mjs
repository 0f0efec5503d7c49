// Stands in for `node:test` inside the in-process mutation runner's workers (in-process-runner.mjs): `test` and
// `describe` only COLLECT the tests a file declares, into the registry the runner reads, so the runner can run each
// test by itself, many times, with Stryker's per-test coverage and mutant switched around it. The resolve hook
// (node-test-hook.mjs) maps the specifier `node:test` here; nothing else in the project sees this module.
//
// Supported, as the core test files use them: `test(name, fn)`, `test(name, { skip }, fn)`, `describe(name, fn)`
// (nested), sync or async functions that take no test context. Anything else throws at load time, so a test file
// that starts to use more of node:test fails the dry run loudly instead of being run wrongly.

/** The registry shared with the runner (one per worker process). */
const registry = (globalThis.__movieNodeTestRegistry ??= { file: undefined, suites: [], tests: [] });

function parse(args) {
  let name;
  let options = {};
  let fn;
  for (const arg of args) {
    if (typeof arg === "string") name = arg;
    else if (typeof arg === "function") fn = arg;
    else if (arg !== null && typeof arg === "object") options = arg;
    else if (arg !== undefined) throw new Error(`in-process runner: unsupported argument ${String(arg)}`);
  }
  for (const key of Object.keys(options)) {
    if (key !== "skip" && key !== "todo") throw new Error(`in-process runner: unsupported test option "${key}"`);
  }
  if (name === undefined) name = fn?.name || "<anonymous>";
  return { name, options, fn };
}

export function test(...args) {
  const { name, options, fn } = parse(args);
  if (fn !== undefined && fn.length > 0) {
    throw new Error(`in-process runner: test "${name}" takes a test context, which it does not provide`);
  }
  if (registry.file === undefined) throw new Error(`in-process runner: test "${name}" declared outside a file load`);
  const path = [...registry.suites.map((s) => s.name), name];
  const skipped = Boolean(options.skip || options.todo) || registry.suites.some((s) => s.skipped);
  const base = `${registry.file} > ${path.join(" > ")}`;
  // node:test allows two tests of one name; the ids Stryker keys coverage by must differ.
  let id = base;
  for (let n = 2; registry.tests.some((t) => t.id === id); n++) id = `${base} #${n}`;
  registry.tests.push({ id, name: path.join(" > "), file: registry.file, fn, skipped });
}

export function describe(...args) {
  const { name, options, fn } = parse(args);
  registry.suites.push({ name, skipped: Boolean(options.skip || options.todo) });
  try {
    const result = fn?.();
    if (result !== undefined && typeof result?.then === "function") {
      throw new Error(`in-process runner: describe "${name}" is async; its tests must be declared synchronously`);
    }
  } finally {
    registry.suites.pop();
  }
}

const unsupported = (what) => () => {
  throw new Error(`in-process runner: node:test's ${what} is not supported (scripts/mutation/node-test-shim.mjs)`);
};
test.skip = (...args) => test(...args, { skip: true });
test.todo = (...args) => test(...args, { todo: true });
test.only = unsupported("test.only");
describe.skip = (...args) => describe(...args, { skip: true });
describe.only = unsupported("describe.only");
export const it = test;
export const suite = describe;
export const before = unsupported("before");
export const after = unsupported("after");
export const beforeEach = unsupported("beforeEach");
export const afterEach = unsupported("afterEach");
export const mock = new Proxy({}, { get: (_t, key) => unsupported(`mock.${String(key)}`) });
export const run = unsupported("run");
export default test;
