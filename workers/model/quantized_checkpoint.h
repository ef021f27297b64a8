#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {

// Writes `source`, a BF16 or F32 Qwen3.5 (qwen3_5_moe) checkpoint, into `dir` in the layout of
// Qwen's block-FP8 release (tandem-make-checkpoint --quant=fp8-block, and the quantized-model
// tests): the attention and Gated DeltaNet projections (q/k/v/o, in_proj_qkv, in_proj_z,
// out_proj), the shared expert and every routed expert become F8_E4M3 `weight`s with a BF16
// `weight_scale_inv` per block of `block` x `block` (amax / 448, rounded to BF16 first, the
// codes rounded to nearest); the routed experts are split per expert
// (`mlp.experts.E.{gate,up,down}_proj.weight`) as that release stores them; the rest (embeddings,
// lm_head, norms, the router and shared-expert gates, in_proj_a/b, conv1d, A_log, dt_bias, the
// vision tower) stays BF16. config.json gains the release's quantization_config; the other
// files of the source directory (tokenizer, templates) are copied.
//
// With `dequantized_dir`, also writes there the same model in the source's own layout with each
// quantized weight replaced by its dequantized values (F32) and the rest as in `dir`: the model
// a block-FP8 load must reproduce exactly. The model is held in memory while written.
absl::Status WriteFp8BlockCheckpoint(const Checkpoint& source, const std::string& dir,
                                     int64_t block, const std::string& dequantized_dir = "");

// Writes `source`, a BF16 or F32 Qwen3.5 checkpoint, as GPTQ int4 (tandem-make-checkpoint
// --quant=gptq): the MLPs (routed experts, split per expert, and the shared expert) as
// X.qweight / X.qzeros / X.scales, symmetric (zero point 8), one F16 scale per `group` inputs
// and output, checkpoint_format gptq, no desc_act; every attention module BF16, as the
// `dynamic` rule of Qwen's GPTQ releases says ("-:.*attn.*": seen on the 27B sibling; the 35B
// release's own config could not be read here). `dequantized_dir` as above.
absl::Status WriteGptqCheckpoint(const Checkpoint& source, const std::string& dir, int64_t group,
                                 const std::string& dequantized_dir = "");

// The same MLPs as AWQ int4 (tandem-make-checkpoint --quant=awq): GEMM packing (qweight
// [in, out/8] and qzeros [groups, out/8] in AWQ's interleaved nibble order), zero points 8,
// F16 scales per `group` inputs; quantization_config quant_method awq, version gemm.
absl::Status WriteAwqCheckpoint(const Checkpoint& source, const std::string& dir, int64_t group,
                                const std::string& dequantized_dir = "");

// The same MLPs as compressed-tensors pack-quantized int4 (tandem-make-checkpoint
// --quant=ct-int4; the community W4A16 releases): weight_packed, BF16 weight_scale per `group`
// inputs, weight_shape; symmetric, group strategy, no actorder.
absl::Status WriteCompressedTensorsCheckpoint(const Checkpoint& source, const std::string& dir,
                                              int64_t group,
                                              const std::string& dequantized_dir = "");

// Writes `source`, a BF16 or F32 Nemotron-H (nemotron_h) checkpoint, in the layout of NVIDIA's
// ModelOpt FP8 release of Nemotron-3-Nano (tandem-make-checkpoint --quant=modelopt-fp8): the
// Mamba in_proj/out_proj and the routed and shared experts' up/down_proj become F8_E4M3 with a
// scalar F32 `weight_scale` (amax / 448) and `input_scale` (1: there is no calibration data);
// the attention layers, the Mamba layers that feed them and every conv1d stay BF16, as the
// release keeps them; the attention layers carry `k_proj.k_scale` / `v_proj.v_scale` (1) as the
// release's FP8 KV cache does. config.json gains a quantization_config (quant_method modelopt,
// quant_algo FP8, its ignore list). `dequantized_dir` as above.
absl::Status WriteModelOptFp8Checkpoint(const Checkpoint& source, const std::string& dir,
                                        const std::string& dequantized_dir = "");

}  // namespace tandem::workers::model
