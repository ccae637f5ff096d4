import { TEXT_GRAPH as IO } from "../../../runtime/artifact/index.js";
import { DataType } from "../../onnx/onnx-proto.js";
import type { BlockContext } from "./context.js";
import { buildsForDevice, deviceGqa, pastSpanPositions } from "./device-io.js";

/** The additive masks of a sliding-window layer, in the shapes {@link cachedAttention} adds to its scores. */
export interface WindowMasks {
  /** [B, 1, group*S, ring]: -inf for ring entries outside each query's window (and for empty ones). */
  past: string;
  /** [B, 1, group*S, S]: the runtime's causal `new_mask` plus -inf for new keys outside the window. */
  new: string;
}

/** A sliding window: its size, and its masks for the explicit attention (GroupQueryAttention takes the size). */
export interface SlidingWindow extends WindowMasks {
  /** Positions each query attends to, itself included. */
  size: number;
}

/**
 * Masks that limit each query to the last `window` positions, itself included, as llama.cpp's
 * LLAMA_SWA_TYPE_STANDARD does (a key at p0 is hidden from a query at p1 when p1 - p0 >= window).
 * Built once per graph from `position_ids` and shared by every sliding-window layer.
 *
 * A sliding-window layer's cache is a ring (see `runtime/artifact/text-graph.ts`): the runtime
 * feeds the position each ring index holds (`ring_positions`), every one earlier than the step's
 * queries; an empty index's position is so far back that the window hides it, so `past_mask` is not
 * needed. On the GPU target the layer reads its slot's pool like every other layer: a past key's
 * position is its index in the past span, and `past_mask` still hides what a row has not cached.
 * `group` is heads / kv_heads: query rows are laid out (group, seq), as `cachedAttention` orders them.
 */
export function slidingWindow(ctx: BlockContext, window: number, group: number): SlidingWindow {
  let masks: WindowMasks | undefined;
  const built = () => (masks ??= windowMasks(ctx, window, group));
  // The explicit attention reads them on every sliding-window layer: built here, ahead of the layers.
  // A graph whose attention is GroupQueryAttention never builds them.
  if (!deviceGqa(ctx)) built();
  return {
    size: window,
    get past() {
      return built().past;
    },
    get new() {
      return built().new;
    },
  };
}

function windowMasks(ctx: BlockContext, window: number, group: number): WindowMasks {
  const g = ctx.g;
  const int64 = (v: number) => g.constant(DataType.INT64, [], BigInt64Array.of(BigInt(v)), "i64");
  const float = (v: number) => g.constant(DataType.FLOAT, [], new Float32Array([v]), "f32");
  const queries = g.op("Unsqueeze", [IO.positionIds, g.int64s([2])]); // [B, S, 1]
  const onDevice = buildsForDevice(ctx);
  const pastKeys = onDevice
    ? g.op("Unsqueeze", [pastSpanPositions(ctx), g.int64s([0, 1])]) // [1, 1, past_span]
    : g.op("Unsqueeze", [IO.ringPositions, g.int64s([1])]); // [B, 1, ring]
  const newKeys = g.op("Unsqueeze", [IO.positionIds, g.int64s([1])]); // [B, 1, S]
  const outside = (keys: string) => {
    const hidden = g.op("GreaterOrEqual", [g.op("Sub", [queries, keys]), int64(window)]); // [B, S, K]
    const additive = g.op("Where", [hidden, float(-Infinity), float(0)]);
    // Repeat for each query head of a KV head (rows g*S + s), then a heads axis to broadcast over.
    return g.op("Unsqueeze", [g.op("Tile", [additive, g.int64s([1, group, 1])]), g.int64s([1])]);
  };
  return {
    past: onDevice ? g.op("Add", [outside(pastKeys), IO.pastMask]) : outside(pastKeys),
    new: g.op("Add", [outside(newKeys), IO.newMask]),
  };
}
