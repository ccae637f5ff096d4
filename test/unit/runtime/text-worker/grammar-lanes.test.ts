/**
 * Which grammar thread compiles a constraint and holds its sequences' matchers: a new constraint
 * compiles where no sequence waits for masks, on a second thread if need be, never more than the
 * most; a constraint compiled on a thread opens there; only that thread's sequences wait while it
 * compiles; a thread that dies is replaced, one that refuses a constraint is kept. The threads are
 * fakes whose compiles the test finishes.
 */
import { describe, expect, it } from "vitest";
import { ConstraintError, type ConstraintSpec, type GrammarThread } from "../../../../src/runtime/constrain/index.js";
import { GrammarLanes } from "../../../../src/runtime/text-worker/grammar-lanes.js";

const spec = (n: number): ConstraintSpec => ({ type: "regex", pattern: `a{${n}}` });

/** A fake grammar thread: compiles wait for the test's `finish`. */
class FakeThread {
  readonly compiled = new Set<string>();
  readonly pending: Array<{ key: string; finish: (err?: Error) => void }> = [];
  gone = false;
  stopped = false;

  prepared(s: ConstraintSpec): boolean {
    return this.holds(s);
  }
  holds(s: ConstraintSpec): boolean {
    return !this.gone && this.compiled.has(JSON.stringify(s));
  }
  prepare(s: ConstraintSpec): Promise<void> {
    const key = JSON.stringify(s);
    return new Promise((resolve, reject) =>
      this.pending.push({
        key,
        finish: (err) => {
          this.pending.splice(
            this.pending.findIndex((p) => p.key === key),
            1,
          );
          if (err) return reject(err);
          this.compiled.add(key);
          resolve();
        },
      }),
    );
  }
  async stop(): Promise<void> {
    this.stopped = true;
  }
}

function lanes(max = 2) {
  const threads: FakeThread[] = [];
  const startedOn: number[] = [];
  const grammar = new GrammarLanes(async (lane) => {
    const thread = new FakeThread();
    threads.push(thread);
    startedOn.push(lane);
    return thread as unknown as GrammarThread;
  }, max);
  return { grammar, threads, startedOn };
}

/** Lets the lanes' promises settle. */
const settle = () => new Promise((r) => setTimeout(r, 0));

async function compiled(grammar: GrammarLanes, threads: FakeThread[], s: ConstraintSpec, thread: number): Promise<void> {
  const done = grammar.prepare(s);
  await settle();
  threads[thread].pending.find((p) => p.key === JSON.stringify(s))!.finish();
  await done;
}

