// GPU tests (ctest label "gpu") of the recurrent and MoE kernels (workers/cuda/kernels_*.cu)
// against plain C++ references that follow the CPU models' math (workers/cpu). Skipped when
// the machine has no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/device_buffer.h"
#include "tests/support/numerics.h"
#include "workers/cpu/cpu_kernels.h"
#include "workers/cuda/cuda_kernels.h"

namespace tandem::workers::cuda {
namespace {

using testing::DeviceBuffer;
using testing::ExpectClose;

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::vector<float> Uniform(std::mt19937* rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

constexpr float kAtol = 2e-5f, kRtol = 1e-4f;

// L2-normalises rows of `dim` as the CPU model does (eps 1e-6 inside the sqrt), times scale.
void L2NormRows(std::vector<float>* x, int64_t dim, float scale) {
  for (size_t r = 0; r * dim < x->size(); ++r) {
    float* row = x->data() + r * dim;
    float ss = 0;
    for (int64_t d = 0; d < dim; ++d) ss += row[d] * row[d];
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t d = 0; d < dim; ++d) row[d] = row[d] * inv * scale;
  }
}

// Rows [t0, t1) of x, per_token floats a row.
std::vector<float> Rows(const std::vector<float>& x, int64_t per_token, int64_t t0, int64_t t1) {
  return std::vector<float>(x.begin() + t0 * per_token, x.begin() + t1 * per_token);
}

// Runs launch(out) into a device output of out_size floats; returns the output.
void RunToOutput(int64_t out_size, const std::function<cudaError_t(float* out)>& launch,
                 std::vector<float>* out) {
  DeviceBuffer<float> o(out_size);
  ASSERT_EQ(launch(o.get()), cudaSuccess);
  *out = o.Download();
}

// Runs a single-sequence launcher, launch(state, out), on a device copy of state0 into an
// output of out_size floats; returns the output and the final state.
void RunFromState(const std::vector<float>& state0, int64_t out_size,
                  const std::function<cudaError_t(float* state, float* out)>& launch,
                  std::vector<float>* out, std::vector<float>* state) {
  DeviceBuffer<float> st(state0);
  ASSERT_NO_FATAL_FAILURE(RunToOutput(
      out_size, [&](float* o) { return launch(st.get(), o); }, out));
  *state = st.Download();
}

// The recurrence-specific parts of a Step test (ExpectStepMatchesReference) for one shape.
template <typename Inputs>
struct StepCase {
  int64_t state_size = 0;  // floats of one sequence's state
  int64_t out_row = 0;     // outputs of one token
  float out_atol = 0;      // the outputs' tolerance against the reference
  std::string label;       // the shape, in failures
  std::string out_name;    // the outputs, in failures
  // Random inputs of `rows` tokens.
  std::function<Inputs(int64_t rows)> make;
  // The host reference of row b (one token of sequence b) on its state, into out's row b.
  std::function<void(const Inputs& in, int64_t b, float* state, float* out)> reference;
  // The batched step launcher (RunToOutput): row b on the device state states[b]; returns out
  // [rows][out_row].
  std::function<void(const Inputs& in, float* const* states, std::vector<float>* out)> step;
  // Row b alone through the single-sequence launcher (RunFromState).
  std::function<void(const Inputs& in, int64_t b, const std::vector<float>& state0,
                     std::vector<float>* out, std::vector<float>* state)>
      single;
};

// `batch` sequences with random states take `steps` tokens, one per sequence per step, through
// the batched step launcher: each step's outputs must match the reference and, to 1e-6, the same
// token through the single-sequence launcher per sequence; the final states likewise.
template <typename Inputs>
void ExpectStepMatchesReference(std::mt19937* rng, int64_t batch, int64_t steps,
                                const StepCase<Inputs>& c) {
  std::vector<std::vector<float>> want_states(batch), seq_states(batch);
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dev_states;
  std::vector<float*> ptrs;
  for (int64_t b = 0; b < batch; ++b) {
    want_states[b] = Uniform(rng, c.state_size, -0.5f, 0.5f);
    seq_states[b] = want_states[b];
    dev_states.push_back(std::make_unique<DeviceBuffer<float>>(want_states[b]));
    ptrs.push_back(dev_states.back()->get());
  }
  DeviceBuffer<float*> dev_ptrs(ptrs);
  for (int64_t step = 0; step < steps; ++step) {
    // One token per sequence: the rows of sequence b are row b.
    const Inputs in = c.make(batch);
    std::vector<float> want_out(batch * c.out_row);
    for (int64_t b = 0; b < batch; ++b) c.reference(in, b, want_states[b].data(), want_out.data());
    std::vector<float> got;
    ASSERT_NO_FATAL_FAILURE(c.step(in, dev_ptrs.get(), &got));
    const std::string what = c.label + " step " + std::to_string(step);
    ExpectClose(got, want_out, c.out_atol, kRtol, what + " " + c.out_name);
    // The same token through the single-sequence launcher, per sequence.
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<float> out, state;
      c.single(in, b, seq_states[b], &out, &state);
      seq_states[b] = state;
      const std::vector<float> step_out(got.begin() + b * c.out_row,
                                        got.begin() + (b + 1) * c.out_row);
      ExpectClose(step_out, out, 1e-6f, 1e-6f, what + " step vs single b " + std::to_string(b));
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<float> got = dev_states[b]->Download();
    ExpectClose(got, want_states[b], kAtol, kRtol, "final state b " + std::to_string(b));
    ExpectClose(got, seq_states[b], 1e-6f, 1e-6f, "step vs single state b " + std::to_string(b));
  }
}

// ---- Gated delta rule ----

struct GdnShape {
  int64_t key_heads, value_heads, dk, dv;
};

struct GdnInputs {
  std::vector<float> q, k, v, g, beta;
};

GdnInputs MakeGdnInputs(std::mt19937* rng, const GdnShape& s, int64_t tokens) {
  GdnInputs in;
  in.q = Uniform(rng, tokens * s.key_heads * s.dk, -1, 1);
  in.k = Uniform(rng, tokens * s.key_heads * s.dk, -1, 1);
  L2NormRows(&in.q, s.dk, 1.0f / std::sqrt(static_cast<float>(s.dk)));
  L2NormRows(&in.k, s.dk, 1.0f);
  in.v = Uniform(rng, tokens * s.value_heads * s.dv, -1, 1);
  in.g = Uniform(rng, tokens * s.value_heads, -0.7f, -0.001f);
  in.beta = Uniform(rng, tokens * s.value_heads, 0.05f, 0.95f);
  return in;
}

// The CPU model's DeltaRuleStep, token by token: S *= exp(g); delta = beta (v - S^T k);
// S += k delta^T; o = S^T q. Sequence b's rows start at row b * tokens.
void GdnReference(const GdnShape& s, const GdnInputs& in, int64_t seq, int64_t tokens, float* state,
                  float* out) {
  const int64_t per_key = s.value_heads / s.key_heads;
  std::vector<float> delta(s.dv);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = seq * tokens + t;
    for (int64_t h = 0; h < s.value_heads; ++h) {
      const int64_t kh = h / per_key;
      const float* q = in.q.data() + (row * s.key_heads + kh) * s.dk;
      const float* k = in.k.data() + (row * s.key_heads + kh) * s.dk;
      const float* v = in.v.data() + (row * s.value_heads + h) * s.dv;
      const float g = in.g[row * s.value_heads + h], beta = in.beta[row * s.value_heads + h];
      float* st = state + h * s.dk * s.dv;
      std::fill(delta.begin(), delta.end(), 0.0f);
      const float decay = std::exp(g);
      for (int64_t d = 0; d < s.dk; ++d) {
        for (int64_t e = 0; e < s.dv; ++e) {
          st[d * s.dv + e] *= decay;
          delta[e] += st[d * s.dv + e] * k[d];
        }
      }
      for (int64_t e = 0; e < s.dv; ++e) delta[e] = beta * (v[e] - delta[e]);
      float* o = out + (row * s.value_heads + h) * s.dv;
      std::fill(o, o + s.dv, 0.0f);
      for (int64_t d = 0; d < s.dk; ++d) {
        for (int64_t e = 0; e < s.dv; ++e) {
          st[d * s.dv + e] += k[d] * delta[e];
          o[e] += st[d * s.dv + e] * q[d];
        }
      }
    }
  }
}

// Runs GatedDeltaRule on one sequence from `state0`; returns the output and the final state.
void RunGdn(const GdnShape& s, const GdnInputs& in, int64_t tokens, bool chunked,
            const std::vector<float>& state0, std::vector<float>* out, std::vector<float>* state) {
  DeviceBuffer<float> q(in.q), k(in.k), v(in.v), g(in.g), beta(in.beta);
  RunFromState(
      state0, tokens * s.value_heads * s.dv,
      [&](float* st, float* o) {
        return GatedDeltaRule(q.get(), k.get(), v.get(), g.get(), beta.get(), tokens, s.key_heads,
                              s.value_heads, s.dk, s.dv, st, o, chunked, nullptr);
      },
      out, state);
}

GdnInputs Slice(const GdnShape& s, const GdnInputs& in, int64_t t0, int64_t t1) {
  const int64_t qk = s.key_heads * s.dk;
  return {Rows(in.q, qk, t0, t1), Rows(in.k, qk, t0, t1), Rows(in.v, s.value_heads * s.dv, t0, t1),
          Rows(in.g, s.value_heads, t0, t1), Rows(in.beta, s.value_heads, t0, t1)};
}

const GdnShape kGdnShapes[] = {
    {1, 1, 16, 16},   {2, 4, 32, 64},  {1, 2, 64, 32},  {4, 4, 48, 80},
    {2, 6, 128, 128}, {1, 3, 100, 24}, {2, 4, 256, 64},
};
const int64_t kTokenCounts[] = {1, 7, 64, 65, 200};

TEST(CudaGatedDeltaRuleTest, MatchesReferenceRecurrentAndChunked) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(1);
  for (const GdnShape& s : kGdnShapes) {
    for (int64_t tokens : kTokenCounts) {
      const GdnInputs in = MakeGdnInputs(&rng, s, tokens);
      const std::vector<float> state0 = Uniform(&rng, s.value_heads * s.dk * s.dv, -0.5f, 0.5f);
      std::vector<float> want_state = state0, want_out(tokens * s.value_heads * s.dv);
      GdnReference(s, in, 0, tokens, want_state.data(), want_out.data());
      for (bool chunked : {false, true}) {
        const std::string what = "kh " + std::to_string(s.key_heads) + " vh " +
                                 std::to_string(s.value_heads) + " dk " + std::to_string(s.dk) +
                                 " dv " + std::to_string(s.dv) + " tokens " +
                                 std::to_string(tokens) + (chunked ? " chunked" : " recurrent");
        std::vector<float> out, state;
        RunGdn(s, in, tokens, chunked, state0, &out, &state);
        ExpectClose(out, want_out, kAtol, kRtol, what + " out");
        ExpectClose(state, want_state, kAtol, kRtol, what + " state");
      }
    }
  }
}

