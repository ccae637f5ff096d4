import { ggmlTypeName } from "./types.js";

/** Base class of every failure to read a GGUF file; `file` is the path that was being read. */
export class GgufError extends Error {
  readonly file: string;

  constructor(file: string, message: string) {
    super(`${file}: ${message}`);
    this.name = new.target.name;
    this.file = file;
  }
}

export class GgufBadMagicError extends GgufError {
  constructor(file: string, found: Uint8Array) {
    const shown = Array.from(found, (b) => b.toString(16).padStart(2, "0")).join(" ");
    super(file, `not a GGUF file: expected magic "GGUF" (47 47 55 46), found ${shown || "nothing"}`);
  }
}

export class GgufUnsupportedVersionError extends GgufError {
  readonly version: number;

  constructor(file: string, version: number) {
    // A big-endian file reads its version byte-swapped, so name that likely cause.
    const hint = version > 0xffff ? " (a big-endian GGUF file? only little-endian is supported)" : "";
    super(file, `unsupported GGUF version ${version}${hint}; kiln reads versions 2 and 3`);
    this.version = version;
  }
}

export class GgufTruncatedError extends GgufError {
  constructor(file: string, detail: string) {
    super(file, `truncated or corrupt file: ${detail}`);
  }
}

export class GgufUnsupportedTensorTypeError extends GgufError {
  readonly tensor: string;
  readonly type: number;

  constructor(file: string, tensor: string, type: number) {
    super(file, `tensor "${tensor}" has type ${ggmlTypeName(type)}, which kiln does not support`);
    this.tensor = tensor;
    this.type = type;
  }
}

export class GgufBadAlignmentError extends GgufError {
  constructor(file: string, alignment: string) {
    super(file, `general.alignment must be a power-of-two integer, found ${alignment}`);
  }
}

export class GgufBadOffsetError extends GgufError {
  constructor(file: string, tensor: string, detail: string) {
    super(file, `tensor "${tensor}": ${detail}`);
  }
}

export class GgufBadShapeError extends GgufError {
  constructor(file: string, tensor: string, detail: string) {
    super(file, `tensor "${tensor}": ${detail}`);
  }
}

export class GgufBadValueTypeError extends GgufError {
  constructor(file: string, key: string, type: number) {
    super(file, `metadata key "${key}" has unknown value type ${type}`);
  }
}

export class GgufDuplicateKeyError extends GgufError {
  constructor(file: string, key: string) {
    super(file, `metadata key "${key}" appears more than once`);
  }
}

export class GgufDuplicateTensorError extends GgufError {
  constructor(file: string, tensor: string) {
    super(file, `tensor "${tensor}" appears more than once`);
  }
}

export class GgufMissingKeyError extends GgufError {
  readonly key: string;

  constructor(file: string, key: string) {
    super(file, `required metadata key "${key}" is missing`);
    this.key = key;
  }
}

export class GgufMetadataTypeError extends GgufError {
  readonly key: string;

  constructor(file: string, key: string, expected: string, found: string) {
    super(file, `metadata key "${key}" should be ${expected}, found ${found}`);
    this.key = key;
  }
}

export class GgufMissingTensorError extends GgufError {
  constructor(file: string, tensor: string) {
    super(file, `tensor "${tensor}" is not in the file`);
  }
}

/** A split GGUF set (`name-00001-of-0000N.gguf`) that cannot be read as one model. */
export class GgufSplitError extends GgufError {
  constructor(file: string, detail: string) {
    super(file, `split GGUF: ${detail}`);
  }
}
