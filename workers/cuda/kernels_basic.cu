// Basic kernels of the CUDA engine: embedding, casts, norms, RoPE, elementwise ops, causal conv,
// paged KV cache, attention and sampling. Correct first, simply parallel: no tensor cores, fp32
// math throughout. See kernels.h for the contracts.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "workers/cuda/block_reduce.cuh"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/launch_check.h"
#include "workers/cuda/rope.cuh"

namespace tandem::workers::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Bf16ToFloat(bf16 v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

__device__ __forceinline__ float DeviceSilu(float x) { return x / (1.0f + expf(-x)); }

// Grid for a flat loop over `count` elements with a grid-stride loop.
unsigned FlatBlocks(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

// Launches `kernel`, a grid-stride loop over `count` elements, on FlatBlocks(count) blocks of
// kThreads (nothing when count is 0); `name` names it in a failure.
template <typename... Params, typename... Args>
cudaError_t LaunchFlat(void (*kernel)(Params...), const char* name, int64_t count,
                       cudaStream_t stream, Args... args) {
  if (count == 0) return cudaSuccess;
  const dim3 grid(FlatBlocks(count));
  kernel<<<grid, kThreads, 0, stream>>>(args...);
  return CheckLaunch(name, grid, kThreads, 0);
}

// ---- Embedding, casts, elementwise ----

__global__ void EmbeddingGatherKernel(const bf16* table, const int32_t* ids, int64_t dim,
                                      float* out) {
  const int64_t row = blockIdx.x;
  const bf16* src = table + static_cast<int64_t>(ids[row]) * dim;
  float* dst = out + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = Bf16ToFloat(src[i]);
}

__global__ void CastToBf16Kernel(const float* in, int64_t count, bf16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void SiluGateKernel(const float* in, int64_t rows, int64_t cols, float* out) {
  const int64_t count = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const float* row = in + r * 2 * cols;
    out[i] = DeviceSilu(row[c]) * row[c + cols];
  }
}

__global__ void Relu2Kernel(const float* in, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float r = fmaxf(in[i], 0.0f);
    out[i] = r * r;
  }
}

// ---- Norms: one block per row (or per row group) ----

__global__ void RmsNormKernel(const float* x, int64_t dim, const bf16* weight, float eps,
                              bool one_plus_weight, float* out) {
  const float* xr = x + blockIdx.x * dim;
  float* o = out + blockIdx.x * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float w = 1.0f;
    if (weight != nullptr)
      w = one_plus_weight ? 1.0f + Bf16ToFloat(weight[i]) : Bf16ToFloat(weight[i]);
    o[i] = xr[i] * inv * w;
  }
}

__global__ void GatedRmsNormKernel(const float* x, const float* z, int64_t dim, const bf16* weight,
                                   float eps, float* out) {
  const int64_t base = blockIdx.x * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += x[base + i] * x[base + i];
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float w = weight == nullptr ? 1.0f : Bf16ToFloat(weight[i]);
    out[base + i] = x[base + i] * inv * w * DeviceSilu(z[base + i]);
  }
}

// Block = one (row, group); y = x * silu(z) is recomputed in the second pass.
__global__ void GroupedGatedRmsNormKernel(const float* x, const float* z, int64_t dim,
                                          int64_t groups, const bf16* weight, float eps,
                                          float* out) {
  const int64_t row = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t group = dim / groups;
  const int64_t base = row * dim + g * group;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float y = x[base + i] * DeviceSilu(z[base + i]);
    ss += y * y;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(group) + eps);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float y = x[base + i] * DeviceSilu(z[base + i]);
    const float w = weight == nullptr ? 1.0f : Bf16ToFloat(weight[g * group + i]);
    out[base + i] = y * inv * w;
  }
}

// ---- RoPE: one thread per (token, head, rotary pair) ----

// Rotates pair (i, i + half) of the head at v by position * inv_freq[i] (rope.cuh). Shared by
// the 1-D and the multimodal kernel, so equal positions give equal bits.
__device__ __forceinline__ void RotatePair(float* v, int64_t i, int64_t half, int64_t rotary_dim,
                                           float theta, int32_t position) {
  float sn, cs;
  RopeSinCos(theta, i, rotary_dim, position, &sn, &cs);
  RotatePairBy(v, i, half, sn, cs);
}

// The RoPE kernels' thread index idx = (token * heads + head) * half + rotary pair i.
struct RotaryIndex {
  int64_t i;   // the rotary pair
  int64_t th;  // token * heads + head
  int64_t t;   // the token
};

