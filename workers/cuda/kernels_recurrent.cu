// Recurrent-layer kernels: the gated delta rule (Qwen3.5 GDN), L2 normalisation and the Mamba-2
// SSD scan (Nemotron-H). See kernels.h for the contracts.
//
// Both recurrences are independent per column of their state: for the delta rule, column e of
// S [dk][dv] evolves from q, k, g, beta and v[e] alone (S^T k and S^T q are per-column dot
// products over dk); for Mamba, row p of h [head_dim][state_size] evolves from x[p], dt, B and C
// alone. So one warp owns a few such columns/rows for all tokens, keeps them in registers (each
// lane holds every 32nd element) and reduces the dot products with warp shuffles; no block-level
// synchronisation is needed and the grid covers (tiles, heads, batch).
//
// The chunked forms (`chunked` for GatedDeltaRule, `chunk` > 0 for MambaSsd) currently run the
// same exact recurrence: it is the reference semantics, both forms must agree to fp32 rounding,
// and the per-column decomposition already keeps the whole GPU busy for prefills of typical
// head counts. A tensor-core chunked (WY / SSD) form is a later optimisation.

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/launch_check.h"

namespace tandem::workers::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Calls f(i, j) for i < I, j < J (i outer), unrolled: the register tiles' loops.
template <int I, int J, typename F>
__device__ __forceinline__ void ForEachIndex(F f) {
#pragma unroll
  for (int i = 0; i < I; ++i) {
#pragma unroll
    for (int j = 0; j < J; ++j) f(i, j);
  }
}

// One token's vector operands of a recurrence into a lane's registers: its shares of two
// vectors of `width` (a[r] = a_src[lane + 32 r], 0 past width: k and q, or B and C) and the
// elements own_src[j0 + c] of the warp's own columns or rows (0 from j_end on: v, or x).
template <int R, int C>
__device__ __forceinline__ void LoadTokenVectors(const float* a_src, const float* b_src, int width,
                                                 const float* own_src, int j0, int j_end, int lane,
                                                 float* a, float* b, float* own) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + kWarp * r;
    a[r] = i < width ? __ldg(a_src + i) : 0.0f;
    b[r] = i < width ? __ldg(b_src + i) : 0.0f;
  }
#pragma unroll
  for (int c = 0; c < C; ++c) own[c] = j0 + c < j_end ? __ldg(own_src + j0 + c) : 0.0f;
}

// Copies the vectors LoadTokenVectors loaded ahead into the current token's registers.
template <int R, int C>
__device__ __forceinline__ void CopyTokenVectors(const float (&a)[R], const float (&b)[R],
                                                 const float (&own)[C], float (&a_out)[R],
                                                 float (&b_out)[R], float (&own_out)[C]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    a_out[r] = a[r];
    b_out[r] = b[r];
  }
#pragma unroll
  for (int c = 0; c < C; ++c) own_out[c] = own[c];
}

// Launches one of the recurrences (see above) over `tokens` tokens of `batch` sequences:
// `columns` state columns (or rows) per head, columns_per_warp per warp and `warps` warps per
// block, the grid over (tiles, heads, batch). Each lane keeps its share of a column of `width`
// (<= 8 * kWarp) elements in R registers, R the fewest of 1, 2, 4 or 8 warp-widths that cover it:
// launch(std::integral_constant<int, R>(), grid, block) enqueues the kernel instantiated for R,
// and names[log2 R] names it in a failure. Invalid sizes are refused before nothing to do
// (batch or tokens 0) succeeds.
template <typename Launch>
cudaError_t LaunchRecurrence(int64_t width, int64_t columns, int columns_per_warp, int warps,
                             int64_t heads, int64_t batch, int64_t tokens,
                             const char* const (&names)[4], Launch launch) {
  if (batch < 0 || tokens < 0 || width <= 0 || width > 8 * kWarp || columns <= 0 || heads <= 0 ||
      heads > 65535 || batch > 65535) {
    return cudaErrorInvalidValue;
  }
  if (batch == 0 || tokens == 0) return cudaSuccess;
  const int per_block = columns_per_warp * warps;
  const dim3 grid(static_cast<unsigned>((columns + per_block - 1) / per_block),
                  static_cast<unsigned>(heads), static_cast<unsigned>(batch));
  const dim3 block(warps * kWarp);
  int name = 0;
  if (width <= kWarp) {
    launch(std::integral_constant<int, 1>(), grid, block);
  } else if (width <= 2 * kWarp) {
    name = 1;
    launch(std::integral_constant<int, 2>(), grid, block);
  } else if (width <= 4 * kWarp) {
    name = 2;
    launch(std::integral_constant<int, 4>(), grid, block);
  } else {
    name = 3;
    launch(std::integral_constant<int, 8>(), grid, block);
  }
  return CheckLaunch(names[name], grid, block, 0);
}

