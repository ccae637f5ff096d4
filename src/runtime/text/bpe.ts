/**
 * Byte-level BPE over one pre-token, as llama.cpp's llm_tokenizer_bpe_session::tokenize does it:
 * repeatedly merge the adjacent pair with the lowest merge rank, ties going to the leftmost pair,
 * then look each piece up, falling back to single-byte tokens for pieces the vocabulary lacks.
 *
 * For speed, texts are interned as integer symbols: a vocabulary text's symbol is its token id, and
 * texts that only appear in merges get ids past the vocabulary. A pair lookup is then one Map get on
 * a number instead of building and hashing a string.
 */
export class MergeTable {
  private readonly symbolOf: Map<string, number>;
  private readonly texts: string[];
  /** (left * stride + right) -> rank * stride + merged symbol. */
  private readonly pairs = new Map<number, number>();
  private stride = 0;

  constructor(
    private readonly vocabSize: number,
    tokenToId: ReadonlyMap<string, number>,
    merges: readonly string[],
  ) {
    this.symbolOf = new Map(tokenToId);
    this.texts = new Array<string>(vocabSize).fill(""); // virtual symbols start at vocabSize
    for (const [text, id] of tokenToId) this.texts[id] = text;
    const parsed = merges.map(splitMerge);
    for (const [left, right] of parsed) {
      this.intern(left);
      this.intern(right);
      this.intern(left + right);
    }
    this.stride = Math.max(this.texts.length, 1);
    parsed.forEach(([left, right], rank) => {
      const key = this.symbolOf.get(left)! * this.stride + this.symbolOf.get(right)!;
      // llama.cpp keeps the first rank when a pair is listed twice (std::map::emplace).
      if (!this.pairs.has(key)) this.pairs.set(key, rank * this.stride + this.symbolOf.get(left + right)!);
    });
  }

  /** Symbol for one character of a byte-level word; -1 when no merge or token mentions it. */
  symbol(ch: string): number {
    return this.symbolOf.get(ch) ?? -1;
  }

  /** rank * stride + merged symbol, or -1 when the pair does not merge. */
  pair(left: number, right: number): number {
    if (left < 0 || right < 0) return -1;
    return this.pairs.get(left * this.stride + right) ?? -1;
  }

  get pairStride(): number {
    return this.stride;
  }

  isToken(symbol: number): boolean {
    return symbol >= 0 && symbol < this.vocabSize;
  }

  private intern(text: string): void {
    if (this.symbolOf.has(text)) return;
    this.symbolOf.set(text, this.texts.length);
    this.texts.push(text);
  }
}

/** "left right", split at the first space after the first character, like llama.cpp. */
function splitMerge(merge: string): [string, string] {
  const space = merge.indexOf(" ", 1);
  return space === -1 ? ["", ""] : [merge.slice(0, space), merge.slice(space + 1)];
}

/** Symbols of a word being merged: a linked list over the word's characters. */
interface WordState {
  symbols: Int32Array;
  lengths: Int32Array;
  next: Int32Array;
  prev: Int32Array;
}

/** Words longer than this use the heap; shorter ones a linear scan, which is faster for them. */
const SCAN_LIMIT = 48;

/** Token ids for one byte-level word, appended to `out`. Each UTF-16 unit is one starting symbol. */
export function encodeWord(word: string, table: MergeTable, tokenToId: ReadonlyMap<string, number>, out: number[]): void {
  const n = word.length;
  const state: WordState = {
    symbols: new Int32Array(n),
    lengths: new Int32Array(n).fill(1),
    next: new Int32Array(n),
    prev: new Int32Array(n),
  };
  for (let i = 0; i < n; i++) {
    state.symbols[i] = table.symbol(word[i]);
    state.next[i] = i + 1 < n ? i + 1 : -1;
    state.prev[i] = i - 1;
  }
  if (n > SCAN_LIMIT) mergeWithHeap(state, table);
  else mergeByScan(state, table);

  for (let i = 0; n > 0 && i !== -1; i = state.next[i]) {
    const symbol = state.symbols[i];
    if (table.isToken(symbol)) out.push(symbol);
    else pushByteFallback(word.slice(i, i + state.lengths[i]), tokenToId, out);
  }
}

