/**
 * The grammar thread's entry: one model's constraint engine, away from the thread that runs the
 * model. Compiling a grammar blocks the thread that compiles it (seconds for a schema with long
 * string bounds, and the engine cannot hand a compiled grammar to another thread), so compiles run
 * here, asked for by the main thread before a constrained sequence is admitted, while the text
 * worker steps its other sequences. A matcher must live where its grammar was compiled, so every
 * sequence's matcher lives here too, and the worker asks for masks over its port.
 */
import { readTokenizerSpec } from "../artifact/index.js";
import { ConstraintEngine, type TokenMatcher } from "./engine.js";
import { ConstraintError } from "./errors.js";
import type { GrammarControlMessage, GrammarWorkerAnswer, GrammarWorkerMessage, MaskAnswer, PrepareAnswer } from "./grammar-protocol.js";

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

class GrammarThreadState {
  private readonly matchers = new Map<number, TokenMatcher>();
  /** Why a sequence's matcher is gone (it failed to open, or refused a token): answered to its next `mask`. */
  private readonly failures = new Map<number, string>();

  constructor(private readonly engine: ConstraintEngine) {}

  prepare(msg: Extract<GrammarControlMessage, { op: "prepare" }>): PrepareAnswer {
    try {
      // Compiling is what is asked for; the matcher itself is not needed.
      this.engine.matcher(msg.spec).dispose();
      return { ok: true };
    } catch (err) {
      const e = err instanceof ConstraintError ? err : new ConstraintError(messageOf(err));
      return { ok: false, message: e.message, path: e.path, ...(e.keyword !== undefined ? { keyword: e.keyword } : {}) };
    }
  }

  /** Handles one worker message; returns its answer, if it has one. */
  async fromWorker(msg: GrammarWorkerMessage): Promise<GrammarWorkerAnswer | null> {
    switch (msg.op) {
      case "hello":
        return { id: msg.id, freeTextBans: this.engine.freeTextBans };
      case "open":
        this.close(msg.seqId);
        try {
          this.matchers.set(msg.seqId, this.engine.matcher(msg.spec));
        } catch (err) {
          this.failures.set(msg.seqId, `open failed: ${messageOf(err)}`);
        }
        return null;
      case "masks": {
        this.accept(msg.accepts);
        const masks: MaskAnswer[] = [];
        for (const seqId of msg.seqIds) masks.push(await this.mask(seqId));
        return { id: msg.id, masks };
      }
      case "close":
        this.accept(msg.accepts);
        this.close(msg.seqId);
        return null;
    }
  }

  /** Records sampled tokens: (seqId, token) pairs, in order. */
  private accept(pairs: readonly number[]): void {
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const [seqId, token] = [pairs[i], pairs[i + 1]];
      const matcher = this.matchers.get(seqId);
      if (matcher && !matcher.accept(token)) this.fail(seqId, `the constraint refused token ${token}`);
    }
  }

  private async mask(seqId: number): Promise<MaskAnswer> {
    const failure = this.failures.get(seqId);
    const matcher = this.matchers.get(seqId);
    if (failure !== undefined || !matcher) return { error: failure ?? `sequence ${seqId} has no constraint open` };
    try {
      return (await matcher.nextMask()) ?? null;
    } catch (err) {
      this.fail(seqId, messageOf(err));
      return { error: messageOf(err) };
    }
  }

  private fail(seqId: number, message: string): void {
    this.close(seqId);
    this.failures.set(seqId, message);
  }

  private close(seqId: number): void {
    this.matchers.get(seqId)?.dispose();
    this.matchers.delete(seqId);
    this.failures.delete(seqId);
  }
}

let ready: Promise<GrammarThreadState> | null = null;
// One message at a time, in arrival order, whoever sent it: a step's accept must land before its next mask is asked for.
let queue: Promise<unknown> = Promise.resolve();
function serially<T>(work: (state: GrammarThreadState) => Promise<T> | T): Promise<T> {
  const done = queue.then(async () => {
    // A thread piscina started in place of one that died was never given its engine.
    if (!ready) throw new Error("the grammar thread has no engine (it was restarted)");
    return work(await ready);
  });
  queue = done.catch((err: unknown) => console.error(`kiln grammar thread: ${messageOf(err)}`));
  return done;
}

/** Piscina task entry: the main thread's messages; the worker's come over the port `connect` gives. */
export default async function handle(msg: GrammarControlMessage): Promise<PrepareAnswer | null> {
  switch (msg.op) {
    case "init":
      ready = ConstraintEngine.create(readTokenizerSpec(msg.artifactDir), msg.logitsWidth, msg.stopTokenIds).then((engine) => new GrammarThreadState(engine));
      await ready;
      return null;
    case "connect":
      msg.port.on(
        "message",
        (m: GrammarWorkerMessage) =>
          void serially(async (state) => {
            const answer = await state.fromWorker(m);
            if (answer) msg.port.postMessage(answer);
          }),
      );
      return null;
    case "prepare":
      return serially((state) => state.prepare(msg));
  }
}
