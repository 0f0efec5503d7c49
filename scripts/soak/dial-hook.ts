// Imported first by a soak node (scripts/soak/node.ts), before any Movie module: it makes the node dial each peer
// through the harness's TCP proxy for that pair, so that the harness can cut or pause one link without root. Movie
// has no separate advertised address (a node binds and advertises one host:port, and peers dial exactly that), so the
// redirection happens at the socket layer: net.connect({ host, port }) to a peer's real address goes to the proxy's
// port instead. The handshake still names the peer's real address, which is what the dialler checks.
import { syncBuiltinESMExports } from "node:module";
import net from "node:net";

/** `"127.0.0.1:<peer port>" -> proxy port`, from MOVIE_SOAK_DIAL_MAP (JSON); absent means dial directly. */
function dialMap(): Map<string, number> {
  const text = process.env.MOVIE_SOAK_DIAL_MAP;
  if (text === undefined || text.length === 0) return new Map();
  const parsed: unknown = JSON.parse(text);
  const map = new Map<string, number>();
  if (parsed !== null && typeof parsed === "object") {
    for (const [address, port] of Object.entries(parsed)) if (typeof port === "number") map.set(address, port);
  }
  return map;
}

const map = dialMap();
const original = net.connect;
const redirected = ((...args: unknown[]) => {
  const options = args[0];
  if (options !== null && typeof options === "object" && !Array.isArray(options)) {
    const { host, port } = options as { host?: unknown; port?: unknown };
    const proxy = map.get(`${typeof host === "string" ? host : "127.0.0.1"}:${String(port)}`);
    if (proxy !== undefined) {
      args[0] = { ...(options as object), host: "127.0.0.1", port: proxy };
    }
  }
  return (original as (...a: unknown[]) => net.Socket)(...args);
}) as typeof net.connect;
net.connect = redirected;
net.createConnection = redirected;
// ESM importers (`import { connect } from "node:net"`) read the builtin's named exports, which only follow the
// CommonJS object after this call.
syncBuiltinESMExports();
