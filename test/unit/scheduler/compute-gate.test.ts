import { describe, expect, it } from "vitest";
import { ComputeGate, type GateLane } from "../../../src/scheduler/index.js";

const tick = () => new Promise((resolve) => setTimeout(resolve, 1));

describe("ComputeGate", () => {
  it("runs one call at a time", async () => {
    const gate = new ComputeGate();
    let running = 0;
    let most = 0;
    const call = async () => {
      most = Math.max(most, ++running);
      await tick();
      running--;
    };
    await Promise.all(Array.from({ length: 6 }, (_, i) => gate.run(i % 2 ? "text" : "speech", call)));
    expect(most).toBe(1);
    expect(gate.calls).toEqual({ text: 3, speech: 3 });
  });

  it("lets waiting text calls go first, but gives speech a turn after every few", async () => {
    const gate = new ComputeGate({ textBurst: 2 });
    const order: string[] = [];
    const call = (name: string) => async () => {
      order.push(name);
      await tick();
    };
    const first = gate.run("speech", call("s0"));
    const queued: Array<[GateLane, string]> = [
      ["speech", "s1"],
      ["text", "t1"],
      ["text", "t2"],
      ["text", "t3"],
      ["speech", "s2"],
      ["text", "t4"],
    ];
    await Promise.all([first, ...queued.map(([lane, name]) => gate.run(lane, call(name)))]);
    expect(order).toEqual(["s0", "t1", "t2", "s1", "t3", "t4", "s2"]);
  });

  it("passes the turn on when a call fails", async () => {
    const gate = new ComputeGate();
    const failing = gate.run("speech", async () => {
      throw new Error("boom");
    });
    const next = gate.run("text", async () => "ran");
    await expect(failing).rejects.toThrow("boom");
    await expect(next).resolves.toBe("ran");
  });
});