TEST(CudaGatedDeltaRuleTest, ChunkedAgreesWithRecurrent) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(2);
  const GdnShape s{2, 4, 128, 128};
  for (int64_t tokens : {63, 64, 65, 129, 300}) {
    const GdnInputs in = MakeGdnInputs(&rng, s, tokens);
    const std::vector<float> state0(s.value_heads * s.dk * s.dv, 0.0f);
    std::vector<float> out_r, state_r, out_c, state_c;
    RunGdn(s, in, tokens, false, state0, &out_r, &state_r);
    RunGdn(s, in, tokens, true, state0, &out_c, &state_c);
    const std::string what = "tokens " + std::to_string(tokens);
    ExpectClose(out_c, out_r, kAtol, kRtol, what + " out");
    ExpectClose(state_c, state_r, kAtol, kRtol, what + " state");
  }
}

TEST(CudaGatedDeltaRuleTest, StateCarriesAcrossCalls) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(3);
  for (const GdnShape& s : {GdnShape{2, 4, 64, 64}, GdnShape{2, 4, 128, 128}}) {
    for (bool chunked : {false, true}) {
      for (int64_t split : {1, 37, 64, 65}) {
        const int64_t tokens = 150;
        const GdnInputs in = MakeGdnInputs(&rng, s, tokens);
        const std::vector<float> state0(s.value_heads * s.dk * s.dv, 0.0f);
        std::vector<float> out_all, state_all, out_a, state_a, out_b, state_b;
        RunGdn(s, in, tokens, chunked, state0, &out_all, &state_all);
        RunGdn(s, Slice(s, in, 0, split), split, chunked, state0, &out_a, &state_a);
        RunGdn(s, Slice(s, in, split, tokens), tokens - split, chunked, state_a, &out_b, &state_b);
        out_a.insert(out_a.end(), out_b.begin(), out_b.end());
        const std::string what = "dk " + std::to_string(s.dk) + " split " + std::to_string(split) +
                                 (chunked ? " chunked" : "");
        ExpectClose(out_a, out_all, kAtol, kRtol, what + " out");
        ExpectClose(state_b, state_all, kAtol, kRtol, what + " state");
      }
    }
  }
}

