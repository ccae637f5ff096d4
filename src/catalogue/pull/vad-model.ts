/**
 * The voice activity detector's model: Silero VAD's `silero_vad.onnx`, as the silero-vad Python
 * package ships it, pulled once into `$KILN_HOME/assets/silero-vad/` with pip (as the embedded
 * models are) and checked by size and SHA-256. The same file every time: a file there with other
 * content is fetched again.
 */
import { join } from "node:path";
import { kilnHome } from "../paths.js";
import { fileSize, sha256File } from "./store.js";
import { pullFromPythonPackage, type PipDownloadOptions } from "./python-package.js";

/** The pinned package and member (silero-vad 6.2.3; the same model file as 6.2.0). */
export const VAD_MODEL_SOURCE = {
  package: "silero-vad",
  version: "6.2.3",
  member: "silero_vad/data/silero_vad.onnx",
  sha256: "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
  bytes: 2_327_524,
} as const;

/** Where the model lives in a kiln home. */
export function vadModelPath(home = kilnHome()): string {
  return join(home, "assets", "silero-vad", "silero_vad.onnx");
}

/** Whether the pinned model is in place (size, then hash). */
async function inPlace(path: string): Promise<boolean> {
  if ((await fileSize(path)) !== VAD_MODEL_SOURCE.bytes) return false;
  return (await sha256File(path)).sha256 === VAD_MODEL_SOURCE.sha256;
}

/** The model's path, pulling it first when it is not in place. */
export async function pullVadModel(options: PipDownloadOptions & { home?: string } = {}): Promise<string> {
  const path = vadModelPath(options.home);
  if (await inPlace(path)) return path;
  const { package: pkg, version, member, sha256, bytes } = VAD_MODEL_SOURCE;
  await pullFromPythonPackage(pkg, version, [{ member, dest: path, sha256, bytes }], options);
  return path;
}
