import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll } from "vitest";

export const FIXTURES = resolve("test/fixtures/gguf");

/** A temp directory removed after the calling test file. */
export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "kiln-gguf-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A fixture file's bytes in a fresh, 0-offset buffer (Node pools small file reads). */
export function fixtureBytes(...parts: string[]): Uint8Array {
  return new Uint8Array(readFileSync(join(FIXTURES, ...parts)));
}

export function fixtureJson<T>(...parts: string[]): T {
  return JSON.parse(readFileSync(join(FIXTURES, ...parts), "utf8")) as T;
}

export function asU32(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

/** Deterministic bytes, so failures reproduce. */
export function pseudoRandomBytes(n: number, seed = 1): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = s & 0xff;
  }
  return out;
}

/** Indexes where two float arrays differ bit for bit, treating any two NaNs as equal. */
export function bitMismatches(actual: Float32Array, expected: Float32Array): number[] {
  const a = asU32(actual);
  const e = asU32(expected);
  const bad: number[] = [];
  for (let i = 0; i < expected.length; i++) {
    if (a[i] === e[i]) continue;
    if (Number.isNaN(actual[i]) && Number.isNaN(expected[i])) continue;
    bad.push(i);
  }
  return bad;
}