// ---- Gated delta rule ----

// Columns of the state per warp and warps per block.
constexpr int kGdnCols = 2;
constexpr int kGdnWarps = 4;

// Grid: (ceil(dv / (kGdnCols * kGdnWarps)), value_heads, batch). Sequence b has `tokens` rows at
// q/k + (b * tokens + t) * key_heads * dk etc., and its state at states[b] (or `state` when
// `states` is null). Lane l holds S[l + 32 r][e] for r < R of each of the warp's columns e.
template <int R>
__global__ void GdnKernel(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, const float* __restrict__ g,
                          const float* __restrict__ beta, int tokens, int key_heads,
                          int value_heads, int dk, int dv, float* state, float* const* states,
                          float* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int col0 = (blockIdx.x * kGdnWarps + warp) * kGdnCols;
  if (col0 >= dv) return;  // whole warp leaves together
  const int kh = h / (value_heads / key_heads);
  float* s = (states != nullptr ? states[b] : state) + static_cast<int64_t>(h) * dk * dv;

  float reg[R][kGdnCols];
  ForEachIndex<R, kGdnCols>([&](int r, int c) {
    const int d = lane + kWarp * r, e = col0 + c;
    reg[r][c] = (d < dk && e < dv) ? s[static_cast<int64_t>(d) * dv + e] : 0.0f;
  });

  const int64_t qk_row = static_cast<int64_t>(key_heads) * dk;
  const int64_t v_row = static_cast<int64_t>(value_heads) * dv;
  const int64_t seq0 = static_cast<int64_t>(b) * tokens;
  // Operands of token t, loaded one token ahead so the loads overlap the arithmetic.
  float kq[R], qq[R], vv[kGdnCols], gg = 0.0f, bb = 0.0f;
  auto load = [&](int t, float* kr, float* qr, float* vr, float* gr, float* br) {
    const int64_t row = seq0 + t;
    const int64_t qk_at = row * qk_row + static_cast<int64_t>(kh) * dk;
    LoadTokenVectors<R, kGdnCols>(k + qk_at, q + qk_at, dk,
                                  v + row * v_row + static_cast<int64_t>(h) * dv, col0, dv, lane,
                                  kr, qr, vr);
    *gr = __ldg(g + row * value_heads + h);
    *br = __ldg(beta + row * value_heads + h);
  };
  if (tokens > 0) load(0, kq, qq, vv, &gg, &bb);
  for (int t = 0; t < tokens; ++t) {
    float kc[R], qc[R], vc[kGdnCols];
    CopyTokenVectors(kq, qq, vv, kc, qc, vc);
    const float gc = gg, bc = bb;
    if (t + 1 < tokens) load(t + 1, kq, qq, vv, &gg, &bb);

    const float decay = expf(gc);
    float stk[kGdnCols];
#pragma unroll
    for (int c = 0; c < kGdnCols; ++c) {
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        reg[r][c] *= decay;
        acc += reg[r][c] * kc[r];
      }
      stk[c] = WarpSum(acc);
    }
    float* o = out + (seq0 + t) * v_row + static_cast<int64_t>(h) * dv;
#pragma unroll
    for (int c = 0; c < kGdnCols; ++c) {
      const float delta = bc * (vc[c] - stk[c]);
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        reg[r][c] += kc[r] * delta;
        acc += reg[r][c] * qc[r];
      }
      acc = WarpSum(acc);
      if (lane == 0 && col0 + c < dv) o[col0 + c] = acc;
    }
  }

  ForEachIndex<R, kGdnCols>([&](int r, int c) {
    const int d = lane + kWarp * r, e = col0 + c;
    if (d < dk && e < dv) s[static_cast<int64_t>(d) * dv + e] = reg[r][c];
  });
}

