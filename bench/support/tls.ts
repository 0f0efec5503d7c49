import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SecureContextOptions } from "node:tls";

/**
 * A throwaway CA and one certificate for 127.0.0.1 (both benchmark processes use it), made with the openssl CLI in a
 * temp dir: `MOVIE_BENCH_TLS=1` measures remoting inside mutual TLS. Returns the dir (pass it to the child) too.
 */
export function makeBenchCertificates(): { dir: string; dispose: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "movie-bench-tls-"));
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=movie-bench-ca");
  run("req", ...ec, "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=bench");
  writeFileSync(join(dir, "node.ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  run(
    "x509",
    "-req",
    "-in",
    "node.csr",
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "node.crt",
    "-days",
    "1",
    "-extfile",
    "node.ext",
  );
  return { dir, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The TLS settings of a benchmark node from the certificates in `dir`. */
export function benchTls(dir: string): SecureContextOptions {
  const read = (f: string) => readFileSync(join(dir, f));
  return { key: read("node.key"), cert: read("node.crt"), ca: read("ca.crt") };
}
