/**
 * Messages to and from the grammar thread (grammar-thread.ts), which owns a model's constraint
 * engine: its compiled grammars and every sequence's matcher. The main thread sends it compiles;
 * the model's text worker opens, steps and closes matchers over a port of its own. The thread
 * handles its messages one at a time, in the order they came, whoever sent them.
 */
import type { MessagePort } from "node:worker_threads";
import type { ConstraintSpec } from "./engine.js";

/** From the main thread, as tasks of the thread (one answer each). */
export type GrammarControlMessage =
  /** Builds the engine for the artifact's tokenizer; the thread's first message. */
  | { op: "init"; artifactDir: string; logitsWidth: number; stopTokenIds: number[] }
  /** Compile `spec` now, so that a sequence opened with it later finds it compiled. */
  | { op: "prepare"; spec: ConstraintSpec }
  /** A port for the text worker's messages. */
  | { op: "connect"; port: MessagePort };

/** The answer to a `prepare`: compiled, or why the engine refused it. */
export type PrepareAnswer = { ok: true } | { ok: false; message: string; path: string; keyword?: string };

/** From the text worker, over its port. Only `hello` and `masks` are answered. */
export type GrammarWorkerMessage =
  | { op: "hello"; id: number }
  | { op: "open"; seqId: number; spec: ConstraintSpec }
  /**
   * The tokens sampled since the last message, in order (`accepts` holds seqId, token pairs), then
   * the next masks of `seqIds`: one message a step rather than two a row.
   */
  | { op: "masks"; id: number; accepts: number[]; seqIds: number[] }
  | { op: "close"; seqId: number; accepts: number[] };

/** One sequence's next mask (null: free text), or why its matcher failed. */
export type MaskAnswer = Int32Array | null | { error: string };

/** Answers over the text worker's port. */
export type GrammarWorkerAnswer =
  /** To `hello`: the ids a free-text (null) mask bans. */
  | { id: number; freeTextBans: Int32Array }
  /** To `masks`: one answer per sequence asked for, in order. */
  | { id: number; masks: MaskAnswer[] };
