/** `kiln compile <slug>`: compile a model's weights into an ONNX artifact. */
import { DEFAULT_COMPILE_OPTIONS } from "../../compiler/defaults.js";
import type { ProvisionOptions } from "../../provision/index.js";
import { defineCommand } from "../command.js";
import { option, UsageError } from "../options.js";

export default defineCommand({
  name: "compile",
  description: "Compile a model's weights into an ONNX artifact",
  intro: `Pulls the model if needed, reads its GGUF file and writes an artifact folder under
$KILN_HOME/artifacts/<slug>/<artifact-id>/ (graph, weights, tokenizer, chat template, manifest).
The same source, compiler version and options give the same artifact id, so a repeated compile
is reused unless --force. Each compile is recorded in $KILN_HOME/kiln.sqlite. A GGUF file on this
machine compiles the same way (\`kiln compile ./my-model.Q4_K_M.gguf\`, a path relative to the
current directory) under a slug made from its file name, cached by its content's sha256 (not
recorded in the database).`,
  positionals: "<slug|file.gguf>",
  options: {
    // The defaults are the compiler's own (src/compiler/compile.ts), so naming them changes no artifact id.
    numerics: option.choice(["fast", "llama.cpp"], {
      default: DEFAULT_COMPILE_OPTIONS.numerics,
      description: "fast: ONNX Runtime's int8-activation fast path; llama.cpp: reproduce llama.cpp's CPU rounding (slower)",
    }),
    accuracyLevel: option.integer({
      min: 0,
      max: 4,
      default: DEFAULT_COMPILE_OPTIONS.accuracyLevel,
      description: "MatMulNBits accuracy level of the fast path: 4 int8 activations, 0 float",
    }),
    minFold: option.choice(["matmul", "8bit", "block-means"], {
      default: DEFAULT_COMPILE_OPTIONS.minFold,
      description:
        "Q4_1/Q4_K/Q5_K block minimums: matmul: an exact correction matmul; 8bit: folded into 8-bit zero points (fewer nodes, twice the weight bytes); block-means: the source's code width with default zero points, block offsets as extra columns over the input's block means",
    }),
    lmHead: option.choice(["source", "4bit", "4bit-rescored"], {
      default: DEFAULT_COMPILE_OPTIONS.lmHead,
      description:
        "LM head: source: as the GGUF stores it; 4bit: re-quantized to 4-bit blocks of 32 (half a Q8_0 head's bytes per step, lossy); 4bit-rescored: 4bit, then each position's top 128 logits recomputed from the source blocks",
    }),
    gateUp: option.choice(["fused", "separate"], {
      default: DEFAULT_COMPILE_OPTIONS.gateUp,
      description:
        "gated MLPs: fused: gate and up as one matmul and a Split; separate: one matmul each (same logits; faster at one thread, slower at two on SmolLM2)",
    }),
    device: option.choice(["cpu", "webgpu"], {
      default: "cpu",
      description:
        "the device the artifact is built for: cpu, or webgpu (the GPU target that `kiln serve --device webgpu` loads, its own artifact beside the CPU one; building it needs no GPU)",
    }),
    activations: option.choice(["float32", "float16"], {
      default: "float32",
      description:
        "with --device webgpu, the precision the GPU artifact computes in: float32, or float16 (half the bytes of weights and caches), the artifact `kiln serve --device webgpu --activations float16` loads; float16 needs --device webgpu",
    }),
    force: option.flag({ description: "rebuild even when the artifact exists" }),
  },
  async run({ options, positionals }, io) {
    const [slug, ...extra] = positionals;
    if (!slug) throw new UsageError("which model? (a slug from `kiln models`)");
    if (extra.length > 0) throw new UsageError(`one model at a time (got ${positionals.join(" and ")})`);
    if (options.activations !== "float32" && options.device === "cpu")
      throw new UsageError(`--activations ${options.activations} is the precision of a GPU artifact: add --device webgpu`);
    const started = Date.now();
    // Loaded here, not with the command's declaration, so that help and usage errors come at once.
    const { checkLocalGguf, isLocalModelPath, provisionArtifact, provisionLocalGguf } = await import("../../provision/index.js");
    try {
      const provision: ProvisionOptions = {
        force: options.force,
        device: options.device,
        deviceActivations: options.activations,
        compile: { numerics: options.numerics, accuracyLevel: options.accuracyLevel, minFold: options.minFold, lmHead: options.lmHead, gateUp: options.gateUp },
        onStage: (stage) => io.stderr.write(`${slug}: ${stage}\n`),
      };
      const result = isLocalModelPath(slug) ? await provisionLocalGguf(await checkLocalGguf(slug), provision) : await provisionArtifact(slug, provision);
      const what = result.reused ? "already compiled" : `compiled in ${((Date.now() - started) / 1000).toFixed(1)} s`;
      io.stdout.write(`${result.manifest.id} ${what}\n${result.dir}\n`);
      return 0;
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      io.stderr.write(`kiln compile: ${message.split("\n")[0]}\n`);
      return 1;
    }
  },
});
