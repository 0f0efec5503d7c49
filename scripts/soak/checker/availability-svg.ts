// The availability picture: acknowledged and failed/ambiguous operations per second, with every fault's window
// shaded and labelled, as a self-contained SVG.
import type { Availability } from "./availability.ts";
import type { FaultLine } from "./types.ts";

const colors: Record<string, string> = {
  kill: "#e45756",
  "pause-owner": "#f58518",
  partition: "#b279a2",
  "db-pause": "#4c78a8",
  "db-restart": "#72b7b2",
  "pg-terminate": "#54a24b",
  "leave-rejoin": "#eeca3b",
  "rolling-restart": "#9d755d",
  "node-exit": "#bab0ac",
};

const escapeXml = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function availabilitySvg(a: Availability, faults: readonly FaultLine[], title: string): string {
  const width = 1200;
  const height = 420;
  const left = 60;
  const right = 20;
  const top = 40;
  const bottom = 90;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const n = Math.max(a.seconds.length, 1);
  const max = Math.max(10, ...a.seconds.map((s) => Math.max(s.ok, s.errors)));
  const x = (sec: number) => left + (sec / n) * plotW;
  const y = (v: number) => top + plotH - (v / max) * plotH;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${left}" y="22" font-size="15">${escapeXml(title)}</text>`,
  );
  for (const f of faults) {
    const x0 = x(f.start / 1000);
    const x1 = Math.max(x(f.end / 1000), x0 + 2);
    const color = colors[f.kind] ?? "#999";
    out.push(
      `<rect x="${x0.toFixed(1)}" y="${top}" width="${(x1 - x0).toFixed(1)}" height="${plotH}" fill="${color}" fill-opacity="0.25"/>`,
    );
    if (f.recovered !== null && f.recovered > f.end) {
      out.push(
        `<rect x="${x1.toFixed(1)}" y="${top}" width="${(x(f.recovered / 1000) - x1).toFixed(1)}" height="${plotH}" fill="${color}" fill-opacity="0.1"/>`,
      );
    }
  }
  for (let t = 0; t <= 4; t++) {
    const v = Math.round((max * t) / 4);
    out.push(
      `<line x1="${left}" x2="${width - right}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${v}</text>`,
    );
  }
  const step = n > 600 ? 120 : n > 120 ? 30 : 10;
  for (let s = 0; s <= n; s += step) {
    out.push(`<text x="${x(s)}" y="${top + plotH + 16}" text-anchor="middle">${s}s</text>`);
  }
  const path = (pick: (s: { ok: number; errors: number }) => number) =>
    a.seconds.map((s, i) => `${i === 0 ? "M" : "L"}${x(i + 0.5).toFixed(1)},${y(pick(s)).toFixed(1)}`).join(" ");
  out.push(
    `<path d="${path((s) => s.ok)}" fill="none" stroke="#2b7a2b" stroke-width="1.5"/>`,
    `<path d="${path((s) => s.errors)}" fill="none" stroke="#c0392b" stroke-width="1.5"/>`,
    `<rect x="${left}" y="${top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`,
    `<text x="14" y="${top + plotH / 2}" transform="rotate(-90 14 ${top + plotH / 2})" text-anchor="middle">operations per second</text>`,
  );
  // Legend: the two lines, then each fault kind present.
  let lx = left;
  const ly = height - 40;
  const legend = (color: string, label: string, box: boolean) => {
    out.push(
      box
        ? `<rect x="${lx}" y="${ly - 9}" width="14" height="10" fill="${color}" fill-opacity="0.5"/>`
        : `<line x1="${lx}" x2="${lx + 14}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2"/>`,
      `<text x="${lx + 18}" y="${ly}">${escapeXml(label)}</text>`,
    );
    lx += 26 + label.length * 7;
  };
  legend("#2b7a2b", "acknowledged (ok)", false);
  legend("#c0392b", "failed or ambiguous", false);
  for (const kind of new Set(faults.map((f) => f.kind))) legend(colors[kind] ?? "#999", kind, true);
  out.push(
    `<text x="${left}" y="${height - 14}" fill="#555">shaded: fault window (darker) and recovery until every node saw every other Up again (lighter)</text>`,
    "</svg>",
  );
  return `${out.join("\n")}\n`;
}