describe("grammar lanes", () => {
  it("compiles where no sequence waits for masks, starting a second thread while the first holds sequences", async () => {
    const { grammar, threads, startedOn } = lanes();
    await compiled(grammar, threads, spec(1), 0);
    expect(grammar.prepared(spec(1))).toBe(true);
    expect(grammar.opened(10, spec(1))).toBe(0);

    // Lane 0 holds sequence 10: the next constraint compiles on a new thread, and sequence 10 does not wait.
    const second = grammar.prepare(spec(2));
    await settle();
    expect(startedOn).toEqual([0, 1]);
    expect(threads[1].pending).toHaveLength(1);
    expect(grammar.waits(10, spec(1))).toBe(false);
    // A sequence about to open with spec(2) waits: no lane holds it yet, and a compile is under way.
    expect(grammar.waits(11, spec(2))).toBe(true);
    threads[1].pending[0].finish();
    await second;
    expect(grammar.waits(11, spec(2))).toBe(false);
    expect(grammar.opened(11, spec(2))).toBe(1);

    // A compile on lane 1 now holds sequence 11, not sequence 10.
    grammar.closed(10);
    const third = grammar.prepare(spec(3));
    await settle();
    expect(threads[0].pending).toHaveLength(1); // lane 0 had nothing to do: no third thread
    expect(startedOn).toEqual([0, 1]);
    expect(grammar.waits(11, spec(2))).toBe(false);
    expect(grammar.opened(12, spec(1))).toBe(0);
    expect(grammar.waits(12, spec(1))).toBe(true);
    threads[0].pending[0].finish();
    await third;
    expect(grammar.waits(12, spec(1))).toBe(false);
  });

  it("never starts more threads than the most; a compile then goes to the least busy", async () => {
    const { grammar, threads, startedOn } = lanes(2);
    await compiled(grammar, threads, spec(1), 0);
    grammar.opened(1, spec(1));
    grammar.opened(2, spec(1));
    await compiled(grammar, threads, spec(2), 1);
    grammar.opened(3, spec(2));
    const next = grammar.prepare(spec(4));
    await settle();
    expect(startedOn).toEqual([0, 1]);
    expect(threads[1].pending).toHaveLength(1); // one sequence on lane 1, two on lane 0
    expect(grammar.waits(3, spec(2))).toBe(true);
    expect(grammar.waits(1, spec(1))).toBe(false);
    threads[1].pending[0].finish();
    await next;
  });

  it("does not compile again what a thread holds, and opens its sequences there", async () => {
    const { grammar, threads } = lanes();
    await compiled(grammar, threads, spec(1), 0);
    grammar.opened(1, spec(1));
    await compiled(grammar, threads, spec(2), 1);
    await grammar.prepare(spec(1));
    await grammar.prepare(spec(2));
    expect(threads.flatMap((t) => t.pending)).toHaveLength(0);
    expect(grammar.opened(5, spec(2))).toBe(1);
    expect(grammar.opened(6, spec(1))).toBe(0);
  });

  it("compiles a held constraint again on a free lane rather than wait behind the long compile of its own", async () => {
    const { grammar, threads } = lanes(2);
    await compiled(grammar, threads, spec(1), 0);
    grammar.opened(1, spec(1));
    await compiled(grammar, threads, spec(2), 1); // lane 0 held a sequence: spec(2) went to lane 1
    grammar.closed(1);
    // A long compile goes to lane 0, which holds no sequence now.
    const long = grammar.prepare(spec(3));
    await settle();
    expect(threads[0].pending.map((p) => p.key)).toEqual([JSON.stringify(spec(3))]);
    // Now lane 0 compiles and lane 1 is free: spec(1), held only by the busy lane 0, compiles on lane 1.
    expect(grammar.prepared(spec(1))).toBe(false);
    const again = grammar.prepare(spec(1));
    await settle();
    expect(threads[1].pending.map((p) => p.key)).toEqual([JSON.stringify(spec(1))]);
    threads[1].pending[0].finish();
    await again;
    expect(grammar.prepared(spec(1))).toBe(true);
    expect(grammar.opened(5, spec(1))).toBe(1);
    expect(grammar.waits(5, spec(1))).toBe(false);
    // With both lanes busy, a held constraint counts as prepared: its sequence waits where it is held.
    const other = grammar.prepare(spec(4));
    await settle();
    expect(threads[1].pending).toHaveLength(1);
    expect(grammar.prepared(spec(2))).toBe(true);
    threads[1].pending[0].finish();
    threads[0].pending[0].finish();
    await Promise.all([long, other]);
  });

  it("keeps a thread that refuses a constraint, and replaces one that fails otherwise or is gone", async () => {
    const { grammar, threads, startedOn } = lanes(1);
    const refused = grammar.prepare(spec(1));
    await settle();
    threads[0].pending[0].finish(new ConstraintError("refused", ""));
    await expect(refused).rejects.toBeInstanceOf(ConstraintError);
    await compiled(grammar, threads, spec(2), 0);
    expect(startedOn).toEqual([0]);

    const died = grammar.prepare(spec(3));
    await settle();
    threads[0].pending[0].finish(new Error("the grammar thread is gone"));
    await expect(died).rejects.toThrow("gone");
    expect(threads[0].stopped).toBe(true);
    expect(grammar.prepared(spec(2))).toBe(false); // what it compiled went with it
    await compiled(grammar, threads, spec(2), 1);
    expect(startedOn).toEqual([0, 0]);

    threads[1].gone = true;
    expect(grammar.prepared(spec(2))).toBe(false);
    await compiled(grammar, threads, spec(2), 2);
    expect(startedOn).toEqual([0, 0, 0]);
  });
});
