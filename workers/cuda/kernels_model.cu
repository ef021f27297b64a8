// Glue kernels of the CUDA models (declared in kernels_model.h). All are simple elementwise or
// gather kernels: one thread per output element, grid-stride loops so any size fits one launch.

#include "workers/cuda/kernels_model.h"
#include "workers/cuda/launch_check.h"

namespace tandem::workers::cuda {
namespace {

constexpr int kThreads = 256;

// Enough blocks to cover `count` threads, capped (grid-stride loops cover the rest).
unsigned int Blocks(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535) blocks = 65535;
  return static_cast<unsigned int>(blocks);
}

__device__ __forceinline__ float SigmoidF(float x) { return 1.0f / (1.0f + expf(-x)); }
// torch's softplus (threshold 20: linear above), as the CPU reference computes it.
__device__ __forceinline__ float SoftplusF(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void BuildDecodeIndexKernel(const int32_t* state_slots, const int32_t* positions,
                                       int64_t batch, float* base, int64_t slot_floats,
                                       int64_t layer_floats, int64_t conv_floats,
                                       int64_t recurrent_layers, int64_t ptr_stride,
                                       float** conv_ptrs, float** ssm_ptrs, int32_t* context_lens) {
  const int64_t total = batch * (recurrent_layers > 0 ? recurrent_layers : 1);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i % batch;
    const int64_t l = i / batch;
    if (l == 0) context_lens[b] = positions[b] + 1;
    if (recurrent_layers > 0) {
      float* layer = base + static_cast<int64_t>(state_slots[b]) * slot_floats + l * layer_floats;
      conv_ptrs[l * ptr_stride + b] = layer;
      ssm_ptrs[l * ptr_stride + b] = layer + conv_floats;
    }
  }
}

__global__ void KvCacheWriteBatchKernel(const float* k, const float* v, int64_t batch,
                                        const int32_t* positions, int64_t row,
                                        const int32_t* block_tables, int64_t max_blocks,
                                        float* kv_blocks) {
  // row = kv_heads * head_dim floats per token; a block is [2][kKvBlockTokens][row].
  const int64_t total = batch * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / row;
    const int64_t e = i % row;
    const int64_t pos = positions[b];
    const int64_t block = block_tables[b * max_blocks + pos / kKvBlockTokens];
    float* dst = kv_blocks + block * 2 * kKvBlockTokens * row + (pos % kKvBlockTokens) * row + e;
    dst[0] = k[i];
    dst[kKvBlockTokens * row] = v[i];
  }
}

__global__ void CopyColumnsKernel(const float* src, int64_t rows, int64_t src_stride, int64_t cols,
                                  float* dst, int64_t dst_stride) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i % cols;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

__global__ void OverrideRowsKernel(float* h, int64_t n, int64_t dim, const int32_t* rows,
                                   const float* embeddings) {
  const int64_t total = n * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t row = rows[i / dim];
    if (row >= 0) h[i] = embeddings[int64_t{row} * dim + i % dim];
  }
}

__global__ void FillPositionsKernel(int32_t* out, int64_t count, int64_t start) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<int32_t>(start + i);
  }
}

__global__ void GdnGatesKernel(const float* a, const float* b, int64_t rows, int64_t heads,
                               const float* a_log, const float* dt_bias, float* g, float* beta) {
  const int64_t total = rows * heads;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t h = i % heads;
    g[i] = -expf(a_log[h]) * SoftplusF(a[i] + dt_bias[h]);
    beta[i] = SigmoidF(b[i]);
  }
}

__global__ void MambaDtKernel(const float* dt_raw, int64_t rows, int64_t heads,
                              const float* dt_bias, float dt_min, float dt_max, float* dt) {
  const int64_t total = rows * heads;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = SoftplusF(dt_raw[i] + dt_bias[i % heads]);
    dt[i] = fminf(fmaxf(v, dt_min), dt_max);
  }
}

__global__ void SigmoidMulKernel(float* x, const float* gate, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= SigmoidF(gate[i]);
  }
}

__global__ void SigmoidScaleRowsKernel(const float* in, const float* logit, int64_t rows,
                                       int64_t cols, float* out) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = SigmoidF(logit[i / cols]) * in[i];
  }
}

}  // namespace