__device__ __forceinline__ RotaryIndex DecodeRotaryIndex(int64_t idx, int64_t half, int64_t heads) {
  const int64_t th = idx / half;
  return {idx % half, th, th / heads};
}

__global__ void RotaryKernel(float* x, const int32_t* positions, int64_t tokens, int64_t heads,
                             int64_t head_dim, int64_t rotary_dim, float theta) {
  const int64_t half = rotary_dim / 2;
  const int64_t count = tokens * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RotaryIndex r = DecodeRotaryIndex(idx, half, heads);
    RotatePair(x + r.th * head_dim, r.i, half, rotary_dim, theta, positions[r.t]);
  }
}

// Slot i reads the t row of positions, or h / w by the interleaved mrope_section rule.
__global__ void MropeRotaryKernel(float* x, const int32_t* positions, int64_t axis_stride,
                                  int64_t tokens, int64_t heads, int64_t head_dim,
                                  int64_t rotary_dim, float theta, int64_t section_h,
                                  int64_t section_w) {
  const int64_t half = rotary_dim / 2;
  const int64_t count = tokens * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RotaryIndex r = DecodeRotaryIndex(idx, half, heads);
    int64_t axis = 0;
    if (r.i % 3 == 1 && r.i < 3 * section_h) {
      axis = 1;
    } else if (r.i % 3 == 2 && r.i < 3 * section_w) {
      axis = 2;
    }
    RotatePair(x + r.th * head_dim, r.i, half, rotary_dim, theta,
               positions[axis * axis_stride + r.t]);
  }
}

// ---- Causal depthwise conv1d ----

constexpr int64_t kConvChunk = 64;  // tokens per thread; must be >= kernel - 1
constexpr int64_t kMaxConvKernel = 64;

// `out` must not alias `x` (the state update re-reads x after other threads wrote out).
// Thread = (channel, chunk of kConvChunk tokens). Input at time i < 0 comes from the carried
// state (state[c][K-1+i]). Only chunk 0 reads the old state (chunks >= 1 start past K-1), and
// the same thread writes the new state afterwards, so there is no race.
__global__ void CausalConv1dKernel(const float* x, int64_t tokens, int64_t channels, int64_t kernel,
                                   const bf16* weight, const bf16* bias, float* state, bool silu,
                                   float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const int64_t km1 = kernel - 1;
  float* st = state + c * km1;
  const bf16* w = weight + c * kernel;
  const float b = bias == nullptr ? 0.0f : Bf16ToFloat(bias[c]);
  const int64_t t0 = blockIdx.y * kConvChunk;
  const int64_t t1 = t0 + kConvChunk < tokens ? t0 + kConvChunk : tokens;
  for (int64_t t = t0; t < t1; ++t) {
    float acc = b;
    for (int64_t j = 0; j < kernel; ++j) {
      const int64_t i = t - km1 + j;
      const float in = i < 0 ? st[km1 + i] : x[i * channels + c];
      acc += Bf16ToFloat(w[j]) * in;
    }
    out[t * channels + c] = silu ? DeviceSilu(acc) : acc;
  }
  if (blockIdx.y == 0) {
    // New window: inputs tokens-K+1 .. tokens-1. In place: entry j reads old entry tokens+j > j.
    for (int64_t j = 0; j < km1; ++j) {
      const int64_t i = tokens - km1 + j;
      st[j] = i < 0 ? st[km1 + i] : x[i * channels + c];
    }
  }
}

__global__ void CausalConv1dStepKernel(const float* x, int64_t batch, int64_t channels,
                                       int64_t kernel, const bf16* weight, const bf16* bias,
                                       float* const* states, bool silu, float* out) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= batch * channels) return;
  const int64_t bi = idx / channels, c = idx % channels;
  const int64_t km1 = kernel - 1;
  float* st = states[bi] + c * km1;
  const bf16* w = weight + c * kernel;
  const float xv = x[idx];
  float acc = bias == nullptr ? 0.0f : Bf16ToFloat(bias[c]);
  for (int64_t j = 0; j < km1; ++j) acc += Bf16ToFloat(w[j]) * st[j];
  acc += Bf16ToFloat(w[km1]) * xv;
  out[idx] = silu ? DeviceSilu(acc) : acc;
  for (int64_t j = 0; j + 1 < km1; ++j) st[j] = st[j + 1];
  if (km1 > 0) st[km1 - 1] = xv;
}

// ---- Paged KV cache ----

__device__ __forceinline__ int64_t KvOffset(const int32_t* block_table, int64_t pos,
                                            int64_t kv_heads, int64_t head_dim, int64_t head) {
  const int64_t block = block_table[pos / kKvBlockTokens];
  return block * 2 * kKvBlockTokens * kv_heads * head_dim +
         ((pos % kKvBlockTokens) * kv_heads + head) * head_dim;
}

