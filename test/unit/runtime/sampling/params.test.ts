import { describe, expect, it } from "vitest";
import { SamplingParamsError, resolveSamplingParams, validateSamplingParams } from "../../../../src/runtime/sampling/params.js";

const params = (problems: { param: string }[]) => problems.map((p) => p.param);

describe("validateSamplingParams", () => {
  it("accepts empty, null and in-range parameters", () => {
    expect(validateSamplingParams(undefined)).toEqual([]);
    expect(validateSamplingParams({})).toEqual([]);
    expect(validateSamplingParams({ temperature: null, top_p: null, seed: null, logit_bias: null, logprobs: null })).toEqual([]);
    expect(
      validateSamplingParams({
        temperature: 2,
        top_p: 0,
        top_k: 40,
        min_p: 1,
        presence_penalty: -2,
        frequency_penalty: 2,
        logit_bias: { "0": -100, "50256": 100 },
        seed: -12345,
        logprobs: true,
        top_logprobs: 20,
        messages: [], // other request fields are ignored
      }),
    ).toEqual([]);
    expect(validateSamplingParams({ top_k: -1 })).toEqual([]);
  });

  it("reports out-of-range values", () => {
    const problems = validateSamplingParams({
      temperature: 2.5,
      top_p: 1.1,
      min_p: -0.1,
      presence_penalty: 3,
      frequency_penalty: -2.01,
      top_logprobs: 21,
      logprobs: true,
      top_k: -2,
    });
    expect(params(problems).sort()).toEqual(["frequency_penalty", "min_p", "presence_penalty", "temperature", "top_k", "top_logprobs", "top_p"].sort());
    expect(problems.find((p) => p.param === "temperature")!.message).toMatch(/between 0 and 2/);
  });

  it("reports wrong types and non-integers", () => {
    const problems = validateSamplingParams({
      temperature: "1",
      top_p: Number.NaN,
      top_k: 1.5,
      seed: 1.5,
      logprobs: "yes",
      top_logprobs: 2.5,
    });
    expect(params(problems).sort()).toEqual(["logprobs", "seed", "temperature", "top_k", "top_logprobs", "top_logprobs", "top_p"].sort());
    expect(params(validateSamplingParams({ seed: Infinity }))).toEqual(["seed"]);
    expect(params(validateSamplingParams([]))).toEqual([""]);
  });

  it("checks stop_token_ids against the vocabulary, naming the entry at fault", () => {
    expect(validateSamplingParams({ stop_token_ids: [0, 49151] }, { vocabSize: 49152 })).toEqual([]);
    expect(params(validateSamplingParams({ stop_token_ids: [3, 49152] }, { vocabSize: 49152 }))).toEqual(["stop_token_ids[1]"]);
    expect(params(validateSamplingParams({ stop_token_ids: [-1] }))).toEqual(["stop_token_ids[0]"]);
    expect(params(validateSamplingParams({ stop_token_ids: new Array(257).fill(1) }))).toEqual(["stop_token_ids"]);
    expect([...resolveSamplingParams({ stop_token_ids: [4, 4, 2], min_tokens: 3 }).stopIds]).toEqual([4, 2]);
  });

  it("requires logprobs for top_logprobs", () => {
    expect(params(validateSamplingParams({ top_logprobs: 3 }))).toEqual(["top_logprobs"]);
    expect(params(validateSamplingParams({ top_logprobs: 3, logprobs: false }))).toEqual(["top_logprobs"]);
    expect(validateSamplingParams({ top_logprobs: 0 })).toEqual([]);
  });

  it("checks logit_bias keys and values", () => {
    const problems = validateSamplingParams({
      logit_bias: { "12": 5, "-1": 1, "1.5": 1, "012": 1, abc: 1, "7": 101, "8": "1", "9": Number.NaN },
    });
    expect(problems).toHaveLength(7);
    expect(problems.every((p) => p.param === "logit_bias")).toBe(true);
    expect(params(validateSamplingParams({ logit_bias: [1, 2] }))).toEqual(["logit_bias"]);
    expect(params(validateSamplingParams({ logit_bias: 3 }))).toEqual(["logit_bias"]);
    // With a vocabulary size, ids must be inside it.
    expect(validateSamplingParams({ logit_bias: { "99": 1 } }, { vocabSize: 100 })).toEqual([]);
    expect(params(validateSamplingParams({ logit_bias: { "100": 1 } }, { vocabSize: 100 }))).toEqual(["logit_bias"]);
  });
});

describe("resolveSamplingParams", () => {
  it("fills in the defaults", () => {
    const r = resolveSamplingParams({});
    expect(r).toMatchObject({
      temperature: 1,
      topP: 1,
      topK: 0,
      minP: 0,
      presencePenalty: 0,
      frequencyPenalty: 0,
      seed: undefined,
      logprobs: false,
      topLogprobs: 0,
    });
    expect(r.biasIds).toHaveLength(0);
  });

  it("parses logit_bias in ascending id order and maps top_k -1 to off", () => {
    const r = resolveSamplingParams({ logit_bias: { "30": 1, "4": -2, "100": 3 }, top_k: -1 });
    expect([...r.biasIds]).toEqual([4, 30, 100]);
    expect([...r.biasValues]).toEqual([-2, 1, 3]);
    expect(r.topK).toBe(0);
  });

  it("throws SamplingParamsError with the problems", () => {
    try {
      resolveSamplingParams({ temperature: 9 });
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(SamplingParamsError);
      expect(e).toBeInstanceOf(RangeError);
      expect((e as SamplingParamsError).problems.map((p) => p.param)).toEqual(["temperature"]);
    }
  });
});
