// MoE kernels: the two routers and the fused routed-expert MLP. See kernels.h for the contracts.
//
// Routers: one warp per token; the scores live in shared memory and the top k are taken by k
// rounds of a warp arg-max (ties to the lower expert id), so the ids come out in the order the
// CPU reference's partial_sort gives: by descending score, ties by ascending id.
//
// MoeExperts: two memory-bound passes, each a warp per output row (a BF16 weight row streamed
// with 16-byte loads, dotted with an fp32 activation row, reduced with shuffles):
//   1. for every (token t, slot j): scratch[t*k + j][i] = act(up_e[i] . x[t]), e = ids[t][j];
//   2. for every token t and hidden row d: out[t][d] += sum_j w[t][j] * (down_e[d] . scratch[..])
//      with the slots added in order by one lane: deterministic, no atomics.
// A negative expert id marks an empty slot (its scratch row is zeroed and it adds nothing).

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/launch_check.h"

namespace tandem::workers::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kNone = 0x7fffffff;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// (value, id) is better than (best, best_id): larger value, ties to the lower id; kNone loses.
__device__ __forceinline__ bool Better(float value, int id, float best, int best_id) {
  if (id == kNone) return false;
  if (best_id == kNone) return true;
  return value > best || (value == best && id < best_id);
}

// k rounds of arg-max over `choice` (shared, per warp), skipping taken experts. Writes the ids
// and, from `score`, the raw weights; returns (on every lane) the sum of the chosen scores in
// selection order.
__device__ float SelectTopK(const float* choice, const float* score, unsigned char* taken,
                            int experts, int k, int32_t* ids, float* weights) {
  const int lane = threadIdx.x % kWarp;
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    float best = 0.0f;
    int best_id = kNone;
    for (int e = lane; e < experts; e += kWarp) {
      if (!taken[e] && Better(choice[e], e, best, best_id)) {
        best = choice[e];
        best_id = e;
      }
    }
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(kFull, best, o);
      const int oi = __shfl_xor_sync(kFull, best_id, o);
      if (Better(ov, oi, best, best_id)) {
        best = ov;
        best_id = oi;
      }
    }
    __syncwarp();
    // best_id is valid: k <= experts, so an untaken expert remains.
    const float s = score[best_id];
    sum += s;
    if (lane == 0) {
      taken[best_id] = 1;
      ids[j] = best_id;
      weights[j] = s;
    }
    __syncwarp();
  }
  return sum;
}

// One warp (block) per token. Shared: float p[experts], unsigned char taken[experts].
__global__ void RouteSoftmaxKernel(const float* __restrict__ logits, int experts, int k,
                                   int32_t* __restrict__ expert_ids, float* __restrict__ weights) {
  extern __shared__ float smem[];
  float* p = smem;
  unsigned char* taken = reinterpret_cast<unsigned char*>(p + experts);
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* l = logits + t * experts;
  float m = -INFINITY;
  for (int e = lane; e < experts; e += kWarp) m = fmaxf(m, l[e]);
  m = WarpMax(m);
  float sum = 0.0f;
  for (int e = lane; e < experts; e += kWarp) {
    const float x = expf(l[e] - m);
    p[e] = x;
    taken[e] = 0;
    sum += x;
  }
  sum = WarpSum(sum);
  __syncwarp();
  for (int e = lane; e < experts; e += kWarp) p[e] = p[e] / sum;
  __syncwarp();
  int32_t* ids = expert_ids + t * k;
  float* w = weights + t * k;
  const float total = SelectTopK(p, p, taken, experts, k, ids, w);
  if (lane == 0) {
    for (int j = 0; j < k; ++j) w[j] = w[j] / total;
  }
}

