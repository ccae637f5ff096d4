import { DEVICE_GRAPH as D, devicePoolDims, type ModelShape, SLOT_COPY_GRAPH as S } from "../../runtime/artifact/index.js";
import { DataType } from "../onnx/onnx-proto.js";
import type { GraphBuilder } from "../onnx/graph-builder.js";

/**
 * The GPU target's slot-copy graph: every layer's key and value pools with slot `to_slot` set to
 * slot `from_slot`, pools of `poolType` (the model's activations' type; float32 by default) (the whole slot: positions past the length the runtime keeps are masked, so
 * copying them is harmless and spares a length input). Runs on the device, so a prefix reuse or a
 * moved sequence never brings the cache to JavaScript.
 */
export function buildSlotCopyGraph(
  g: GraphBuilder,
  h: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "slidingWindow">,
  poolType: DataType = DataType.FLOAT,
): void {
  g.input(S.from, DataType.INT64, [1]);
  g.input(S.to, DataType.INT64, [1]);
  // A sliding-window layer's pools are its rings (see device-io.ts).
  const pool = (l: number) => devicePoolDims("slots", h.slidingWindow?.layers.includes(l) ? "ring" : "capacity", h);
  for (let l = 0; l < h.layers; l++) {
    g.input(D.keyPool(l), poolType, pool(l));
    g.input(D.valuePool(l), poolType, pool(l));
  }
  for (let l = 0; l < h.layers; l++) {
    g.output(D.keyPoolOut(l), poolType, pool(l));
    g.output(D.valuePoolOut(l), poolType, pool(l));
  }
  const to = g.op("Unsqueeze", [S.to, g.int64s([1])]); // [1, 1]: one index into the slots axis
  const copy = (pool: string, out: string) => g.node("ScatterND", [pool, to, g.op("Gather", [pool, S.from], { attributes: { axis: 0 } })], { names: [out] });
  for (let l = 0; l < h.layers; l++) {
    copy(D.keyPool(l), D.keyPoolOut(l));
    copy(D.valuePool(l), D.valuePoolOut(l));
  }
}
