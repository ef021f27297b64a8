#!/usr/bin/env python3
"""Writes the FP8 test vectors: in this folder a checkpoint (config.json with a block FP8
quantization_config, model.safetensors), and in ../modelopt_fp8 one in ModelOpt's per-tensor
FP8 (W = e4m3(q) * weight_scale, one F32 scale per tensor, shape [] or [1]); their F8_E4M3
weights and scales, and the dequantized values they must give, come from this script alone. It is written from the formats'
specifications (OCP 8-bit floating point, E4M3: bias 7, no infinities, S.1111.111 NaN; block
FP8 as in Qwen3.5's FP8 release: W = e4m3(q) * weight_scale_inv[r // 128][c // 128]), not from
the C++ under test, which must reproduce every expected value bit for bit.

  /usr/bin/python3 tests/workers/model/fp8_block/make_fp8_vectors.py   # rewrites the files
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 128


def e4m3(code):
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return float("nan")
    if exponent == 0:
        return sign * (mantissa / 8.0) * 2.0 ** -6
    return sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)


DECODE = np.array([e4m3(c) for c in range(256)], dtype=np.float32)


def bf16_bits(values):
    """float32 values with zero low halves, as their BF16 bits."""
    bits = values.astype(np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any()
    return (bits >> 16).astype(np.uint16)


def main():
    rng = np.random.default_rng(20261206)
    tensors = {}  # name -> (dtype, shape, bytes)

    def add(name, dtype, array, raw=None):
        data = raw if raw is not None else array
        tensors[name] = (dtype, list(array.shape), np.ascontiguousarray(data).tobytes())

    # Every code once (scale 1): 0x7F and 0xFF are NaN.
    codes = np.arange(256, dtype=np.uint8).reshape(2, 128)
    add("codes.weight", "F8_E4M3", codes)
    add("codes.weight_scale_inv", "F32", np.ones((1, 1), np.float32))
    add("codes.expected", "F32", DECODE[codes])
    # Partial last blocks in both dimensions, one scale dtype each; codes avoid NaN.
    finite = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
    for name, shape, scale_dtype in (("w", (129, 130), "BF16"), ("v", (2, 129), "F16"),
                                     ("u", (129, 2), "F32")):
        q = rng.choice(finite, size=shape).astype(np.uint8)
        sshape = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
        scale = (rng.uniform(1e-4, 2e-2, size=sshape) * rng.choice([1, -1], size=sshape))
        if scale_dtype == "BF16":
            scale = (scale.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
            add(f"{name}.weight_scale_inv", "BF16", scale, bf16_bits(scale))
        elif scale_dtype == "F16":
            scale = scale.astype(np.float16)
            add(f"{name}.weight_scale_inv", "F16", scale)
            scale = scale.astype(np.float32)
        else:
            scale = scale.astype(np.float32)
            add(f"{name}.weight_scale_inv", "F32", scale)
        add(f"{name}.weight", "F8_E4M3", q)
        rows = np.arange(shape[0])[:, None] // BLOCK
        cols = np.arange(shape[1])[None, :] // BLOCK
        add(f"{name}.expected", "F32", DECODE[q] * scale[rows, cols])
    # A quantized weight whose scale is missing: must be refused, never read raw.
    add("orphan.weight", "F8_E4M3", np.zeros((4, 4), np.uint8))

    config = {"model_type": "qwen3_5_moe", "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ["lm_head"]}}
    write(HERE, tensors, config)

    # ModelOpt per-tensor FP8: one scale per tensor, in both shapes the exporters write.
    tensors = {}
    for name, shape, scale_shape in (("m", (3, 130), ()), ("n", (130, 3), (1,))):
        q = rng.choice(finite, size=shape).astype(np.uint8)
        scale = np.float32(rng.uniform(1e-4, 2e-2))
        add(f"{name}.weight", "F8_E4M3", q)
        add(f"{name}.weight_scale", "F32", np.full(scale_shape, scale, np.float32))
        add(f"{name}.input_scale", "F32", np.full(scale_shape, 1.0, np.float32))
        add(f"{name}.expected", "F32", DECODE[q] * scale)
    add("orphan.weight", "F8_E4M3", np.zeros((4, 4), np.uint8))
    config = {"model_type": "nemotron_h", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"],
        "producer": {"name": "modelopt"}}}
    write(os.path.join(HERE, "..", "modelopt_fp8"), tensors, config)


def write(folder, tensors, config):
    os.makedirs(folder, exist_ok=True)
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