cudaError_t LaunchGdn(const float* q, const float* k, const float* v, const float* g,
                      const float* beta, int64_t batch, int64_t tokens, int64_t key_heads,
                      int64_t value_heads, int64_t dk, int64_t dv, float* state,
                      float* const* states, float* out, cudaStream_t stream) {
  if (key_heads <= 0 || value_heads % key_heads != 0) return cudaErrorInvalidValue;
  const int t = static_cast<int>(tokens), kh = static_cast<int>(key_heads),
            vh = static_cast<int>(value_heads), ik = static_cast<int>(dk),
            iv = static_cast<int>(dv);
  constexpr const char* kNames[] = {"GdnKernel<1>", "GdnKernel<2>", "GdnKernel<4>", "GdnKernel<8>"};
  return LaunchRecurrence(dk, dv, kGdnCols, kGdnWarps, value_heads, batch, tokens, kNames,
                          [&](auto registers, dim3 grid, dim3 block) {
                            GdnKernel<decltype(registers)::value><<<grid, block, 0, stream>>>(
                                q, k, v, g, beta, t, kh, vh, ik, iv, state, states, out);
                          });
}

// ---- L2 norm ----

// One warp per row.
__global__ void L2NormScaleKernel(float* x, int64_t rows, int dim, float eps, float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  float* xr = x + row * dim;
  float ss = 0.0f;
  for (int i = lane; i < dim; i += kWarp) ss += xr[i] * xr[i];
  ss = WarpSum(ss);
  const float inv = 1.0f / sqrtf(ss + eps);
  for (int i = lane; i < dim; i += kWarp) xr[i] = xr[i] * inv * scale;
}

// ---- Mamba-2 SSD ----

constexpr int kSsdRows = 2;  // rows of h (head_dim index p) per warp
constexpr int kSsdWarps = 4;

// Grid: (ceil(head_dim / (kSsdRows * kSsdWarps)), heads, batch). Lane l holds h[p][l + 32 r].
template <int R>
__global__ void SsdKernel(const float* __restrict__ x, const float* __restrict__ dt,
                          const float* __restrict__ A, const float* __restrict__ B,
                          const float* __restrict__ C, const float* __restrict__ D, int tokens,
                          int heads, int head_dim, int groups, int state_size, float* state,
                          float* const* states, float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int p0 = (blockIdx.x * kSsdWarps + warp) * kSsdRows;
  if (p0 >= head_dim) return;
  const int grp = h / (heads / groups);
  float* st =
      (states != nullptr ? states[b] : state) + static_cast<int64_t>(h) * head_dim * state_size;

  float reg[kSsdRows][R];
  ForEachIndex<kSsdRows, R>([&](int i, int r) {
    const int p = p0 + i, n = lane + kWarp * r;
    reg[i][r] =
        (p < head_dim && n < state_size) ? st[static_cast<int64_t>(p) * state_size + n] : 0.0f;
  });
  const float a = __ldg(A + h);
  const float d_skip = __ldg(D + h);
  const int64_t x_row = static_cast<int64_t>(heads) * head_dim;
  const int64_t bc_row = static_cast<int64_t>(groups) * state_size;
  const int64_t seq0 = static_cast<int64_t>(b) * tokens;

  float bn[R], cn[R], xn[kSsdRows], dtn = 0.0f;
  auto load = [&](int t, float* br, float* cr, float* xr, float* dr) {
    const int64_t row = seq0 + t;
    const int64_t bc_at = row * bc_row + static_cast<int64_t>(grp) * state_size;
    LoadTokenVectors<R, kSsdRows>(B + bc_at, C + bc_at, state_size,
                                  x + row * x_row + static_cast<int64_t>(h) * head_dim, p0,
                                  head_dim, lane, br, cr, xr);
    *dr = __ldg(dt + row * heads + h);
  };
  if (tokens > 0) load(0, bn, cn, xn, &dtn);
  for (int t = 0; t < tokens; ++t) {
    float bc[R], cc[R], xc[kSsdRows];
    CopyTokenVectors(bn, cn, xn, bc, cc, xc);
    const float dtc = dtn;
    if (t + 1 < tokens) load(t + 1, bn, cn, xn, &dtn);

    const float decay = expf(dtc * a);
    float* yt = y + (seq0 + t) * x_row + static_cast<int64_t>(h) * head_dim;
#pragma unroll
    for (int i = 0; i < kSsdRows; ++i) {
      const float xdt = xc[i] * dtc;
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        reg[i][r] = decay * reg[i][r] + xdt * bc[r];
        acc += reg[i][r] * cc[r];
      }
      acc = WarpSum(acc);
      if (lane == 0 && p0 + i < head_dim) yt[p0 + i] = acc + d_skip * xc[i];
    }
  }

  ForEachIndex<kSsdRows, R>([&](int i, int r) {
    const int p = p0 + i, n = lane + kWarp * r;
    if (p < head_dim && n < state_size) st[static_cast<int64_t>(p) * state_size + n] = reg[i][r];
  });
}

