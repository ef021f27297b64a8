#include "workers/simulator/synthetic_profile.h"

#include "absl/strings/str_cat.h"

namespace tandem::workers {
namespace {

// Every figure is from docs/models.md (§1-2 the architectures, §3 memory, §4 performance).
// H200 HBM is 4.8 TB/s (§4). Serving stacks reach 57-61% of the HBM bound at large batch
// (§4, Qwen3-30B-A3B on vLLM); we use 59%.
constexpr double kH200BandwidthBytesPerSecond = 4.8e12;
constexpr double kBoundEfficiency = 0.59;
// Prefill is compute-bound: ~989 dense BF16 TFLOP/s on H100/H200 (§4) at an assumed 40% MFU,
// 2 FLOP per active parameter per token.
constexpr double kPrefillFlopsPerSecond = 989e12 * 0.40;

SyntheticProfile Qwen() {
  SyntheticProfile p;
  p.info.engine = "synthetic";
  p.info.model_name = "qwen";
  p.info.model_id = "Qwen/Qwen3.5-35B-A3B";
  p.info.vision = true;                // natively multimodal (§1)
  p.info.reasoning = true;             // thinking on by default (§1)
  p.info.max_context_tokens = 262144;  // max_position_embeddings (§1)
  p.info.max_output_tokens = 32768;
  // Batch 1: p95 TPOT 6.9 ms at 1 RPS on H200 (§4).
  p.decode_step_batch1_seconds = 6.9e-3;
  // Batch 64 reads nearly every expert: the whole-weight floor is ~14.6 ms on H200 BF16 (§4);
  // at 59% of the bound a step takes 14.6 / 0.59 = 24.7 ms. Linear between the two points.
  p.decode_step_per_extra_sequence_seconds = (14.6e-3 / kBoundEfficiency - 6.9e-3) / 63.0;
  // ~2.95B active parameters per token (§3).
  p.prefill_tokens_per_second = kPrefillFlopsPerSecond / (2.0 * 2.95e9);
  // 10 attention layers x 2 (K,V) x 2 KV heads x 256 x 2 B = 20 KiB per token (§3).
  p.kv_bytes_per_token = 20480;
  p.effective_memory_bandwidth_bytes_per_second = kH200BandwidthBytesPerSecond * kBoundEfficiency;
  // A 448x448 image at 16-pixel patches merged 2x2 gives 196 tokens; we round to 256.
  p.tokens_per_image = 256;
  // Qwen3.5-35B-A3B BF16 uses ~78 GB on one 80 GB GPU under vLLM (§4); weights
  // alone are ~35B x 2 B.
  p.weight_bytes = 70ull * 1000 * 1000 * 1000;
  return p;
}

SyntheticProfile Nemotron() {
  SyntheticProfile p;
  p.info.engine = "synthetic";
  p.info.model_name = "nemotron";
  p.info.model_id = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16";
  p.info.vision = false;               // text only (§2)
  p.info.reasoning = true;             // reasoning on/off with thinking budget (§2)
  p.info.max_context_tokens = 262144;  // max_position_embeddings (§2)
  p.info.max_output_tokens = 32768;
  // Batch-1 decode bounds on H200: Qwen ~800 tok/s, Nemotron ~750 tok/s (§4). Qwen's measured
  // 6.9 ms is 18% of its bound (1/800 s / 6.9 ms); the same efficiency gives 1/750 / 0.18.
  p.decode_step_batch1_seconds = (1.0 / 750.0) / ((1.0 / 800.0) / 6.9e-3);
  // Whole-weight floor ~13.2 ms on H200 BF16 (§4) at 59% of the bound, reached at batch 64.
  p.decode_step_per_extra_sequence_seconds =
      (13.2e-3 / kBoundEfficiency - p.decode_step_batch1_seconds) / 63.0;
  // ~3.23B active parameters per token (§3).
  p.prefill_tokens_per_second = kPrefillFlopsPerSecond / (2.0 * 3.23e9);
  // 6 attention layers x 2 x 2 KV heads x 128 x 2 B = 6 KiB per token (§3); the Mamba-2
  // state does not grow with context, which is why long documents go here.
  p.kv_bytes_per_token = 6144;
  p.effective_memory_bandwidth_bytes_per_second = kH200BandwidthBytesPerSecond * kBoundEfficiency;
  p.tokens_per_image = 0;
  // 31.58B parameters, 63.16 GB BF16 (§3).
  p.weight_bytes = 63160ull * 1000 * 1000;
  return p;
}

}  // namespace

absl::StatusOr<SyntheticProfile> SyntheticProfileFor(const std::string& model_name) {
  if (model_name == "qwen") return Qwen();
  if (model_name == "nemotron") return Nemotron();
  return absl::NotFoundError(
      absl::StrCat("no synthetic profile for model '", model_name, "'; known: qwen, nemotron"));
}

}  // namespace tandem::workers
