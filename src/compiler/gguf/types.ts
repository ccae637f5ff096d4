/** Tensor element types, numbered as in ggml.h `enum ggml_type`. */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
}

/** Metadata value types, numbered as in gguf.h `enum gguf_type`. */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** A metadata value. 64-bit integers are numbers when they fit exactly, bigints otherwise. */
export type GgufValue = number | bigint | boolean | string | GgufValue[];

export interface GgufTensorInfo {
  name: string;
  /** Dimensions in ggml order: dims[0] (ne[0]) is the contiguous, innermost one. */
  dims: number[];
  type: GgmlType;
  /** Absolute byte offset of the tensor's data in the file. */
  offset: number;
  byteLength: number;
  elementCount: number;
  /** The shard holding this tensor's data, in a split model; absent: the file's own `path`. */
  path?: string;
}

export interface GgufFile {
  path: string;
  version: number;
  /** Keyed by GGUF key, in file order; a prototype-less object, so any key is safe. */
  metadata: Record<string, GgufValue>;
  tensors: GgufTensorInfo[];
  /** `general.alignment`, 32 when absent. */
  alignment: number;
  /** Absolute offset where the tensor data section starts (of the first shard, in a split model). */
  dataOffset: number;
  fileSize: number;
  /**
   * Every file of a split model (`name-00001-of-0000N.gguf` ...), in order, the first being `path`;
   * the tensor table then spans them all. Absent for a single file.
   */
  shards?: string[];
}

/** Elements per block and bytes per block of one tensor type. */
export interface GgmlTypeTraits {
  blockSize: number;
  bytesPerBlock: number;
}

export const QK_K = 256;

/** Sizes of every type ggml knows, so that even unsupported types can be named and measured. */
export const GGML_TYPE_TRAITS: Readonly<Partial<Record<GgmlType, GgmlTypeTraits>>> = {
  [GgmlType.F32]: { blockSize: 1, bytesPerBlock: 4 },
  [GgmlType.F16]: { blockSize: 1, bytesPerBlock: 2 },
  [GgmlType.Q4_0]: { blockSize: 32, bytesPerBlock: 18 },
  [GgmlType.Q4_1]: { blockSize: 32, bytesPerBlock: 20 },
  [GgmlType.Q5_0]: { blockSize: 32, bytesPerBlock: 22 },
  [GgmlType.Q5_1]: { blockSize: 32, bytesPerBlock: 24 },
  [GgmlType.Q8_0]: { blockSize: 32, bytesPerBlock: 34 },
  [GgmlType.Q8_1]: { blockSize: 32, bytesPerBlock: 40 },
  [GgmlType.Q2_K]: { blockSize: QK_K, bytesPerBlock: 84 },
  [GgmlType.Q3_K]: { blockSize: QK_K, bytesPerBlock: 110 },
  [GgmlType.Q4_K]: { blockSize: QK_K, bytesPerBlock: 144 },
  [GgmlType.Q5_K]: { blockSize: QK_K, bytesPerBlock: 176 },
  [GgmlType.Q6_K]: { blockSize: QK_K, bytesPerBlock: 210 },
  [GgmlType.Q8_K]: { blockSize: QK_K, bytesPerBlock: 292 },
  [GgmlType.IQ2_XXS]: { blockSize: QK_K, bytesPerBlock: 66 },
  [GgmlType.IQ2_XS]: { blockSize: QK_K, bytesPerBlock: 74 },
  [GgmlType.IQ3_XXS]: { blockSize: QK_K, bytesPerBlock: 98 },
  [GgmlType.IQ1_S]: { blockSize: QK_K, bytesPerBlock: 50 },
  [GgmlType.IQ4_NL]: { blockSize: 32, bytesPerBlock: 18 },
  [GgmlType.IQ3_S]: { blockSize: QK_K, bytesPerBlock: 110 },
  [GgmlType.IQ2_S]: { blockSize: QK_K, bytesPerBlock: 82 },
  [GgmlType.IQ4_XS]: { blockSize: QK_K, bytesPerBlock: 136 },
  [GgmlType.I8]: { blockSize: 1, bytesPerBlock: 1 },
  [GgmlType.I16]: { blockSize: 1, bytesPerBlock: 2 },
  [GgmlType.I32]: { blockSize: 1, bytesPerBlock: 4 },
  [GgmlType.I64]: { blockSize: 1, bytesPerBlock: 8 },
  [GgmlType.F64]: { blockSize: 1, bytesPerBlock: 8 },
  [GgmlType.IQ1_M]: { blockSize: QK_K, bytesPerBlock: 56 },
  [GgmlType.BF16]: { blockSize: 1, bytesPerBlock: 2 },
  [GgmlType.TQ1_0]: { blockSize: QK_K, bytesPerBlock: 54 },
  [GgmlType.TQ2_0]: { blockSize: QK_K, bytesPerBlock: 66 },
  [GgmlType.MXFP4]: { blockSize: 32, bytesPerBlock: 17 },
};

/** The types kiln can read and dequantize. */
export const SUPPORTED_GGML_TYPES: ReadonlySet<GgmlType> = new Set([
  GgmlType.F32,
  GgmlType.F16,
  GgmlType.BF16,
  GgmlType.Q4_0,
  GgmlType.Q4_1,
  GgmlType.Q5_0,
  GgmlType.Q8_0,
  GgmlType.Q4_K,
  GgmlType.Q5_K,
  GgmlType.Q6_K,
]);

export function isSupportedGgmlType(type: number): type is GgmlType {
  return SUPPORTED_GGML_TYPES.has(type);
}

/** "Q4_K" for 12, "type 99" for numbers ggml does not define. */
export function ggmlTypeName(type: number): string {
  return GgmlType[type] ?? `type ${type}`;
}

export function ggmlTypeTraits(type: number): GgmlTypeTraits | undefined {
  return GGML_TYPE_TRAITS[type as GgmlType];
}

/** Byte size of `elementCount` elements of a type; the count must be a whole number of blocks. */
export function ggmlByteLength(type: GgmlType, elementCount: number): number {
  const traits = ggmlTypeTraits(type);
  if (!traits) throw new RangeError(`unknown ggml type ${type}`);
  if (elementCount % traits.blockSize !== 0) {
    throw new RangeError(`${elementCount} elements is not a whole number of ${ggmlTypeName(type)} blocks of ${traits.blockSize}`);
  }
  return (elementCount / traits.blockSize) * traits.bytesPerBlock;
}