cudaError_t LaunchSsd(const float* x, const float* dt, const float* A, const float* B,
                      const float* C, const float* D, int64_t batch, int64_t tokens, int64_t heads,
                      int64_t head_dim, int64_t groups, int64_t state_size, float* state,
                      float* const* states, float* y, cudaStream_t stream) {
  if (groups <= 0 || heads % groups != 0) return cudaErrorInvalidValue;
  const int t = static_cast<int>(tokens), nh = static_cast<int>(heads),
            hp = static_cast<int>(head_dim), ng = static_cast<int>(groups),
            ns = static_cast<int>(state_size);
  constexpr const char* kNames[] = {"SsdKernel<1>", "SsdKernel<2>", "SsdKernel<4>", "SsdKernel<8>"};
  return LaunchRecurrence(state_size, head_dim, kSsdRows, kSsdWarps, heads, batch, tokens, kNames,
                          [&](auto registers, dim3 grid, dim3 block) {
                            SsdKernel<decltype(registers)::value><<<grid, block, 0, stream>>>(
                                x, dt, A, B, C, D, t, nh, hp, ng, ns, state, states, y);
                          });
}

}  // namespace

cudaError_t GatedDeltaRule(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int64_t tokens, int64_t key_heads,
                           int64_t value_heads, int64_t dk, int64_t dv, float* state, float* out,
                           bool chunked, cudaStream_t stream) {
  (void)chunked;  // the chunked form runs the exact recurrence (see the file comment)
  return LaunchGdn(q, k, v, g, beta, /*batch=*/1, tokens, key_heads, value_heads, dk, dv, state,
                   /*states=*/nullptr, out, stream);
}

cudaError_t GatedDeltaRuleStep(const float* q, const float* k, const float* v, const float* g,
                               const float* beta, int64_t batch, int64_t key_heads,
                               int64_t value_heads, int64_t dk, int64_t dv, float* const* states,
                               float* out, cudaStream_t stream) {
  return LaunchGdn(q, k, v, g, beta, batch, /*tokens=*/1, key_heads, value_heads, dk, dv,
                   /*state=*/nullptr, states, out, stream);
}

cudaError_t L2NormScale(float* x, int64_t rows, int64_t dim, float eps, float scale,
                        cudaStream_t stream) {
  if (rows < 0 || dim <= 0 || dim > INT32_MAX) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  constexpr int kWarpsPerBlock = 8;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  const dim3 block(kWarpsPerBlock * kWarp);
  L2NormScaleKernel<<<grid, block, 0, stream>>>(x, rows, static_cast<int>(dim), eps, scale);
  return CheckLaunch("L2NormScaleKernel", grid, block, 0);
}

cudaError_t MambaSsd(const float* x, const float* dt, const float* A, const float* B,
                     const float* C, const float* D, int64_t tokens, int64_t heads,
                     int64_t head_dim, int64_t groups, int64_t state_size, int64_t chunk,
                     float* state, float* y, cudaStream_t stream) {
  (void)chunk;  // the chunked form runs the exact recurrence (see the file comment)
  return LaunchSsd(x, dt, A, B, C, D, /*batch=*/1, tokens, heads, head_dim, groups, state_size,
                   state, /*states=*/nullptr, y, stream);
}

cudaError_t MambaSsdStep(const float* x, const float* dt, const float* A, const float* B,
                         const float* C, const float* D, int64_t batch, int64_t heads,
                         int64_t head_dim, int64_t groups, int64_t state_size, float* const* states,
                         float* y, cudaStream_t stream) {
  return LaunchSsd(x, dt, A, B, C, D, batch, /*tokens=*/1, heads, head_dim, groups, state_size,
                   /*state=*/nullptr, states, y, stream);
}

}  // namespace tandem::workers::cuda
