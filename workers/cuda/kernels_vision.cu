// Kernels of the Qwen3.5 vision encoder (declared in kernels_vision.h). Elementwise kernels use
// grid-stride loops; LayerNorm is one block per row; attention is a tiled online-softmax kernel
// (see VisionAttentionKernel).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "workers/cuda/block_reduce.cuh"
#include "workers/cuda/kernels_vision.h"
#include "workers/cuda/launch_check.h"
#include "workers/cuda/rope.cuh"

namespace tandem::workers::cuda {
namespace {

constexpr int kVisionThreads = 256;

// Enough blocks to cover `count` threads, capped (grid-stride loops cover the rest).
unsigned VisionBlocks(int64_t count) {
  int64_t blocks = (count + kVisionThreads - 1) / kVisionThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535) blocks = 65535;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ bf16 ToBf16(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}


// ---- Elementwise ----

__global__ void AddBiasKernel(float* x, int64_t rows, int64_t cols, const float* bias) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += bias[i % cols];
  }
}

__global__ void AddBiasResidualKernel(float* h, const float* y, int64_t rows, int64_t cols,
                                      const float* bias) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    h[i] += y[i] + bias[i % cols];
  }
}

__global__ void BiasGeluBf16Kernel(const float* x, int64_t rows, int64_t cols, const float* bias,
                                   bool tanh_form, bf16* out) {
  const int64_t total = rows * cols;
  // sqrt(2 / pi) and 1 / sqrt(2), as torch's GELU kernels use them.
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i] + bias[i % cols];
    const float g = tanh_form
                        ? 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)))
                        : 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    out[i] = ToBf16(g);
  }
}

// One block per row: mean, then the variance around it (two passes over the row: no
// cancellation from E[x^2] - E[x]^2).
__global__ void LayerNormBf16Kernel(const float* x, int64_t dim, const float* weight,
                                    const float* bias, float eps, bf16* out) {
  const float* xr = x + blockIdx.x * dim;
  bf16* o = out + blockIdx.x * dim;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
  const float mean = BlockSum(s) / static_cast<float>(dim);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = xr[i] - mean;
    ss += d * d;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    o[i] = ToBf16((xr[i] - mean) * inv * weight[i] + bias[i]);
  }
}

__global__ void AddPositionEmbeddingKernel(float* x, int64_t rows, int64_t dim, const float* table,
                                           const int32_t* index, const float* weight) {
  const int64_t total = rows * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / dim, c = i % dim;
    const int32_t* ix = index + n * 4;
    const float* w = weight + n * 4;
    float pe = w[0] * table[int64_t{ix[0]} * dim + c];
    pe += w[1] * table[int64_t{ix[1]} * dim + c];
    pe += w[2] * table[int64_t{ix[2]} * dim + c];
    pe += w[3] * table[int64_t{ix[3]} * dim + c];
    x[i] += pe;
  }
}

// Thread = (row, head, pair i < head_dim / 2), for q and then k. The angle is computed as the
// text RoPE's (RopeSinCos: fp32 exponent, pow and sincos in double, rounded to fp32).
__global__ void VisionRotaryKernel(float* qkv, int64_t rows, int64_t heads, int64_t head_dim,
                                   const int32_t* rows_cols, float theta) {
  const int64_t half = head_dim / 2, quarter = head_dim / 4;
  const int64_t hidden = heads * head_dim;
  const int64_t total = rows * heads * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t head = (idx / half) % heads;
    const int64_t n = idx / (half * heads);
    // Slots [0, quarter) rotate by the patch row, [quarter, half) by its column.
    const int64_t j = i < quarter ? i : i - quarter;
    const int32_t pos = rows_cols[n * 2 + (i < quarter ? 0 : 1)];
    float sn, cs;
    RopeSinCos(theta, j, half, pos, &sn, &cs);
    for (int part = 0; part < 2; ++part) {  // q, then k
      RotatePairBy(qkv + n * 3 * hidden + part * hidden + head * head_dim, i, half, sn, cs);
    }
  }
}

// ---- Attention ----
//
// Block = 64 query rows of one head in one segment (8 warps of 8 rows). Keys and values go
// through shared memory in tiles of 32. Lane j scores key j of the tile against the warp's 8 rows
// (q rows read as broadcast float4s from shared memory; the k rows are padded to an odd number
// of float4s, so the lanes' float4 reads of 8 consecutive keys hit distinct banks). The online
// softmax (fp32 running max and sum per row) rescales the accumulators; the tile's
// probabilities go to shared memory, and lane l accumulates output dims l, l + 32, ... from the
// value tile. Shared memory: (64 + 32) rows x padded head_dim of q and k, 32 x head_dim of v and
// 8 x 8 x 32 probabilities: 46 KiB at head_dim 72 (the released encoder), 74 KiB at 128.

constexpr int kVaWarps = 8;
constexpr int kVaRowsPerWarp = 8;
constexpr int kVaRows = kVaWarps * kVaRowsPerWarp;
constexpr int kVaKeys = 32;
constexpr int64_t kVaMaxHeadDim = 128;