TEST(CudaGatedDeltaRuleTest, StepMatchesReferenceAndSingleTokenCalls) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(4);
  for (const GdnShape& s :
       {GdnShape{2, 4, 128, 128}, GdnShape{1, 2, 32, 48}, GdnShape{4, 8, 64, 16}}) {
    const int64_t batch = 5;
    StepCase<GdnInputs> c;
    c.state_size = s.value_heads * s.dk * s.dv;
    c.out_row = s.value_heads * s.dv;
    c.out_atol = kAtol;
    c.label = "dk " + std::to_string(s.dk);
    c.out_name = "out";
    c.make = [&](int64_t rows) { return MakeGdnInputs(&rng, s, rows); };
    c.reference = [&](const GdnInputs& in, int64_t b, float* state, float* out) {
      GdnReference(s, in, b, 1, state, out);
    };
    c.step = [&](const GdnInputs& in, float* const* states, std::vector<float>* out) {
      DeviceBuffer<float> q(in.q), k(in.k), v(in.v), g(in.g), beta(in.beta);
      RunToOutput(
          batch * c.out_row,
          [&](float* o) {
            return GatedDeltaRuleStep(q.get(), k.get(), v.get(), g.get(), beta.get(), batch,
                                      s.key_heads, s.value_heads, s.dk, s.dv, states, o, nullptr);
          },
          out);
    };
    c.single = [&](const GdnInputs& in, int64_t b, const std::vector<float>& state0,
                   std::vector<float>* out, std::vector<float>* state) {
      RunGdn(s, Slice(s, in, b, b + 1), 1, false, state0, out, state);
    };
    ExpectStepMatchesReference(&rng, batch, /*steps=*/6, c);
  }
}

