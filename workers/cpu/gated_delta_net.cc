#include "workers/cpu/gated_delta_net.h"

#include <algorithm>
#include <cmath>

#include "workers/cpu/cpu_kernels.h"

namespace tandem::workers::cpu {
namespace {

using model::qwen35::TextConfig;

// One value head of the gated delta rule over a run of tokens: row t of q/k/v at ptr + t *
// stride, its g/beta at ptr[t * gate_stride], its output at out + t * out_stride. q is already
// L2-normalised and scaled by 1/sqrt(dk); k is L2-normalised.
struct DeltaRuleHead {
  const float* q;
  const float* k;
  const float* v;
  int64_t stride;
  const float* g;     // log-decay, <= 0
  const float* beta;  // write strength, in (0, 1)
  int64_t gate_stride;
  float* out;
  int64_t out_stride;
};

// Scratch reused across heads and chunks of one call.
struct DeltaRuleScratch {
  std::vector<float> cum, ks, kk, qk, delta, kw;
};

// One token in the recurrent form (the decode path), on the fp32 state S[d][e] (dk x dv):
//   S *= exp(g); delta = beta (v - S^T k); S += k delta^T; o = S^T q.
void DeltaRuleStep(const DeltaRuleHead& h, int64_t dk, int64_t dv, float* s,
                   DeltaRuleScratch* scratch) {
  std::vector<float>& delta = scratch->delta;
  delta.assign(dv, 0.0f);  // first S^T k, then delta
  const float decay = std::exp(h.g[0]);
  for (int64_t d = 0; d < dk; ++d) {
    float* row = s + d * dv;
    for (int64_t e = 0; e < dv; ++e) {
      row[e] *= decay;
      delta[e] += row[e] * h.k[d];
    }
  }
  for (int64_t e = 0; e < dv; ++e) delta[e] = h.beta[0] * (h.v[e] - delta[e]);
  float* o = h.out;
  std::fill(o, o + dv, 0.0f);
  for (int64_t d = 0; d < dk; ++d) {
    float* row = s + d * dv;
    for (int64_t e = 0; e < dv; ++e) {
      row[e] += h.k[d] * delta[e];
      o[e] += row[e] * h.q[d];
    }
  }
}

// n tokens in chunks of kDeltaChunk: the same recurrence in matrix form (the prefill path).
// Within a chunk of L tokens with start state S0 and cumulative log-decay G[t] = g[0] + .. + g[t]:
//   delta[t] = beta[t] (v[t] - e^G[t] S0^T k[t] - sum_{m<t} e^(G[t]-G[m]) (k[t].k[m]) delta[m])
//   o[t]     = e^G[t] S0^T q[t] + sum_{m<=t} e^(G[t]-G[m]) (q[t].k[m]) delta[m]
//   S        = e^G[L-1] S0 + sum_m e^(G[L-1]-G[m]) k[m] delta[m]^T
// The delta rows come by forward substitution, the rest as matrix products. Every exponent is
// <= 0, so nothing overflows.
constexpr int64_t kDeltaChunk = 64;
void DeltaRuleChunked(const DeltaRuleHead& h, int64_t n, int64_t dk, int64_t dv, float* s,
                      DeltaRuleScratch* scratch) {
  DeltaRuleScratch& w = *scratch;
  for (int64_t c0 = 0; c0 < n; c0 += kDeltaChunk) {
    const int64_t L = std::min(kDeltaChunk, n - c0);
    const float* q = h.q + c0 * h.stride;
    const float* k = h.k + c0 * h.stride;
    const float* v = h.v + c0 * h.stride;
    float* o = h.out + c0 * h.out_stride;
    w.cum.resize(L);
    float acc = 0;
    for (int64_t t = 0; t < L; ++t) {
      acc += h.g[(c0 + t) * h.gate_stride];
      w.cum[t] = acc;
    }
    w.ks.resize(L * dv);
    w.kk.resize(L * L);
    w.qk.resize(L * L);
    w.delta.resize(L * dv);
    w.kw.resize(dk * L);
    MatMul(k, h.stride, s, dv, /*b_transposed=*/false, L, dv, dk, w.ks.data(), dv);  // K S0
    MatMul(q, h.stride, s, dv, /*b_transposed=*/false, L, dv, dk, o, h.out_stride);  // Q S0
    MatMul(k, h.stride, k, h.stride, /*b_transposed=*/true, L, L, dk, w.kk.data(), L);
    MatMul(q, h.stride, k, h.stride, /*b_transposed=*/true, L, L, dk, w.qk.data(), L);
    for (int64_t t = 0; t < L; ++t) {
      const float beta = h.beta[(c0 + t) * h.gate_stride];
      const float decay = std::exp(w.cum[t]);
      float* dt = w.delta.data() + t * dv;
      const float* vt = v + t * h.stride;
      for (int64_t e = 0; e < dv; ++e) dt[e] = beta * (vt[e] - decay * w.ks[t * dv + e]);
      for (int64_t m = 0; m < t; ++m) {
        const float coef = beta * std::exp(w.cum[t] - w.cum[m]) * w.kk[t * L + m];
        const float* dm = w.delta.data() + m * dv;
        for (int64_t e = 0; e < dv; ++e) dt[e] -= coef * dm[e];
      }
      float* ot = o + t * h.out_stride;
      for (int64_t e = 0; e < dv; ++e) ot[e] *= decay;
      float* qk = w.qk.data() + t * L;
      for (int64_t m = 0; m <= t; ++m) qk[m] *= std::exp(w.cum[t] - w.cum[m]);
      std::fill(qk + t + 1, qk + L, 0.0f);
    }
    MatMul(w.qk.data(), L, w.delta.data(), dv, /*b_transposed=*/false, L, dv, L, o, h.out_stride,
           /*accumulate=*/true);
    const float last = w.cum[L - 1];
    for (int64_t m = 0; m < L; ++m) {
      const float f = std::exp(last - w.cum[m]);
      for (int64_t d = 0; d < dk; ++d) w.kw[d * L + m] = k[m * h.stride + d] * f;
    }
    const float total = std::exp(last);
    for (int64_t i = 0; i < dk * dv; ++i) s[i] *= total;
    MatMul(w.kw.data(), L, w.delta.data(), dv, /*b_transposed=*/false, dk, dv, L, s, dv,
           /*accumulate=*/true);
  }
}

// The qkv projection of the n tokens after the K-1 carried rows of `conv_state`, through the
// causal depthwise conv and silu: u [n][C], rows q | k | v. `conv_state` becomes the last K-1
// pre-conv rows.
std::vector<float> ConvolvedQkv(const GdnWeights& w, const TextConfig& c, const float* x, int64_t n,
                                std::vector<float>* conv_state) {
  const int64_t H = c.hidden_size, C = c.conv_dim(), K = c.conv_kernel;
  // The K-1 carried pre-conv rows followed by this call's n rows: [K-1+n][C].
  std::vector<float> padded((K - 1 + n) * C);
  std::copy(conv_state->begin(), conv_state->end(), padded.begin());
  float* qkv = padded.data() + (K - 1) * C;
  Linear(x, n, H, w.in_qkv.data(), C, qkv);

  // Causal depthwise conv (no bias) then silu: u[t][c] = silu(sum_j w[c][j] padded[t+j][c]).
  std::vector<float> u(n * C);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t ch = 0; ch < C; ++ch) {
      float acc = 0;
      for (int64_t j = 0; j < K; ++j) acc += w.conv[ch * K + j] * padded[(t + j) * C + ch];
      u[t * C + ch] = Silu(acc);
    }
  }
  std::copy(padded.end() - (K - 1) * C, padded.end(), conv_state->begin());
  return u;
}

