/**
 * A reasoning model's thinking held to a budget of tokens (vLLM's `thinking_token_budget`,
 * Anthropic's `thinking.budget_tokens`, llama.cpp's reasoning budget): tokens after the thinking's
 * open tag are counted, and once `tokens` of them are spent with the thinking still open, its close
 * tag is forced, one token a step, as SGLang and llama.cpp force theirs. Before that and after it,
 * the sequence samples as it would without a budget (or as its inner constraint says).
 */
import type { TokenMatcher } from "./engine.js";

/** What the budget needs to know of a sequence. */
export interface ThinkingBudget {
  /** Most tokens of thinking, after its open tag, before the close tag is forced; 0 closes it at once. */
  tokens: number;
  /** Whether the prompt already opened the thinking (DeepSeek-R1's templates do); else it opens at the model's own open tag. */
  opened: boolean;
  /** The open tag's token ids, as the model's tokenizer writes it. */
  open: readonly number[];
  /** The close tag's token ids, forced in order once the budget is spent. */
  close: readonly number[];
}

export class ThinkingBudgetMatcher implements TokenMatcher {
  private state: "before" | "thinking" | "after";
  private spent = 0;
  /** The last tokens accepted, as many as the longer tag: where a tag is recognized. */
  private readonly recent: number[] = [];
  private readonly mask: Int32Array;

  /**
   * @param inner a constraint that holds too (a schema after the thinking, allowed tokens), whose
   *   masks are the sequence's while no close token is forced
   */
  constructor(
    private readonly budget: ThinkingBudget,
    logitsWidth: number,
    private readonly inner?: TokenMatcher,
  ) {
    this.state = budget.opened ? "thinking" : "before";
    this.mask = new Int32Array(Math.ceil(logitsWidth / 32));
  }

  async nextMask(): Promise<Int32Array | null | undefined> {
    const forced = this.forcedToken();
    if (forced === undefined) return this.inner ? this.inner.nextMask() : undefined;
    this.mask.fill(0);
    this.mask[forced >>> 5] |= 1 << (forced & 31);
    return this.mask;
  }

  accept(token: number): boolean {
    const forced = this.forcedToken();
    const allowed = (this.inner ? this.inner.accept(token) : true) && (forced === undefined || token === forced);
    this.recent.push(token);
    if (this.recent.length > Math.max(this.budget.open.length, this.budget.close.length)) this.recent.shift();
    if (this.state === "before" && endsWith(this.recent, this.budget.open)) this.state = "thinking";
    else if (this.state === "thinking") {
      if (endsWith(this.recent, this.budget.close)) this.state = "after";
      else this.spent++;
    }
    return allowed;
  }

  get terminated(): boolean {
    return this.inner?.terminated ?? false;
  }

  dispose(): void {
    this.inner?.dispose();
  }

  /** The close tag's next token while the budget is spent and the thinking still open; else undefined. */
  private forcedToken(): number | undefined {
    if (this.state !== "thinking" || this.spent < this.budget.tokens || this.budget.close.length === 0) return undefined;
    // Where the model already began the tag, the forcing goes on from there.
    return this.budget.close[this.closeBegun()];
  }

  /** How many of the close tag's first tokens the last tokens accepted are (fewer than all of them). */
  private closeBegun(): number {
    const close = this.budget.close;
    for (let k = Math.min(close.length - 1, this.recent.length); k > 0; k--) {
      if (endsWith(this.recent, close.slice(0, k))) return k;
    }
    return 0;
  }
}

function endsWith(tokens: readonly number[], tag: readonly number[]): boolean {
  if (tag.length === 0 || tokens.length < tag.length) return false;
  const from = tokens.length - tag.length;
  return tag.every((t, i) => tokens[from + i] === t);
}
