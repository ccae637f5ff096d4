/**
 * The compute gate: the models one process serves take turns on the machine's cores, one model call
 * at a time. Two onnxruntime sessions running at once on the same few cores each slow the other
 * far more than their share (their thread pools wait on each other's preempted threads), so a
 * transcription beside a chat would double the chat's time to first token. Text calls go first,
 * since they are short and someone is usually watching them stream; a speech call still gets a turn
 * after every few text calls, so a busy chat never stalls a transcription.
 */

export type GateLane = "text" | "speech";

export interface ComputeGateOptions {
  /** Text calls that may go ahead of a waiting speech call before it gets its turn. Default 4. */
  textBurst?: number;
}

interface Waiter {
  lane: GateLane;
  start: () => void;
}

export class ComputeGate {
  private busy = false;
  private readonly waiting: Waiter[] = [];
  /** Text calls run since a speech call last did while one was waiting. */
  private textRun = 0;
  private readonly textBurst: number;
  /** Calls run per lane (tests and metrics read them). */
  readonly calls: Record<GateLane, number> = { text: 0, speech: 0 };

  constructor(options: ComputeGateOptions = {}) {
    this.textBurst = Math.max(1, options.textBurst ?? 4);
  }

  /** Runs one model call when it is this lane's turn. */
  async run<T>(lane: GateLane, call: () => Promise<T>): Promise<T> {
    if (this.busy) await new Promise<void>((start) => this.waiting.push({ lane, start }));
    this.busy = true;
    this.calls[lane]++;
    try {
      return await call();
    } finally {
      this.next();
    }
  }

  private next(): void {
    if (this.waiting.length === 0) {
      this.busy = false;
      this.textRun = 0;
      return;
    }
    const speechWaits = this.waiting.some((w) => w.lane === "speech");
    const textAt = this.waiting.findIndex((w) => w.lane === "text");
    const pickText = textAt >= 0 && !(speechWaits && this.textRun >= this.textBurst);
    const at = pickText ? textAt : this.waiting.findIndex((w) => w.lane === "speech");
    const [waiter] = this.waiting.splice(at, 1);
    this.textRun = pickText && speechWaits ? this.textRun + 1 : 0;
    // busy stays true: the turn passes straight to the waiter.
    waiter.start();
  }
}
