#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::workers::model {

// How a checkpoint's weights are quantized: config.json's `quantization_config`, checked here
// once for every engine. Each tensor's own dtype says whether it is quantized (what a release
// keeps in BF16 stays BF16); a quantized tensor is only ever read through its scales
// (Checkpoint::GetFloat), never as raw codes.
struct QuantScheme {
  enum class Method {
    kNone,      // no quantization_config
    kFp8Block,  // quant_method fp8, fmt e4m3, weight_block_size [rows, cols] (Qwen3.5's FP8)
    // NVIDIA ModelOpt's per-tensor FP8 (Nemotron-3-Nano's FP8): each F8_E4M3 `weight` has one
    // `weight_scale` (and a static `input_scale`, which the CPU reference does not apply: it
    // runs FP8 weights with unquantized activations).
    kModelOptFp8,
    // GPTQ int4 (quant_method gptq, bits 4): X.weight stored as X.qweight (I32 [in/8, out]),
    // X.qzeros (I32 [groups, out/8]), X.scales [groups, out] and, with desc_act, X.g_idx [in].
    kGptq,
    // AWQ int4 (quant_method awq, version gemm): the same names, qweight I32 [in, out/8] and
    // qzeros [groups, out/8] with AWQ's interleaved nibble order, zero points as they are.
    kAwq,
    // compressed-tensors pack-quantized int4 (W4A16): X.weight_packed I32 [out, ceil(in/8)]
    // (codes + 8), X.weight_scale [out, groups], asymmetric: X.weight_zero_point I32
    // [ceil(out/8), groups] (+ 8, packed along outputs), actorder group: X.weight_g_idx [in].
    kCompressedTensors,
  };
  Method method = Method::kNone;
  // kFp8Block: each `weight_scale_inv` element multiplies a block of this many rows and columns
  // of its weight (the last block of a dimension may be partial).
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  // kModelOptFp8: the KV cache is FP8 in the release (k_scale / v_scale tensors); the engines
  // keep it unquantized, and say so at load.
  bool kv_cache_fp8 = false;
  // kGptq, kAwq: input rows per group (0: one group, the config's -1); whether groups follow g_idx
  // (desc_act); whether zero points are stored minus one (checkpoint_format gptq, "v1") or as
  // they are (gptq_v2); sym is informational (the zero points say it).
  int64_t group_size = 0;
  bool desc_act = false;
  bool gptq_v2 = false;
  bool sym = true;

  // "none", or e.g. "fp8 (e4m3, 128x128 blocks)": for logs and messages.
  std::string Describe() const;
  // "none" or "fp8-block" (as tandem-make-checkpoint --quant says it): for WorkerInfo and the
  // worker's info metric.
  std::string Name() const;
};

// The scheme of a parsed config.json. A quant_method this project does not read yet, or a block
// FP8 config missing or contradicting one of its fields, is UNIMPLEMENTED or INVALID_ARGUMENT
// naming the field and saying what is read: loading on regardless would run garbage weights.
absl::StatusOr<QuantScheme> ParseQuantization(const nlohmann::json& config);
// The same from ModelOpt's own hf_quant_config.json ({"producer": {"name": "modelopt"},
// "quantization": {"quant_algo": "FP8", ...}}), which releases made with ModelOpt 0.29 and
// before carry instead of a quantization_config in config.json.
absl::StatusOr<QuantScheme> ParseHfQuantConfig(const nlohmann::json& hf_quant_config);

// The value of an OCP FP8 E4M3 ("e4m3fn") code: 1 sign, 4 exponent (bias 7) and 3 mantissa
// bits, no infinities, S.1111.111 is NaN, largest finite 448.
float F8E4M3ToFloat(uint8_t code);
// The E4M3 code nearest `f` (ties to the even code), saturating at +-448; NaN gives 0x7F.
uint8_t FloatToF8E4M3(float f);

}  // namespace tandem::workers::model