TEST(CudaL2NormScaleTest, MatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  for (int64_t dim : {16, 100, 128, 256}) {
    for (int64_t rows : {1, 9, 300}) {
      std::vector<float> x = Uniform(&rng, rows * dim, -3, 3);
      x[0] = 0.0f;  // an all-but-one-zero row stays finite
      DeviceBuffer<float> dx(x);
      const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
      ASSERT_EQ(L2NormScale(dx.get(), rows, dim, 1e-6f, scale, nullptr), cudaSuccess);
      L2NormRows(&x, dim, scale);
      ExpectClose(dx.Download(), x, 1e-6f, 1e-5f, "dim " + std::to_string(dim));
    }
  }
}

// ---- Mamba-2 SSD ----

struct SsdShape {
  int64_t heads, head_dim, groups, state_size;
};

struct SsdInputs {
  std::vector<float> x, dt, A, B, C, D;
};

SsdInputs MakeSsdInputs(std::mt19937* rng, const SsdShape& s, int64_t tokens) {
  SsdInputs in;
  in.x = Uniform(rng, tokens * s.heads * s.head_dim, -1, 1);
  in.dt = Uniform(rng, tokens * s.heads, -4, 2);
  for (float& d : in.dt) d = cpu::Softplus(d);  // softplus(dt + bias), no clamp
  in.A = Uniform(rng, s.heads, -1, 1.5f);
  for (float& a : in.A) a = -std::exp(a);
  in.B = Uniform(rng, tokens * s.groups * s.state_size, -1, 1);
  in.C = Uniform(rng, tokens * s.groups * s.state_size, -1, 1);
  in.D = Uniform(rng, s.heads, -1, 1);
  return in;
}

// The CPU model's selective scan: h = exp(dt A) h + (x dt) B^T; y = h C + D x.
void SsdReference(const SsdShape& s, const SsdInputs& in, int64_t seq, int64_t tokens, float* state,
                  float* y) {
  const int64_t per_group = s.heads / s.groups, ns = s.state_size;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = seq * tokens + t;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / per_group;
      const float* b = in.B.data() + (row * s.groups + g) * ns;
      const float* c = in.C.data() + (row * s.groups + g) * ns;
      const float dt = in.dt[row * s.heads + h];
      const float decay = std::exp(dt * in.A[h]);
      for (int64_t p = 0; p < s.head_dim; ++p) {
        float* hs = state + (h * s.head_dim + p) * ns;
        const float xv = in.x[(row * s.heads + h) * s.head_dim + p];
        const float xdt = xv * dt;
        float acc = 0.0f;
        for (int64_t n = 0; n < ns; ++n) {
          hs[n] = decay * hs[n] + xdt * b[n];
          acc += hs[n] * c[n];
        }
        y[(row * s.heads + h) * s.head_dim + p] = acc + in.D[h] * xv;
      }
    }
  }
}