// Shared: float score[experts], float choice[experts], unsigned char taken[experts].
__global__ void RouteSigmoidKernel(const float* __restrict__ logits, const float* __restrict__ bias,
                                   int experts, int k, float scaling,
                                   int32_t* __restrict__ expert_ids, float* __restrict__ weights) {
  extern __shared__ float smem[];
  float* score = smem;
  float* choice = smem + experts;
  unsigned char* taken = reinterpret_cast<unsigned char*>(choice + experts);
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* l = logits + t * experts;
  for (int e = lane; e < experts; e += kWarp) {
    const float s = 1.0f / (1.0f + expf(-l[e]));
    score[e] = s;
    choice[e] = bias != nullptr ? s + bias[e] : s;
    taken[e] = 0;
  }
  __syncwarp();
  int32_t* ids = expert_ids + t * k;
  float* w = weights + t * k;
  const float total = SelectTopK(choice, score, taken, experts, k, ids, w);
  if (lane == 0) {
    const float norm = 1.0f / (total + 1e-20f);
    for (int j = 0; j < k; ++j) w[j] = w[j] * norm * scaling;
  }
}

// ---- Routed experts ----

__device__ __forceinline__ float Bf16Lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Bf16Hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Partial (per-lane) dot product of a BF16 row with an fp32 row of n elements. `vec`: n % 8 == 0
// and both rows 16-byte aligned.
__device__ __forceinline__ float RowDot(const bf16* __restrict__ w, const float* __restrict__ x,
                                        int64_t n, bool vec) {
  const int lane = threadIdx.x % kWarp;
  float acc = 0.0f;
  if (vec) {
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t i = lane; i < n / 8; i += kWarp) {
      const uint4 ww = __ldg(w4 + i);
      const float4 a = __ldg(x4 + 2 * i);
      const float4 b = __ldg(x4 + 2 * i + 1);
      acc += Bf16Lo(ww.x) * a.x;
      acc += Bf16Hi(ww.x) * a.y;
      acc += Bf16Lo(ww.y) * a.z;
      acc += Bf16Hi(ww.y) * a.w;
      acc += Bf16Lo(ww.z) * b.x;
      acc += Bf16Hi(ww.z) * b.y;
      acc += Bf16Lo(ww.w) * b.z;
      acc += Bf16Hi(ww.w) * b.w;
    }
  } else {
    for (int64_t i = lane; i < n; i += kWarp) {
      acc += __uint_as_float(static_cast<uint32_t>(__ldg(w + i)) << 16) * __ldg(x + i);
    }
  }
  return acc;
}

constexpr int kMoeWarps = 8;

// Grid: (tokens * k, ceil(inter / kMoeWarps)). Warp -> one row i of slot (t, j).
__global__ void MoeUpKernel(const float* __restrict__ x, int64_t hidden,
                            const int32_t* __restrict__ expert_ids, int k,
                            const bf16* __restrict__ up, int64_t inter, bool swiglu, bool vec,
                            float* __restrict__ scratch) {
  const int lane = threadIdx.x % kWarp;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kMoeWarps + threadIdx.x / kWarp;
  if (i >= inter) return;
  const int64_t slot = blockIdx.x;
  const int64_t t = slot / k;
  const int e = expert_ids[slot];
  float* dst = scratch + slot * inter + i;
  if (e < 0) {
    if (lane == 0) *dst = 0.0f;
    return;
  }
  const float* xt = x + t * hidden;
  float a;
  if (swiglu) {
    const bf16* base = up + static_cast<int64_t>(e) * 2 * inter * hidden;
    const float gate = WarpSum(RowDot(base + i * hidden, xt, hidden, vec));
    const float u = WarpSum(RowDot(base + (inter + i) * hidden, xt, hidden, vec));
    a = gate / (1.0f + expf(-gate)) * u;
  } else {
    const bf16* base = up + static_cast<int64_t>(e) * inter * hidden;
    const float u = WarpSum(RowDot(base + i * hidden, xt, hidden, vec));
    a = u > 0.0f ? u * u : 0.0f;
  }
  if (lane == 0) *dst = a;
}