// L2-normalise q and k of the n rows of u per key head in place (eps inside the rsqrt, as
// FLA's l2norm); scale q by 1/sqrt(dk).
void NormalizeQk(const TextConfig& c, int64_t n, float* u) {
  const int64_t C = c.conv_dim(), dk = c.linear_key_dim, kd = c.key_dim();
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < n; ++t) {
    float* ut = u + t * C;
    for (int64_t h = 0; h < c.linear_key_heads; ++h) {
      float* qh = ut + h * dk;
      float* kh = ut + kd + h * dk;
      float qs = 0, ks = 0;
      for (int64_t d = 0; d < dk; ++d) {
        qs += qh[d] * qh[d];
        ks += kh[d] * kh[d];
      }
      const float qi = 1.0f / std::sqrt(qs + 1e-6f), ki = 1.0f / std::sqrt(ks + 1e-6f);
      for (int64_t d = 0; d < dk; ++d) {
        qh[d] = qh[d] * qi * q_scale;
        kh[d] *= ki;
      }
    }
  }
}

// The delta rule of every value head over the n rows of u (normalised q | k | v), gated by the
// a and b projections ([n][Hv] each); outputs into core [n][value_dim], advancing
// `recurrent_state`.
void RunDeltaRule(const GdnWeights& w, const TextConfig& c, const float* u, const float* a,
                  const float* b, int64_t n, std::vector<float>* recurrent_state, float* core) {
  const int64_t C = c.conv_dim(), hv = c.linear_value_heads;
  const int64_t dk = c.linear_key_dim, dv = c.linear_value_dim;
  const int64_t kd = c.key_dim(), vd = c.value_dim();
  const int64_t heads_per_key = hv / c.linear_key_heads;
  // Per token and value head: log-decay g <= 0 and write strength beta.
  std::vector<float> g(n * hv), beta(n * hv);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < hv; ++j) {
      g[t * hv + j] = -std::exp(w.a_log[j]) * Softplus(a[t * hv + j] + w.dt_bias[j]);
      beta[t * hv + j] = Sigmoid(b[t * hv + j]);
    }
  }

  // The delta rule per value head j, reading key head j / heads_per_key: views into u (row
  // stride C); outputs into core (row stride vd).
  std::vector<float>& s_all = *recurrent_state;
  DeltaRuleScratch scratch;
  for (int64_t j = 0; j < hv; ++j) {
    const int64_t kh = j / heads_per_key;
    const DeltaRuleHead head{.q = u + kh * dk,
                             .k = u + kd + kh * dk,
                             .v = u + 2 * kd + j * dv,
                             .stride = C,
                             .g = g.data() + j,
                             .beta = beta.data() + j,
                             .gate_stride = hv,
                             .out = core + j * dv,
                             .out_stride = vd};
    float* s = s_all.data() + j * dk * dv;
    if (n == 1) {
      DeltaRuleStep(head, dk, dv, s, &scratch);
    } else {
      DeltaRuleChunked(head, n, dk, dv, s, &scratch);
    }
  }
}

}  // namespace