void RunSsd(const SsdShape& s, const SsdInputs& in, int64_t tokens, int64_t chunk,
            const std::vector<float>& state0, std::vector<float>* y, std::vector<float>* state) {
  DeviceBuffer<float> x(in.x), dt(in.dt), A(in.A), B(in.B), C(in.C), D(in.D);
  RunFromState(
      state0, tokens * s.heads * s.head_dim,
      [&](float* st, float* out) {
        return MambaSsd(x.get(), dt.get(), A.get(), B.get(), C.get(), D.get(), tokens, s.heads,
                        s.head_dim, s.groups, s.state_size, chunk, st, out, nullptr);
      },
      y, state);
}

SsdInputs Slice(const SsdShape& s, const SsdInputs& in, int64_t t0, int64_t t1) {
  const int64_t bc = s.groups * s.state_size;
  return {Rows(in.x, s.heads * s.head_dim, t0, t1),
          Rows(in.dt, s.heads, t0, t1),
          in.A,
          Rows(in.B, bc, t0, t1),
          Rows(in.C, bc, t0, t1),
          in.D};
}

const SsdShape kSsdShapes[] = {
    {4, 8, 1, 16},    {8, 16, 2, 32}, {8, 64, 8, 128},
    {16, 64, 2, 128}, {6, 24, 2, 48}, {4, 40, 1, 200},
};

TEST(CudaMambaSsdTest, MatchesReferenceRecurrentAndChunked) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(6);
  for (const SsdShape& s : kSsdShapes) {
    for (int64_t tokens : kTokenCounts) {
      const SsdInputs in = MakeSsdInputs(&rng, s, tokens);
      const std::vector<float> state0 =
          Uniform(&rng, s.heads * s.head_dim * s.state_size, -0.5f, 0.5f);
      std::vector<float> want_state = state0, want_y(tokens * s.heads * s.head_dim);
      SsdReference(s, in, 0, tokens, want_state.data(), want_y.data());
      for (int64_t chunk : {0, 64}) {
        const std::string what =
            "heads " + std::to_string(s.heads) + " hd " + std::to_string(s.head_dim) + " groups " +
            std::to_string(s.groups) + " ns " + std::to_string(s.state_size) + " tokens " +
            std::to_string(tokens) + " chunk " + std::to_string(chunk);
        std::vector<float> y, state;
        RunSsd(s, in, tokens, chunk, state0, &y, &state);
        ExpectClose(y, want_y, 1e-4f, kRtol, what + " y");
        ExpectClose(state, want_state, kAtol, kRtol, what + " state");
      }
    }
  }
}

TEST(CudaMambaSsdTest, StateCarriesAcrossCallsAndChunkedAgrees) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  const SsdShape s{16, 64, 2, 128};
  const int64_t tokens = 200;
  for (int64_t chunk : {0, 64}) {
    for (int64_t split : {1, 63, 64, 129}) {
      const SsdInputs in = MakeSsdInputs(&rng, s, tokens);
      const std::vector<float> state0(s.heads * s.head_dim * s.state_size, 0.0f);
      std::vector<float> y_all, state_all, y_a, state_a, y_b, state_b, y_r, state_r;
      RunSsd(s, in, tokens, chunk, state0, &y_all, &state_all);
      RunSsd(s, in, tokens, 0, state0, &y_r, &state_r);
      RunSsd(s, Slice(s, in, 0, split), split, chunk, state0, &y_a, &state_a);
      RunSsd(s, Slice(s, in, split, tokens), tokens - split, chunk, state_a, &y_b, &state_b);
      y_a.insert(y_a.end(), y_b.begin(), y_b.end());
      const std::string what = "chunk " + std::to_string(chunk) + " split " + std::to_string(split);
      ExpectClose(y_a, y_all, 1e-4f, kRtol, what + " y");
      ExpectClose(state_b, state_all, kAtol, kRtol, what + " state");
      ExpectClose(y_all, y_r, 1e-4f, kRtol, what + " y vs recurrent");
      ExpectClose(state_all, state_r, kAtol, kRtol, what + " state vs recurrent");
    }
  }
}

