import { MissingDriverError } from "./errors.ts";

/**
 * Loads a backend's driver (an optional peer dependency) with `load` (a literal `import("pg")`, so the driver's types
 * flow through), turning "the driver itself is not installed" into one MissingDriverError that says what to install.
 * Any other failure, including a missing dependency of the driver, is rethrown as it came.
 */
export async function loadDriver<T>(packageName: string, entryPoint: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    if (isMissingPackage(error, packageName)) throw new MissingDriverError(packageName, entryPoint);
    throw error;
  }
}

/** Node's ESM resolver says `Cannot find package 'pg' imported from ...` (code ERR_MODULE_NOT_FOUND). */
function isMissingPackage(error: unknown, packageName: string): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND") return false;
  return error.message.includes(`'${packageName}'`);
}
