// `npm run soak:check -- <run dir>`: judges a soak run directory (check.ts), prints the summary table, and exits 1
// on any violation (2 when the directory cannot be read).
import { checkRun } from "./check.ts";

const dir = process.argv[2];
if (dir === undefined) {
  console.error("usage: npm run soak:check -- <run dir>   (a directory written by npm run soak)");
  process.exit(2);
}
let result: { report: string; violations: number };
try {
  result = checkRun(dir);
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  process.exit(2);
}
console.log(result.report);
console.log(result.violations === 0 ? "no violations" : `${result.violations} violations`);
process.exit(result.violations === 0 ? 0 : 1);
