/**
 * Renders a JSON template (a valid document of some frame kind) as bytes with one mutation applied at one field:
 * a hostile value in its place, the field missing, an extra field (a `__proto__` key, say) beside it, or the whole
 * document replaced. Written by hand rather than with JSON.stringify so the hostile bytes go in verbatim.
 */

import type { Prng } from "../fixtures/prng.ts";
import { type Hostile, pickHostileJson } from "./dictionary.ts";

/** A JSON value of a template. */
export type Json = null | boolean | number | string | readonly Json[] | { readonly [key: string]: Json };

/** Where a mutation applies: object keys and array indices from the root. */
export type JsonPath = readonly (string | number)[];

/** One mutation of a template. */
export type JsonMutation =
  | { readonly op: "none" }
  | { readonly op: "set"; readonly path: JsonPath; readonly value: Hostile }
  | { readonly op: "delete"; readonly path: JsonPath }
  | { readonly op: "extra"; readonly path: JsonPath; readonly key: string; readonly value: Hostile }
  | { readonly op: "root"; readonly value: Hostile };

/** Every path to a value inside `template` (not the root itself). */
export function pathsOf(template: Json, prefix: JsonPath = []): JsonPath[] {
  const out: JsonPath[] = [];
  if (Array.isArray(template)) {
    template.forEach((v, i) => {
      out.push([...prefix, i], ...pathsOf(v, [...prefix, i]));
    });
  } else if (template !== null && typeof template === "object") {
    for (const [k, v] of Object.entries(template)) out.push([...prefix, k], ...pathsOf(v, [...prefix, k]));
  }
  return out;
}

/** Paths to objects inside `template`, the root included (where an extra key can go). */
function objectPaths(template: Json, prefix: JsonPath = []): JsonPath[] {
  const out: JsonPath[] = [];
  if (Array.isArray(template)) {
    template.forEach((v, i) => {
      out.push(...objectPaths(v, [...prefix, i]));
    });
  } else if (template !== null && typeof template === "object") {
    out.push(prefix);
    for (const [k, v] of Object.entries(template)) out.push(...objectPaths(v, [...prefix, k]));
  }
  return out;
}

const extraKeys = ["__proto__", "constructor", "prototype", "toString", "valueOf", "hasOwnProperty", "extra", ""];

/** A random mutation of `template`; `hugeBytes`/`hugeChance` bound the huge values. */
export function randomMutation(rng: Prng, template: Json, hugeBytes: number, hugeChance: number): JsonMutation {
  const value = (): Hostile => pickHostileJson(rng, hugeBytes, hugeChance);
  const r = rng.int(100);
  const paths = pathsOf(template);
  if (r < 4) return { op: "none" };
  if (r < 8) return { op: "root", value: value() };
  if (r < 20 && paths.length > 0) return { op: "delete", path: rng.pick(paths) };
  if (r < 32) {
    const objects = objectPaths(template);
    if (objects.length > 0) return { op: "extra", path: rng.pick(objects), key: rng.pick(extraKeys), value: value() };
  }
  if (paths.length === 0) return { op: "root", value: value() };
  return { op: "set", path: rng.pick(paths), value: value() };
}

/** A short description of `mutation` for reports: `set to=toStringNumber`. */
export function describeMutation(mutation: JsonMutation): string {
  switch (mutation.op) {
    case "none":
      return "valid";
    case "root":
      return `root=${mutation.value.name}`;
    case "delete":
      return `delete ${mutation.path.join(".")}`;
    case "set":
      return `${mutation.path.join(".")}=${mutation.value.name}`;
    case "extra":
      return `extra ${[...mutation.path, mutation.key].join(".")}=${mutation.value.name}`;
  }
}

function samePath(a: JsonPath, b: readonly (string | number)[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The bytes of `template` with `mutation` applied. */
export function renderJson(template: Json, mutation: JsonMutation): Buffer {
  if (mutation.op === "root") return mutation.value.bytes;
  const parts: Buffer[] = [];
  const path: (string | number)[] = [];
  const write = (value: Json): void => {
    if (mutation.op === "set" && samePath(mutation.path, path)) {
      parts.push(mutation.value.bytes);
      return;
    }
    if (Array.isArray(value)) {
      parts.push(Buffer.from("["));
      let first = true;
      value.forEach((v, i) => {
        path.push(i);
        if (!(mutation.op === "delete" && samePath(mutation.path, path))) {
          if (!first) parts.push(Buffer.from(","));
          first = false;
          write(v);
        }
        path.pop();
      });
      parts.push(Buffer.from("]"));
      return;
    }
    if (value !== null && typeof value === "object") {
      parts.push(Buffer.from("{"));
      let first = true;
      for (const [k, v] of Object.entries(value)) {
        path.push(k);
        if (!(mutation.op === "delete" && samePath(mutation.path, path))) {
          if (!first) parts.push(Buffer.from(","));
          first = false;
          parts.push(Buffer.from(`${JSON.stringify(k)}:`));
          write(v);
        }
        path.pop();
      }
      if (mutation.op === "extra" && samePath(mutation.path, path)) {
        if (!first) parts.push(Buffer.from(","));
        parts.push(Buffer.from(`${JSON.stringify(mutation.key)}:`), mutation.value.bytes);
      }
      parts.push(Buffer.from("}"));
      return;
    }
    parts.push(Buffer.from(JSON.stringify(value)));
  };
  write(template);
  return Buffer.concat(parts);
}
