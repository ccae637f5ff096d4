/** Files inside one compiled artifact folder. */
export const ARTIFACT_FILES = {
  manifest: "manifest.json",
  graph: "model.onnx",
  weights: "model.onnx.data",
  tokenizer: "tokenizer.json",
  chatTemplate: "chat_template.jinja",
} as const;
