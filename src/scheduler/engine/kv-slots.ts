/**
 * The KV slots of one model as the scheduler sees them: who owns each slot, what a free slot still
 * holds (for prefix reuse), and the copies that keep it all in order. It decides; the engine sends
 * the resulting copies to the worker, in order, before the next model step.
 *
 * - Running sequences are kept in consecutive slots from 0, because one decode call covers
 *   consecutive slots: when one finishes, the last one moves into the hole ({@link pack}).
 * - A new sequence takes the lowest free slot. Its prompt's longest prefix already cached anywhere
 *   (a running sequence's slot, or a finished one's left behind) is copied in instead of computed.
 * - With sliding-window layers ({@link KvSlotsOptions.ring}), a prefix is reusable only while their
 *   rings still hold the window before it, as the worker's `KvPool.canKeep` decides.
 */

/** How much of a cached prefix may be reused. */
export type PrefixReuse =
  /** Only positions computed by chunk-aligned prefill, in whole chunks: results stay bit-identical to a fresh prefill. */
  | "exact"
  /** Any cached positions: more reuse, but results may differ slightly from a fresh prefill. */
  | "any"
  /** None. */
  | "off";

/** What the slot table reads of a sequence (the engine's {@link Sequence} fits). */
export interface SlotHolder {
  readonly id: number;
  /** Its tokens; the first `cached` have their keys and values in the slot. */
  readonly tokens: readonly number[];
  readonly cached: number;
  /** Leading positions computed as a fresh chunk-aligned prefill would (see {@link PrefixReuse}). */
  readonly exact: number;
  /** Ready to decode (must sit in the consecutive block of decoding slots). */
  readonly ready: boolean;
  /** Its slot; written by the table. */
  slot: number;
}

/** A worker copy: slot `to` gets the first `length` cached positions of slot `from` (`from === to` truncates). */
export interface KvCopy {
  from: number;
  to: number;
  length: number;
  /** The holder whose cache lands in `to` (it fails if the copy does); absent for a truncation of a freed slot. */
  seqId?: number;
}

export interface KvSlotsOptions {
  /** Prefix reuse policy. Default "exact". */
  reuse?: PrefixReuse;
  /** In "exact" mode, reused lengths are multiples of this (the prefill chunk), in tokens. Default 256. */
  align?: number;
  /**
   * The model's sliding-window layers: their window and the positions their KV ring holds
   * (`slidingCacheCapacity`). Default none: every cached prefix can be cut back to any length.
   */
  ring?: { window: number; capacity: number };
}

/** Prefix reuse counters, in tokens. */
export interface PrefixStats {
  /** Prompts looked up. */
  lookups: number;
  /** Prompt tokens looked up. */
  promptTokens: number;
  /** Prompt tokens found cached and copied instead of computed. */
  hitTokens: number;
}

interface Leftover {
  tokens: readonly number[];
  length: number;
  exact: number;
}

export interface Allocation {
  slot: number;
  /** Prompt positions already cached in the slot. */
  reused: number;
  /** Of those, how many are exact (see {@link SlotHolder.exact}). */
  exact: number;
}

export class KvSlots {
  private readonly owners: Array<SlotHolder | null>;
  private readonly leftovers: Array<Leftover | null>;
  private copies: KvCopy[] = [];
  private readonly reuse: PrefixReuse;
  private readonly align: number;
  private readonly ring: { window: number; capacity: number } | undefined;
  /**
   * Per slot, the first position its rings held intact when its current content arrived (copied in,
   * or truncated); writes since then only raise it (see {@link intactFrom}).
   */
  private readonly intactBase: number[];
  readonly prefix: PrefixStats = { lookups: 0, promptTokens: 0, hitTokens: 0 };

  constructor(
    /** Number of slots (the worker's KV pool size). */
    readonly count: number,
    options: KvSlotsOptions = {},
  ) {
    this.owners = new Array<SlotHolder | null>(count).fill(null);
    this.leftovers = new Array<Leftover | null>(count).fill(null);
    this.reuse = options.reuse ?? "exact";
    this.align = options.align ?? 256;
    this.ring = options.ring;
    this.intactBase = new Array<number>(count).fill(0);
  }

  /** Slots nobody owns. */
  get free(): number {
    let n = 0;
    for (const o of this.owners) if (o === null) n++;
    return n;
  }

  /** The owner of a slot, or null. */
  owner(slot: number): SlotHolder | null {
    return this.owners[slot];
  }

  /**
   * Gives `holder` the lowest free slot, with the longest reusable cached prefix of `prompt` (at
   * most `maxReuse` positions) copied into it. Throws when no slot is free.
   */
  allocate(holder: SlotHolder, prompt: readonly number[], maxReuse: number): Allocation {
    const slot = this.owners.indexOf(null);
    if (slot === -1) throw new Error("no free KV slot");
    let best = { from: slot, length: 0, exact: 0 };
    if (this.reuse !== "off" && maxReuse > 0) {
      this.prefix.lookups++;
      this.prefix.promptTokens += prompt.length;
      for (let s = 0; s < this.count; s++) {
        const found = this.reusable(s, prompt, maxReuse);
        if (found.length > best.length || (found.length === best.length && found.length > 0 && s === slot)) best = { from: s, ...found };
      }
      this.prefix.hitTokens += best.length;
    }
    this.intactBase[slot] = best.length > 0 ? this.intactFrom(best.from) : 0;
    this.take(slot, holder);
    this.copies.push({ from: best.from, to: slot, length: best.length, seqId: holder.id });
    return { slot, reused: best.length, exact: best.exact };
  }