__global__ void KvCacheWriteKernel(const float* k, const float* v, int64_t tokens, int64_t start,
                                   int64_t kv_heads, int64_t head_dim, const int32_t* block_table,
                                   float* kv_blocks) {
  const int64_t count = tokens * kv_heads * head_dim;
  const int64_t v_off = kKvBlockTokens * kv_heads * head_dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = idx % head_dim;
    const int64_t h = (idx / head_dim) % kv_heads;
    const int64_t t = idx / (head_dim * kv_heads);
    const int64_t off = KvOffset(block_table, start + t, kv_heads, head_dim, h) + d;
    kv_blocks[off] = k[idx];
    kv_blocks[off + v_off] = v[idx];
  }
}

// ---- Attention ----
//
// One kernel serves prefill and decode. A block handles kAttnRows query rows that share one KV
// head: rows are the flattened (token, head-in-group) pairs of that KV head, so GQA heads reuse
// the keys the block loads. Each of the 4 warps owns 4 rows. Keys go through shared memory in
// tiles of 32: lane j scores key j of the tile against the warp's rows (q rows broadcast from
// shared memory), then the online softmax (fp32, running max and sum per row) rescales the
// accumulators, and lane l accumulates output dims l, l+32, ... reading V from global memory
// (coalesced; the warps share it through L1). Shared memory: q [16][D] + k [32][D] floats,
// 48 KiB at D = 256.

constexpr int kAttnWarps = 4;
constexpr int kAttnRowsPerWarp = 4;
constexpr int kAttnRows = kAttnWarps * kAttnRowsPerWarp;
constexpr int kAttnTile = 32;
constexpr int64_t kMaxHeadDim = 256;