// Grid: (tokens, ceil(hidden / kMoeWarps)). Warp -> one row d of token t, all k slots in order.
__global__ void MoeDownKernel(int64_t hidden, const int32_t* __restrict__ expert_ids,
                              const float* __restrict__ weights, int k,
                              const bf16* __restrict__ down, int64_t inter, bool vec,
                              const float* __restrict__ scratch, float* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * kMoeWarps + threadIdx.x / kWarp;
  if (d >= hidden) return;
  const int64_t t = blockIdx.x;
  float o = out[t * hidden + d];
  for (int j = 0; j < k; ++j) {
    const int64_t slot = t * k + j;
    const int e = expert_ids[slot];
    if (e < 0) continue;
    const bf16* row = down + (static_cast<int64_t>(e) * hidden + d) * inter;
    const float y = WarpSum(RowDot(row, scratch + slot * inter, inter, vec));
    o += weights[slot] * y;
  }
  if (lane == 0) out[t * hidden + d] = o;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t RouteSoftmaxTopK(const float* logits, int64_t tokens, int64_t experts, int64_t k,
                             int32_t* expert_ids, float* weights, cudaStream_t stream) {
  if (tokens < 0 || experts <= 0 || k <= 0 || k > experts || experts > 8192 || tokens > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(experts) * (sizeof(float) + 1);
  const dim3 grid(static_cast<unsigned>(tokens));
  RouteSoftmaxKernel<<<grid, kWarp, smem, stream>>>(logits, static_cast<int>(experts),
                                                    static_cast<int>(k), expert_ids, weights);
  return CheckLaunch("RouteSoftmaxKernel", grid, kWarp, smem);
}

cudaError_t RouteSigmoidTopK(const float* logits, const float* bias, int64_t tokens,
                             int64_t experts, int64_t k, float scaling, int32_t* expert_ids,
                             float* weights, cudaStream_t stream) {
  if (tokens < 0 || experts <= 0 || k <= 0 || k > experts || experts > 4096 || tokens > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(experts) * (2 * sizeof(float) + 1);
  const dim3 grid(static_cast<unsigned>(tokens));
  RouteSigmoidKernel<<<grid, kWarp, smem, stream>>>(
      logits, bias, static_cast<int>(experts), static_cast<int>(k), scaling, expert_ids, weights);
  return CheckLaunch("RouteSigmoidKernel", grid, kWarp, smem);
}

cudaError_t MoeExperts(const float* x, int64_t tokens, int64_t hidden, const int32_t* expert_ids,
                       const float* weights, int64_t k, const bf16* up, const bf16* down,
                       int64_t inter, bool swiglu, float* scratch, float* out,
                       cudaStream_t stream) {
  if (tokens < 0 || hidden <= 0 || k <= 0 || inter <= 0 || tokens * k > INT32_MAX ||
      (inter + kMoeWarps - 1) / kMoeWarps > 65535 || (hidden + kMoeWarps - 1) / kMoeWarps > 65535) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  const bool up_vec = hidden % 8 == 0 && Aligned16(x) && Aligned16(up);
  const dim3 up_grid(static_cast<unsigned>(tokens * k),
                     static_cast<unsigned>((inter + kMoeWarps - 1) / kMoeWarps));
  const dim3 block(kMoeWarps * kWarp);
  MoeUpKernel<<<up_grid, block, 0, stream>>>(x, hidden, expert_ids, static_cast<int>(k), up, inter,
                                             swiglu, up_vec, scratch);
  if (cudaError_t e = CheckLaunch("MoeUpKernel", up_grid, block, 0); e != cudaSuccess) return e;
  const bool down_vec = inter % 8 == 0 && Aligned16(scratch) && Aligned16(down);
  const dim3 down_grid(static_cast<unsigned>(tokens),
                       static_cast<unsigned>((hidden + kMoeWarps - 1) / kMoeWarps));
  MoeDownKernel<<<down_grid, block, 0, stream>>>(hidden, expert_ids, weights, static_cast<int>(k),
                                                 down, inter, down_vec, scratch, out);
  return CheckLaunch("MoeDownKernel", down_grid, block, 0);
}

}  // namespace tandem::workers::cuda
