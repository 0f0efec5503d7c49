#!/usr/bin/env -S node --import tsx
// The `movie` command (package.json "bin"): see src/management/cli.ts and docs/operations.md.
import { runCli } from "../src/management/cli.ts";

process.exitCode = await runCli(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  isTTY: process.stdout.isTTY === true,
});