// Float4s per padded q/k row in shared memory: odd, so 8 lanes' float4 reads spread over banks.
__host__ __device__ __forceinline__ int PaddedQuads(int head_dim) {
  const int quads = head_dim / 4;
  return quads + 1 + (quads & 1);
}

size_t VisionAttentionSmem(int head_dim) {
  return sizeof(float4) * (kVaRows + kVaKeys) * PaddedQuads(head_dim) +
         sizeof(float) * (kVaKeys * head_dim + kVaWarps * kVaRowsPerWarp * kVaKeys);
}

// kChunks = ceil(head_dim / 32).
template <int kChunks>
__global__ void __launch_bounds__(kVaWarps * 32)
    VisionAttentionKernel(const float* qkv, int64_t heads, int64_t head_dim,
                          const int32_t* cu_seqlens, float scale, float* out) {
  extern __shared__ float4 smem4[];
  const int hd = static_cast<int>(head_dim);  // <= kVaMaxHeadDim: 32-bit index math below
  const int quads = hd / 4, stride = PaddedQuads(hd);
  float4* q_s = smem4;                                            // [kVaRows][stride]
  float4* k_s = q_s + kVaRows * stride;                           // [kVaKeys][stride]
  float* v_s = reinterpret_cast<float*>(k_s + kVaKeys * stride);  // [kVaKeys][hd]
  float* p_s = v_s + kVaKeys * hd;  // [kVaWarps * kVaRowsPerWarp][kVaKeys]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t head = blockIdx.y;
  const int64_t begin = cu_seqlens[blockIdx.z];
  const int64_t len = cu_seqlens[blockIdx.z + 1] - begin;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kVaRows;
  if (row0 >= len) return;  // the whole block: before any barrier
  const int64_t hidden = heads * head_dim;
  const int64_t row_stride = 3 * hidden;
  const float* base = qkv + begin * row_stride + head * head_dim;

  for (int idx = threadIdx.x; idx < kVaRows * quads; idx += blockDim.x) {
    const int r = idx / quads, d4 = idx % quads;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row0 + r < len) {
      v = *reinterpret_cast<const float4*>(base + (row0 + r) * row_stride + 4 * d4);
    }
    q_s[r * stride + d4] = v;
  }

  float acc[kVaRowsPerWarp][kChunks];
  float m[kVaRowsPerWarp], l[kVaRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kVaRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[r][c] = 0.0f;
  }
  const float4* qw = q_s + warp * kVaRowsPerWarp * stride;
  float* pw = p_s + warp * kVaRowsPerWarp * kVaKeys;

  for (int64_t tile0 = 0; tile0 < len; tile0 += kVaKeys) {
    __syncthreads();  // the previous tile is consumed (and q_s written, the first time)
    for (int idx = threadIdx.x; idx < kVaKeys * quads; idx += blockDim.x) {
      const int j = idx / quads, d4 = idx % quads;
      float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
      if (tile0 + j < len) {
        const float* key = base + (tile0 + j) * row_stride + 4 * d4;
        kv = *reinterpret_cast<const float4*>(key + hidden);
        vv = *reinterpret_cast<const float4*>(key + 2 * hidden);
      }
      k_s[j * stride + d4] = kv;
      *reinterpret_cast<float4*>(v_s + j * hd + 4 * d4) = vv;
    }
    __syncthreads();

    // Scores of key tile0 + lane.
    float s[kVaRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kVaRowsPerWarp; ++r) s[r] = 0.0f;
    const float4* kr = k_s + lane * stride;
    for (int d4 = 0; d4 < quads; ++d4) {
      const float4 k4 = kr[d4];
#pragma unroll
      for (int r = 0; r < kVaRowsPerWarp; ++r) {
        const float4 q4 = qw[r * stride + d4];
        s[r] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
      }
    }
    const bool valid = tile0 + lane < len;
#pragma unroll
    for (int r = 0; r < kVaRowsPerWarp; ++r) {
      const float sc = valid ? s[r] * scale : -INFINITY;
      const float tile_max = WarpMax(sc);  // finite: key tile0 < len is valid
      const float m_new = fmaxf(m[r], tile_max);
      const float alpha = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
      const float p = valid ? expf(sc - m_new) : 0.0f;
      l[r] = l[r] * alpha + WarpSum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[r][c] *= alpha;
      pw[r * kVaKeys + lane] = p;
    }
    __syncwarp();

    const int tile_keys = static_cast<int>(len - tile0 < kVaKeys ? len - tile0 : kVaKeys);
    for (int j = 0; j < tile_keys; ++j) {
      float vv[kChunks];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = lane + 32 * c;
        vv[c] = d < hd ? v_s[j * hd + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kVaRowsPerWarp; ++r) {
        const float pj = pw[r * kVaKeys + j];
#pragma unroll
        for (int c = 0; c < kChunks; ++c) acc[r][c] += pj * vv[c];
      }
    }
    __syncwarp();  // pw is rewritten next tile
  }