TEST(CudaMambaSsdTest, StepMatchesReferenceAndSingleTokenCalls) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(8);
  for (const SsdShape& s :
       {SsdShape{16, 64, 2, 128}, SsdShape{8, 8, 8, 16}, SsdShape{6, 24, 1, 48}}) {
    const int64_t batch = 4;
    StepCase<SsdInputs> c;
    c.state_size = s.heads * s.head_dim * s.state_size;
    c.out_row = s.heads * s.head_dim;
    c.out_atol = 1e-4f;
    c.label = "ns " + std::to_string(s.state_size);
    c.out_name = "y";
    c.make = [&](int64_t rows) { return MakeSsdInputs(&rng, s, rows); };
    c.reference = [&](const SsdInputs& in, int64_t b, float* state, float* y) {
      SsdReference(s, in, b, 1, state, y);
    };
    c.step = [&](const SsdInputs& in, float* const* states, std::vector<float>* y) {
      DeviceBuffer<float> x(in.x), dt(in.dt), A(in.A), B(in.B), C(in.C), D(in.D);
      RunToOutput(
          batch * c.out_row,
          [&](float* out) {
            return MambaSsdStep(x.get(), dt.get(), A.get(), B.get(), C.get(), D.get(), batch,
                                s.heads, s.head_dim, s.groups, s.state_size, states, out, nullptr);
          },
          y);
    };
    c.single = [&](const SsdInputs& in, int64_t b, const std::vector<float>& state0,
                   std::vector<float>* y, std::vector<float>* state) {
      RunSsd(s, Slice(s, in, b, b + 1), 1, 0, state0, y, state);
    };
    ExpectStepMatchesReference(&rng, batch, /*steps=*/5, c);
  }
}

// ---- Routers ----

// The CPU models' selection: partial_sort by descending key, ties to the lower id.
std::vector<int32_t> TopK(const float* key, int64_t experts, int64_t k) {
  std::vector<int32_t> order(experts);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [key](int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
  });
  order.resize(k);
  return order;
}

// Random logits with planted exact ties and near-ties (a gap of 1e-4, far above the rounding
// differences of exp between the host and the device).
std::vector<float> RouterLogits(std::mt19937* rng, int64_t tokens, int64_t experts) {
  std::vector<float> l = Uniform(rng, tokens * experts, -3, 3);
  std::uniform_int_distribution<int64_t> pick(0, experts - 1);
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = l.data() + t * experts;
    if (experts < 4) continue;
    const int64_t top = std::max_element(row, row + experts) - row;
    switch (t % 4) {
      case 0:  // exact tie with the maximum
        row[pick(*rng)] = row[top];
        break;
      case 1:  // near-tie with the maximum
        row[pick(*rng)] = row[top] - 1e-4f;
        break;
      case 2:  // a run of equal values at the top
        for (int i = 0; i < 3; ++i) row[pick(*rng)] = 3.5f;
        break;
      default:
        break;
    }
  }
  return l;
}

TEST(CudaRouterTest, SoftmaxTopKMatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(9);
  for (int64_t experts : {4, 8, 64, 128, 512}) {
    for (int64_t k : {1, 2, 8}) {
      if (k > experts) continue;
      const int64_t tokens = 37;
      const std::vector<float> logits = RouterLogits(&rng, tokens, experts);
      std::vector<int32_t> want_ids(tokens * k);
      std::vector<float> want_w(tokens * k);
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<float> p(logits.begin() + t * experts, logits.begin() + (t + 1) * experts);
        cpu::Softmax(p.data(), experts);
        const std::vector<int32_t> top = TopK(p.data(), experts, k);
        float sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += p[top[j]];
        for (int64_t j = 0; j < k; ++j) {
          want_ids[t * k + j] = top[j];
          want_w[t * k + j] = p[top[j]] / sum;
        }
      }
      DeviceBuffer<float> dl(logits), dw(tokens * k);
      DeviceBuffer<int32_t> di(tokens * k);
      ASSERT_EQ(RouteSoftmaxTopK(dl.get(), tokens, experts, k, di.get(), dw.get(), nullptr),
                cudaSuccess);
      const std::string what = "experts " + std::to_string(experts) + " k " + std::to_string(k);
      EXPECT_EQ(di.Download(), want_ids) << what;
      ExpectClose(dw.Download(), want_w, 1e-6f, 1e-5f, what + " weights");
    }
  }
}

