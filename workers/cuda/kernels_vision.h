#pragma once

// Kernels of the Qwen3.5 vision encoder (workers/cuda/cuda_qwen35_vision.cc), implemented in
// kernels_vision.cu. Same conventions as cuda_kernels.h: row-major, fp32 activations, BF16
// GEMM inputs, fp32 accumulation; every launcher only enqueues on `stream` (no synchronization,
// no allocation) and records a failed launch with its shape (launch_check.h). The encoder's
// small parameters (biases, LayerNorm weights, the position table) are fp32 on the device.

#include <cuda_runtime.h>

#include <cstdint>

#include "workers/cuda/cuda_kernels.h"

namespace tandem::workers::cuda {

// x[r][c] += bias[c], in place.
cudaError_t AddBias(float* x, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream);

// h[r][c] += y[r][c] + bias[c] (a linear layer's output and bias into the residual stream).
cudaError_t AddBiasResidual(float* h, const float* y, int64_t rows, int64_t cols, const float* bias,
                            cudaStream_t stream);

// out[r][c] = bf16(gelu(x[r][c] + bias[c])): the tanh approximation (gelu_pytorch_tanh) when
// `tanh_form`, else the exact erf form (nn.GELU()). The BF16 output is the next GEMM's input.
cudaError_t BiasGeluBf16(const float* x, int64_t rows, int64_t cols, const float* bias,
                         bool tanh_form, bf16* out, cudaStream_t stream);

// LayerNorm over each row of `dim` (mean and variance in fp32, two passes), times weight plus
// bias, rounded to BF16 (every LayerNorm of the encoder feeds a GEMM).
cudaError_t LayerNormBf16(const float* x, int64_t rows, int64_t dim, const float* weight,
                          const float* bias, float eps, bf16* out, cudaStream_t stream);

// The learned position embedding resampled to each patch: for row n,
//   x[n][:] += ((w[n][0] E[i[n][0]] + w[n][1] E[i[n][1]]) + w[n][2] E[i[n][2]]) + w[n][3]
//   E[i[n][3]]
// (the four bilinear taps summed in this order, as the reference). table E [positions][dim]
// fp32; index, weight [rows][4].
cudaError_t AddPositionEmbedding(float* x, int64_t rows, int64_t dim, const float* table,
                                 const int32_t* index, const float* weight, cudaStream_t stream);

// The encoder's 2-D rotary embedding on the q and k parts of a fused qkv buffer
// [rows][3][heads][head_dim] (q | k | v, each heads x head_dim wide), in place. Row n's patch is
// at (row, col) = rows_cols[n][0..1]; with F = head_dim / 4 frequencies
// inv[j] = 1 / theta^(2j / (head_dim / 2)), the angles are [row * inv, col * inv] (head_dim / 2
// values), duplicated over the head, NeoX rotate_half over the full head dim.
cudaError_t VisionRotary(float* qkv, int64_t rows, int64_t heads, int64_t head_dim,
                         const int32_t* rows_cols, float theta, cudaStream_t stream);

// Non-causal softmax attention of every segment's rows with each other only (one image or
// temporal frame per segment): for each head, out[n] = softmax(q[n] . k[m] * scale over the m of
// n's segment) v[m]. qkv [rows][3][heads][head_dim] as VisionRotary; cu_seqlens [segments + 1]
// (device; the first row of each segment, then the total); max_segment is the longest segment.
// out [rows][heads][head_dim]. Online softmax over key tiles in shared memory: no rows x rows
// scores in global memory, no scratch. head_dim a multiple of 4, at most 128.
cudaError_t VisionAttention(const float* qkv, int64_t heads, int64_t head_dim,
                            const int32_t* cu_seqlens, int64_t segments, int64_t max_segment,
                            float scale, float* out, cudaStream_t stream);

}  // namespace tandem::workers::cuda
