/**
 * Money in cloud mode: integers of nano-USD (1e-9 USD), never floats. The catalogue states prices
 * in USD (per million tokens, per audio minute); they are turned into integer nano-USD once, and a
 * request's cost is computed from integers with one rounding rule:
 *
 *   text:  cost = ceil((prompt_tokens × input_nano_per_mtok + completion_tokens × output_nano_per_mtok) / 1e6)
 *   audio: cost = ceil(audio_ms × nano_per_audio_minute / 60 000)
 *
 * i.e. each request (one ledger row) is rounded up once, to the next whole nano-USD; sums over rows
 * are exact integer sums done by the database. The products are computed as bigint, so no
 * intermediate is ever rounded.
 */
import type { ModelEntry } from "../catalogue/types.js";

/** The prices a ledger row was charged at, nano-USD; null where the model has no such price. */
export interface PriceInForce {
  /** Nano-USD per million prompt tokens. */
  inputNanoUsdPerMTok: number;
  /** Nano-USD per million completion tokens. */
  outputNanoUsdPerMTok: number;
  /** Nano-USD per minute of audio. */
  nanoUsdPerAudioMinute: number;
}

/** What one request used. */
export interface Metered {
  promptTokens: number;
  completionTokens: number;
  /** Milliseconds of audio billed (transcriptions); 0 for text. */
  audioMs: number;
}

export const FREE: PriceInForce = { inputNanoUsdPerMTok: 0, outputNanoUsdPerMTok: 0, nanoUsdPerAudioMinute: 0 };

/** USD as integer nano-USD; the catalogue's prices have at most 9 decimals, so this is exact for them. */
export function usdToNano(usd: number | undefined): number {
  if (usd === undefined) return 0;
  const nano = Math.round(usd * 1e9);
  assertSafeAmount(nano, "price");
  return nano;
}

/** The prices of a catalogue entry in nano-USD; free for an unknown model. */
export function priceOf(entry: ModelEntry | undefined): PriceInForce {
  if (!entry) return FREE;
  return {
    inputNanoUsdPerMTok: usdToNano(entry.prices.inputUsdPerMillionTokens),
    outputNanoUsdPerMTok: usdToNano(entry.prices.outputUsdPerMillionTokens),
    nanoUsdPerAudioMinute: usdToNano(entry.prices.usdPerAudioMinute),
  };
}

/** `price` times `factor` (a batch's discount), each rate rounded to a whole nano-USD. */
export function scaledPrice(price: PriceInForce, factor: number): PriceInForce {
  if (factor === 1) return price;
  return {
    inputNanoUsdPerMTok: Math.round(price.inputNanoUsdPerMTok * factor),
    outputNanoUsdPerMTok: Math.round(price.outputNanoUsdPerMTok * factor),
    nanoUsdPerAudioMinute: Math.round(price.nanoUsdPerAudioMinute * factor),
  };
}

/** The cost of one request in nano-USD, by the rule in this file's header. Throws past 2^53 - 1. */
export function costNanoUsd(price: PriceInForce, used: Metered): number {
  for (const [name, v] of Object.entries(used)) assertSafeAmount(v, name);
  const tokens = BigInt(used.promptTokens) * BigInt(price.inputNanoUsdPerMTok) + BigInt(used.completionTokens) * BigInt(price.outputNanoUsdPerMTok);
  const audio = BigInt(used.audioMs) * BigInt(price.nanoUsdPerAudioMinute);
  const cost = ceilDiv(tokens, 1_000_000n) + ceilDiv(audio, 60_000n);
  if (cost > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`a request's cost of ${cost} nano-USD is past what one ledger row holds`);
  return Number(cost);
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/** Throws unless `v` is a non-negative safe integer (money and counts never go through floats). */
export function assertSafeAmount(v: number, what: string): void {
  if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${what} must be a non-negative safe integer, got ${v}`);
}

/** Nano-USD as a decimal USD string with all 9 decimals ("1.250000000"), exact for any size. */
export function formatNanoUsd(nano: bigint | number | string): string {
  const n = BigInt(nano);
  const sign = n < 0n ? "-" : "";
  const abs = n < 0n ? -n : n;
  return `${sign}${abs / 1_000_000_000n}.${(abs % 1_000_000_000n).toString().padStart(9, "0")}`;
}

/** A decimal USD amount ("0.50", "2") as nano-USD, exactly; null when it is not one. */
export function parseUsdToNano(text: string): bigint | null {
  const m = /^(\d+)(?:\.(\d{1,9}))?$/.exec(text.trim());
  if (!m) return null;
  return BigInt(m[1]) * 1_000_000_000n + BigInt((m[2] ?? "").padEnd(9, "0") || "0");
}