function mergeAt(state: WordState, left: number, merged: number): void {
  const right = state.next[left];
  state.symbols[left] = merged;
  state.lengths[left] += state.lengths[right];
  state.next[left] = state.next[right];
  if (state.next[right] !== -1) state.prev[state.next[right]] = left;
  state.lengths[right] = 0;
}

/** Lowest (rank, position) first: keep each adjacent pair's rank in an array and rescan. */
function mergeByScan(state: WordState, table: MergeTable): void {
  const stride = table.pairStride;
  const pairAt = new Float64Array(state.symbols.length).fill(-1);
  const refresh = (i: number) => {
    if (i !== -1) pairAt[i] = state.next[i] === -1 ? -1 : table.pair(state.symbols[i], state.symbols[state.next[i]]);
  };
  for (let i = 0; i !== -1 && i < state.symbols.length; i = state.next[i]) refresh(i);
  for (;;) {
    let best = -1;
    let bestValue = Infinity;
    for (let i = 0; i !== -1; i = state.next[i]) {
      const value = pairAt[i];
      // value = rank * stride + symbol, so comparing values compares ranks (ties are the same pair).
      if (value >= 0 && value < bestValue) {
        best = i;
        bestValue = value;
      }
    }
    if (best === -1) return;
    mergeAt(state, best, bestValue % stride);
    refresh(state.prev[best]);
    refresh(best);
  }
}

/** The same order with a binary heap of candidates, for long words; stale entries are skipped. */
function mergeWithHeap(state: WordState, table: MergeTable): void {
  const stride = table.pairStride;
  const heap = new CandidateHeap();
  const consider = (left: number) => {
    const right = left === -1 ? -1 : state.next[left];
    if (right === -1) return;
    const value = table.pair(state.symbols[left], state.symbols[right]);
    if (value >= 0) heap.push(Math.floor(value / stride), left, right, state.lengths[left], state.lengths[right]);
  };
  for (let i = 0; i !== -1; i = state.next[i]) consider(i);
  while (heap.size > 0) {
    const c = heap.pop();
    // Stale when either side has merged since (llama.cpp detects this by comparing texts).
    if (state.next[c.left] !== c.right || state.lengths[c.left] !== c.leftLength || state.lengths[c.right] !== c.rightLength) continue;
    mergeAt(state, c.left, table.pair(state.symbols[c.left], state.symbols[c.right]) % stride);
    consider(state.prev[c.left]);
    consider(c.left);
  }
}

interface Candidate {
  rank: number;
  left: number;
  right: number;
  leftLength: number;
  rightLength: number;
}

/** Min-heap ordered by (rank, left), the order of llama.cpp's llm_bigram_bpe comparator. */
class CandidateHeap {
  private readonly items: Candidate[] = [];

  get size(): number {
    return this.items.length;
  }

  push(rank: number, left: number, right: number, leftLength: number, rightLength: number): void {
    const items = this.items;
    items.push({ rank, left, right, leftLength, rightLength });
    for (let i = items.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (!before(items[i], items[parent])) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }

  pop(): Candidate {
    const items = this.items;
    const top = items[0];
    const last = items.pop()!;
    if (items.length === 0) return top;
    items[0] = last;
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      let best = i;
      if (l < items.length && before(items[l], items[best])) best = l;
      if (l + 1 < items.length && before(items[l + 1], items[best])) best = l + 1;
      if (best === i) return top;
      [items[i], items[best]] = [items[best], items[i]];
      i = best;
    }
  }
}

function before(a: Candidate, b: Candidate): boolean {
  return a.rank < b.rank || (a.rank === b.rank && a.left < b.left);
}

/**
 * A piece missing from the vocabulary becomes one token per byte of its UTF-8 text, as in llama.cpp;
 * only ASCII bytes can be whole tokens there, so other bytes are dropped.
 */
function pushByteFallback(piece: string, tokenToId: ReadonlyMap<string, number>, out: number[]): void {
  for (const ch of piece) {
    if (ch.charCodeAt(0) >= 0x80) continue;
    const id = tokenToId.get(ch);
    if (id !== undefined) out.push(id);
  }
}
