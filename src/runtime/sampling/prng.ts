import { getRandomValues } from "node:crypto";

const MASK64 = (1n << 64n) - 1n;
const GAMMA = 0x9e3779b97f4a7c15n;
/** Odd constant separating the streams of one seed (see {@link Xoshiro128ss.fromSeed}). */
const STREAM_STRIDE = 0xd1b54a32d192ed03n;

/** SplitMix64 (Steele, Lea and Flood), used only to expand a seed into xoshiro state. */
export class SplitMix64 {
  private state: bigint;

  constructor(seed: bigint) {
    this.state = BigInt.asUintN(64, seed);
  }

  next(): bigint {
    this.state = (this.state + GAMMA) & MASK64;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
    return z ^ (z >> 31n);
  }
}

/**
 * xoshiro128** 1.0 (Blackman and Vigna): 128 bits of state, period 2^128 - 1, all 32-bit
 * arithmetic, so it stays in V8's fast integer paths.
 */
export class Xoshiro128ss {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(s0: number, s1: number, s2: number, s3: number) {
    this.s0 = s0 | 0;
    this.s1 = s1 | 0;
    this.s2 = s2 | 0;
    this.s3 = s3 | 0;
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s3 = 1; // the all-zero state is a fixed point
  }

  /**
   * A generator seeded from any integer via SplitMix64. Different `stream`s of one seed give
   * unrelated sequences (e.g. for the n choices of one request); stream 0 is the seed itself.
   */
  static fromSeed(seed: number | bigint, stream = 0): Xoshiro128ss {
    const s = typeof seed === "bigint" ? seed : BigInt(Math.trunc(seed));
    const sm = new SplitMix64(s + BigInt(stream) * STREAM_STRIDE);
    const a = sm.next();
    const b = sm.next();
    return new Xoshiro128ss(Number(a & 0xffffffffn), Number(a >> 32n), Number(b & 0xffffffffn), Number(b >> 32n));
  }

  /** Next 32-bit output as an unsigned integer. */
  nextU32(): number {
    const s0 = this.s0;
    const s1 = this.s1;
    let s2 = this.s2;
    let s3 = this.s3;
    const x = Math.imul(s1, 5);
    const result = Math.imul((x << 7) | (x >>> 25), 9) >>> 0;
    const t = s1 << 9;
    s2 ^= s0;
    s3 ^= s1;
    this.s1 = s1 ^ s2;
    this.s0 = s0 ^ s3;
    this.s2 = s2 ^ t;
    this.s3 = (s3 << 11) | (s3 >>> 21);
    return result;
  }

  /** Uniform double in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const a = this.nextU32() >>> 5;
    const b = this.nextU32() >>> 6;
    return (a * 67108864 + b) / 9007199254740992;
  }
}

/** A random non-negative safe integer, for sequences that did not ask for a seed. */
export function randomSeed(): number {
  const w = getRandomValues(new Uint32Array(2));
  return (w[0] & 0x1fffff) * 4294967296 + w[1];
}
