// Claim: the grammar thread gives the text worker the same masks as the constraint engine run in
// place, step by step through a JSON-schema answer; a compile there answers the main thread (a
// refusal as a ConstraintError naming where); a token the grammar refuses fails its sequence at its
// next mask; a thread that goes away fails the masks waited for instead of leaving them hanging,
// and its text worker starts another.
import { readTokenizerSpec } from "../../../../src/runtime/artifact/index.js";
import { ConstraintEngine, ConstraintError, GrammarClient, GrammarThread, type ConstraintSpec } from "../../../../src/runtime/constrain/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TextWorker } from "../../../../src/runtime/text-worker/handle.js";
import { compiledArtifact } from "../../../support/model.js";

const SCHEMA: ConstraintSpec = {
  type: "json_schema",
  schema: JSON.stringify({ type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" } }, required: ["name", "age"] }),
};

let local: ConstraintEngine;
let thread: GrammarThread;
let client: GrammarClient;

beforeAll(async () => {
  const { dir, manifest } = await compiledArtifact();
  local = await ConstraintEngine.create(readTokenizerSpec(dir), manifest.shape.vocab, manifest.stopTokenIds);
  thread = await GrammarThread.start({ artifactDir: dir, logitsWidth: manifest.shape.vocab, stopTokenIds: manifest.stopTokenIds });
  client = await GrammarClient.connect(await thread.connect());
}, 120_000);

afterAll(async () => {
  await thread?.stop();
});

/** The lowest id a mask allows (a walk both sides take alike), or refuses. */
function firstWhere(mask: Int32Array, allowed: boolean): number {
  for (let id = 0; id < mask.length * 32; id++) if ((((mask[id >>> 5] >>> (id & 31)) & 1) === 1) === allowed) return id;
  return -1;
}
const firstAllowed = (mask: Int32Array) => firstWhere(mask, true);

describe("the grammar thread", () => {
  it("gives the masks the engine gives in place, token after token", async () => {
    expect(Array.from(client.freeTextBans)).toEqual(Array.from(local.freeTextBans));
    await thread.prepare(SCHEMA);
    expect(thread.prepared(SCHEMA)).toBe(true);
    const here = local.matcher(SCHEMA);
    const there = client.open(1, SCHEMA);
    for (let step = 0; step < 40 && !here.terminated; step++) {
      const expected = (await here.nextMask())!;
      const got = (await there.nextMask())!;
      expect(Array.from(got), `step ${step}`).toEqual(Array.from(expected));
      const token = firstAllowed(expected);
      expect(here.accept(token)).toBe(true);
      expect(there.accept(token)).toBe(true);
    }
    here.dispose();
    there.dispose();
  });

  it("answers a compile it refuses with a ConstraintError naming where", async () => {
    const refused = thread.prepare({ type: "regex", pattern: "(ab" });
    await expect(refused).rejects.toBeInstanceOf(ConstraintError);
    await expect(refused).rejects.toThrow(/unclosed group/);
    expect(thread.prepared({ type: "regex", pattern: "(ab" })).toBe(false);
  });

  it("fails a sequence whose token its grammar refuses at its next mask, and no other", async () => {
    const bad = client.open(2, SCHEMA);
    const good = client.open(3, SCHEMA);
    bad.accept(firstWhere((await bad.nextMask())!, false));
    await expect(bad.nextMask()).rejects.toThrow(/refused token/);
    expect(firstAllowed((await good.nextMask())!)).toBeGreaterThanOrEqual(0);
    bad.dispose();
    good.dispose();
  });

  it("a text worker whose grammar thread died starts another at its next compile", async () => {
    const { dir } = await compiledArtifact();
    const worker = await TextWorker.start(dir);
    try {
      await worker.prepareConstraint(SCHEMA);
      expect(worker.constraintPrepared(SCHEMA)).toBe(true);
      // The thread goes away (as one that crashed would): nothing counts as compiled any more, and
      // the next compile starts another thread.
      const lanes = (worker as unknown as { grammar: { lanes: Array<{ ready: GrammarThread }> } }).grammar.lanes;
      expect(worker.grammarThreads).toBe(1);
      await lanes[0].ready.stop();
      expect(worker.constraintPrepared(SCHEMA)).toBe(false);
      await worker.prepareConstraint(SCHEMA);
      expect(worker.constraintPrepared(SCHEMA)).toBe(true);
      expect(worker.grammarThreads).toBe(1);
    } finally {
      await worker.stop();
    }
  });

  it("fails the masks waited for when the thread goes away", async () => {
    const { dir, manifest } = await compiledArtifact();
    const doomed = await GrammarThread.start({ artifactDir: dir, logitsWidth: manifest.shape.vocab, stopTokenIds: manifest.stopTokenIds });
    const gone = await GrammarClient.connect(await doomed.connect());
    const matcher = gone.open(1, { type: "json_object" });
    await doomed.stop();
    await expect(matcher.nextMask()).rejects.toThrow(/grammar thread is gone/);
  });
});
