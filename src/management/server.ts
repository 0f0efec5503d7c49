/**
 * `startManagement(system, options)`: the management endpoint on node:http. It binds loopback unless told otherwise,
 * reads no request body (none of its endpoints takes one: a body above {@link requestBodyBytesMax} gets 413 and the
 * connection closes), bounds headers, connections and request time, and hands each request to the fetch-style
 * handler.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import type { ActorSystem } from "../actor/index.ts";
import { errorText } from "../actor/untrusted.ts";
import { ManagementConfigurationError } from "./errors.ts";
import {
  createManagementHandler,
  type ManagementHandler,
  type ManagementHandlerOptions,
  requestTargetCharsMax,
} from "./handler.ts";

/** The most body bytes a request may carry (the endpoints take none; a small one is read and ignored). */
export const requestBodyBytesMax = 1_024;
/** Request header bytes node:http accepts; more gets 431. */
const headerBytesMax = 8 * 1_024;

/** Options of {@link startManagement}. */
export interface ManagementOptions extends ManagementHandlerOptions {
  /** Interface to bind (default `127.0.0.1`: loopback only; `0.0.0.0` for a pod's probes and scrapes). */
  readonly host?: string;
  /** TCP port (default 8558; 0 picks a free one, readable from `address`). */
  readonly port?: number;
  /** Most open connections (default 64); more are refused at accept. */
  readonly maxConnections?: number;
}

/** A running management server. */
export interface ManagementServer {
  /** The bound host and port. */
  readonly address: { readonly host: string; readonly port: number };
  /** `http://host:port/` of the dashboard. */
  readonly url: string;
  readonly handler: ManagementHandler;
  /** Closes the server, its event streams and every connection. */
  close(): Promise<void>;
}

function headersOf(req: IncomingMessage): Headers {
  const headers = new Headers();
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i]!, raw[i + 1]!);
  return headers;
}

function sendPlain(res: ServerResponse, status: number, code: string, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", connection: "close" });
  res.end(`${JSON.stringify({ error: code, message })}\n`);
}

/**
 * Starts the management endpoint of `system` and resolves once it listens.
 * @throws ManagementConfigurationError for invalid options; the listen error (EADDRINUSE…) when the port is taken
 */
export async function startManagement(system: ActorSystem, options: ManagementOptions = {}): Promise<ManagementServer> {
  const host = options.host ?? "127.0.0.1";
  if (typeof host !== "string" || host.length === 0 || host.length > 255) {
    throw new ManagementConfigurationError("host", "must be a host name or IP address");
  }
  const port = options.port ?? 8558;
  if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
    throw new ManagementConfigurationError("port", "must be a whole number from 0 to 65535");
  }
  const maxConnections = options.maxConnections ?? 64;
  if (!Number.isSafeInteger(maxConnections) || maxConnections < 1) {
    throw new ManagementConfigurationError("maxConnections", "must be a whole number above 0");
  }
  const handler = createManagementHandler(system, options);
  const server: Server = createServer({ maxHeaderSize: headerBytesMax, requestTimeout: 10_000, headersTimeout: 5_000 });
  server.maxConnections = maxConnections;
  let base = "";

  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    const target = req.url ?? "";
    if (target.length > requestTargetCharsMax) {
      sendPlain(res, 414, "UriTooLong", "the request target is too long");
      req.destroy();
      return;
    }
    if (!target.startsWith("/")) {
      sendPlain(res, 400, "BadRequestTarget", "the request target must be a path");
      return;
    }
    const declared = Number(req.headers["content-length"] ?? 0);
    if (!(declared <= requestBodyBytesMax)) {
      sendPlain(res, 413, "BodyTooLarge", `management endpoints take no body above ${requestBodyBytesMax} bytes`);
      res.on("finish", () => req.destroy());
      return;
    }
    let bytes = 0;
    let refused = false;
    req.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > requestBodyBytesMax && !refused) {
        refused = true;
        sendPlain(res, 413, "BodyTooLarge", `management endpoints take no body above ${requestBodyBytesMax} bytes`);
        res.on("finish", () => req.destroy());
      }
    });
    req.on("error", () => {});
    req.on("end", () => {
      if (refused) return;
      void dispatch(req, res, target);
    });
  });

  const dispatch = async (req: IncomingMessage, res: ServerResponse, target: string): Promise<void> => {
    const abort = new AbortController();
    res.on("close", () => abort.abort());
    let request: Request;
    try {
      request = new Request(`${base}${target}`, {
        method: req.method ?? "GET",
        headers: headersOf(req),
        signal: abort.signal,
      });
    } catch (error) {
      sendPlain(res, 400, "BadRequest", `the request could not be read: ${errorText(error)}`);
      return;
    }
    const remote =
      req.socket.remoteAddress === undefined ? undefined : `${req.socket.remoteAddress}:${req.socket.remotePort ?? 0}`;
    const response = await handler.handle(request, remote === undefined ? {} : { remote });
    const headers: Record<string, string> = {};
    response.headers.forEach((value, key) => {
      headers[key] = value;
    });
    res.writeHead(response.status, headers);
    if (response.body === null || req.method === "HEAD") {
      res.end();
      return;
    }
    const body = Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>);
    body.on("error", () => res.destroy());
    res.on("close", () => body.destroy());
    body.pipe(res);
  };

  server.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    // node:http's own refusals end here (headers too large, malformed request, timeout): answer when possible.
    const status =
      error.code === "HPE_HEADER_OVERFLOW"
        ? "431 Request Header Fields Too Large"
        : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? "408 Request Timeout"
          : "400 Bad Request";
    if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  server.on("error", (error) => system.log.warn({ error: errorText(error) }, "management server error"));
  const bound = server.address() as AddressInfo;
  const urlHost = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
  base = `http://${urlHost}:${bound.port}`;
  return {
    address: { host: bound.address, port: bound.port },
    url: `${base}/`,
    handler,
    close: () =>
      new Promise<void>((resolve) => {
        handler.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
