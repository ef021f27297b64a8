#pragma once

// Small glue kernels the CUDA models need beyond kernels.h: decode-batch indexing, the batched
// KV write, column slicing and the per-architecture gate math. Same conventions as kernels.h:
// row-major, fp32 activations, every launcher only enqueues on `stream` (no sync, no allocation),
// so all are safe inside CUDA graph capture.

#include <cuda_runtime.h>

#include <cstdint>

#include "workers/cuda/cuda_kernels.h"

namespace tandem::workers::cuda {

// Per decode batch entry b, from its state slot id: for every recurrent layer l,
//   conv_ptrs[l * ptr_stride + b] = base + slot * slot_floats + l * layer_floats
//   ssm_ptrs[l * ptr_stride + b]  = that + conv_floats
// and context_lens[b] = positions[b] + 1 (the token being fed included). Offsets are in floats.
// With recurrent_layers == 0 only context_lens is written (base may be null).
cudaError_t BuildDecodeIndex(const int32_t* state_slots, const int32_t* positions, int64_t batch,
                             float* base, int64_t slot_floats, int64_t layer_floats,
                             int64_t conv_floats, int64_t recurrent_layers, int64_t ptr_stride,
                             float** conv_ptrs, float** ssm_ptrs, int32_t* context_lens,
                             cudaStream_t stream);

// KvCacheWrite for a decode batch: one token per sequence at positions[b], into the blocks of
// block_tables[b][:max_blocks]. k, v: [batch][kv_heads][head_dim]. Block layout as kernels.h.
cudaError_t KvCacheWriteBatch(const float* k, const float* v, int64_t batch,
                              const int32_t* positions, int64_t kv_heads, int64_t head_dim,
                              const int32_t* block_tables, int64_t max_blocks, float* kv_blocks,
                              cudaStream_t stream);

// dst[r][c] = src[r * src_stride + c] for c < cols; dst rows are dst_stride apart.
cudaError_t CopyColumns(const float* src, int64_t rows, int64_t src_stride, int64_t cols,
                        float* dst, int64_t dst_stride, cudaStream_t stream);

// Embedding overrides (Qwen3.5 image tokens): for every row i < n with rows[i] >= 0,
// h[i][:] = embeddings[rows[i]][:]; rows of -1 keep their token embedding. rows [n] device.
cudaError_t OverrideRows(float* h, int64_t n, int64_t dim, const int32_t* rows,
                         const float* embeddings, cudaStream_t stream);

// out[i] = start + i, `count` int32 positions.
cudaError_t FillPositions(int32_t* out, int64_t count, int64_t start, cudaStream_t stream);

// Qwen3.5 GDN gates per [row][head]: g = -exp(a_log[h]) * softplus(a + dt_bias[h]) (log decay)
// and beta = sigmoid(b). a_log and dt_bias are fp32 [heads].
cudaError_t GdnGates(const float* a, const float* b, int64_t rows, int64_t heads,
                     const float* a_log, const float* dt_bias, float* g, float* beta,
                     cudaStream_t stream);

// Mamba-2 step size per [row][head]: clamp(softplus(dt_raw + dt_bias[h]), dt_min, dt_max).
// dt_bias fp32 [heads]; dt_max may be +inf (no clamp).
cudaError_t MambaDt(const float* dt_raw, int64_t rows, int64_t heads, const float* dt_bias,
                    float dt_min, float dt_max, float* dt, cudaStream_t stream);

// x[i] *= sigmoid(gate[i]), `count` elements (Qwen3.5 attention output gate).
cudaError_t SigmoidMul(float* x, const float* gate, int64_t count, cudaStream_t stream);

// out[r][c] = sigmoid(logit[r]) * in[r][c] (Qwen3.5 shared-expert gate); in place allowed.
cudaError_t SigmoidScaleRows(const float* in, const float* logit, int64_t rows, int64_t cols,
                             float* out, cudaStream_t stream);

}  // namespace tandem::workers::cuda
