/**
 * Zero tensors made on the device: a cache the size of a GPU's memory is never uploaded from
 * JavaScript. (Uploading a KV pool of 12 GB through onnxruntime's staging buffers ran an H100 out of
 * device memory before the first step.)
 */
import * as ort from "onnxruntime-node";
import { ElementType, smallGraphBytes } from "../onnx/small-graph.js";
import { executionProvidersFor, SESSION_LOG_SEVERITY } from "./execution-providers.js";
import type { ComputeDevice } from "./index.js";

const ZEROS = { zero: "zero", dims: "dims", output: "zeros" } as const;

/** The element types DeviceZeros makes. */
export type ZerosType = "float32" | "float16";

/** Makes zero tensors of one float type and any rank-4 shape on one device; `release` when no more are wanted (the tensors stay valid until disposed). */
export class DeviceZeros {
  private constructor(
    private readonly session: ort.InferenceSession,
    readonly type: ZerosType,
  ) {}

  static async open(device: ComputeDevice, type: ZerosType = "float32"): Promise<DeviceZeros> {
    const element = type === "float16" ? ElementType.float16 : ElementType.float;
    const bytes = smallGraphBytes({
      name: "device_zeros",
      nodes: [{ op: "Expand", inputs: [ZEROS.zero, ZEROS.dims], outputs: [ZEROS.output] }],
      inputs: [
        { name: ZEROS.zero, type: element, dims: [1] },
        { name: ZEROS.dims, type: ElementType.int64, dims: ["rank"] },
      ],
      outputs: [{ name: ZEROS.output, type: element, dims: ["d0", "d1", "d2", "d3"] }],
    });
    const session = await ort.InferenceSession.create(bytes, {
      executionProviders: executionProvidersFor(device),
      logSeverityLevel: SESSION_LOG_SEVERITY,
      preferredOutputLocation: device === "cpu" ? "cpu" : "gpu-buffer",
    });
    return new DeviceZeros(session, type);
  }

  /** A zero tensor of `dims` (rank 4), left where the device keeps it. */
  async make(dims: readonly number[]): Promise<ort.Tensor> {
    if (dims.length !== 4) throw new RangeError(`device zeros are rank 4, not ${dims.length}`);
    const out = await this.session.run({
      [ZEROS.zero]: this.type === "float16" ? new ort.Tensor("float16", new Uint16Array(1), [1]) : new ort.Tensor("float32", new Float32Array(1), [1]),
      [ZEROS.dims]: new ort.Tensor("int64", BigInt64Array.from(dims, BigInt), [dims.length]),
    });
    return out[ZEROS.output] as ort.Tensor;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
