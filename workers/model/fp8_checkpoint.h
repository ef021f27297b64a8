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

}  // namespace tandem::workers::model
