/** compileCt2Whisper's checks of its request, before it reads any file. */
import { describe, expect, it } from "vitest";
import { compileCt2Whisper } from "../../../src/compiler/compile-whisper.js";

describe("compileCt2Whisper", () => {
  it("refuses float16 activations for the CPU, whose provider has no float16 kernels for the graph, naming the GPU build", async () => {
    const req = { slug: "whisper-tiny-en", modelDir: "/nonexistent/whisper", deviceActivations: "float16" as const };
    await expect(compileCt2Whisper(req)).rejects.toThrow(/^float16 activations are for a GPU build \(device webgpu\), not the CPU$/);
    await expect(compileCt2Whisper({ ...req, device: "cpu" })).rejects.toThrow(/not the CPU/);
    // A GPU build gets past the check to the source files.
    await expect(compileCt2Whisper({ ...req, device: "webgpu" })).rejects.toThrow(/nonexistent/);
  });
});
