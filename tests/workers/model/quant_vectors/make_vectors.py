#!/usr/bin/env python3
"""Writes the quantized-weight test vectors in the folders beside this script: one checkpoint
each (config.json with the format's quantization_config, model.safetensors) whose quantized
tensors, and the dequantized values they must give (`NAME.expected`, F32), come from this script
alone. It is written from the formats' specifications, not from the C++ under test, which must
reproduce every expected value bit for bit:

  fp8_block     OCP FP8 E4M3 (bias 7, no infinities, S.1111.111 NaN), block FP8 as in Qwen3.5's
                FP8 release: W = e4m3(q) * weight_scale_inv[r // 128][c // 128]
  modelopt_fp8  ModelOpt per-tensor FP8: W = e4m3(q) * weight_scale (one scale, shape [] or [1])
  gptq_v1       GPTQ int4, checkpoint_format gptq: qweight I32 [in/8, out] (input row i in bits
                4*(i%8)), qzeros I32 [groups, out/8] (column o in bits 4*(o%8)) holding each zero
                point minus one, scales F16 [groups, out], g_idx [in] (desc_act: a permutation of
                the groups); W[o][i] = scale[g][o] * (q - zero), g = g_idx[i]. Asymmetric.
  gptq_v2       the same with checkpoint_format gptq_v2 (zero points as they are), symmetric
                (zero 8), no g_idx: g = i // group_size, the last group partial.
  awq           AWQ int4, GEMM packing: qweight I32 [in, out/8] whose nibble j holds column
                8c + [0, 2, 4, 6, 1, 3, 5, 7][j], qzeros I32 [groups, out/8] packed the same way,
                scales F16 [groups, out]; W[o][i] = (q - zero) * scale[i // group_size][o].
  ct_sym        compressed-tensors pack-quantized int4: weight_packed I32 [out, ceil(in/8)]
                (signed code + 8, input k in bits 4*(k%8), zero-padded), weight_shape I64 [2],
                weight_scale [out, groups]; symmetric, groups through an actorder
                weight_g_idx, BF16 scales: W = bf16((q - 0) * scale), in the scale's dtype.
  ct_asym       the same by channel (scale [out, 1]), asymmetric: weight_zero_point I32
                [ceil(out/8), 1] (+ 8, packed along outputs), F16 scales, sizes that 8 does
                not divide (padding).

  /usr/bin/python3 tests/workers/model/quant_vectors/make_vectors.py   # rewrites the files
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
FINITE = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)


class Tensors(dict):
    """name -> (safetensors dtype, shape, bytes)."""

    def add(self, name, dtype, array, raw=None):
        data = raw if raw is not None else array
        self[name] = (dtype, list(array.shape), np.ascontiguousarray(data).tobytes())


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


def fp8_block(rng):
    t = Tensors()
    # Every code once (scale 1): 0x7F and 0xFF are NaN.
    codes = np.arange(256, dtype=np.uint8).reshape(2, 128)
    t.add("codes.weight", "F8_E4M3", codes)
    t.add("codes.weight_scale_inv", "F32", np.ones((1, 1), np.float32))
    t.add("codes.expected", "F32", DECODE[codes])
    # Partial last blocks in both dimensions, one scale dtype each; codes avoid NaN.
    for name, shape, scale_dtype in (("w", (129, 130), "BF16"), ("v", (2, 129), "F16"),
                                     ("u", (129, 2), "F32")):
        q = rng.choice(FINITE, size=shape).astype(np.uint8)
        sshape = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
        scale = rng.uniform(1e-4, 2e-2, size=sshape) * rng.choice([1, -1], size=sshape)
        if scale_dtype == "BF16":
            scale = (scale.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
            t.add(f"{name}.weight_scale_inv", "BF16", scale,
                  (scale.view(np.uint32) >> 16).astype(np.uint16))
        elif scale_dtype == "F16":
            scale = scale.astype(np.float16)
            t.add(f"{name}.weight_scale_inv", "F16", scale)
            scale = scale.astype(np.float32)
        else:
            scale = scale.astype(np.float32)
            t.add(f"{name}.weight_scale_inv", "F32", scale)
        t.add(f"{name}.weight", "F8_E4M3", q)
        rows = np.arange(shape[0])[:, None] // BLOCK
        cols = np.arange(shape[1])[None, :] // BLOCK
        t.add(f"{name}.expected", "F32", DECODE[q] * scale[rows, cols])
    # A quantized weight whose scale is missing: must be refused, never read raw.
    t.add("orphan.weight", "F8_E4M3", np.zeros((4, 4), np.uint8))
    write(os.path.join(HERE, "fp8_block"), t, {
        "model_type": "qwen3_5_moe", "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ["lm_head"]}})


def modelopt_fp8(rng):
    t = Tensors()
    for name, shape, scale_shape in (("m", (3, 130), ()), ("n", (130, 3), (1,))):
        q = rng.choice(FINITE, size=shape).astype(np.uint8)
        scale = np.float32(rng.uniform(1e-4, 2e-2))
        t.add(f"{name}.weight", "F8_E4M3", q)
        t.add(f"{name}.weight_scale", "F32", np.full(scale_shape, scale, np.float32))
        t.add(f"{name}.input_scale", "F32", np.full(scale_shape, 1.0, np.float32))
        t.add(f"{name}.expected", "F32", DECODE[q] * scale)
    t.add("orphan.weight", "F8_E4M3", np.zeros((4, 4), np.uint8))
    write(os.path.join(HERE, "modelopt_fp8"), t, {
        "model_type": "nemotron_h", "quantization_config": {
            "quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"],
            "producer": {"name": "modelopt"}}})


def pack_rows(codes):
    """[in, out] codes -> I32 [in/8, out], row i in bits 4*(i%8)."""
    packed = np.zeros((codes.shape[0] // 8, codes.shape[1]), np.uint32)
    for k in range(8):
        packed |= codes[k::8].astype(np.uint32) << np.uint32(4 * k)
    return packed.view(np.int32)


def pack_cols(codes):
    """[g, out] codes -> I32 [g, out/8], column o in bits 4*(o%8)."""
    packed = np.zeros((codes.shape[0], codes.shape[1] // 8), np.uint32)
    for k in range(8):
        packed |= codes[:, k::8].astype(np.uint32) << np.uint32(4 * k)
    return packed.view(np.int32)


def gptq(rng, folder, out, inputs, group, v2, sym, desc_act):
    groups = -(-inputs // group)
    q = rng.integers(0, 16, size=(inputs, out))  # [in, out], as qweight stores it
    zero = np.full((groups, out), 8) if sym else rng.integers(1, 16, size=(groups, out))
    scale = rng.uniform(1e-3, 5e-2, size=(groups, out)).astype(np.float16)
    g_idx = np.arange(inputs) // group
    if desc_act:
        g_idx = rng.permutation(g_idx)
    t = Tensors()
    t.add("x.qweight", "I32", pack_rows(q))
    t.add("x.qzeros", "I32", pack_cols(zero if v2 else zero - 1))
    t.add("x.scales", "F16", scale)
    if desc_act:
        t.add("x.g_idx", "I32", g_idx.astype(np.int32))
    w = scale.astype(np.float32)[g_idx, :] * (q - zero[g_idx, :]).astype(np.float32)  # [in, out]
    t.add("x.expected", "F32", np.ascontiguousarray(w.T))
    write(os.path.join(HERE, folder), t, {
        "model_type": "qwen3_5_moe", "quantization_config": {
            "quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": desc_act,
            "sym": sym, "checkpoint_format": "gptq_v2" if v2 else "gptq"}})


def pack_awq(codes):
    """[rows, out] codes -> I32 [rows, out/8] in AWQ's order."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    packed = np.zeros((codes.shape[0], codes.shape[1] // 8), np.uint32)
    for j in range(8):
        packed |= codes[:, order[j]::8].astype(np.uint32) << np.uint32(4 * j)
    return packed.view(np.int32)