cudaError_t BuildDecodeIndex(const int32_t* state_slots, const int32_t* positions, int64_t batch,
                             float* base, int64_t slot_floats, int64_t layer_floats,
                             int64_t conv_floats, int64_t recurrent_layers, int64_t ptr_stride,
                             float** conv_ptrs, float** ssm_ptrs, int32_t* context_lens,
                             cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  const int64_t total = batch * (recurrent_layers > 0 ? recurrent_layers : 1);
  const dim3 grid(Blocks(total));
  BuildDecodeIndexKernel<<<grid, kThreads, 0, stream>>>(
      state_slots, positions, batch, base, slot_floats, layer_floats, conv_floats, recurrent_layers,
      ptr_stride, conv_ptrs, ssm_ptrs, context_lens);
  return CheckLaunch("BuildDecodeIndexKernel", grid, kThreads, 0);
}

cudaError_t KvCacheWriteBatch(const float* k, const float* v, int64_t batch,
                              const int32_t* positions, int64_t kv_heads, int64_t head_dim,
                              const int32_t* block_tables, int64_t max_blocks, float* kv_blocks,
                              cudaStream_t stream) {
  const int64_t row = kv_heads * head_dim;
  if (batch <= 0 || row <= 0) return cudaSuccess;
  const dim3 grid(Blocks(batch * row));
  KvCacheWriteBatchKernel<<<grid, kThreads, 0, stream>>>(k, v, batch, positions, row, block_tables,
                                                         max_blocks, kv_blocks);
  return CheckLaunch("KvCacheWriteBatchKernel", grid, kThreads, 0);
}

cudaError_t CopyColumns(const float* src, int64_t rows, int64_t src_stride, int64_t cols,
                        float* dst, int64_t dst_stride, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid(Blocks(rows * cols));
  CopyColumnsKernel<<<grid, kThreads, 0, stream>>>(src, rows, src_stride, cols, dst, dst_stride);
  return CheckLaunch("CopyColumnsKernel", grid, kThreads, 0);
}

cudaError_t OverrideRows(float* h, int64_t n, int64_t dim, const int32_t* rows,
                         const float* embeddings, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  const dim3 grid(Blocks(n * dim));
  OverrideRowsKernel<<<grid, kThreads, 0, stream>>>(h, n, dim, rows, embeddings);
  return CheckLaunch("OverrideRowsKernel", grid, kThreads, 0);
}

cudaError_t FillPositions(int32_t* out, int64_t count, int64_t start, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const dim3 grid(Blocks(count));
  FillPositionsKernel<<<grid, kThreads, 0, stream>>>(out, count, start);
  return CheckLaunch("FillPositionsKernel", grid, kThreads, 0);
}

cudaError_t GdnGates(const float* a, const float* b, int64_t rows, int64_t heads,
                     const float* a_log, const float* dt_bias, float* g, float* beta,
                     cudaStream_t stream) {
  if (rows <= 0 || heads <= 0) return cudaSuccess;
  const dim3 grid(Blocks(rows * heads));
  GdnGatesKernel<<<grid, kThreads, 0, stream>>>(a, b, rows, heads, a_log, dt_bias, g, beta);
  return CheckLaunch("GdnGatesKernel", grid, kThreads, 0);
}

cudaError_t MambaDt(const float* dt_raw, int64_t rows, int64_t heads, const float* dt_bias,
                    float dt_min, float dt_max, float* dt, cudaStream_t stream) {
  if (rows <= 0 || heads <= 0) return cudaSuccess;
  const dim3 grid(Blocks(rows * heads));
  MambaDtKernel<<<grid, kThreads, 0, stream>>>(dt_raw, rows, heads, dt_bias, dt_min, dt_max, dt);
  return CheckLaunch("MambaDtKernel", grid, kThreads, 0);
}

cudaError_t SigmoidMul(float* x, const float* gate, int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const dim3 grid(Blocks(count));
  SigmoidMulKernel<<<grid, kThreads, 0, stream>>>(x, gate, count);
  return CheckLaunch("SigmoidMulKernel", grid, kThreads, 0);
}

cudaError_t SigmoidScaleRows(const float* in, const float* logit, int64_t rows, int64_t cols,
                             float* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid(Blocks(rows * cols));
  SigmoidScaleRowsKernel<<<grid, kThreads, 0, stream>>>(in, logit, rows, cols, out);
  return CheckLaunch("SigmoidScaleRowsKernel", grid, kThreads, 0);
}

}  // namespace tandem::workers::cuda