#pragma unroll
  for (int r = 0; r < kVaRowsPerWarp; ++r) {
    const int64_t row = row0 + warp * kVaRowsPerWarp + r;
    if (row >= len) continue;
    float* o = out + (begin + row) * hidden + head * head_dim;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) o[d] = acc[r][c] * inv;
    }
  }
}

template <int kChunks>
cudaError_t LaunchVisionAttention(const float* qkv, int64_t heads, int64_t head_dim,
                                  const int32_t* cu_seqlens, dim3 grid, float scale, float* out,
                                  const char* name, cudaStream_t stream) {
  const size_t smem = VisionAttentionSmem(static_cast<int>(head_dim));
  const dim3 block(kVaWarps * 32);
  if (smem > 48 * 1024) {
    // Above the default 48 KiB a kernel must opt in (a host-side attribute, set each time: cheap).
    const cudaError_t err =
        cudaFuncSetAttribute(VisionAttentionKernel<kChunks>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return RecordLaunchError(err, name, grid, block, smem);
  }
  VisionAttentionKernel<kChunks>
      <<<grid, block, smem, stream>>>(qkv, heads, head_dim, cu_seqlens, scale, out);
  return CheckLaunch(name, grid, block, smem);
}

}  // namespace

cudaError_t AddBias(float* x, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid(VisionBlocks(rows * cols));
  AddBiasKernel<<<grid, kVisionThreads, 0, stream>>>(x, rows, cols, bias);
  return CheckLaunch("AddBiasKernel", grid, kVisionThreads, 0);
}

cudaError_t AddBiasResidual(float* h, const float* y, int64_t rows, int64_t cols, const float* bias,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid(VisionBlocks(rows * cols));
  AddBiasResidualKernel<<<grid, kVisionThreads, 0, stream>>>(h, y, rows, cols, bias);
  return CheckLaunch("AddBiasResidualKernel", grid, kVisionThreads, 0);
}

cudaError_t BiasGeluBf16(const float* x, int64_t rows, int64_t cols, const float* bias,
                         bool tanh_form, bf16* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid(VisionBlocks(rows * cols));
  BiasGeluBf16Kernel<<<grid, kVisionThreads, 0, stream>>>(x, rows, cols, bias, tanh_form, out);
  return CheckLaunch("BiasGeluBf16Kernel", grid, kVisionThreads, 0);
}

cudaError_t LayerNormBf16(const float* x, int64_t rows, int64_t dim, const float* weight,
                          const float* bias, float eps, bf16* out, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(rows));
  LayerNormBf16Kernel<<<grid, kVisionThreads, 0, stream>>>(x, dim, weight, bias, eps, out);
  return CheckLaunch("LayerNormBf16Kernel", grid, kVisionThreads, 0);
}

cudaError_t AddPositionEmbedding(float* x, int64_t rows, int64_t dim, const float* table,
                                 const int32_t* index, const float* weight, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  const dim3 grid(VisionBlocks(rows * dim));
  AddPositionEmbeddingKernel<<<grid, kVisionThreads, 0, stream>>>(x, rows, dim, table, index,
                                                                  weight);
  return CheckLaunch("AddPositionEmbeddingKernel", grid, kVisionThreads, 0);
}

cudaError_t VisionRotary(float* qkv, int64_t rows, int64_t heads, int64_t head_dim,
                         const int32_t* rows_cols, float theta, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 4 != 0 || heads <= 0) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  const dim3 grid(VisionBlocks(rows * heads * (head_dim / 2)));
  VisionRotaryKernel<<<grid, kVisionThreads, 0, stream>>>(qkv, rows, heads, head_dim, rows_cols,
                                                          theta);
  return CheckLaunch("VisionRotaryKernel", grid, kVisionThreads, 0);
}

cudaError_t VisionAttention(const float* qkv, int64_t heads, int64_t head_dim,
                            const int32_t* cu_seqlens, int64_t segments, int64_t max_segment,
                            float scale, float* out, cudaStream_t stream) {
  if (segments <= 0 || max_segment <= 0) return cudaSuccess;
  if (heads <= 0 || heads > 65535 || segments > 65535 || head_dim <= 0 || head_dim % 4 != 0 ||
      head_dim > kVaMaxHeadDim) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_blocks = (max_segment + kVaRows - 1) / kVaRows;
  if (row_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(heads),
                  static_cast<unsigned>(segments));
  if (head_dim <= 32) {
    return LaunchVisionAttention<1>(qkv, heads, head_dim, cu_seqlens, grid, scale, out,
                                    "VisionAttentionKernel<1>", stream);
  }
  if (head_dim <= 64) {
    return LaunchVisionAttention<2>(qkv, heads, head_dim, cu_seqlens, grid, scale, out,
                                    "VisionAttentionKernel<2>", stream);
  }
  if (head_dim <= 96) {
    return LaunchVisionAttention<3>(qkv, heads, head_dim, cu_seqlens, grid, scale, out,
                                    "VisionAttentionKernel<3>", stream);
  }
  return LaunchVisionAttention<4>(qkv, heads, head_dim, cu_seqlens, grid, scale, out,
                                  "VisionAttentionKernel<4>", stream);
}

}  // namespace tandem::workers::cuda
