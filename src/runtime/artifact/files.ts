/** Files inside one compiled artifact folder. */
export const ARTIFACT_FILES = {
  manifest: "manifest.json",
  graph: "model.onnx",
  weights: "model.onnx.data",
  tokenizer: "tokenizer.json",
  chatTemplate: "chat_template.jinja",
  /** GPU artifacts only: the graph that copies one KV slot to another on the device (see `device-graph.ts`). */
  slotCopyGraph: "slot-copy.onnx",
  /** Its (empty) external data file: the graph has no weights. */
  slotCopyWeights: "slot-copy.onnx.data",
} as const;
