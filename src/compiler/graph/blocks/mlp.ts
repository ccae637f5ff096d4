import type { TensorNeeds } from "../architecture.js";
import type { BlockContext } from "./context.js";
import { emulatesLlamaCpp, roundTo, scalar } from "./context.js";
import { DataType } from "../../onnx/onnx-proto.js";
import { fusedLinear, loadLinears, project } from "./linear.js";

/** The gate's nonlinearity: "silu" (SwiGLU: Llama, Qwen, Phi-3) or "gelu_tanh" (GeGLU with tanh GELU: Gemma). */
export type GateActivation = "silu" | "gelu_tanh";

/** Options of {@link gatedMlp}. */
export interface GatedMlpOptions {
  /** Default "silu". */
  activation?: GateActivation;
}

/** 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
function geluTanh(ctx: BlockContext, x: string): string {
  const g = ctx.g;
  const inner = g.op("Mul", [
    scalar(ctx, Math.sqrt(2 / Math.PI)),
    g.op("Add", [x, g.op("Mul", [scalar(ctx, 0.044715), g.op("Mul", [x, g.op("Mul", [x, x])])])]),
  ]);
  return g.op("Mul", [g.op("Mul", [scalar(ctx, 0.5), x]), g.op("Add", [scalar(ctx, 1), g.op("Tanh", [inner])])]);
}

/**
 * llama.cpp's CPU GELU (GGML_GELU_FP16): inside (-10, 10) it looks up an fp16 table, i.e. the input
 * is rounded to fp16 and the result too; below -10 it is 0, from 10 on x itself.
 */
function geluTanhFp16Table(ctx: BlockContext, x: string): string {
  const g = ctx.g;
  const tabled = roundTo(ctx, geluTanh(ctx, roundTo(ctx, x, DataType.FLOAT16)), DataType.FLOAT16);
  const high = g.op("Where", [g.op("GreaterOrEqual", [x, scalar(ctx, 10)]), x, tabled]);
  return g.op("Where", [g.op("LessOrEqual", [x, scalar(ctx, -10)]), scalar(ctx, 0), high]);
}

function activate(ctx: BlockContext, x: string, activation: GateActivation): string {
  const g = ctx.g;
  if (activation === "silu") return g.op("Mul", [x, g.op("Sigmoid", [x])]);
  return emulatesLlamaCpp(ctx) ? geluTanhFp16Table(ctx, x) : geluTanh(ctx, x);
}

/**
 * The gated feed-forward sub-layer of layer `layer`: down(act(gate(x)) * up(x)). Gate and up come
 * from `ffn_gate` and `ffn_up` (one fused matmul where their encodings allow), or from a single
 * `ffn_up` of 2*ffn outputs holding gate then up (Phi-3) when the file has no `ffn_gate`.
 */
export async function gatedMlp(ctx: BlockContext, layer: number, x: string, ffn: number, options: GatedMlpOptions = {}): Promise<string> {
  const g = ctx.g;
  const p = `blk.${layer}`;
  const fusedInFile = !ctx.w.has(`${p}.ffn_gate.weight`);
  const ws = await loadLinears(ctx, fusedInFile ? [`${p}.ffn_up.weight`] : [`${p}.ffn_gate.weight`, `${p}.ffn_up.weight`]);
  const total = ws.reduce((s, w) => s + w.n, 0);
  if (total !== 2 * ffn) throw new Error(`${p}: gate and up have ${total} outputs together, expected 2 x ${ffn}`);
  let gate: string;
  let up: string;
  if (ctx.options.gateUp === "separate" && ws.length === 2) {
    gate = fusedLinear(ctx, x, [ws[0]], `${p}.gate`);
    up = fusedLinear(ctx, x, [ws[1]], `${p}.up`);
  } else {
    const gu = fusedLinear(ctx, x, ws, `${p}.gate_up`);
    [gate, up] = g.node("Split", [gu, g.int64s([ffn, ffn])], { outputs: 2, attributes: { axis: -1 } });
  }
  const hidden = g.op("Mul", [activate(ctx, gate, options.activation ?? "silu"), up]);
  return project(ctx, hidden, `${p}.ffn_down.weight`, `${p}.ffn_down`);
}

/** The tensors {@link gatedMlp} reads for layer `layer` (`ffn_gate` is absent where `ffn_up` holds both). */
export function gatedMlpTensors(layer: number): TensorNeeds {
  const p = `blk.${layer}`;
  return { required: [`${p}.ffn_up.weight`, `${p}.ffn_down.weight`], optional: [`${p}.ffn_gate.weight`] };
}
