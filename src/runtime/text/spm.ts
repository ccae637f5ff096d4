/**
 * SentencePiece-style tokenization of one text fragment, as llama.cpp's llm_tokenizer_spm_session
 * does it (tokenizer.ggml.model "llama": Llama 2, Mistral, Gemma, Phi-3). The text starts as one
 * symbol per character; the adjacent pair whose concatenation is a vocabulary token with the highest
 * score merges first (ties: the leftmost pair), until no pair forms a token. A character that never
 * became a token falls back to its UTF-8 bytes as "<0xNN>" tokens.
 */

/** The whitespace marker SentencePiece vocabularies store instead of a space (U+2581). */
export const SPACE_MARKER = "\u2581";

/** The vocabulary side of SentencePiece merging: token lookup, scores and byte fallback. */
export class SpmVocab {
  private readonly maxTokenLength: number;
  private readonly byteIds: Int32Array;

  constructor(
    private readonly tokenToId: ReadonlyMap<string, number>,
    private readonly scores: ArrayLike<number>,
    /** Used for a byte the vocabulary has no token for (llama.cpp would abort there). */
    private readonly unkId: number | null,
  ) {
    let longest = 0;
    for (const text of tokenToId.keys()) longest = Math.max(longest, text.length);
    this.maxTokenLength = longest;
    this.byteIds = new Int32Array(256).fill(-1);
    for (let b = 0; b < 256; b++) {
      const hex = b.toString(16).toUpperCase().padStart(2, "0");
      // llama.cpp's byte_to_token: "<0xNN>", else the byte itself as text (only an ASCII byte can be).
      const id = tokenToId.get(`<0x${hex}>`) ?? (b < 0x80 ? tokenToId.get(String.fromCharCode(b)) : undefined);
      if (id !== undefined) this.byteIds[b] = id;
    }
  }

  /** Token ids of `text` (spaces already turned into the marker), appended to `out`. */
  encode(text: string, out: number[]): void {
    const merger = new SymbolMerger(text, this);
    merger.run();
    for (let i = 0; i !== -1 && text.length > 0; i = merger.next[i]) {
      const piece = text.slice(merger.start[i], merger.start[i] + merger.length[i]);
      const id = this.tokenToId.get(piece);
      if (id !== undefined) out.push(id);
      else this.pushBytes(piece, out);
    }
  }

  /** Id and score of the token spelled `text`, or undefined when there is none. */
  lookup(text: string): { id: number; score: number } | undefined {
    if (text.length > this.maxTokenLength) return undefined;
    const id = this.tokenToId.get(text);
    return id === undefined ? undefined : { id, score: this.scores[id] ?? 0 };
  }

  private pushBytes(piece: string, out: number[]): void {
    for (const b of Buffer.from(piece, "utf8")) {
      const id = this.byteIds[b] >= 0 ? this.byteIds[b] : this.unkId;
      if (id === null) throw new Error(`the vocabulary has no token for byte 0x${b.toString(16)} and no unknown token`);
      out.push(id);
    }
  }
}

/** One candidate merge: symbols `left` and `right`, worth `score`, spelling `size` UTF-16 units. */
interface Bigram {
  left: number;
  right: number;
  score: number;
  size: number;
}

/** The symbols of one text as a linked list over code points, merged by a max-heap of bigrams. */
class SymbolMerger {
  readonly start: Int32Array;
  readonly length: Int32Array;
  readonly next: Int32Array;
  private readonly prev: Int32Array;
  private readonly heap: Bigram[] = [];

  constructor(
    private readonly text: string,
    private readonly vocab: SpmVocab,
  ) {
    const starts: number[] = [];
    for (let i = 0; i < text.length; i += text.codePointAt(i)! > 0xffff ? 2 : 1) starts.push(i);
    const n = starts.length;
    this.start = Int32Array.from(starts);
    this.length = new Int32Array(n);
    this.next = new Int32Array(n);
    this.prev = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      this.length[i] = (i + 1 < n ? starts[i + 1] : text.length) - starts[i];
      this.next[i] = i + 1 < n ? i + 1 : -1;
      this.prev[i] = i - 1;
    }
  }

  run(): void {
    for (let i = 1; i < this.start.length; i++) this.tryAdd(i - 1, i);
    while (this.heap.length > 0) {
      const bigram = this.pop();
      const { left, right } = bigram;
      // Stale: one side merged since (lengths only grow, so an unchanged sum means both unchanged).
      if (this.length[left] === 0 || this.length[right] === 0 || this.length[left] + this.length[right] !== bigram.size) continue;
      this.length[left] += this.length[right];
      this.length[right] = 0;
      this.next[left] = this.next[right];
      if (this.next[right] >= 0) this.prev[this.next[right]] = left;
      this.tryAdd(this.prev[left], left);
      this.tryAdd(left, this.next[left]);
    }
  }

  private tryAdd(left: number, right: number): void {
    if (left === -1 || right === -1) return;
    const size = this.length[left] + this.length[right];
    const token = this.vocab.lookup(this.text.slice(this.start[left], this.start[left] + size));
    if (token === undefined) return;
    this.push({ left, right, score: token.score, size });
  }

  // A binary max-heap: higher score first, then the leftmost pair (llama.cpp's llm_bigram_spm::comparator).

  private push(item: Bigram): void {
    const heap = this.heap;
    heap.push(item);
    for (let i = heap.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i], heap[parent])) break;
      [heap[i], heap[parent]] = [heap[parent], heap[i]];
      i = parent;
    }
  }

  private pop(): Bigram {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop()!;
    if (heap.length === 0) return top;
    heap[0] = last;
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      let best = i;
      if (l < heap.length && before(heap[l], heap[best])) best = l;
      if (l + 1 < heap.length && before(heap[l + 1], heap[best])) best = l + 1;
      if (best === i) return top;
      [heap[i], heap[best]] = [heap[best], heap[i]];
      i = best;
    }
  }
}

function before(a: Bigram, b: Bigram): boolean {
  return a.score > b.score || (a.score === b.score && a.left < b.left);
}
