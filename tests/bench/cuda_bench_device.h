#pragma once

// Device-side pieces of cuda_benchmark: the per-sequence memory a measurement binds to the model
// and a captured decode step. Host code over the CudaModel interface (workers/cuda/cuda_model.h).

#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/gemm.h"

namespace tandem::workers::cuda::bench {

inline int64_t BlocksFor(int64_t tokens) { return (tokens + kKvBlockTokens - 1) / kKvBlockTokens; }

// Token id `i` of a benchmark input: distinct for i < vocab whenever vocab is not a multiple of
// the prime 104729, so a batch's rows (and a prompt's tokens) differ and route to different
// experts, as real text does.
inline int32_t DistinctToken(int64_t i, int64_t vocab) {
  return static_cast<int32_t>((i * 104729 + 17) % vocab);
}

// Device memory for `batch` sequences of up to `tokens` tokens each, bound to the model: sequence
// i owns state slot i and KV blocks [i * per_seq, (i + 1) * per_seq). Also the decode inputs and
// one logits row per sequence. DeviceBuffer zeroes what it allocates, so the KV cache and the
// recurrent state start as zeros: finite values, and a step reads the same bytes whatever they
// hold (the benchmark's synthetic context fill).
class Pools {
 public:
  // Device bytes Allocate takes.
  static int64_t Bytes(const CudaModel& m, int64_t batch, int64_t tokens) {
    const int64_t per_seq = BlocksFor(tokens);
    return batch * (m.state_slot_bytes() + per_seq * (m.kv_block_bytes() + 4) +
                    int64_t{4} * m.shape().vocab_size + 12);
  }

  absl::Status Allocate(CudaModel& m, int64_t batch, int64_t tokens) {
    batch_ = batch;
    per_seq_ = BlocksFor(tokens);
    vocab_ = m.shape().vocab_size;
    const int64_t blocks = batch * per_seq_;
    RETURN_IF_ERROR(state_.Allocate(batch * m.state_slot_bytes(), "benchmark state slots"));
    RETURN_IF_ERROR(kv_.Allocate(blocks * m.kv_block_bytes(), "benchmark KV blocks"));
    tables_.resize(static_cast<size_t>(blocks));
    std::iota(tables_.begin(), tables_.end(), 0);
    std::vector<int32_t> slots(static_cast<size_t>(batch));
    std::iota(slots.begin(), slots.end(), 0);
    RETURN_IF_ERROR(d_tables_.Allocate(blocks * 4, "benchmark block tables"));
    RETURN_IF_ERROR(d_slots_.Allocate(batch * 4, "benchmark slot ids"));
    RETURN_IF_ERROR(d_tokens_.Allocate(batch * 4, "benchmark decode tokens"));
    RETURN_IF_ERROR(d_positions_.Allocate(batch * 4, "benchmark decode positions"));
    RETURN_IF_ERROR(logits_.Allocate(batch * vocab_ * 4, "benchmark logits"));
    TANDEM_CUDA_RETURN(cudaMemcpy(d_tables_.as<int32_t>(), tables_.data(), tables_.size() * 4,
                                  cudaMemcpyHostToDevice));
    TANDEM_CUDA_RETURN(
        cudaMemcpy(d_slots_.as<int32_t>(), slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
    return m.BindMemory(state_.as<void>(), batch, kv_.as<void>(), blocks);
  }

  // Sequence i for Prefill.
  SequenceSlot Sequence(int64_t i) const {
    SequenceSlot s;
    s.state_slot = static_cast<int32_t>(i);
    s.block_table = d_tables_.as<int32_t>() + i * per_seq_;
    s.blocks.assign(tables_.begin() + i * per_seq_, tables_.begin() + (i + 1) * per_seq_);
    return s;
  }

  // Every sequence fed one token: `tokens` and `positions` hold one entry per sequence.
  absl::Status SetDecodeInputs(const std::vector<int32_t>& tokens,
                               const std::vector<int32_t>& positions) {
    TANDEM_CUDA_RETURN(cudaMemcpy(d_tokens_.as<int32_t>(), tokens.data(), tokens.size() * 4,
                                  cudaMemcpyHostToDevice));
    TANDEM_CUDA_RETURN(cudaMemcpy(d_positions_.as<int32_t>(), positions.data(),
                                  positions.size() * 4, cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  DecodeBatch Batch() const {
    return DecodeBatch{batch_,
                       d_tokens_.as<int32_t>(),
                       d_positions_.as<int32_t>(),
                       d_slots_.as<int32_t>(),
                       d_tables_.as<int32_t>(),
                       per_seq_,
                       logits_.as<float>()};
  }
  float* logits() const { return logits_.as<float>(); }

  // Row `row` of the logits, copied to the host.
  absl::StatusOr<std::vector<float>> LogitsRow(int64_t row) const {
    std::vector<float> out(static_cast<size_t>(vocab_));
    TANDEM_CUDA_RETURN(cudaMemcpy(out.data(), logits_.as<float>() + row * vocab_, out.size() * 4,
                                  cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  int64_t batch_ = 0, per_seq_ = 0, vocab_ = 0;
  std::vector<int32_t> tables_;  // host copy of the block tables
  DeviceBuffer state_, kv_, d_tables_, d_slots_, d_tokens_, d_positions_, logits_;
};

// One decode step captured as a CUDA graph and replayed, as the engine runs its steps.
class GraphStep {
 public:
  GraphStep() = default;
  ~GraphStep() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  absl::Status Capture(CudaModel& m, const DecodeBatch& batch, cudaStream_t stream) {
    TANDEM_CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status decode = m.Decode(batch, stream);
    const cudaError_t end = cudaStreamEndCapture(stream, &graph_);
    RETURN_IF_ERROR(decode);
    TANDEM_CUDA_RETURN(end, "decode graph capture");
    TANDEM_CUDA_RETURN(cudaGraphInstantiate(&exec_, graph_, 0), "decode graph instantiation");
    return absl::OkStatus();
  }

  // Milliseconds per step over `steps` back-to-back replays (device time between two events).
  absl::StatusOr<double> Time(int steps, cudaStream_t stream) {
    cudaEvent_t a = nullptr, b = nullptr;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream);
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < steps && err == cudaSuccess; ++i) err = cudaGraphLaunch(exec_, stream);
    cudaEventRecord(b, stream);
    if (err == cudaSuccess) err = cudaEventSynchronize(b);
    float ms = 0;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    TANDEM_CUDA_RETURN(err, "decode graph replay");
    return static_cast<double>(ms) / steps;
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace tandem::workers::cuda::bench
