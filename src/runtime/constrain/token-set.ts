/**
 * vLLM's `allowed_token_ids` as a matcher: the same set of tokens every step, the model's end
 * tokens included only when listed (so without them the output runs to its budget). Beside a
 * constraint both hold: the set is intersected with the constraint's mask each step.
 */
import type { TokenMatcher } from "./engine.js";

export class TokenSetMatcher implements TokenMatcher {
  private readonly mask: Int32Array;
  private readonly ids: ReadonlySet<number>;

  /**
   * @param ids the tokens allowed (ids at or past `logitsWidth` are left out)
   * @param inner a constraint that holds too, whose null (free-text) mask stands for every id but `freeTextBans`
   */
  constructor(
    ids: readonly number[],
    logitsWidth: number,
    private readonly inner?: TokenMatcher,
    private readonly freeTextBans: ArrayLike<number> = [],
  ) {
    this.mask = new Int32Array(Math.ceil(logitsWidth / 32));
    for (const id of ids) if (id >= 0 && id < logitsWidth) this.mask[id >>> 5] |= 1 << (id & 31);
    this.ids = new Set(ids);
  }

  async nextMask(): Promise<Int32Array> {
    if (!this.inner) return this.mask;
    const constraint = await this.inner.nextMask();
    if (constraint === undefined) return this.mask;
    const out = this.mask.slice();
    if (constraint === null) {
      for (let i = 0; i < this.freeTextBans.length; i++) out[this.freeTextBans[i] >>> 5] &= ~(1 << (this.freeTextBans[i] & 31));
    } else {
      for (let w = 0; w < out.length; w++) out[w] &= constraint[w] ?? 0;
    }
    return out;
  }

  accept(token: number): boolean {
    const inner = this.inner ? this.inner.accept(token) : true;
    return this.ids.has(token) && inner;
  }

  get terminated(): boolean {
    return this.inner?.terminated ?? false;
  }

  dispose(): void {
    this.inner?.dispose();
  }
}
