/**
 * The text worker's side of the grammar thread (grammar-thread.ts): matchers that live there, as
 * {@link TokenMatcher}s here. The masks a step asks for go in one message, and wait for its
 * answer; a sampled token waits for nothing (it came from the mask, so the grammar takes it): it
 * goes with the next message, and a token refused after all fails the sequence at its next mask.
 * Opening a matcher waits for nothing either.
 */
import type { MessagePort } from "node:worker_threads";
import type { ConstraintSpec, TokenMatcher } from "./engine.js";
import type { GrammarWorkerAnswer, GrammarWorkerMessage } from "./grammar-protocol.js";

export class GrammarClient {
  private readonly waiting = new Map<number, (answer: GrammarWorkerAnswer) => void>();
  private nextId = 1;
  private closed = false;
  /** Tokens sampled and not sent yet: (seqId, token) pairs. */
  private readonly accepts: number[] = [];
  /** Masks asked for in this turn, sent together at its end. */
  private readonly batch: Array<{ seqId: number; resolve: (mask: Int32Array | null) => void; reject: (err: Error) => void }> = [];

  /** Ids a free-text (null) mask bans: the engine's control tokens and ids past the vocabulary. */
  freeTextBans: Int32Array = new Int32Array(0);

  private constructor(private readonly port: MessagePort) {
    port.on("message", (answer: GrammarWorkerAnswer) => this.answered(answer));
    port.on("close", () => this.gone());
  }

  /** Connects over `port` (from GrammarThread.connect) once the thread's engine is ready. */
  static async connect(port: MessagePort): Promise<GrammarClient> {
    const client = new GrammarClient(port);
    const hello = await new Promise<GrammarWorkerAnswer>((resolve) => {
      const id = client.nextId++;
      client.waiting.set(id, resolve);
      port.postMessage({ op: "hello", id } satisfies GrammarWorkerMessage);
    });
    if (!("freeTextBans" in hello)) throw new Error("the grammar thread did not say hello");
    client.freeTextBans = hello.freeTextBans;
    return client;
  }

  /** A sequence's matcher, opened on the grammar thread. */
  open(seqId: number, spec: ConstraintSpec): TokenMatcher {
    this.port.postMessage({ op: "open", seqId, spec } satisfies GrammarWorkerMessage);
    return new RemoteMatcher(this, seqId);
  }

  /** Records a sampled token; it goes with the next message, ahead of what that asks. */
  accept(seqId: number, token: number): void {
    this.accepts.push(seqId, token);
  }

  close(seqId: number): void {
    this.port.postMessage({ op: "close", seqId, accepts: this.takeAccepts() } satisfies GrammarWorkerMessage);
  }

  /**
   * Asks for a sequence's next mask and waits for it. The masks asked for in one turn of the event
   * loop (a step's rows) go in one message, with the tokens accepted before them.
   */
  mask(seqId: number): Promise<Int32Array | null> {
    if (this.closed) return Promise.reject(new Error("the grammar thread is gone"));
    if (this.batch.length === 0) queueMicrotask(() => this.flush());
    return new Promise((resolve, reject) => this.batch.push({ seqId, resolve, reject }));
  }

  private flush(): void {
    const batch = this.batch.splice(0);
    if (this.closed) return batch.forEach((asked) => asked.reject(new Error("the grammar thread is gone")));
    const id = this.nextId++;
    this.waiting.set(id, (answer) => {
      const masks = "masks" in answer ? answer.masks : batch.map(() => ({ error: "the grammar thread answered something else" }));
      batch.forEach((asked, i) => {
        const mask = masks[i];
        if (mask === undefined) asked.reject(new Error(this.closed ? "the grammar thread is gone" : "no mask came back"));
        else if (mask !== null && !(mask instanceof Int32Array)) asked.reject(new Error(mask.error));
        else asked.resolve(mask);
      });
    });
    this.port.postMessage({ op: "masks", id, accepts: this.takeAccepts(), seqIds: batch.map((b) => b.seqId) } satisfies GrammarWorkerMessage);
  }

  private takeAccepts(): number[] {
    return this.accepts.splice(0);
  }

  /** The thread went away (stopped, or crashed): every mask waited for fails its sequence, as will every later one. */
  private gone(): void {
    this.closed = true;
    for (const [id, resolve] of this.waiting) resolve({ id, masks: [] });
    this.waiting.clear();
  }

  private answered(answer: GrammarWorkerAnswer): void {
    const resolve = this.waiting.get(answer.id);
    this.waiting.delete(answer.id);
    resolve?.(answer);
  }
}

class RemoteMatcher implements TokenMatcher {
  private closed = false;

  constructor(
    private readonly client: GrammarClient,
    private readonly seqId: number,
  ) {}

  nextMask(): Promise<Int32Array | null> {
    return this.client.mask(this.seqId);
  }

  accept(token: number): boolean {
    this.client.accept(this.seqId, token);
    return true;
  }

  /** Not known here without asking; nothing on this side reads it (the thread's matcher ends the output). */
  get terminated(): boolean {
    return false;
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    this.client.close(this.seqId);
  }
}
