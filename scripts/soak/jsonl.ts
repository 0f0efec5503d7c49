// Append-only JSON Lines files written synchronously: a record is in the kernel's page cache before the operation it
// describes is sent, so a node killed with SIGKILL loses no record of what it already started.
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";

export class JsonlWriter {
  private fd: number | null;

  constructor(readonly path: string) {
    this.fd = openSync(path, "a");
  }

  write(record: object): void {
    if (this.fd !== null) writeSync(this.fd, `${JSON.stringify(record)}\n`);
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}

/** Every record of a JSONL file; a torn last line (a writer killed mid-write) is skipped and counted. */
export function readJsonl<T>(path: string): { records: T[]; torn: number } {
  const records: T[] = [];
  let torn = 0;
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (line.length === 0) continue;
    try {
      records.push(JSON.parse(line) as T);
    } catch {
      torn++;
    }
  }
  return { records, torn };
}