// kChunks = ceil(head_dim / 32) rounded up to the instantiation (2, 4 or 8).
// Decode expects context_lens[b] >= 1; a sequence with 0 leaves its output rows unwritten.
// Decode: context_lens != null, sequence b = blockIdx.z, tokens = 1 and start = len - 1.
// Split decode (splits > 1, `partial` set): blockIdx.x = row block * splits + split, and the
// block reads only its split's share of the keys, writing its unnormalised output and its
// softmax max and sum to `partial` for AttentionCombineKernel (layout there) instead of `out`.
template <int kChunks>
__global__ void __launch_bounds__(kAttnWarps * 32)
    AttentionKernel(const float* q, int64_t tokens, int64_t start, int64_t heads, int64_t kv_heads,
                    int64_t head_dim, float scale, const int32_t* context_lens,
                    const int32_t* block_tables, int64_t max_blocks, const float* kv_blocks,
                    float* out, int splits, float* partial) {
  extern __shared__ float smem[];
  float* q_s = smem;                         // [kAttnRows][head_dim]
  float* k_s = smem + kAttnRows * head_dim;  // [kAttnTile][head_dim]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t group = heads / kv_heads;
  const int64_t kvh = blockIdx.y;
  const int64_t seq = blockIdx.z;
  const int32_t* block_table = block_tables;
  if (context_lens != nullptr) {
    start = context_lens[seq] - 1;
    block_table = block_tables + seq * max_blocks;
    q += seq * heads * head_dim;
    out += seq * heads * head_dim;
  }
  const int64_t total_rows = tokens * group;
  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(splits));
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(splits)) * kAttnRows;
  const int64_t rows_here = total_rows - row0 < kAttnRows ? total_rows - row0 : kAttnRows;
  // Keys the block needs: up to the causal limit of its last row; a split reads its share, in
  // whole tiles (the last splits of a short context read none).
  const int64_t last_token = (row0 + rows_here - 1) / group;
  const int64_t block_len = start + last_token + 1;
  int64_t key_begin = 0, key_end = block_len;
  if (splits > 1) {
    const int64_t share =
        ((block_len + splits - 1) / splits + kAttnTile - 1) / kAttnTile * kAttnTile;
    key_begin = split * share < block_len ? split * share : block_len;
    key_end = key_begin + share < block_len ? key_begin + share : block_len;
  }

  // Load the block's q rows.
  const int hd = static_cast<int>(head_dim);  // <= kMaxHeadDim: 32-bit index math below
  for (int idx = threadIdx.x; idx < kAttnRows * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx % hd;
    float v = 0.0f;
    if (r < rows_here) {
      const int64_t row = row0 + r;
      const int64_t t = row / group, h = kvh * group + row % group;
      v = q[(t * heads + h) * head_dim + d];
    }
    q_s[idx] = v;
  }

  float acc[kAttnRowsPerWarp][kChunks];
  float m[kAttnRowsPerWarp], l[kAttnRowsPerWarp];
  int64_t len[kAttnRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kAttnRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    const int64_t local = warp * kAttnRowsPerWarp + r;
    len[r] = local < rows_here ? start + (row0 + local) / group + 1 : 0;  // 0: no row
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[r][c] = 0.0f;
  }
  const int64_t v_off = kKvBlockTokens * kv_heads * head_dim;

  for (int64_t tile0 = key_begin; tile0 < key_end; tile0 += kAttnTile) {
    __syncthreads();  // previous tile fully consumed (and q_s written on the first pass)
    for (int idx = threadIdx.x; idx < kAttnTile * hd; idx += blockDim.x) {
      const int j = idx / hd, d = idx % hd;
      const int64_t key = tile0 + j;
      k_s[idx] =
          key < key_end ? kv_blocks[KvOffset(block_table, key, kv_heads, head_dim, kvh) + d] : 0.0f;
    }
    __syncthreads();

    // Scores: lane = key of the tile. Lanes walk d starting at their own lane so that the k_s
    // reads (stride head_dim) hit distinct banks when head_dim is a multiple of 32.
    const int64_t key = tile0 + lane;
    float s[kAttnRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kAttnRowsPerWarp; ++r) s[r] = 0.0f;
    {
      const float* kr = k_s + lane * hd;
      const float* qw = q_s + warp * kAttnRowsPerWarp * hd;
      int d = lane % hd;
      for (int n = 0; n < hd; ++n) {
        const float kv = kr[d];
#pragma unroll
        for (int r = 0; r < kAttnRowsPerWarp; ++r) s[r] += qw[r * hd + d] * kv;
        if (++d == hd) d = 0;
      }
    }
    float p[kAttnRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kAttnRowsPerWarp; ++r) {
      const int64_t visible = len[r] < key_end ? len[r] : key_end;  // keys [.., visible) count
      if (tile0 >= visible) {  // warp-uniform: no visible key in this tile (or no row)
        p[r] = 0.0f;
        continue;
      }
      const float sc = key < visible ? s[r] * scale : -INFINITY;
      const float tile_max = WarpMax(sc);  // finite: key tile0 is visible
      const float m_new = fmaxf(m[r], tile_max);
      const float alpha = expf(m[r] - m_new);  // m[r] = -inf on the first tile: 0
      p[r] = key < visible ? expf(sc - m_new) : 0.0f;
      l[r] = l[r] * alpha + WarpSum(p[r]);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[r][c] *= alpha;
    }
    // P V: lane accumulates dims lane + 32 c.
    const int64_t tile_keys = key_end - tile0 < kAttnTile ? key_end - tile0 : kAttnTile;
    for (int j = 0; j < tile_keys; ++j) {
      const float* vr =
          kv_blocks + KvOffset(block_table, tile0 + j, kv_heads, head_dim, kvh) + v_off;
      float vv[kChunks];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int64_t d = lane + 32 * c;
        vv[c] = d < head_dim ? vr[d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kAttnRowsPerWarp; ++r) {
        const float pj = __shfl_sync(kFullWarp, p[r], j);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) acc[r][c] += pj * vv[c];
      }
    }
  }

  // Partials: [batch][heads][splits][head_dim] outputs, then [batch][heads][splits][2] (max, sum).
  const int64_t ml_base = static_cast<int64_t>(gridDim.z) * heads * splits * head_dim;
#pragma unroll
  for (int r = 0; r < kAttnRowsPerWarp; ++r) {
    if (len[r] == 0) continue;
    const int64_t row = row0 + warp * kAttnRowsPerWarp + r;
    const int64_t t = row / group, h = kvh * group + row % group;
    if (partial != nullptr) {
      const int64_t slot = (seq * heads + h) * splits + split;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int64_t d = lane + 32 * c;
        if (d < head_dim) partial[slot * head_dim + d] = acc[r][c];
      }
      if (lane == 0) {
        partial[ml_base + 2 * slot] = m[r];  // -inf and 0 when the split read no key
        partial[ml_base + 2 * slot + 1] = l[r];
      }
      continue;
    }
    float* o = out + (t * heads + h) * head_dim;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t d = lane + 32 * c;
      if (d < head_dim) o[d] = acc[r][c] * inv;
    }
  }
}

