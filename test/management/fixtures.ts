/** Raw HTTP for the management tests: bytes exactly as given, so hostile requests reach the server unchanged. */
import { connect } from "node:net";

/** A response read off a raw socket. */
export interface RawResponse {
  readonly status: number;
  readonly headers: Map<string, string>;
  readonly body: string;
}

/** Sends `request` (a whole HTTP/1.1 request text or bytes) and reads the response until the server closes. */
export function rawRequest(port: number, request: string | Buffer, timeoutMs = 10_000): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no response within ${timeoutMs} ms; got ${Buffer.concat(chunks).toString().slice(0, 200)}`));
    }, timeoutMs);
    socket.on("data", (c) => chunks.push(c));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString("utf8");
      const [head = "", ...bodyParts] = text.split("\r\n\r\n");
      const [statusLine = "", ...headerLines] = head.split("\r\n");
      const status = Number(statusLine.split(" ")[1]);
      const headers = new Map<string, string>();
      for (const line of headerLines) {
        const i = line.indexOf(":");
        if (i > 0) headers.set(line.slice(0, i).toLowerCase(), line.slice(i + 1).trim());
      }
      let body = bodyParts.join("\r\n\r\n");
      if (headers.get("transfer-encoding") === "chunked") body = unchunk(body);
      resolve({ status, headers, body });
    });
    socket.write(request);
  });
}

function unchunk(body: string): string {
  let out = "";
  let rest = body;
  for (;;) {
    const i = rest.indexOf("\r\n");
    if (i < 0) return out;
    const size = Number.parseInt(rest.slice(0, i), 16);
    if (!(size > 0)) return out;
    out += rest.slice(i + 2, i + 2 + size);
    rest = rest.slice(i + 2 + size + 2);
  }
}

/** A GET (or `method`) of `path` with `headers`, closing the connection after the response. */
export function rawGet(
  port: number,
  path: string,
  headers: readonly string[] = [],
  method = "GET",
): Promise<RawResponse> {
  return rawRequest(
    port,
    `${method} ${path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n${headers.map((h) => `${h}\r\n`).join("")}\r\n`,
  );
}

/** Parses a JSON body, failing the test with the body when it is not JSON. */
export function bodyJson(response: RawResponse): Record<string, unknown> {
  try {
    return JSON.parse(response.body) as Record<string, unknown>;
  } catch {
    throw new Error(`not JSON (status ${response.status}): ${response.body.slice(0, 300)}`);
  }
}
