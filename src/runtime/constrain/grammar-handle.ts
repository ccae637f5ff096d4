/**
 * The main thread's handle on a model's grammar thread (grammar-thread.ts): it starts the thread,
 * hands the text worker a port to it, and compiles constraints there ahead of their sequences. It
 * remembers which constraints it had compiled (as many as the engine keeps, forgotten in the same
 * order), so that a constraint seen again is not sent to be compiled again.
 */
import { MessageChannel, type MessagePort } from "node:worker_threads";
import { WorkerThread } from "../worker-thread.js";
import { GRAMMAR_CACHE_ENTRIES, type ConstraintSpec } from "./engine.js";
import { ConstraintError } from "./errors.js";
import type { GrammarControlMessage, PrepareAnswer } from "./grammar-protocol.js";

export class GrammarThread {
  /** Keys of the constraints compiled there, oldest first (the engine's cache evicts in the same order). */
  private readonly compiled = new Map<string, true>();

  /** The thread is gone: what it compiled with it, and a bare thread (if any) in its place. */
  private lost = false;

  private constructor(private readonly thread: WorkerThread) {
    thread.onLost(() => {
      this.lost = true;
      this.compiled.clear();
    });
  }

  /** Whether the thread is gone (stopped, or dead): a new one must take its place. */
  get gone(): boolean {
    return this.lost;
  }

  /** Starts the thread and builds its engine for the artifact's tokenizer. */
  static async start(init: Omit<Extract<GrammarControlMessage, { op: "init" }>, "op">): Promise<GrammarThread> {
    const { thread } = await WorkerThread.start<null>("./grammar-thread", import.meta.url, { op: "init", ...init }, { hearsPorts: true });
    return new GrammarThread(thread);
  }

  /** Gives the text worker's end of a new port to the thread (transfer it there). */
  async connect(): Promise<MessagePort> {
    const { port1, port2 } = new MessageChannel();
    await this.thread.run({ op: "connect", port: port1 }, [port1]);
    return port2;
  }

  /**
   * Whether `spec` was compiled there lately, so that a sequence can open with it at once. A yes
   * counts as a use, as the sequence's opening will in the engine's cache, so that both forget the
   * same constraints first.
   */
  prepared(spec: ConstraintSpec): boolean {
    const key = keyOf(spec);
    if (!this.compiled.has(key)) return false;
    this.remember(key);
    return true;
  }

  /** Whether `spec` was compiled there lately, without counting it as a use. */
  holds(spec: ConstraintSpec): boolean {
    return this.compiled.has(keyOf(spec));
  }

  /** Compiles `spec` on the grammar thread; rejects with a ConstraintError when the engine refuses it. */
  async prepare(spec: ConstraintSpec): Promise<void> {
    const answer = await this.thread.run<PrepareAnswer>({ op: "prepare", spec });
    if (!answer.ok) throw new ConstraintError(answer.message, answer.path, answer.keyword);
    this.remember(keyOf(spec));
  }

  private remember(key: string): void {
    this.compiled.delete(key);
    this.compiled.set(key, true);
    if (this.compiled.size > GRAMMAR_CACHE_ENTRIES) this.compiled.delete(this.compiled.keys().next().value as string);
  }

  async stop(): Promise<void> {
    await this.thread.stop();
  }
}

/** A constraint's identity for the remembered compiles: its spec as JSON. */
function keyOf(spec: ConstraintSpec): string {
  return JSON.stringify(spec);
}
