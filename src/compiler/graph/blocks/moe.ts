import { getInteger, getNumber } from "../../gguf/metadata.js";
import type { GgufFile } from "../../gguf/types.js";
import { UnsupportedHyperparameterError } from "../../hyper.js";
import { DataType } from "../../onnx/onnx-proto.js";
import { type LinearWeight, sliceRows } from "../../quant/linear-weight.js";
import type { TensorNeeds } from "../architecture.js";
import { type BlockContext, scalar } from "./context.js";
import { fusedLinear, linear } from "./linear.js";

/** The routing of a mixture-of-experts feed-forward layer (`<arch>.expert_*` metadata). */
export interface MoeSpec {
  /** Experts per layer (`expert_count`). */
  experts: number;
  /** Experts each token is routed to (`expert_used_count`), k of top-k. */
  expertsUsed: number;
  /** Each expert's feed-forward width. */
  ffn: number;
  /** Multiplier of the renormalized routing weights (`expert_weights_scale`); 1 when the file has none. */
  weightsScale: number;
}

/** The routing `<arch>.expert_*` declares; `ffn` is each expert's width (`feed_forward_length` for Mixtral). */
export function readMoeSpec(file: GgufFile, arch: string, ffn: number): MoeSpec {
  const experts = getInteger(file, `${arch}.expert_count`);
  const expertsUsed = getInteger(file, `${arch}.expert_used_count`);
  if (expertsUsed < 1 || expertsUsed > experts)
    throw new UnsupportedHyperparameterError(`${arch}.expert_used_count`, expertsUsed, `must be 1..${arch}.expert_count (${experts})`);
  // llama.cpp applies the scale only when it is set and not 1.
  const weightsScale = getNumber(file, `${arch}.expert_weights_scale`, 0) || 1;
  return { experts, expertsUsed, ffn, weightsScale };
}

/**
 * llama.cpp clamps the sum of the chosen experts' probabilities to the smallest normal fp16 before
 * dividing by it (llm_build_moe_ffn), so a token whose chosen probabilities all underflow gets 0, not NaN.
 */
const MIN_WEIGHT_SUM = 6.103515625e-5;

/**
 * The mixture-of-experts feed-forward sub-layer of layer `layer` (Mixtral), as llama.cpp's
 * llm_build_moe_ffn with softmax gating and normalized weights: router logits `ffn_gate_inp` x,
 * softmax over all experts, the top `expertsUsed` per token, their probabilities renormalized to sum
 * to 1; each chosen expert's SwiGLU MLP (`ffn_{gate,up,down}_exps`, stacked [experts, ...]) applied
 * to the token and the outputs summed with those weights.
 *
 * Routed in one step for every token of the batch, without a per-token loop: per expert, the rows
 * that chose it are gathered (NonZero + Gather), run through that expert's matmuls, weighted, and
 * added back into their rows (ScatterND with add). An expert no token chose runs on zero rows. The
 * matmuls are the dense path's (MatMulNBits on the file's own blocks, exact), so each token pays for
 * `expertsUsed` experts, not all of them: measured on 2 threads, a step costs 1.03-1.14x a dense
 * model of the same active size (decode and 64-token prefill), 1.12-1.28x for 8 sequences at once.
 *
 * Not onnxruntime's com.microsoft QMoE (it runs on the CPU in 1.30): its weights are symmetric
 * integers with integer zero points, so Q4_K/Q5_K's fractional block minimums would be requantized
 * (inexact), and llama.cpp's activation rounding cannot be emulated inside one fused op. On one
 * 8-expert layer with 8-bit weights it was 2x slower than this block for one token and 1.5x faster
 * for 64.
 */
export async function moeFeedForward(ctx: BlockContext, layer: number, x: string, spec: MoeSpec): Promise<string> {
  const g = ctx.g;
  const p = `blk.${layer}`;
  const names = { router: `${p}.ffn_gate_inp.weight`, gate: `${p}.ffn_gate_exps.weight`, up: `${p}.ffn_up_exps.weight`, down: `${p}.ffn_down_exps.weight` };
  const router = await ctx.w.linear(names.router);
  const hidden = router.k;
  checkExpertShapes(ctx, names, spec, hidden, router);
  const expert = expertReader(ctx);

  // Every token of the batch as one row: [1, T, hidden] for the matmuls, [T, hidden] for gathering.
  const rows3 = g.op("Reshape", [x, g.int64s([1, -1, hidden])]);
  const rows = g.op("Reshape", [x, g.int64s([-1, hidden])]);
  const [weights, chosen] = route(ctx, linear(ctx, rows3, router, `${p}.ffn_gate_inp`), spec);

  let out = g.op("Expand", [scalar(ctx, 0), g.op("Shape", [rows])]);
  for (let e = 0; e < spec.experts; e++) {
    const label = `${p}.expert${e}`;
    // [T, k] -> which rows chose expert e, and with what weight (0 where not chosen).
    const isE = g.op("Equal", [chosen, g.int64s([e])]);
    const weightE = g.op("ReduceSum", [g.op("Where", [isE, weights, scalar(ctx, 0)]), g.int64s([-1])], { attributes: { keepdims: 0 } });
    const picked = g.op("ReduceMax", [g.op("Cast", [isE], { attributes: { to: DataType.FLOAT } }), g.int64s([-1])], { attributes: { keepdims: 0 } });
    const rowIds = g.op("NonZero", [picked]); // [1, n_e]
    const taken = g.op("Gather", [rows, rowIds], { attributes: { axis: 0 } }); // [1, n_e, hidden]
    // One expert's matrices at a time: a Mixtral 8x22B layer's experts are gigabytes together.
    const [gate, up, down] = await Promise.all([expert(names.gate, e, spec.ffn), expert(names.up, e, spec.ffn), expert(names.down, e, hidden)]);
    const y = expertMlp(ctx, taken, gate, up, down, spec.ffn, label);
    const scale = g.op("Unsqueeze", [g.op("Gather", [weightE, rowIds], { attributes: { axis: 0 } }), g.int64s([-1])]); // [1, n_e, 1]
    const weighted = g.op("Mul", [y, scale]);
    // ScatterND indices [n_e, 1] address rows of [T, hidden]; updates [n_e, hidden].
    const indices = g.op("Transpose", [rowIds], { attributes: { perm: [1, 0] } });
    out = g.op("ScatterND", [out, indices, g.op("Reshape", [weighted, g.int64s([-1, hidden])])], { attributes: { reduction: "add" } });
  }
  ctx.choices.push({
    what: `${p}.ffn`,
    choice: `mixture of ${spec.experts} experts, top ${spec.expertsUsed} of a softmax, weights renormalized${spec.weightsScale !== 1 ? ` and scaled by ${spec.weightsScale}` : ""}; rows grouped per expert (NonZero/Gather/ScatterND add)`,
    exact: true,
    why: "llama.cpp's llm_build_moe_ffn for Mixtral; each token computes only its chosen experts",
  });
  return g.op("Reshape", [out, g.op("Shape", [x])]);
}

