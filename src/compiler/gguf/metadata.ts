import { GgufMetadataTypeError, GgufMissingKeyError } from "./errors.js";
import type { GgufFile, GgufValue } from "./types.js";

export function findMetadata(file: GgufFile, key: string): GgufValue | undefined {
  return file.metadata[key];
}

/** A metadata value, unchecked beyond presence; prefer the typed getters below. */
export function getMetadata<T extends GgufValue = GgufValue>(file: GgufFile, key: string): T {
  const value = file.metadata[key];
  if (value === undefined) throw new GgufMissingKeyError(file.path, key);
  return value as T;
}

export function getString(file: GgufFile, key: string, fallback?: string): string {
  return getTyped(file, key, fallback, isString, "a string");
}

/** Any integer or float type; 64-bit integers too large for a number are rejected. */
export function getNumber(file: GgufFile, key: string, fallback?: number): number {
  return getTyped(file, key, fallback, isNumber, "a number");
}

export function getInteger(file: GgufFile, key: string, fallback?: number): number {
  return getTyped(file, key, fallback, Number.isSafeInteger as (v: GgufValue) => v is number, "an integer");
}

export function getBoolean(file: GgufFile, key: string, fallback?: boolean): boolean {
  return getTyped(file, key, fallback, isBoolean, "a boolean");
}

export function getArray(file: GgufFile, key: string, fallback?: GgufValue[]): GgufValue[] {
  return getTyped(file, key, fallback, Array.isArray as (v: GgufValue) => v is GgufValue[], "an array");
}

export function getStringArray(file: GgufFile, key: string, fallback?: string[]): string[] {
  return getTyped(file, key, fallback, (v): v is string[] => Array.isArray(v) && v.every(isString), "an array of strings");
}

export function getNumberArray(file: GgufFile, key: string, fallback?: number[]): number[] {
  return getTyped(file, key, fallback, (v): v is number[] => Array.isArray(v) && v.every(isNumber), "an array of numbers");
}

function getTyped<T extends GgufValue>(file: GgufFile, key: string, fallback: T | undefined, check: (v: GgufValue) => v is T, expected: string): T {
  const value = file.metadata[key];
  if (value === undefined) {
    if (fallback !== undefined) return fallback;
    throw new GgufMissingKeyError(file.path, key);
  }
  if (!check(value)) throw new GgufMetadataTypeError(file.path, key, expected, describe(value));
  return value;
}

function isString(v: GgufValue): v is string {
  return typeof v === "string";
}

function isNumber(v: GgufValue): v is number {
  return typeof v === "number";
}

function isBoolean(v: GgufValue): v is boolean {
  return typeof v === "boolean";
}

function describe(value: GgufValue): string {
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === "string") return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === "bigint") return `the 64-bit integer ${value}`;
  return `the ${typeof value} ${value}`;
}
