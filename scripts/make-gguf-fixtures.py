#!/usr/bin/env python3
"""Regenerates the committed fixtures of kiln's GGUF reader and dequantizer tests.

The Python `gguf` package (the reference implementation kept next to llama.cpp) is the
independent oracle: it dequantizes deterministic random blocks of every type kiln supports,
converts floats to fp16/bf16, and writes one small GGUF file. The tests read only the files
written here, so they never need Python.

    python3 -m pip install gguf numpy
    python3 scripts/make-gguf-fixtures.py

(or PYTHONPATH=<llama.cpp checkout>/gguf-py with numpy alone).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quant_shape_to_byte_shape, quantize

SEED = 20240611
OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "gguf"
DEQUANT_DIR = OUT / "dequant"

rng = np.random.default_rng(SEED)


def fp16_bytes(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float16).reshape(-1, 1).view(np.uint8)


def random_scales(n: int, scale: float) -> np.ndarray:
    """Sane fp16 scales: mostly normal values of either sign, plus a zero and a subnormal."""
    values = rng.normal(0.0, scale, n).astype(np.float32)
    if n >= 3:
        values[1] = 0.0
        values[2] = 3.0e-7  # an fp16 subnormal
    return values


def random_bytes(n_blocks: int, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n_blocks, n), dtype=np.uint8)


def q4_0_blocks(n: int) -> np.ndarray:
    return np.concatenate([fp16_bytes(random_scales(n, 0.05)), random_bytes(n, 16)], axis=1)


def q4_1_blocks(n: int) -> np.ndarray:
    d = fp16_bytes(np.abs(random_scales(n, 0.05)))
    m = fp16_bytes(random_scales(n, 0.5))
    return np.concatenate([d, m, random_bytes(n, 16)], axis=1)


def q8_0_blocks(n: int) -> np.ndarray:
    return np.concatenate([fp16_bytes(random_scales(n, 0.01)), random_bytes(n, 32)], axis=1)


def q4_k_blocks(n: int) -> np.ndarray:
    d = fp16_bytes(np.abs(random_scales(n, 0.01)))
    dmin = fp16_bytes(np.abs(random_scales(n, 0.01)))
    return np.concatenate([d, dmin, random_bytes(n, 12), random_bytes(n, 128)], axis=1)


def q5_0_blocks(n: int) -> np.ndarray:
    return np.concatenate([fp16_bytes(random_scales(n, 0.05)), random_bytes(n, 4), random_bytes(n, 16)], axis=1)


def q5_k_blocks(n: int) -> np.ndarray:
    d = fp16_bytes(np.abs(random_scales(n, 0.01)))
    dmin = fp16_bytes(np.abs(random_scales(n, 0.01)))
    return np.concatenate([d, dmin, random_bytes(n, 12), random_bytes(n, 32), random_bytes(n, 128)], axis=1)


def q6_k_blocks(n: int) -> np.ndarray:
    d = fp16_bytes(random_scales(n, 0.002))
    return np.concatenate([random_bytes(n, 128), random_bytes(n, 64), random_bytes(n, 16), d], axis=1)


def quantized_blocks(qtype: T, n: int) -> np.ndarray:
    """Blocks made the way real weights are, by quantizing normal-ish floats."""
    block_size, _ = gguf.GGML_QUANT_SIZES[qtype]
    values = (rng.normal(0.0, 0.1, n * block_size)).astype(np.float32).reshape(n, block_size)
    return quantize(values, qtype).reshape(n, -1)


def special_halfs() -> np.ndarray:
    specials = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00,
                0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7FFF]
    return np.array(specials, dtype=np.uint16)


def f16_elements() -> np.ndarray:
    bits = np.concatenate([special_halfs(), rng.integers(0, 65536, 496, dtype=np.uint16)])
    return bits.view(np.uint8)


def bf16_elements() -> np.ndarray:
    bits = np.concatenate([special_halfs(), rng.integers(0, 65536, 496, dtype=np.uint16)])
    return bits.view(np.uint8)


def f32_elements() -> np.ndarray:
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -3.4e38, 1.0, -1.5], dtype=np.float32)
    values = np.concatenate([specials, rng.normal(0, 10, 248).astype(np.float32)])
    return values.view(np.uint8)


def dequantize_raw(raw: np.ndarray, qtype: T) -> np.ndarray:
    flat = raw.reshape(-1)
    if qtype == T.F16:
        return flat.view(np.float16).astype(np.float32)
    return np.asarray(dequantize(flat, qtype), dtype=np.float32).reshape(-1)


def dequant_cases() -> list[tuple[str, T, np.ndarray]]:
    return [
        ("f32", T.F32, f32_elements()),
        ("f16", T.F16, f16_elements()),
        ("bf16", T.BF16, bf16_elements()),
        ("q4_0", T.Q4_0, np.concatenate([q4_0_blocks(6), quantized_blocks(T.Q4_0, 2)])),
        ("q4_1", T.Q4_1, np.concatenate([q4_1_blocks(6), quantized_blocks(T.Q4_1, 2)])),
        ("q8_0", T.Q8_0, np.concatenate([q8_0_blocks(6), quantized_blocks(T.Q8_0, 2)])),
        ("q4_k", T.Q4_K, q4_k_blocks(4)),
        ("q6_k", T.Q6_K, q6_k_blocks(4)),
    ]


def later_dequant_cases() -> list[tuple[str, T, np.ndarray]]:
    """Types added after the first fixtures, drawn after every other draw so those stay byte-identical."""
    return [
        ("q5_0", T.Q5_0, np.concatenate([q5_0_blocks(6), quantized_blocks(T.Q5_0, 2)])),
        ("q5_k", T.Q5_K, q5_k_blocks(4)),
    ]


def write_dequant_fixtures(cases: list[tuple[str, T, np.ndarray]]) -> list[dict]:
    entries = []
    for name, qtype, raw in cases:
        raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
        expected = dequantize_raw(raw, qtype)
        raw.tofile(DEQUANT_DIR / f"{name}.raw")
        expected.astype("<f4").tofile(DEQUANT_DIR / f"{name}.f32")
        entries.append({"name": name, "type": int(qtype), "elementCount": int(expected.size),
                        "raw": f"{name}.raw", "expected": f"{name}.f32"})
    return entries


def float_conversion_inputs() -> np.ndarray:
    edges = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 6.1035156e-05, 6.0975552e-05,
                      5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1e-9, 1.0 + 2**-11, 1.0 + 3 * 2**-11,
                      np.inf, -np.inf, np.nan], dtype=np.float32)
    spread = (rng.normal(0, 1, 300) * 10.0 ** rng.integers(-9, 6, 300)).astype(np.float32)
    return np.concatenate([edges, spread])


def write_float_conversion_fixtures() -> dict:
    values = float_conversion_inputs()
    values.astype("<f4").tofile(DEQUANT_DIR / "convert-input.f32")
    with np.errstate(over="ignore"):
        values.astype(np.float16).view("<u2").tofile(DEQUANT_DIR / "convert-f16.u16")
    quantize(values, T.BF16).view("<u2").tofile(DEQUANT_DIR / "convert-bf16.u16")
    return {"count": int(values.size), "input": "convert-input.f32", "f16": "convert-f16.u16",
            "bf16": "convert-bf16.u16"}


def python_tensors() -> list[tuple[str, T, list[int], np.ndarray]]:
    """(name, type, ggml dims ne[], raw bytes): one small tensor of every supported type."""
    f32 = rng.normal(0, 1, 12).astype(np.float32)
    f16 = rng.normal(0, 1, 64).astype(np.float16)
    bf16 = quantize(rng.normal(0, 1, 16).astype(np.float32), T.BF16)
    return [
        ("f32.weight", T.F32, [4, 3], f32.view(np.uint8)),
        ("f16.weight", T.F16, [16, 2, 2], f16.view(np.uint8)),
        ("bf16.weight", T.BF16, [16], bf16.view(np.uint8)),
        ("blk.0.q4_0.weight", T.Q4_0, [64, 2], quantized_blocks(T.Q4_0, 4)),
        ("blk.0.q4_1.weight", T.Q4_1, [32, 3], quantized_blocks(T.Q4_1, 3)),
        ("blk.0.q8_0.weight", T.Q8_0, [32, 1, 2], quantized_blocks(T.Q8_0, 2)),
        ("blk.1.q4_k.weight", T.Q4_K, [256], q4_k_blocks(1)),
        ("blk.1.q6_k.weight", T.Q6_K, [256, 2], q6_k_blocks(2)),
    ]


def python_metadata(w: gguf.GGUFWriter) -> dict:
    """Adds one key of every value type; returns their expected values as JSON-safe data."""
    V = gguf.GGUFValueType
    w.add_key_value("test.u8", 200, V.UINT8)
    w.add_key_value("test.i8", -100, V.INT8)
    w.add_key_value("test.u16", 60000, V.UINT16)
    w.add_key_value("test.i16", -30000, V.INT16)
    w.add_key_value("test.u32", 4000000000, V.UINT32)
    w.add_key_value("test.i32", -2000000000, V.INT32)
    w.add_key_value("test.f32", 0.1, V.FLOAT32)
    w.add_key_value("test.bool", True, V.BOOL)
    w.add_key_value("test.string", "héllo ✓ gguf", V.STRING)
    w.add_key_value("test.u64", 2**53 - 1, V.UINT64)
    w.add_key_value("test.u64_big", 2**64 - 2, V.UINT64)
    w.add_key_value("test.i64", -(2**40), V.INT64)
    w.add_key_value("test.i64_big", -(2**62), V.INT64)
    w.add_key_value("test.f64", 1.0 / 3.0, V.FLOAT64)
    w.add_key_value("test.strings", ["a", "", "Ġthe", "<|im_end|>"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("test.i32s", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.nested", [[1, 2], ["x"], [[True]]], V.ARRAY)
    return {
        "general.architecture": "llama",
        "test.u8": 200, "test.i8": -100, "test.u16": 60000, "test.i16": -30000,
        "test.u32": 4000000000, "test.i32": -2000000000,
        "test.f32": float(np.float32(0.1)), "test.bool": True, "test.string": "héllo ✓ gguf",
        "test.u64": 2**53 - 1, "test.u64_big": {"bigint": str(2**64 - 2)},
        "test.i64": -(2**40), "test.i64_big": {"bigint": str(-(2**62))},
        "test.f64": 1.0 / 3.0,
        "test.strings": ["a", "", "Ġthe", "<|im_end|>"], "test.i32s": [1, -2, 3],
        "test.nested": [[1, 2], ["x"], [[True]]],
    }


def write_python_gguf() -> None:
    """A GGUF file written by gguf-py, so the reader is checked against a writer that is not kiln's."""
    path = OUT / "python-written.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    metadata = python_metadata(w)
    tensors = []
    for name, qtype, dims, raw in python_tensors():
        raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
        # gguf-py takes numpy (outermost-first) shapes of the bytes and writes them reversed, as ggml ne[].
        w.add_tensor(name, raw, raw_shape=quant_shape_to_byte_shape(list(reversed(dims)), qtype), raw_dtype=qtype)
        values = dequantize_raw(raw, qtype)
        tensors.append({"name": name, "type": int(qtype), "dims": dims, "values": [float(v) for v in values]})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expected = {"version": 3, "alignment": 32, "metadata": metadata, "tensors": tensors}
    (OUT / "python-written.json").write_text(json.dumps(expected, ensure_ascii=False) + "\n")


def main() -> None:
    DEQUANT_DIR.mkdir(parents=True, exist_ok=True)
    manifest = {
        "generator": "scripts/make-gguf-fixtures.py",
        "seed": SEED,
        "typeSizes": {str(int(t)): list(s) for t, s in gguf.GGML_QUANT_SIZES.items()},
        "dequant": write_dequant_fixtures(dequant_cases()),
        "convert": write_float_conversion_fixtures(),
    }
    write_python_gguf()
    manifest["dequant"] += write_dequant_fixtures(later_dequant_cases())
    (DEQUANT_DIR / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