TEST(CudaRouterTest, SigmoidTopKMatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(10);
  for (int64_t experts : {4, 8, 64, 128, 512}) {
    for (int64_t k : {1, 2, 6, 8}) {
      for (bool with_bias : {false, true}) {
        if (k > experts) continue;
        const int64_t tokens = 41;
        const float scaling = 2.5f;
        const std::vector<float> logits = RouterLogits(&rng, tokens, experts);
        // Bias on a coarse grid so planted logit ties stay exact ties of score + bias.
        std::vector<float> bias(experts, 0.0f);
        if (with_bias) {
          std::uniform_int_distribution<int> level(-4, 4);
          for (float& b : bias) b = 0.125f * static_cast<float>(level(rng));
        }
        std::vector<int32_t> want_ids(tokens * k);
        std::vector<float> want_w(tokens * k);
        std::vector<float> score(experts), choice(experts);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t e = 0; e < experts; ++e) {
            score[e] = cpu::Sigmoid(logits[t * experts + e]);
            choice[e] = score[e] + bias[e];
          }
          const std::vector<int32_t> top = TopK(choice.data(), experts, k);
          float sum = 0;
          for (int64_t j = 0; j < k; ++j) sum += score[top[j]];
          const float norm = 1.0f / (sum + 1e-20f);
          for (int64_t j = 0; j < k; ++j) {
            want_ids[t * k + j] = top[j];
            want_w[t * k + j] = score[top[j]] * norm * scaling;
          }
        }
        DeviceBuffer<float> dl(logits), db(bias), dw(tokens * k);
        DeviceBuffer<int32_t> di(tokens * k);
        ASSERT_EQ(RouteSigmoidTopK(dl.get(), with_bias ? db.get() : nullptr, tokens, experts, k,
                                   scaling, di.get(), dw.get(), nullptr),
                  cudaSuccess);
        const std::string what = "experts " + std::to_string(experts) + " k " + std::to_string(k) +
                                 (with_bias ? " bias" : "");
        EXPECT_EQ(di.Download(), want_ids) << what;
        ExpectClose(dw.Download(), want_w, 1e-6f, 1e-5f, what + " weights");
      }
    }
  }
}

