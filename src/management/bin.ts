#!/usr/bin/env node
// The `movie` command of the installed package (package.json "bin" points at its build, dist/management/bin.js, so
// it runs on plain node); inside the repository bin/movie.ts runs the same CLI from source through tsx.
import { runCli } from "./cli.ts";

process.exitCode = await runCli(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  isTTY: process.stdout.isTTY === true,
});
