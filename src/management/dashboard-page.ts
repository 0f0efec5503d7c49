/**
 * The dashboard (GET /): one static page, no build step. It subscribes to `/events` (server-sent events) and redraws
 * members, a shard grid per entity type coloured by owner (shards in handoff outlined, shards that just moved
 * flashing), message and activation rates over the last five minutes on a canvas, lease epochs, the last operator
 * actions, and the projections (owner, status, checkpoint, lag, events/s, last error) and the outbox (rows by state,
 * the oldest pending age, the oldest parked messages with their last error). Every value from the node is written with textContent, never as HTML, so a hostile type name or address
 * cannot inject markup.
 */
export const dashboardPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Movie cluster</title>
<link rel="icon" href="data:,">
<style>
  :root { color-scheme: light dark; --bg: #0f1115; --panel: #181b22; --text: #e6e6e6; --dim: #8a90a0; --line: #2a2f3a; }
  body { margin: 0; font: 14px/1.4 system-ui, sans-serif; background: var(--bg); color: var(--text); }
  header { padding: 12px 20px; border-bottom: 1px solid var(--line); display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  .dim { color: var(--dim); }
  main { display: grid; grid-template-columns: minmax(420px, 1fr) minmax(420px, 1fr); gap: 16px; padding: 16px 20px; }
  section { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; min-width: 0; }
  section h2 { font-size: 14px; margin: 0 0 8px; text-transform: uppercase; letter-spacing: .05em; color: var(--dim); }
  table { border-collapse: collapse; width: 100%; }
  td, th { text-align: left; padding: 3px 8px 3px 0; border-bottom: 1px solid var(--line); white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 360px; }
  th { color: var(--dim); font-weight: 500; }
  .ok { color: #5ad17a; } .warn { color: #f0c04a; } .bad { color: #ff6b6b; }
  .grid { display: grid; grid-template-columns: repeat(auto-fill, 22px); gap: 3px; margin: 6px 0 10px; }
  .shard { width: 22px; height: 22px; border-radius: 3px; font-size: 9px; display: flex; align-items: center; justify-content: center; color: #000a; }
  .shard.none { background: #333; }
  .shard.handoff { outline: 2px solid #fff; outline-offset: -2px; }
  .shard.moved { animation: flash 1.5s ease-out 2; }
  @keyframes flash { 0% { transform: scale(1.35); box-shadow: 0 0 8px #fff; } 100% { transform: scale(1); } }
  .legend span { display: inline-flex; align-items: center; gap: 4px; margin-right: 12px; }
  .legend i { width: 12px; height: 12px; border-radius: 2px; display: inline-block; }
  canvas { width: 100%; height: 160px; }
  .wide { grid-column: 1 / -1; }
  #status.stale { color: #ff6b6b; }
</style>
</head>
<body>
<header>
  <h1>Movie cluster</h1>
  <span>node <b id="self" data-testid="self"></b></span>
  <span>leader <b id="leader"></b></span>
  <span id="converged"></span>
  <span id="status" class="dim">connecting…</span>
</header>
<main>
  <section><h2>Members</h2>
    <table data-testid="members"><thead><tr><th>address</th><th>status</th><th>reachable</th><th>roles</th><th>version</th><th></th></tr></thead><tbody id="members"></tbody></table>
  </section>
  <section><h2>Rates (per second, last 5 minutes)</h2>
    <canvas id="chart" width="800" height="200" data-testid="chart"></canvas>
    <div class="legend" id="chart-legend"></div>
  </section>
  <section class="wide"><h2>Shards</h2><div id="types" data-testid="types"></div></section>
  <section><h2>Leases (this node)</h2>
    <table><thead><tr><th>type</th><th>shard</th><th>phase</th><th>epoch</th></tr></thead><tbody id="leases"></tbody></table>
  </section>
  <section><h2>Operator actions</h2>
    <table><thead><tr><th>when</th><th>action</th><th>target</th><th>from</th><th>outcome</th></tr></thead><tbody id="actions" data-testid="actions"></tbody></table>
  </section>
  <section class="wide" data-testid="operations"><h2>Projections and outbox</h2>
    <table><thead><tr><th>projection</th><th>slice</th><th>owner</th><th>status</th><th>checkpoint</th><th>lag</th><th>events/s</th><th>last error</th></tr></thead><tbody id="projections" data-testid="projections"></tbody></table>
    <p id="outbox" data-testid="outbox" class="dim">outbox: not in use on this node</p>
    <table><thead><tr><th>parked</th><th>sender</th><th>attempts</th><th>last error</th></tr></thead><tbody id="parked" data-testid="parked"></tbody></table>
  </section>
</main>
<script>
"use strict";
const palette = ["#4e9af1", "#f1a04e", "#5ad17a", "#d16ad1", "#f1e04e", "#4ed1c8", "#f16a6a", "#a38cf1", "#9ad14e", "#f18cc0"];
const colourOf = new Map();
function colour(owner) {
  if (!colourOf.has(owner)) colourOf.set(owner, palette[colourOf.size % palette.length]);
  return colourOf.get(owner);
}
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.append(c instanceof Node ? wrap(c) : el("td", c));
  return tr;
}
function wrap(node) { const td = document.createElement("td"); td.append(node); return td; }
function short(address) { const m = /@([^#]+)/.exec(address || ""); return m ? m[1] : address; }

const history = [];      // { t, routes, deliveries, activations }
const series = [["routes", "#4e9af1"], ["deliveries", "#5ad17a"], ["activations", "#f1a04e"]];
let previous = null;
const lastOwners = new Map();  // type -> owners by shard (strings)
const movedAt = new Map();     // "type/shard" -> time it moved

function drawChart() {
  const canvas = document.getElementById("chart");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  ctx.strokeStyle = "#2a2f3a"; ctx.lineWidth = 1;
  for (let i = 1; i < 4; i++) { ctx.beginPath(); ctx.moveTo(0, h * i / 4); ctx.lineTo(w, h * i / 4); ctx.stroke(); }
  if (history.length < 2) return;
  // The x axis spans what was seen, from 30 s up to 5 minutes, so a fresh page shows a line rather than a dot.
  const t1 = history[history.length - 1].t, span = Math.min(300000, Math.max(30000, t1 - history[0].t)), t0 = t1 - span;
  let max = 1;
  for (const p of history) for (const [k] of series) max = Math.max(max, p[k]);
  ctx.fillStyle = "#8a90a0"; ctx.font = "20px system-ui"; ctx.fillText(max.toFixed(0) + "/s", 6, 22);
  for (const [k, c] of series) {
    ctx.strokeStyle = c; ctx.lineWidth = 2; ctx.beginPath();
    history.forEach((p, i) => {
      const x = (p.t - t0) / span * w, y = h - p[k] / max * (h - 30) - 2;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
  const legend = document.getElementById("chart-legend");
  legend.replaceChildren(...series.map(([k, c]) => {
    const s = el("span"); const i = el("i"); i.style.background = c;
    s.append(i, el("b", k + " " + history[history.length - 1][k].toFixed(1)));
    return s;
  }));
}

function render(s) {
  const m = s.members;
  document.getElementById("self").textContent = m ? m.self : "(no cluster)";
  document.getElementById("leader").textContent = m && m.leader ? short(m.leader) : "none";
  const conv = document.getElementById("converged");
  conv.textContent = m && m.converged ? "converged" : "not converged";
  conv.className = m && m.converged ? "ok" : "warn";
  const members = document.getElementById("members");
  members.replaceChildren(...(m ? m.members : []).map((x) => {
    const dot = el("i"); dot.style.cssText = "display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;background:" + colour(x.address);
    const addr = el("span"); addr.append(dot, document.createTextNode(x.address + (x.self ? " (this node)" : "")));
    const tr = row([addr, el("span", x.status, x.status === "Up" ? "ok" : "warn"), el("span", x.reachable ? "yes" : "no", x.reachable ? "ok" : "bad"), x.roles.join(",") || "-", x.appVersion ?? "-", x.leader ? "leader" : ""]);
    tr.dataset.member = x.hostPort; tr.dataset.status = x.status;
    return tr;
  }));

  const now = Date.now();
  const types = document.getElementById("types");
  types.replaceChildren(...s.types.map((t) => {
    const box = el("div"); box.dataset.type = t.type;
    const title = el("div"); title.append(el("b", t.type), el("span", "  " + t.shardCount + " shards, generation " + t.generation + ", " + t.localEntities + " local entities, handoffs " + (t.handoffs.length ? t.handoffs.join(",") : "none"), "dim"));
    const grid = el("div", null, "grid"); grid.dataset.testid = "grid";
    const before = lastOwners.get(t.type);
    const owners = t.shards.map((i) => (i < 0 ? null : t.owners[i]));
    owners.forEach((owner, shard) => {
      const cell = el("div", shard, "shard");
      cell.dataset.shard = String(shard); cell.dataset.owner = owner ? short(owner) : "";
      cell.title = "shard " + shard + " → " + (owner || "no owner");
      if (owner === null) cell.classList.add("none"); else cell.style.background = colour(owner);
      if (t.handoffs.includes(shard)) cell.classList.add("handoff");
      const key = t.type + "/" + shard;
      if (before && before[shard] !== owner) movedAt.set(key, now);
      if (now - (movedAt.get(key) || 0) < 3000) cell.classList.add("moved");
      grid.append(cell);
    });
    lastOwners.set(t.type, owners);
    const legend = el("div", null, "legend");
    const counts = new Map();
    for (const o of owners) if (o) counts.set(o, (counts.get(o) || 0) + 1);
    for (const [o, n] of counts) { const sp = el("span"); const i = el("i"); i.style.background = colour(o); sp.append(i, el("span", short(o) + ": " + n)); legend.append(sp); }
    box.append(title, grid, legend);
    return box;
  }));

  const leases = document.getElementById("leases");
  leases.replaceChildren(...s.types.flatMap((t) => (t.leases || []).map((l) => row([t.type, l.shardId, l.phase, l.epoch === null ? "-" : l.epoch]))));
  const actions = document.getElementById("actions");
  actions.replaceChildren(...s.actions.slice().reverse().map((a) => row([new Date(a.atEpochMs).toLocaleTimeString(), a.action, short(a.target), a.remote || "-", el("span", a.outcome, a.outcome === "accepted" ? "ok" : "bad")])));

  renderOperations(s);

  if (s.counters) {
    if (previous && s.atEpochMs > previous.atEpochMs) {
      const dt = (s.atEpochMs - previous.atEpochMs) / 1000;
      history.push({ t: s.atEpochMs, routes: (s.counters.routes - previous.counters.routes) / dt, deliveries: (s.counters.localDeliveries - previous.counters.localDeliveries) / dt, activations: (s.counters.activations - previous.counters.activations) / dt });
      while (history.length > 0 && history[0].t < s.atEpochMs - 300000) history.shift();
    }
    previous = s;
    drawChart();
  }
  const status = document.getElementById("status");
  status.textContent = "updated " + new Date(s.atEpochMs).toLocaleTimeString();
  status.className = "dim";
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

function renderOperations(s) {
  const projections = document.getElementById("projections");
  projections.replaceChildren(...(s.projections || []).map((p) => {
    const cls = p.status === "running" ? "ok" : p.status === "failed" || p.status === "stale" || p.status === "unowned" ? "bad" : "warn";
    const error = p.lastError === null ? "-" : p.lastError + (p.lastErrorAtEpochMs === null ? "" : " (" + new Date(p.lastErrorAtEpochMs).toLocaleTimeString() + ")");
    const tr = row([p.projection, p.slice === null ? "-" : p.slice, p.owner === null ? "none" : short(p.owner), el("span", p.status, cls), p.checkpoint === null ? "-" : p.checkpoint, el("span", p.lag, p.lag > 0 ? "warn" : "ok"), p.eventsPerSecond === null ? "-" : p.eventsPerSecond.toFixed(1), el("span", error, p.lastError === null ? "" : "bad")]);
    tr.dataset.projection = p.name; tr.dataset.status = p.status; tr.dataset.checkpoint = String(p.checkpoint); tr.dataset.lag = String(p.lag);
    return tr;
  }));
  const outbox = document.getElementById("outbox");
  const parked = document.getElementById("parked");
  const o = s.outbox;
  if (!o) { outbox.textContent = "outbox: not in use on this node"; outbox.className = "dim"; parked.replaceChildren(); return; }
  const c = o.counts;
  outbox.replaceChildren(document.createTextNode("outbox (" + o.backend + "): "), ...["pending", "claimed", "retrying", "parked", "delivered"].map((k) => {
    const span = el("span", k + " " + c[k] + "  ", k === "parked" && c[k] > 0 ? "bad" : k === "pending" && c[k] > 0 ? "warn" : "");
    span.dataset.state = k; span.dataset.count = String(c[k]);
    return span;
  }), el("span", "oldest pending " + (c.oldestPendingAgeMs === null ? "-" : (c.oldestPendingAgeMs / 1000).toFixed(1) + " s")));
  outbox.className = "";
  parked.replaceChildren(...o.parked.map((m) => {
    const tr = row([m.offset, m.persistenceId, m.attempts, el("span", m.lastError, "bad")]);
    tr.dataset.offset = String(m.offset);
    return tr;
  }));
}

const source = new EventSource("events");
source.addEventListener("snapshot", (e) => render(JSON.parse(e.data)));
source.onerror = () => { const s = document.getElementById("status"); s.textContent = "disconnected; retrying…"; s.className = "stale"; };
</script>
</body>
</html>
`;