// ---- Routed experts ----

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even (inputs are finite)
  return static_cast<uint16_t>(bits >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

std::vector<uint16_t> RandomBf16(std::mt19937* rng, size_t n, float range) {
  const std::vector<float> f = Uniform(rng, n, -range, range);
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = ToBf16(f[i]);
  return b;
}

struct MoeCase {
  int64_t tokens, hidden, inter, experts, k;
  bool swiglu;
};

TEST(CudaMoeExpertsTest, MatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(11);
  const MoeCase cases[] = {
      {1, 64, 32, 8, 1, true},     {5, 256, 96, 16, 2, true}, {33, 128, 64, 16, 8, true},
      {3, 100, 50, 8, 2, true},    {1, 64, 32, 8, 1, false},  {5, 256, 96, 16, 2, false},
      {33, 128, 64, 16, 8, false}, {7, 72, 44, 12, 6, false}, {2, 512, 256, 64, 8, true},
  };
  for (const MoeCase& c : cases) {
    const int64_t up_rows = (c.swiglu ? 2 : 1) * c.inter;
    const std::vector<uint16_t> up = RandomBf16(&rng, c.experts * up_rows * c.hidden, 0.1f);
    const std::vector<uint16_t> down = RandomBf16(&rng, c.experts * c.hidden * c.inter, 0.1f);
    const std::vector<float> x = Uniform(&rng, c.tokens * c.hidden, -1, 1);
    const std::vector<float> out0 = Uniform(&rng, c.tokens * c.hidden, -1, 1);
    // Distinct experts per token and positive weights.
    std::vector<int32_t> ids(c.tokens * c.k);
    std::vector<float> w = Uniform(&rng, c.tokens * c.k, 0.05f, 1.0f);
    std::vector<int32_t> all(c.experts);
    std::iota(all.begin(), all.end(), 0);
    for (int64_t t = 0; t < c.tokens; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      std::copy(all.begin(), all.begin() + c.k, ids.begin() + t * c.k);
    }

    // Reference: out[t] += sum_j w * down_e(act(up_e x[t])), slots in order.
    std::vector<float> want = out0, a(c.inter);
    for (int64_t t = 0; t < c.tokens; ++t) {
      const float* xt = x.data() + t * c.hidden;
      for (int64_t j = 0; j < c.k; ++j) {
        const int64_t e = ids[t * c.k + j];
        const uint16_t* ue = up.data() + e * up_rows * c.hidden;
        auto dot = [&](int64_t row) {
          float acc = 0;
          for (int64_t d = 0; d < c.hidden; ++d) acc += FromBf16(ue[row * c.hidden + d]) * xt[d];
          return acc;
        };
        for (int64_t i = 0; i < c.inter; ++i) {
          if (c.swiglu) {
            a[i] = cpu::Silu(dot(i)) * dot(c.inter + i);
          } else {
            const float u = dot(i);
            a[i] = u > 0.0f ? u * u : 0.0f;
          }
        }
        const uint16_t* de = down.data() + e * c.hidden * c.inter;
        for (int64_t d = 0; d < c.hidden; ++d) {
          float acc = 0;
          for (int64_t i = 0; i < c.inter; ++i) acc += FromBf16(de[d * c.inter + i]) * a[i];
          want[t * c.hidden + d] += w[t * c.k + j] * acc;
        }
      }
    }

    DeviceBuffer<float> dx(x), dw(w), dout(out0), scratch(c.tokens * c.k * c.inter);
    DeviceBuffer<int32_t> di(ids);
    DeviceBuffer<uint16_t> dup(up), ddown(down);
    ASSERT_EQ(MoeExperts(dx.get(), c.tokens, c.hidden, di.get(), dw.get(), c.k, dup.get(),
                         ddown.get(), c.inter, c.swiglu, scratch.get(), dout.get(), nullptr),
              cudaSuccess);
    const std::string what = "tokens " + std::to_string(c.tokens) + " hidden " +
                             std::to_string(c.hidden) + " inter " + std::to_string(c.inter) +
                             " k " + std::to_string(c.k) + (c.swiglu ? " swiglu" : " relu2");
    ExpectClose(dout.Download(), want, 1e-5f, 1e-4f, what);
    // Deterministic: a second run from the same start gives the same bits.
    const std::vector<float> first = dout.Download();
    dout.Upload(out0);
    ASSERT_EQ(MoeExperts(dx.get(), c.tokens, c.hidden, di.get(), dw.get(), c.k, dup.get(),
                         ddown.get(), c.inter, c.swiglu, scratch.get(), dout.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(dout.Download(), first) << what << ": not deterministic";
  }
}

TEST(CudaMoeExpertsTest, RouterThenExpertsMatchesCpuPipeline) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  // Sigmoid router output fed straight into relu2 experts, as the Nemotron-H layer does.
  std::mt19937 rng(12);
  const int64_t tokens = 9, hidden = 128, inter = 64, experts = 16, k = 4;
  const std::vector<float> logits = Uniform(&rng, tokens * experts, -2, 2);
  const std::vector<uint16_t> up = RandomBf16(&rng, experts * inter * hidden, 0.1f);
  const std::vector<uint16_t> down = RandomBf16(&rng, experts * hidden * inter, 0.1f);
  const std::vector<float> x = Uniform(&rng, tokens * hidden, -1, 1);
  std::vector<float> want(tokens * hidden, 0.0f), a(inter), score(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) score[e] = cpu::Sigmoid(logits[t * experts + e]);
    const std::vector<int32_t> top = TopK(score.data(), experts, k);
    float sum = 0;
    for (int32_t e : top) sum += score[e];
    for (int32_t e : top) {
      for (int64_t i = 0; i < inter; ++i) {
        float u = 0;
        for (int64_t d = 0; d < hidden; ++d) {
          u += FromBf16(up[(e * inter + i) * hidden + d]) * x[t * hidden + d];
        }
        a[i] = u > 0.0f ? u * u : 0.0f;
      }
      for (int64_t d = 0; d < hidden; ++d) {
        float acc = 0;
        for (int64_t i = 0; i < inter; ++i)
          acc += FromBf16(down[(e * hidden + d) * inter + i]) * a[i];
        want[t * hidden + d] += score[e] / (sum + 1e-20f) * 2.5f * acc;
      }
    }
  }
  DeviceBuffer<float> dl(logits), dw(tokens * k), dx(x), dout(tokens * hidden),
      scratch(tokens * k * inter);
  DeviceBuffer<int32_t> di(tokens * k);
  DeviceBuffer<uint16_t> dup(up), ddown(down);
  ASSERT_EQ(cudaMemset(dout.get(), 0, tokens * hidden * sizeof(float)), cudaSuccess);
  ASSERT_EQ(
      RouteSigmoidTopK(dl.get(), nullptr, tokens, experts, k, 2.5f, di.get(), dw.get(), nullptr),
      cudaSuccess);
  ASSERT_EQ(MoeExperts(dx.get(), tokens, hidden, di.get(), dw.get(), k, dup.get(), ddown.get(),
                       inter, /*swiglu=*/false, scratch.get(), dout.get(), nullptr),
            cudaSuccess);
  ExpectClose(dout.Download(), want, 1e-5f, 1e-4f, "router + experts");
}

}  // namespace
}  // namespace tandem::workers::cuda
