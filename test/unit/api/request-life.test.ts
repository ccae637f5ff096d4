/** One request's life: aborted when the client goes away or the drain deadline passes, settled and counted once. */
import { EventEmitter } from "node:events";
import type { FastifyReply, FastifyRequest } from "fastify";
import { describe, expect, it, vi } from "vitest";
import type { UsageRecord } from "../../../src/api/cloud-port.js";
import { type ApiContext, Lifecycle } from "../../../src/api/context.js";
import { ApiError } from "../../../src/api/errors.js";
import { RequestLife } from "../../../src/api/routes/request-life.js";

function setup(options: { stoppedShort?: () => boolean; recordThrows?: boolean } = {}) {
  const lifecycle = new Lifecycle();
  const records: UsageRecord[] = [];
  const errors: unknown[] = [];
  const usage = {
    record(r: UsageRecord) {
      if (options.recordThrows) throw new Error("ledger down");
      records.push(r);
    },
  };
  const ctx = { lifecycle, usage } as unknown as ApiContext;
  const raw = Object.assign(new EventEmitter(), { writableFinished: false });
  const reply = { raw } as unknown as FastifyReply;
  const request = { apiKey: { id: "key_1" }, log: { error: (...args: unknown[]) => errors.push(args) } } as unknown as FastifyRequest;
  const life = new RequestLife(ctx, request, reply, "cmpl-1", options.stoppedShort);
  const used = { slug: "m", promptTokens: 3, completionTokens: 2 };
  const end = () => life.end((settledFrom) => life.recordUsage(used, settledFrom));
  return { lifecycle, raw, life, records, errors, end };
}

describe("RequestLife", () => {
  it("a complete answer settles as completed, and is counted once", () => {
    const { raw, life, records, end } = setup();
    raw.writableFinished = true;
    raw.emit("close"); // 'close' also fires after a complete answer
    expect(life.signal.aborted).toBe(false);
    end();
    end();
    expect(records).toEqual([{ requestId: "cmpl-1", keyId: "key_1", slug: "m", promptTokens: 3, completionTokens: 2, settledFrom: "completed" }]);
  });

  it("a client that goes away aborts the work at once; the request settles as cancelled", () => {
    const { raw, life, records, end } = setup();
    raw.emit("close");
    expect(life.signal.aborted).toBe(true);
    expect(life.clientLeft).toBe(true);
    expect(life.cutOffError()).toBeNull();
    end();
    expect(records.map((r) => r.settledFrom)).toEqual(["cancelled"]);
  });

  it("the drain deadline aborts the work; the answer is a shutting_down error and the request settles as shutdown", () => {
    const { lifecycle, life, records, end } = setup();
    lifecycle.cutOff();
    expect(life.signal.aborted).toBe(true);
    expect(life.clientLeft).toBe(false);
    const error = life.cutOffError();
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).code).toBe("shutting_down");
    end();
    expect(records.map((r) => r.settledFrom)).toEqual(["shutdown"]);
  });

  it("work that stopped of itself settles as failed", () => {
    const { life, records, end } = setup();
    life.failed();
    end();
    expect(records.map((r) => r.settledFrom)).toEqual(["failed"]);
  });

  it("an abort after the work's end cuts nothing short when the work says it ran to its end", () => {
    let stoppedEarly = false;
    const { lifecycle, life, records, end } = setup({ stoppedShort: () => stoppedEarly });
    lifecycle.cutOff();
    expect(life.cutOffError()).toBeNull();
    stoppedEarly = true;
    expect(life.cutOffError()).not.toBeNull();
    stoppedEarly = false;
    end();
    expect(records.map((r) => r.settledFrom)).toEqual(["completed"]);
  });

  it("stops watching once ended, and a usage recorder that throws is logged, not thrown", () => {
    const { raw, life, errors, end } = setup({ recordThrows: true });
    const count = vi.fn();
    expect(end).not.toThrow();
    expect(errors).toHaveLength(1);
    life.end(count);
    expect(count).not.toHaveBeenCalled();
    raw.emit("close");
    expect(life.signal.aborted).toBe(false);
  });
});