// Split decode's second pass: one block per (head, sequence) merges the splits' partials (the
// log-sum-exp of their maxima and sums) into out [batch][heads][head_dim].
__global__ void AttentionCombineKernel(const float* partial, int64_t heads, int64_t head_dim,
                                       int splits, const int32_t* context_lens, float* out) {
  const int64_t h = blockIdx.x, seq = blockIdx.y;
  if (context_lens[seq] < 1) return;  // as the one-pass kernel: rows left unwritten
  const int64_t slot0 = (seq * heads + h) * splits;
  const float* ml =
      partial + static_cast<int64_t>(gridDim.y) * heads * splits * head_dim + 2 * slot0;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) {
    if (ml[2 * s + 1] > 0.0f) mx = fmaxf(mx, ml[2 * s]);
  }
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    if (ml[2 * s + 1] > 0.0f) sum += ml[2 * s + 1] * expf(ml[2 * s] - mx);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < splits; ++s) {
      if (ml[2 * s + 1] > 0.0f) o += partial[(slot0 + s) * head_dim + d] * expf(ml[2 * s] - mx);
    }
    out[(seq * heads + h) * head_dim + d] = o * inv;
  }
}

constexpr int64_t kMaxAttentionSplits = 64;

// The device's multiprocessors (1 when it cannot be read), read once: a worker owns one device.
int64_t DeviceMultiprocessors() {
  static const int64_t count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        n <= 0) {
      cudaGetLastError();  // not sticky, but the next launch check would read it
      n = 1;
    }
    return static_cast<int64_t>(n);
  }();
  return count;
}

}  // namespace

int64_t AttentionDecodeSplits(int64_t batch, int64_t heads, int64_t kv_heads) {
  if (batch <= 0 || kv_heads <= 0 || heads <= 0 || heads % kv_heads != 0) return 1;
  const int64_t row_blocks = (heads / kv_heads + kAttnRows - 1) / kAttnRows;
  const int64_t blocks = batch * kv_heads * row_blocks;
  const int64_t wanted = 2 * DeviceMultiprocessors();
  const int64_t splits = (wanted + blocks - 1) / blocks;
  return splits < 1 ? 1 : (splits > kMaxAttentionSplits ? kMaxAttentionSplits : splits);
}

int64_t AttentionDecodeWorkspaceFloats(int64_t max_batch, int64_t heads, int64_t kv_heads,
                                       int64_t head_dim) {
  int64_t most = 0;
  for (int64_t b = 1; b <= max_batch; ++b) {
    const int64_t splits = AttentionDecodeSplits(b, heads, kv_heads);
    if (splits > 1 && b * heads * splits * (head_dim + 2) > most) {
      most = b * heads * splits * (head_dim + 2);
    }
  }
  return most;
}

namespace {

cudaError_t LaunchAttention(const float* q, int64_t batch, int64_t tokens, int64_t start,
                            int64_t heads, int64_t kv_heads, int64_t head_dim, float scale,
                            const int32_t* context_lens, const int32_t* block_tables,
                            int64_t max_blocks, const float* kv_blocks, float* out,
                            float* workspace, cudaStream_t stream) {
  if (batch == 0 || tokens == 0) return cudaSuccess;
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 ||
      head_dim > kMaxHeadDim || batch > 65535 || kv_heads > 65535) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = tokens * (heads / kv_heads);
  const int64_t row_blocks = (rows + kAttnRows - 1) / kAttnRows;
  // Decode with a workspace splits each sequence's keys over enough blocks to fill the device:
  // one block per KV head otherwise walks a 16K context alone.
  const int splits = static_cast<int>(context_lens != nullptr && workspace != nullptr
                                          ? AttentionDecodeSplits(batch, heads, kv_heads)
                                          : 1);
  float* partial = splits > 1 ? workspace : nullptr;
  if (row_blocks * splits > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_blocks * splits), static_cast<unsigned>(kv_heads),
                  static_cast<unsigned>(batch));
  const size_t smem = sizeof(float) * (kAttnRows + kAttnTile) * head_dim;
  const dim3 block(kAttnWarps * 32);
  const char* name = nullptr;
  if (head_dim <= 64) {
    name = "AttentionKernel<2>";
    AttentionKernel<2><<<grid, block, smem, stream>>>(q, tokens, start, heads, kv_heads, head_dim,
                                                      scale, context_lens, block_tables, max_blocks,
                                                      kv_blocks, out, splits, partial);
  } else if (head_dim <= 128) {
    name = "AttentionKernel<4>";
    AttentionKernel<4><<<grid, block, smem, stream>>>(q, tokens, start, heads, kv_heads, head_dim,
                                                      scale, context_lens, block_tables, max_blocks,
                                                      kv_blocks, out, splits, partial);
  } else {
    name = "AttentionKernel<8>";
    AttentionKernel<8><<<grid, block, smem, stream>>>(q, tokens, start, heads, kv_heads, head_dim,
                                                      scale, context_lens, block_tables, max_blocks,
                                                      kv_blocks, out, splits, partial);
  }
  if (const cudaError_t e = CheckLaunch(name, grid, block, smem); e != cudaSuccess || splits == 1) {
    return e;
  }
  const dim3 combine_grid(static_cast<unsigned>(heads), static_cast<unsigned>(batch));
  AttentionCombineKernel<<<combine_grid, 128, 0, stream>>>(partial, heads, head_dim, splits,
                                                           context_lens, out);
  return CheckLaunch("AttentionCombineKernel", combine_grid, dim3(128), 0);
}