  /** Copies `length` cached positions of `from`'s slot into `to`'s (a sibling sharing a prefill). */
  share(from: SlotHolder, to: SlotHolder, length: number): void {
    this.intactBase[to.slot] = length > 0 ? this.intactFrom(from.slot) : 0;
    this.copies.push({ from: from.slot, to: to.slot, length, seqId: to.id });
  }

  /**
   * Frees the slot of `holder`. What it cached stays there for prefix reuse, unless `keep` is false
   * (its cache is not trustworthy, e.g. after a failed step).
   */
  release(holder: SlotHolder, keep = true): void {
    const slot = holder.slot;
    if (slot < 0 || this.owners[slot] !== holder) throw new Error(`sequence ${holder.id} does not own slot ${slot}`);
    this.intactBase[slot] = keep ? this.intactFrom(slot) : 0;
    this.owners[slot] = null;
    this.leftovers[slot] = keep ? { tokens: holder.tokens, length: holder.cached, exact: holder.exact } : null;
    if (!keep) this.copies.push({ from: slot, to: slot, length: 0 });
    holder.slot = -1;
  }

  /**
   * Moves ready holders into consecutive slots from 0: the highest ready one fills each hole; a
   * not-ready holder in the way moves to a free slot when there is one.
   */
  pack(): void {
    for (;;) {
      let lead = 0;
      while (lead < this.count && this.owners[lead]?.ready) lead++;
      let last = -1;
      for (let s = this.count - 1; s > lead; s--) {
        if (this.owners[s]?.ready) {
          last = s;
          break;
        }
      }
      if (last === -1) return;
      if (this.owners[lead] !== null) {
        const free = this.owners.indexOf(null);
        if (free === -1) return; // it decodes in a call of its own until a slot frees up
        this.move(lead, free);
      }
      this.move(last, lead);
    }
  }

  /** Maximal runs of consecutive slots whose owners are ready: one decode call each. */
  runs(): Array<{ first: number; holders: SlotHolder[] }> {
    const runs: Array<{ first: number; holders: SlotHolder[] }> = [];
    for (let s = 0; s < this.count; s++) {
      const o = this.owners[s];
      if (!o?.ready) continue;
      const run = runs[runs.length - 1];
      if (run && run.first + run.holders.length === s) run.holders.push(o);
      else runs.push({ first: s, holders: [o] });
    }
    return runs;
  }

  /** Whether copies wait to be taken. */
  get hasCopies(): boolean {
    return this.copies.length > 0;
  }

  /** The copies decided so far, in order (the caller must send them before its next model step). */
  takeCopies(): KvCopy[] {
    const out = this.copies;
    this.copies = [];
    return out;
  }

  private take(slot: number, holder: SlotHolder): void {
    this.owners[slot] = holder;
    this.leftovers[slot] = null;
    holder.slot = slot;
  }

  private move(from: number, to: number): void {
    const holder = this.owners[from]!;
    this.intactBase[to] = this.intactBase[from] = this.intactFrom(from);
    this.copies.push({ from, to, length: holder.cached, seqId: holder.id });
    this.owners[from] = null;
    this.leftovers[from] = { tokens: holder.tokens, length: holder.cached, exact: holder.exact };
    this.take(to, holder);
  }

  /**
   * The first position from which slot `s`'s rings still hold every cached position: writes up to
   * `length` leave the last `capacity` (0 without sliding-window layers).
   */
  private intactFrom(s: number): number {
    if (!this.ring) return 0;
    const length = this.owners[s]?.cached ?? this.leftovers[s]?.length ?? 0;
    return Math.max(this.intactBase[s], length - this.ring.capacity);
  }

  /** Whether slot `s`, holding `length` positions, can be cut back to `n` (`KvPool.canKeep`). */
  private ringHolds(s: number, length: number, n: number): boolean {
    if (!this.ring || n === 0 || n === length) return true;
    return this.intactFrom(s) <= Math.max(0, n - this.ring.window + 1);
  }

  /** The longest prefix of `prompt` cached in slot `s` that may be reused. */
  private reusable(s: number, prompt: readonly number[], maxReuse: number): { length: number; exact: number } {
    const o = this.owners[s];
    const held = o ? { tokens: o.tokens, length: o.cached, exact: o.exact } : this.leftovers[s];
    if (!held) return { length: 0, exact: 0 };
    let limit = Math.min(maxReuse, this.reuse === "exact" ? held.exact : held.length);
    let n = 0;
    while (n < limit && held.tokens[n] === prompt[n]) n++;
    if (this.reuse === "exact") n -= n % this.align;
    if (!this.ringHolds(s, held.length, n)) n = 0;
    limit = n;
    return { length: limit, exact: Math.min(limit, held.exact) };
  }
}