void GatedDeltaNet(const GdnWeights& w, const TextConfig& c, const float* x, int64_t n,
                   std::vector<float>* conv_state, std::vector<float>* recurrent_state,
                   float* out) {
  const int64_t H = c.hidden_size, hv = c.linear_value_heads, dv = c.linear_value_dim;
  const int64_t vd = c.value_dim();
  std::vector<float> u = ConvolvedQkv(w, c, x, n, conv_state);
  std::vector<float> z(n * vd), b(n * hv), a(n * hv);
  Linear(x, n, H, w.in_z.data(), vd, z.data());
  Linear(x, n, H, w.in_b.data(), hv, b.data());
  Linear(x, n, H, w.in_a.data(), hv, a.data());
  NormalizeQk(c, n, u.data());

  std::vector<float> core(n * vd);
  RunDeltaRule(w, c, u.data(), a.data(), b.data(), n, recurrent_state, core.data());
  // Gated RMSNorm per (token, value head) over dv: norm first (plain weight), then silu(z).
  RmsNorm(core.data(), n * hv, dv, w.norm.data(), c.rms_norm_eps, /*one_plus_weight=*/false,
          core.data());
  for (int64_t i = 0; i < n * vd; ++i) core[i] *= Silu(z[i]);
  Linear(core.data(), n, vd, w.out.data(), H, out);
}

}  // namespace tandem::workers::cpu
