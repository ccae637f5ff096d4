export {
  GgmlType,
  GgufValueType,
  GGML_TYPE_TRAITS,
  QK_K,
  SUPPORTED_GGML_TYPES,
  ggmlByteLength,
  ggmlTypeName,
  ggmlTypeTraits,
  isSupportedGgmlType,
} from "./types.js";
export type { GgmlTypeTraits, GgufFile, GgufTensorInfo, GgufValue } from "./types.js";
export {
  GgufBadAlignmentError,
  GgufBadMagicError,
  GgufBadOffsetError,
  GgufBadShapeError,
  GgufBadValueTypeError,
  GgufDuplicateKeyError,
  GgufDuplicateTensorError,
  GgufError,
  GgufMetadataTypeError,
  GgufMissingKeyError,
  GgufMissingTensorError,
  GgufSplitError,
  GgufTruncatedError,
  GgufUnsupportedTensorTypeError,
  GgufUnsupportedVersionError,
} from "./errors.js";
export { findTensor, getTensor, readGguf, readTensorBytes, readTensorF32 } from "./reader.js";
export { isFirstOrOnlyGguf, isShardName, shardPath, shardPaths, SPLIT_KEYS, splitCount } from "./split.js";
export { DEFAULT_ALIGNMENT } from "./tensor-table.js";
export { findMetadata, getArray, getBoolean, getInteger, getMetadata, getNumber, getNumberArray, getString, getStringArray } from "./metadata.js";
export { dequantize } from "./dequant.js";
export { Q_BLOCK_SIZE, q4Blocks, q8Blocks, unpackQ4, unpackQ8_0 } from "./blocks.js";
export type { Q4BlockView, Q4Type, Q4Unpacked, Q8BlockView, Q8Unpacked } from "./blocks.js";
export { bf16ToF32, f16ArrayToF32, f16ToF32, f32ArrayToBf16, f32ArrayToF16, f32ToBf16, f32ToF16 } from "./fp16.js";
