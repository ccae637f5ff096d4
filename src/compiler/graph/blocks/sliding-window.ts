import { TEXT_GRAPH as IO } from "../../../runtime/artifact/index.js";
import { DataType } from "../../onnx/onnx-proto.js";
import type { BlockContext } from "./context.js";
import { buildsForDevice, deviceRingPositions } from "./device-io.js";

/** The additive masks of a sliding-window layer, in the shapes {@link cachedAttention} adds to its scores. */
export interface WindowMasks {
  /** [B, 1, group*S, ring]: -inf for ring entries outside each query's window (and for empty ones). */
  past: string;
  /** [B, 1, group*S, S]: the runtime's causal `new_mask` plus -inf for new keys outside the window. */
  new: string;
}

/**
 * Masks that limit each query to the last `window` positions, itself included, as llama.cpp's
 * LLAMA_SWA_TYPE_STANDARD does (a key at p0 is hidden from a query at p1 when p1 - p0 >= window).
 * Built once per graph from `position_ids` and shared by every sliding-window layer.
 *
 * A sliding-window layer's cache is a ring (see `runtime/artifact/text-graph.ts`): on the CPU the
 * runtime feeds the position each ring index holds (`ring_positions`); on the GPU target the graph
 * computes it from each row's length (`deviceRingPositions`). Every one is earlier than the step's
 * queries, and an empty index's position is so far back that the window hides it, so `past_mask` is
 * not needed. `group` is heads / kv_heads: query rows are laid out (group, seq), as `cachedAttention`
 * orders them.
 */
export function slidingWindowMasks(ctx: BlockContext, window: number, group: number): WindowMasks {
  const g = ctx.g;
  const int64 = (v: number) => g.constant(DataType.INT64, [], BigInt64Array.of(BigInt(v)), "i64");
  const float = (v: number) => g.constant(DataType.FLOAT, [], new Float32Array([v]), "f32");
  const queries = g.op("Unsqueeze", [IO.positionIds, g.int64s([2])]); // [B, S, 1]
  const ringKeys = buildsForDevice(ctx) ? deviceRingPositions(ctx) : g.op("Unsqueeze", [IO.ringPositions, g.int64s([1])]); // [B, 1, ring]
  const newKeys = g.op("Unsqueeze", [IO.positionIds, g.int64s([1])]); // [B, 1, S]
  const outside = (keys: string) => {
    const hidden = g.op("GreaterOrEqual", [g.op("Sub", [queries, keys]), int64(window)]); // [B, S, K]
    const additive = g.op("Where", [hidden, float(-Infinity), float(0)]);
    // Repeat for each query head of a KV head (rows g*S + s), then a heads axis to broadcast over.
    return g.op("Unsqueeze", [g.op("Tile", [additive, g.int64s([1, group, 1])]), g.int64s([1])]);
  };
  return {
    past: outside(ringKeys),
    new: g.op("Add", [outside(newKeys), IO.newMask]),
  };
}