/**
 * Expert e's matrix (`rows` rows) of a stacked expert tensor: read alone where the source can
 * (`linearRows`), else sliced out of the whole tensor, read once per tensor.
 */
function expertReader(ctx: BlockContext): (name: string, e: number, rows: number) => Promise<LinearWeight> {
  const { w } = ctx;
  if (w.linearRows) return (name, e, rows) => w.linearRows!(name, e * rows, rows);
  const whole = new Map<string, Promise<LinearWeight>>();
  return async (name, e, rows) => {
    if (!whole.has(name)) whole.set(name, w.linear(name));
    return sliceRows(await whole.get(name)!, e * rows, rows);
  };
}

/** Softmax over the router logits [1, T, experts], top k, renormalized: returns the weights [T, k] and the chosen experts [T, k]. */
function route(ctx: BlockContext, logits: string, spec: MoeSpec): [string, string] {
  const g = ctx.g;
  const probs = g.op("Softmax", [logits], { attributes: { axis: -1 } });
  const [top, chosen] = g.node("TopK", [g.op("Reshape", [probs, g.int64s([-1, spec.experts])]), g.int64s([spec.expertsUsed])], {
    outputs: 2,
    attributes: { axis: -1, largest: 1, sorted: 1 },
  });
  const sum = g.op("ReduceSum", [top, g.int64s([-1])], { attributes: { keepdims: 1 } });
  let weights = g.op("Div", [top, g.op("Max", [sum, scalar(ctx, MIN_WEIGHT_SUM)])]);
  if (spec.weightsScale !== 1) weights = g.op("Mul", [weights, scalar(ctx, spec.weightsScale)]);
  return [weights, chosen];
}

/** One expert's SwiGLU MLP on rows [1, n, hidden]: down(silu(gate(x)) * up(x)). */
function expertMlp(ctx: BlockContext, x: string, gate: LinearWeight, up: LinearWeight, down: LinearWeight, ffn: number, label: string): string {
  const g = ctx.g;
  const gu = fusedLinear(ctx, x, [gate, up], `${label}.gate_up`);
  const [gated, upped] = g.node("Split", [gu, g.int64s([ffn, ffn])], { outputs: 2, attributes: { axis: -1 } });
  const hidden = g.op("Mul", [g.op("Mul", [gated, g.op("Sigmoid", [gated])]), upped]);
  return linear(ctx, hidden, down, `${label}.down`);
}

/** The router is [hidden -> experts], and the stacked experts [experts, ffn, hidden] / [experts, hidden, ffn] as the metadata says. */
function checkExpertShapes(ctx: BlockContext, names: Record<"gate" | "up" | "down", string>, spec: MoeSpec, hidden: number, router: LinearWeight): void {
  const expect = (name: string, actual: number[], wanted: number[]) => {
    if (actual.join(",") !== wanted.join(","))
      throw new Error(
        `${name} has dims [${actual.join(", ")}], expected [${wanted.join(", ")}] (${spec.experts} experts of ffn ${spec.ffn}, hidden ${hidden})`,
      );
  };
  expect("the router", [router.k, router.n], [hidden, spec.experts]);
  expect(names.gate, ctx.w.dims(names.gate), [hidden, spec.ffn, spec.experts]);
  expect(names.up, ctx.w.dims(names.up), [hidden, spec.ffn, spec.experts]);
  expect(names.down, ctx.w.dims(names.down), [spec.ffn, hidden, spec.experts]);
}

/** The tensors {@link moeFeedForward} reads for layer `layer`. */
export function moeTensors(layer: number): TensorNeeds {
  const p = `blk.${layer}`;
  return { required: [`${p}.ffn_gate_inp.weight`, `${p}.ffn_gate_exps.weight`, `${p}.ffn_up_exps.weight`, `${p}.ffn_down_exps.weight`], optional: [] };
}
