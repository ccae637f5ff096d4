/**
 * Zero tensors made on the device: a cache the size of a GPU's memory is never uploaded from
 * JavaScript. (Uploading a KV pool of 12 GB through onnxruntime's staging buffers ran an H100 out of
 * device memory before the first step.)
 */
import * as ort from "onnxruntime-node";
import { ElementType, smallGraphBytes } from "../onnx/small-graph.js";
import { executionProvidersFor } from "./execution-providers.js";
import type { ComputeDevice } from "./index.js";

const ZEROS = { zero: "zero", dims: "dims", output: "zeros" } as const;

/** Makes float32 zero tensors of any shape on one device; `release` when no more are wanted (the tensors stay valid until disposed). */
export class DeviceZeros {
  private constructor(private readonly session: ort.InferenceSession) {}

  static async open(device: ComputeDevice): Promise<DeviceZeros> {
    const bytes = smallGraphBytes({
      name: "device_zeros",
      nodes: [{ op: "Expand", inputs: [ZEROS.zero, ZEROS.dims], outputs: [ZEROS.output] }],
      inputs: [
        { name: ZEROS.zero, type: ElementType.float, dims: [1] },
        { name: ZEROS.dims, type: ElementType.int64, dims: ["rank"] },
      ],
      outputs: [{ name: ZEROS.output, type: ElementType.float, dims: ["d0", "d1", "d2", "d3"] }],
    });
    const session = await ort.InferenceSession.create(bytes, {
      executionProviders: executionProvidersFor(device),
      preferredOutputLocation: device === "cpu" ? "cpu" : "gpu-buffer",
    });
    return new DeviceZeros(session);
  }

  /** A zero tensor of `dims` (rank 4), left where the device keeps it. */
  async make(dims: readonly number[]): Promise<ort.Tensor> {
    if (dims.length !== 4) throw new RangeError(`device zeros are rank 4, not ${dims.length}`);
    const out = await this.session.run({
      [ZEROS.zero]: new ort.Tensor("float32", new Float32Array(1), [1]),
      [ZEROS.dims]: new ort.Tensor("int64", BigInt64Array.from(dims, BigInt), [dims.length]),
    });
    return out[ZEROS.output] as ort.Tensor;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