// ---- Sampling ----
//
// One block per row. Every token gets a unique 64-bit key, (orderable logit bits << 32) |
// ~index, so that key order is the reference sampler's order (logit descending, then index
// ascending). Probabilities become fixed-point integers (exp((l - max) / T) * 2^40, at most 2^40
// each), so every sum is exact and the result does not depend on the order of atomics. Top-k,
// top-p and the draw are all the same question, answered by an MSB-first radix descent over the
// keys (8 passes of 8 bits): which key is the first, in descending order, at which the
// cumulative mass (a count for top-k) reaches a target?

constexpr int kSampleThreads = 512;
constexpr double kMassScale = 1099511627776.0;  // 2^40

__device__ __forceinline__ uint64_t SampleKey(float logit, int64_t i) {
  uint32_t u = __float_as_uint(logit);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

__device__ __forceinline__ uint64_t Mass(float logit, float max_logit, float temperature) {
  const float e = expf((logit - max_logit) / temperature);
  return static_cast<uint64_t>(static_cast<double>(e) * kMassScale);
}

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Sum of the masses (counts when `count`) of the keys >= lo. Every thread gets the result.
__device__ uint64_t MassAbove(const float* row, int64_t vocab, uint64_t lo, bool count,
                              float max_logit, float temperature, unsigned long long* cell) {
  if (threadIdx.x == 0) *cell = 0;
  __syncthreads();
  unsigned long long local = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (SampleKey(row[i], i) >= lo) local += count ? 1 : Mass(row[i], max_logit, temperature);
  }
  atomicAdd(cell, local);
  __syncthreads();
  const uint64_t r = *cell;
  __syncthreads();
  return r;
}

// The key K among those >= lo with mass(keys > K) < target <= mass(keys >= K). target >= 1 and
// at most the total mass of the keys >= lo.
__device__ uint64_t SelectKey(const float* row, int64_t vocab, uint64_t lo, bool count,
                              float max_logit, float temperature, uint64_t target,
                              unsigned long long* hist, uint64_t* shared_prefix,
                              uint64_t* shared_target) {
  uint64_t prefix = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    // Keys whose bits above `shift` equal the prefix found so far.
    // Each thread accumulates runs of the same digit before one shared atomic: most logits
    // share their top key byte, and integer atomics keep the sums exact in any order.
    const uint64_t high_mask = shift == 56 ? 0 : (~0ull << (shift + 8));
    int run_digit = -1;
    unsigned long long run_mass = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint64_t key = SampleKey(row[i], i);
      if (key < lo || (key & high_mask) != prefix) continue;
      const uint64_t mass = count ? 1 : Mass(row[i], max_logit, temperature);
      const int digit = static_cast<int>((key >> shift) & 0xff);
      if (digit != run_digit) {
        if (run_mass != 0) atomicAdd(&hist[run_digit], run_mass);
        run_digit = digit;
        run_mass = 0;
      }
      run_mass += mass;
    }
    if (run_mass != 0) atomicAdd(&hist[run_digit], run_mass);
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t cum = 0;
      int digit = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= target) {
          digit = b;
          break;
        }
        cum += hist[b];
      }
      *shared_prefix = prefix | (static_cast<uint64_t>(digit) << shift);
      *shared_target = target - cum;
    }
    __syncthreads();
    prefix = *shared_prefix;
    target = *shared_target;
    __syncthreads();
  }
  return prefix;
}

