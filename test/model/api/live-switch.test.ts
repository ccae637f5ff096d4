/**
 * The live switch on the real server: `kiln serve` under load from 8 streaming clients of the
 * official `openai` client (no retries, so nothing hides a failure) switches to another artifact of
 * its model within seconds of a promotion written to the database by this process, and back after
 * a rollback. No request fails, every answer names one artifact in all its chunks, and answers begun
 * after a switch name the new artifact.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { currentPromotion, promoteArtifact, rollbackPromotion, type Promotion } from "../../../src/catalogue/promotions.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const CLIENTS = 8;

interface Answer {
  startedAt: number;
  fingerprints: Set<string>;
  /** When each fingerprint was first seen in this answer's chunks. */
  firstSeen: Map<string, number>;
  text: string;
  error: string | null;
  done: boolean;
}

let server: RunningServer;
let client: OpenAI;
let defaultId: string;
let otherId: string;
let promoted: Promotion | null = null;
const answers: Answer[] = [];
let stop = false;
let clients: Promise<void>[] = [];

function withDatabase<T>(fn: (db: ReturnType<typeof openDatabase>) => T): T {
  const db = openDatabase();
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

async function loop(i: number): Promise<void> {
  while (!stop) {
    const answer: Answer = { startedAt: performance.now(), fingerprints: new Set(), firstSeen: new Map(), text: "", error: null, done: false };
    answers.push(answer); // while it streams, so that its first chunks are seen at once
    try {
      const stream = await client.chat.completions.create({
        model: TEXT_SLUG,
        messages: [{ role: "user", content: `Count from ${i} to ${i + 20}.` }],
        max_tokens: 16,
        temperature: 0,
        stream: true,
      });
      for await (const chunk of stream) {
        const fp = chunk.system_fingerprint ?? "(none)";
        if (!answer.firstSeen.has(fp)) answer.firstSeen.set(fp, performance.now());
        answer.fingerprints.add(fp);
        answer.text += chunk.choices[0]?.delta.content ?? "";
      }
    } catch (err) {
      answer.error = err instanceof Error ? err.message : String(err);
    }
    answer.done = true;
  }
}

/** Waits until some chunk names `artifactId`; returns when that was first seen. */
async function firstSeenOf(artifactId: string, since: number, timeoutMs = 60_000): Promise<number> {
  for (;;) {
    const seen = answers.flatMap((a) => (a.firstSeen.has(artifactId) ? [a.firstSeen.get(artifactId)!] : [])).filter((t) => t >= since);
    if (seen.length > 0) return Math.min(...seen);
    if (performance.now() - since > timeoutMs) {
      const failed = answers.filter((a) => a.error !== null);
      const state = `${finished()} answers complete, ${failed.length} failed (${failed[0]?.error ?? "-"})`;
      throw new Error(`no answer named ${artifactId} within ${timeoutMs / 1000} s; ${state}; the server's log:\n${server.stderr()}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

const finished = () => answers.filter((a) => a.done).length;

/** Waits until `count` answers are complete (the load runs meanwhile). */
async function answered(count: number, timeoutMs = 60_000): Promise<void> {
  const since = performance.now();
  while (finished() < count) {
    if (performance.now() - since > timeoutMs) throw new Error(`only ${answers.length} of ${count} answers within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function servedModel(): Promise<Record<string, unknown>> {
  return (await fetch(`${server.baseURL}/models/${TEXT_SLUG}`, { headers: { authorization: "Bearer local" } })).json() as Promise<Record<string, unknown>>;
}

beforeAll(async () => {
  // A second artifact of the same model: other compile options give another id (cached in the test home after the first run).
  defaultId = (await compiledArtifact()).manifest.id;
  otherId = (await compiledArtifact({ accuracyLevel: 0 })).manifest.id;
  server = await startServer(TEXT_SLUG);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: "local", maxRetries: 0 });
});

afterAll(async () => {
  stop = true;
  await Promise.all(clients);
  // Never leave a promotion behind in the shared test home: every later loadModel would serve it.
  // Its row goes too, so that the model's promotion history there shows only real ones.
  if (promoted) {
    const id = promoted.id;
    withDatabase((db) => {
      if (currentPromotion(db, TEXT_SLUG)?.id === id) rollbackPromotion(db, TEXT_SLUG);
      db.prepare("DELETE FROM artifacts_promoted WHERE id = ?").run(id);
    });
  }
  expect(await stopServer(server)).toBe(0);
});

describe("live switch under load", () => {
  it("switches to a promoted artifact and back on rollback, failing no request", async () => {
    const start = (await servedModel()).artifact_id as string;
    const startPromotion = withDatabase((db) => currentPromotion(db, TEXT_SLUG));
    const target = start === otherId ? defaultId : otherId;
    expect(target).not.toBe(start);

    clients = Array.from({ length: CLIENTS }, (_, i) => loop(i));
    await answered(CLIENTS);

    const promotedAt = performance.now();
    promoted = withDatabase((db) => promoteArtifact(db, { slug: TEXT_SLUG, artifactId: target, reason: "live-switch test" }));
    const switchedAt = await firstSeenOf(target, promotedAt);
    const promoteSeconds = (switchedAt - promotedAt) / 1000;
    const model = await servedModel();
    expect(model).toMatchObject({ artifact_id: target, optimization: { reason: "live-switch test" } });
    expect(model.last_optimized_at).toBe(Math.floor(Date.parse(promoted.createdAt) / 1000));
    await answered(finished() + CLIENTS);

    const rolledBackAt = performance.now();
    withDatabase((db) => rollbackPromotion(db, TEXT_SLUG));
    const backAt = await firstSeenOf(start, rolledBackAt);
    const rollbackSeconds = (backAt - rolledBackAt) / 1000;
    expect(await servedModel()).toMatchObject({ artifact_id: start, last_optimized_at: startPromotion ? expect.any(Number) : null });
    await answered(finished() + CLIENTS);
    stop = true;
    await Promise.all(clients);

    // Each switch drains the artifact it replaced, then closes it.
    const drained = () => server.stderr().match(/drained and closed/g)?.length ?? 0;
    for (const since = performance.now(); drained() < 2 && performance.now() - since < 30_000; ) await new Promise((r) => setTimeout(r, 50));
    const failed = answers.filter((a) => a.error !== null);
    const log = server.stderr();
    console.log(
      `live switch: ${answers.length} streamed answers, ${failed.length} failed; promotion seen in answers after ${promoteSeconds.toFixed(2)} s, ` +
        `rollback after ${rollbackSeconds.toFixed(2)} s\n${log
          .split("\n")
          .filter((l) => /switched to|drained/.test(l))
          .join("\n")}`,
    );
    expect(failed.map((a) => a.error)).toEqual([]);
    // Each answer came whole from one artifact.
    expect(answers.filter((a) => a.fingerprints.size !== 1 || a.text.length === 0)).toEqual([]);
    // Answers begun once an answer had shown the new artifact went to it.
    const during = (from: number, to: number) => answers.filter((a) => a.startedAt > from && a.startedAt < to);
    expect(during(switchedAt, rolledBackAt).length).toBeGreaterThan(0);
    expect(during(switchedAt, rolledBackAt).every((a) => a.fingerprints.has(target))).toBe(true);
    expect(during(backAt, Infinity).length).toBeGreaterThan(0);
    expect(during(backAt, Infinity).every((a) => a.fingerprints.has(start))).toBe(true);
    // "Within seconds": the load of the new session competes with 8 streams for the CPU (13 s on a busy 2-core machine).
    expect(promoteSeconds).toBeLessThan(45);
    expect(rollbackSeconds).toBeLessThan(45);
    expect(drained()).toBe(2);
  });
});