def awq(rng, out, inputs, group):
    groups = -(-inputs // group)
    q = rng.integers(0, 16, size=(inputs, out))
    zero = rng.integers(0, 16, size=(groups, out))
    scale = rng.uniform(1e-3, 5e-2, size=(groups, out)).astype(np.float16)
    g = np.arange(inputs) // group
    t = Tensors()
    t.add("x.qweight", "I32", pack_awq(q))
    t.add("x.qzeros", "I32", pack_awq(zero))
    t.add("x.scales", "F16", scale)
    w = (q - zero[g, :]).astype(np.float32) * scale.astype(np.float32)[g, :]  # [in, out]
    t.add("x.expected", "F32", np.ascontiguousarray(w.T))
    write(os.path.join(HERE, "awq"), t, {
        "model_type": "qwen3_5_moe", "quantization_config": {
            "quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
            "version": "gemm"}})


def bf16_round(x):
    """float32 -> nearest-even BF16, as float32."""
    bits = x.astype(np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def pack_last(codes):
    """[rows, n] unsigned codes -> I32 [rows, ceil(n/8)], element k in bits 4*(k%8)."""
    n = codes.shape[1]
    padded = np.zeros((codes.shape[0], -(-n // 8) * 8), np.uint32)
    padded[:, :n] = codes
    packed = np.zeros((codes.shape[0], padded.shape[1] // 8), np.uint32)
    for k in range(8):
        packed |= padded[:, k::8] << np.uint32(4 * k)
    return packed.view(np.int32)


def compressed_tensors(rng, folder, out, inputs, group, sym, actorder, bf16):
    groups = -(-inputs // group) if group else 1
    q = rng.integers(-8, 8, size=(out, inputs))  # signed int4
    zp = np.zeros((out, groups), np.int64) if sym else rng.integers(-8, 8, size=(out, groups))
    draws = rng.uniform(1e-3, 5e-2, size=(out, groups))
    g_idx = np.arange(inputs) // group if group else np.zeros(inputs, np.int64)
    if actorder:
        g_idx = rng.permutation(g_idx)
    t = Tensors()
    t.add("x.weight_packed", "I32", pack_last((q + 8).astype(np.uint32)))
    t.add("x.weight_shape", "I64", np.array([out, inputs], np.int64))
    levels = (q - zp[:, g_idx]).astype(np.float32)
    if bf16:  # computed in the scale's dtype: the product rounded to BF16
        scale = bf16_round(draws.astype(np.float32))
        t.add("x.weight_scale", "BF16", scale, (scale.view(np.uint32) >> 16).astype(np.uint16))
        expected = bf16_round(levels * scale[:, g_idx])
    else:  # F16
        scale = draws.astype(np.float16)
        t.add("x.weight_scale", "F16", scale)
        expected = (levels * scale.astype(np.float32)[:, g_idx]).astype(np.float16)
    if not sym:
        t.add("x.weight_zero_point", "I32", pack_rows_zero((zp + 8).astype(np.uint32)))
    if actorder:
        t.add("x.weight_g_idx", "I32", g_idx.astype(np.int32))
    t.add("x.expected", "F32", expected.astype(np.float32))
    weights = {"num_bits": 4, "type": "int", "symmetric": sym,
               "strategy": "group" if group else "channel", "group_size": group or None,
               "actorder": "group" if actorder else None}
    write(os.path.join(HERE, folder), t, {
        "model_type": "qwen3_5_moe", "quantization_config": {
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
            "ignore": ["lm_head"]}})


def pack_rows_zero(zero):
    """[out, groups] unsigned codes -> I32 [ceil(out/8), groups], output o in bits 4*(o%8)."""
    out = zero.shape[0]
    padded = np.zeros((-(-out // 8) * 8, zero.shape[1]), np.uint32)
    padded[:out] = zero
    packed = np.zeros((padded.shape[0] // 8, zero.shape[1]), np.uint32)
    for k in range(8):
        packed |= padded[k::8] << np.uint32(4 * k)
    return packed.view(np.int32)


def main():
    rng = np.random.default_rng(20261206)
    fp8_block(rng)
    modelopt_fp8(rng)
    gptq(rng, "gptq_v1", out=16, inputs=64, group=32, v2=False, sym=False, desc_act=True)
    gptq(rng, "gptq_v2", out=24, inputs=72, group=32, v2=True, sym=True, desc_act=False)
    awq(rng, out=24, inputs=72, group=32)
    compressed_tensors(rng, "ct_sym", out=16, inputs=64, group=32, sym=True, actorder=True,
                       bf16=True)
    compressed_tensors(rng, "ct_asym", out=12, inputs=20, group=0, sym=False, actorder=False,
                       bf16=False)


if __name__ == "__main__":
    main()