__global__ void __launch_bounds__(kSampleThreads)
    SampleKernel(const float* logits, int64_t vocab, const float* temperature, const int32_t* top_k,
                 const float* top_p, const uint64_t* seeds, const int64_t* steps, int32_t* out) {
  __shared__ unsigned long long hist[256];
  __shared__ unsigned long long cell;
  __shared__ uint64_t shared_prefix, shared_target;
  const int64_t b = blockIdx.x;
  const float* row = logits + b * vocab;

  // The largest key: the argmax (lowest index among equal logits).
  if (threadIdx.x == 0) cell = 0;
  __syncthreads();
  unsigned long long best = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const unsigned long long key = SampleKey(row[i], i);
    best = key > best ? key : best;
  }
  atomicMax(&cell, best);
  __syncthreads();
  const uint64_t max_key = cell;
  __syncthreads();
  const int32_t argmax = static_cast<int32_t>(~static_cast<uint32_t>(max_key));

  const float temp = temperature[b];
  const int32_t k = top_k[b];
  if (!(temp > 0.0f) || k == 1) {
    if (threadIdx.x == 0) out[b] = argmax;
    return;
  }
  const float max_logit = row[argmax];

  // Top-k: keys >= the k-th largest.
  uint64_t lo = 0;
  if (k > 0 && k < vocab) {
    lo = SelectKey(row, vocab, 0, /*count=*/true, max_logit, temp, static_cast<uint64_t>(k), hist,
                   &shared_prefix, &shared_target);
  }
  uint64_t total = MassAbove(row, vocab, lo, false, max_logit, temp, &cell);
  // Top-p: the shortest prefix whose mass reaches top_p of the top-k mass.
  const float p = top_p[b];
  if (p < 1.0f) {
    double want = ceil(static_cast<double>(p) * static_cast<double>(total));
    uint64_t target = want < 1.0 ? 1 : static_cast<uint64_t>(want);
    if (target > total) target = total;
    lo = SelectKey(row, vocab, lo, false, max_logit, temp, target, hist, &shared_prefix,
                   &shared_target);
    total = MassAbove(row, vocab, lo, false, max_logit, temp, &cell);
  }
  // The draw: r uniform in [0, total), the token where the cumulative mass first exceeds r.
  const uint64_t bits = SplitMix64(seeds[b] ^ SplitMix64(static_cast<uint64_t>(steps[b])));
  const double u = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  uint64_t r = static_cast<uint64_t>(u * static_cast<double>(total));
  if (r >= total) r = total - 1;
  const uint64_t key = SelectKey(row, vocab, lo, false, max_logit, temp, r + 1, hist,
                                 &shared_prefix, &shared_target);
  if (threadIdx.x == 0) out[b] = static_cast<int32_t>(~static_cast<uint32_t>(key));
}

}  // namespace

cudaError_t EmbeddingGather(const bf16* table, const int32_t* ids, int64_t n, int64_t dim,
                            float* out, cudaStream_t stream) {
  if (n == 0 || dim == 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n));
  EmbeddingGatherKernel<<<grid, kThreads, 0, stream>>>(table, ids, dim, out);
  return CheckLaunch("EmbeddingGatherKernel", grid, kThreads, 0);
}

cudaError_t CastToBf16(const float* in, int64_t count, bf16* out, cudaStream_t stream) {
  return LaunchFlat(CastToBf16Kernel, "CastToBf16Kernel", count, stream, in, count, out);
}

cudaError_t RmsNorm(const float* x, int64_t rows, int64_t dim, const bf16* weight, float eps,
                    bool one_plus_weight, float* out, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(rows));
  RmsNormKernel<<<grid, kThreads, 0, stream>>>(x, dim, weight, eps, one_plus_weight, out);
  return CheckLaunch("RmsNormKernel", grid, kThreads, 0);
}

cudaError_t GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                         const bf16* weight, float eps, float* out, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  // Rows are short (a head, 128) in the models: 128 threads.
  const dim3 grid(static_cast<unsigned>(rows));
  GatedRmsNormKernel<<<grid, 128, 0, stream>>>(x, z, dim, weight, eps, out);
  return CheckLaunch("GatedRmsNormKernel", grid, 128, 0);
}

cudaError_t GroupedGatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                                int64_t groups, const bf16* weight, float eps, float* out,
                                cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if (groups <= 0 || dim % groups != 0 || rows * groups > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(rows * groups));
  GroupedGatedRmsNormKernel<<<grid, kThreads, 0, stream>>>(x, z, dim, groups, weight, eps, out);
  return CheckLaunch("GroupedGatedRmsNormKernel", grid, kThreads, 0);
}

cudaError_t RotaryEmbedding(float* x, const int32_t* positions, int64_t tokens, int64_t heads,
                            int64_t head_dim, int64_t rotary_dim, float theta,
                            cudaStream_t stream) {
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim || rotary_dim < 0) return cudaErrorInvalidValue;
  return LaunchFlat(RotaryKernel, "RotaryKernel", tokens * heads * (rotary_dim / 2), stream, x,
                    positions, tokens, heads, head_dim, rotary_dim, theta);
}

