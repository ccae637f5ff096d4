/**
 * The text of one choice as it is generated: token ids -> UTF-8-safe text deltas -> stop-string
 * hold-back, with each token's log probability released together with the text it produced.
 */
import type { SampleResult } from "../../runtime/sampling/index.js";
import type { EmittedTokenLogprob, TokenDecoder, TokenLogprob } from "../types.js";
import { CallTexts } from "../tools/repeated-calls.js";
import { StopMatcher } from "./stop-matcher.js";

export interface ChoiceOutputOptions {
  /** Stop strings (see {@link StopMatcher}). Default none. */
  stop?: readonly string[];
  /** Collect log probabilities with this many alternatives per token. Default: none collected. */
  logprobs?: { top: number };
  /** Bytes of a token, needed when `logprobs` is set. */
  tokenBytes?: (id: number) => Uint8Array;
  /** End the choice, as a stop string would, where it starts writing a tool call it already made. Default false. */
  endRepeatedCalls?: boolean;
  /** A matched stop string is released with the text (vLLM's `include_stop_str_in_output`). Default false. */
  includeStop?: boolean;
  /** Tokens whose text stop strings are not looked for in (`min_tokens`, as vLLM counts it: the text of the tokens before the nth). Default 0. */
  minTokens?: number;
  /** Spaces and tabs a line after a line break needs, else the choice ends after its indentation (see {@link StopMatcher}). Default 0: none. */
  minIndent?: number;
}

export interface ChoiceStep {
  text: string;
  stopped: boolean;
  /** The client's stop string that ended the choice (not one of kiln's own, such as a repeated call). */
  stopString?: string;
  /** A line indented less than `minIndent` ended the choice. */
  dedented?: boolean;
  logprobs?: EmittedTokenLogprob[];
}

interface PendingLogprob {
  entry: EmittedTokenLogprob;
  /** Offsets of the token's text in the generated text (before stop handling). */
  start: number;
  end: number;
}

const whole = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

export class ChoiceOutput {
  private readonly matcher: StopMatcher;
  private readonly pending: PendingLogprob[] = [];
  private rawLength = 0;
  private tokens = 0;
  /** The calls made so far, each then a stop string (with `endRepeatedCalls`). */
  private readonly calls: CallTexts | undefined;

  constructor(
    private readonly decoder: TokenDecoder,
    private readonly options: ChoiceOutputOptions = {},
  ) {
    this.matcher = new StopMatcher(options.stop, options.includeStop, options.minIndent);
    if (options.endRepeatedCalls) this.calls = new CallTexts();
  }

  /** Feeds one generated token. */
  push(sample: SampleResult): ChoiceStep {
    const piece = this.decoder.push(sample.token);
    const start = this.rawLength;
    this.rawLength += piece.length;
    if (this.options.logprobs) this.pending.push({ entry: this.logprobEntry(sample), start, end: this.rawLength });
    const match = ++this.tokens < (this.options.minTokens ?? 0) ? this.matcher.pass(piece) : this.matcher.push(piece);
    // Added after the piece that completes a call is matched, so that the call itself never stops it.
    if (this.calls && !match.stopped) for (const call of this.calls.push(piece)) this.matcher.add(call);
    if (match.stopped) {
      // The stop string starts where released text ends: tokens that began before it are kept.
      const cut = this.matcher.emitted;
      return { ...match, ...this.clientStop(), logprobs: this.release((p) => p.start < cut, true) };
    }
    const emitted = this.matcher.emitted;
    return { ...match, logprobs: this.release((p) => p.end <= emitted) };
  }

  /** Ends the choice without a stop-string match: whatever was held back comes out. */
  finish(): ChoiceStep {
    const tail = this.decoder.flush();
    const last = this.matcher.push(tail);
    if (last.stopped) {
      const cut = this.matcher.emitted;
      return { text: last.text, stopped: true, ...this.clientStop(), logprobs: this.release((p) => p.start < cut, true) };
    }
    return { text: last.text + this.matcher.flush(), stopped: false, logprobs: this.release(() => true, true) };
  }

  /** The matched stop string, when it is one the client sent; or that a dedented line ended the choice. */
  private clientStop(): { stopString?: string; dedented?: boolean } {
    if (this.matcher.dedented) return { dedented: true };
    const matched = this.matcher.matched;
    return matched !== null && this.options.stop?.includes(matched) ? { stopString: matched } : {};
  }

  /** Takes the pending entries from the front while `take` holds; `last` drops the rest. */
  private release(take: (p: PendingLogprob) => boolean, last = false): EmittedTokenLogprob[] | undefined {
    if (!this.options.logprobs) return undefined;
    const out: EmittedTokenLogprob[] = [];
    while (this.pending.length > 0 && take(this.pending[0])) out.push(this.pending.shift()!.entry);
    if (last) this.pending.length = 0;
    return out;
  }

  private logprobEntry(sample: SampleResult): EmittedTokenLogprob {
    const describe = (token: number, logprob: number) => describeToken(this.options.tokenBytes, token, logprob);
    const top = this.options.logprobs?.top ?? 0;
    return {
      ...describe(sample.token, sample.logprob ?? 0),
      top: (sample.top ?? []).slice(0, top).map((t) => describe(t.token, t.logprob)),
    };
  }
}

/** A token's log probability as reported: its bytes, and their text (a piece of a character decodes to U+FFFD). */
export function describeToken(tokenBytes: ((id: number) => Uint8Array) | undefined, token: number, logprob: number): TokenLogprob {
  const bytes = tokenBytes?.(token) ?? new Uint8Array();
  return { id: token, token: whole.decode(bytes), logprob, bytes: [...bytes] };
}