cudaError_t MropeRotaryEmbedding(float* x, const int32_t* positions, int64_t axis_stride,
                                 int64_t tokens, int64_t heads, int64_t head_dim,
                                 int64_t rotary_dim, float theta, int32_t section_h,
                                 int32_t section_w, cudaStream_t stream) {
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim || rotary_dim < 0 || axis_stride < tokens ||
      section_h < 0 || section_w < 0) {
    return cudaErrorInvalidValue;
  }
  return LaunchFlat(MropeRotaryKernel, "MropeRotaryKernel", tokens * heads * (rotary_dim / 2),
                    stream, x, positions, axis_stride, tokens, heads, head_dim, rotary_dim, theta,
                    section_h, section_w);
}

cudaError_t Add(const float* a, const float* b, int64_t count, float* out, cudaStream_t stream) {
  return LaunchFlat(AddKernel, "AddKernel", count, stream, a, b, count, out);
}

cudaError_t SiluGate(const float* in, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  return LaunchFlat(SiluGateKernel, "SiluGateKernel", rows * cols, stream, in, rows, cols, out);
}

cudaError_t Relu2(const float* in, int64_t count, float* out, cudaStream_t stream) {
  return LaunchFlat(Relu2Kernel, "Relu2Kernel", count, stream, in, count, out);
}

cudaError_t CausalConv1d(const float* x, int64_t tokens, int64_t channels, int64_t kernel,
                         const bf16* weight, const bf16* bias, float* state, bool silu, float* out,
                         cudaStream_t stream) {
  if (kernel < 1 || kernel > kMaxConvKernel) return cudaErrorInvalidValue;
  if (tokens == 0 || channels == 0) return cudaSuccess;
  const int64_t chunks = (tokens + kConvChunk - 1) / kConvChunk;
  if (chunks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((channels + kThreads - 1) / kThreads),
                  static_cast<unsigned>(chunks));
  CausalConv1dKernel<<<grid, kThreads, 0, stream>>>(x, tokens, channels, kernel, weight, bias,
                                                    state, silu, out);
  return CheckLaunch("CausalConv1dKernel", grid, kThreads, 0);
}

cudaError_t CausalConv1dStep(const float* x, int64_t batch, int64_t channels, int64_t kernel,
                             const bf16* weight, const bf16* bias, float* const* states, bool silu,
                             float* out, cudaStream_t stream) {
  if (kernel < 1) return cudaErrorInvalidValue;
  const int64_t count = batch * channels;
  if (count == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((count + kThreads - 1) / kThreads));
  CausalConv1dStepKernel<<<grid, kThreads, 0, stream>>>(x, batch, channels, kernel, weight, bias,
                                                        states, silu, out);
  return CheckLaunch("CausalConv1dStepKernel", grid, kThreads, 0);
}

cudaError_t KvCacheWrite(const float* k, const float* v, int64_t tokens, int64_t start,
                         int64_t kv_heads, int64_t head_dim, const int32_t* block_table,
                         float* kv_blocks, cudaStream_t stream) {
  return LaunchFlat(KvCacheWriteKernel, "KvCacheWriteKernel", tokens * kv_heads * head_dim, stream,
                    k, v, tokens, start, kv_heads, head_dim, block_table, kv_blocks);
}

cudaError_t AttentionPrefill(const float* q, int64_t tokens, int64_t start, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, float scale,
                             const int32_t* block_table, const float* kv_blocks, float* out,
                             cudaStream_t stream) {
  return LaunchAttention(q, 1, tokens, start, heads, kv_heads, head_dim, scale, nullptr,
                         block_table, 0, kv_blocks, out, nullptr, stream);
}

cudaError_t AttentionDecode(const float* q, int64_t batch, int64_t heads, int64_t kv_heads,
                            int64_t head_dim, float scale, const int32_t* context_lens,
                            const int32_t* block_tables, int64_t max_blocks, const float* kv_blocks,
                            float* out, float* workspace, cudaStream_t stream) {
  return LaunchAttention(q, batch, 1, 0, heads, kv_heads, head_dim, scale, context_lens,
                         block_tables, max_blocks, kv_blocks, out, workspace, stream);
}

cudaError_t Sample(const float* logits, int64_t batch, int64_t vocab, const float* temperature,
                   const int32_t* top_k, const float* top_p, const uint64_t* seeds,
                   const int64_t* steps, int32_t* out, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  if (vocab <= 0 || vocab > 0x7fffffff || batch > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(batch));
  SampleKernel<<<grid, kSampleThreads, 0, stream>>>(logits, vocab, temperature, top_k, top_p, seeds,
                                                    steps, out);
  return CheckLaunch("SampleKernel", grid, kSampleThreads, 0);
}

}  // namespace tandem::workers::cuda
