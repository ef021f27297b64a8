// Tests of the basic CUDA kernels (workers/cuda/kernels_basic.cu) against plain C++ references.
// Every test skips when no CUDA device is visible.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/gpu/device_buffer.h"
#include "workers/cpu/cpu_kernels.h"
#include "workers/cuda/cuda_kernels.h"

namespace tandem::workers::cuda {
namespace {

using testing::DeviceBuffer;

float ScaleOf(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

#define SKIP_WITHOUT_CUDA()                                \
  do {                                                     \
    int n = 0;                                             \
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) { \
      GTEST_SKIP() << "no CUDA device";                    \
    }                                                      \
  } while (0)

#define CUDA_OK(expr)                                               \
  do {                                                              \
    const cudaError_t status_ = (expr);                             \
    ASSERT_EQ(status_, cudaSuccess) << cudaGetErrorString(status_); \
  } while (0)

// Host BF16 helpers (round to nearest even; no NaNs in these tests).
bf16 ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>(u >> 16);
}
float FromBf16(bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<bf16> RandomBf16(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::vector<float> f = RandomFloats(n, seed, scale);
  std::vector<bf16> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = ToBf16(f[i] + offset);
  return b;
}

std::vector<float> ToFloats(const std::vector<bf16>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = FromBf16(b[i]);
  return f;
}

float HostSilu(float x) { return x / (1.0f + std::exp(-x)); }

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rtol,
                 float atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
      if (++failures >= 10) return;
    }
  }
}

// ---- Embedding, cast, elementwise ----

TEST(CudaKernelsBasicTest, EmbeddingGather) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 37, dim = 129;
  const std::vector<bf16> table = RandomBf16(vocab * dim, 1);
  const std::vector<int32_t> ids = {5, 0, 36, 5, 17, 2, 35, 1, 9, 9, 30};
  const int64_t n = static_cast<int64_t>(ids.size());
  DeviceBuffer<bf16> d_table(table);
  DeviceBuffer<int32_t> d_ids(ids);
  DeviceBuffer<float> d_out(n * dim);
  CUDA_OK(EmbeddingGather(d_table.get(), d_ids.get(), n, dim, d_out.get(), nullptr));
  const std::vector<float> out = d_out.Download();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(out[i * dim + d], FromBf16(table[ids[i] * dim + d])) << i << " " << d;
    }
  }
}

TEST(CudaKernelsBasicTest, CastToBf16RoundsToNearestEven) {
  SKIP_WITHOUT_CUDA();
  std::vector<float> in = RandomFloats(1001, 2, 100.0f);
  // Exact ties (round to even both ways), the largest finite float, zeros and infinities.
  const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80ffffu, 0x7f7fffffu,
                               0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x00000001u};
  for (uint32_t s : specials) {
    float f;
    std::memcpy(&f, &s, 4);
    in.push_back(f);
  }
  DeviceBuffer<float> d_in(in);
  DeviceBuffer<bf16> d_out(in.size());
  CUDA_OK(CastToBf16(d_in.get(), static_cast<int64_t>(in.size()), d_out.get(), nullptr));
  const std::vector<bf16> out = d_out.Download();
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &in[i], 4);
    const bf16 want = ToBf16(in[i]);  // FLT_MAX rounds up to infinity
    ASSERT_EQ(out[i], want) << i << " value " << in[i];
  }
}

TEST(CudaKernelsBasicTest, AddSiluGateRelu2) {
  SKIP_WITHOUT_CUDA();
  const int64_t rows = 7, cols = 333, count = 4099;
  const std::vector<float> a = RandomFloats(count, 3), b = RandomFloats(count, 4);
  const std::vector<float> fused = RandomFloats(rows * 2 * cols, 5, 3.0f);
  DeviceBuffer<float> d_a(a), d_b(b), d_out(count), d_fused(fused), d_gate(rows * cols);
  CUDA_OK(Add(d_a.get(), d_b.get(), count, d_out.get(), nullptr));
  std::vector<float> want(count);
  for (int64_t i = 0; i < count; ++i) want[i] = a[i] + b[i];
  ExpectClose(d_out.Download(), want, 0, 0, "add");
  // In place.
  CUDA_OK(Add(d_a.get(), d_b.get(), count, d_a.get(), nullptr));
  ExpectClose(d_a.Download(), want, 0, 0, "add in place");

  CUDA_OK(SiluGate(d_fused.get(), rows, cols, d_gate.get(), nullptr));
  std::vector<float> want_gate(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      want_gate[r * cols + c] = HostSilu(fused[r * 2 * cols + c]) * fused[r * 2 * cols + cols + c];
    }
  }
  ExpectClose(d_gate.Download(), want_gate, 2e-6f, 1e-7f, "silu gate");

  std::vector<float> want_relu(count);
  for (int64_t i = 0; i < count; ++i) {
    const float r = std::max(b[i], 0.0f);
    want_relu[i] = r * r;
  }
  CUDA_OK(Relu2(d_b.get(), count, d_b.get(), nullptr));  // in place
  ExpectClose(d_b.Download(), want_relu, 0, 0, "relu2");
}

// ---- Norms ----

TEST(CudaKernelsBasicTest, RmsNormMatchesNative) {
  SKIP_WITHOUT_CUDA();
  for (int64_t dim : {1, 31, 257, 2048, 2688}) {
    const int64_t rows = 7;
    const std::vector<float> x = RandomFloats(rows * dim, 6 + dim, 2.0f);
    const std::vector<bf16> w = RandomBf16(dim, 7 + dim, 0.2f, 0.5f);
    const std::vector<float> wf = ToFloats(w);
    DeviceBuffer<float> d_x(x), d_out(rows * dim);
    DeviceBuffer<bf16> d_w(w);
    for (int mode = 0; mode < 3; ++mode) {
      const bool has_weight = mode > 0, one_plus = mode == 2;
      std::vector<float> want(rows * dim);
      cpu::RmsNorm(x.data(), rows, dim, has_weight ? wf.data() : nullptr, 1e-6f, one_plus,
                   want.data());
      CUDA_OK(RmsNorm(d_x.get(), rows, dim, has_weight ? d_w.get() : nullptr, 1e-6f, one_plus,
                      d_out.get(), nullptr));
      ExpectClose(d_out.Download(), want, 1e-5f, 1e-6f,
                  "rmsnorm dim " + std::to_string(dim) + " mode " + std::to_string(mode));
    }
    // In place, (1 + w).
    std::vector<float> want(rows * dim);
    cpu::RmsNorm(x.data(), rows, dim, wf.data(), 1e-5f, true, want.data());
    CUDA_OK(RmsNorm(d_x.get(), rows, dim, d_w.get(), 1e-5f, true, d_x.get(), nullptr));
    ExpectClose(d_x.Download(), want, 1e-5f, 1e-6f, "rmsnorm in place");
  }
}

TEST(CudaKernelsBasicTest, GatedRmsNorm) {
  SKIP_WITHOUT_CUDA();
  for (int64_t dim : {128, 131}) {
    const int64_t rows = 9;
    const std::vector<float> x = RandomFloats(rows * dim, 8), z = RandomFloats(rows * dim, 9, 3);
    const std::vector<bf16> w = RandomBf16(dim, 10, 0.3f, 1.0f);
    const std::vector<float> wf = ToFloats(w);
    std::vector<float> want(rows * dim);
    cpu::RmsNorm(x.data(), rows, dim, wf.data(), 1e-6f, false, want.data());
    for (int64_t i = 0; i < rows * dim; ++i) want[i] *= HostSilu(z[i]);
    DeviceBuffer<float> d_x(x), d_z(z), d_out(rows * dim);
    DeviceBuffer<bf16> d_w(w);
    CUDA_OK(GatedRmsNorm(d_x.get(), d_z.get(), rows, dim, d_w.get(), 1e-6f, d_out.get(), nullptr));
    ExpectClose(d_out.Download(), want, 1e-5f, 1e-6f, "gated rmsnorm " + std::to_string(dim));
    // In place on x.
    CUDA_OK(GatedRmsNorm(d_x.get(), d_z.get(), rows, dim, d_w.get(), 1e-6f, d_x.get(), nullptr));
    ExpectClose(d_x.Download(), want, 1e-5f, 1e-6f, "gated rmsnorm in place");
  }
}

TEST(CudaKernelsBasicTest, GroupedGatedRmsNorm) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t rows, dim, groups;
  };
  for (const Case& c : {Case{5, 4096, 8}, Case{3, 96, 3}, Case{4, 77, 1}}) {
    const int64_t n = c.rows * c.dim, group = c.dim / c.groups;
    const std::vector<float> x = RandomFloats(n, 11), z = RandomFloats(n, 12, 2);
    const std::vector<bf16> w = RandomBf16(c.dim, 13, 0.3f, 1.0f);
    const std::vector<float> wf = ToFloats(w);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] * HostSilu(z[i]);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t g = 0; g < c.groups; ++g) {
        float* y = want.data() + r * c.dim + g * group;
        cpu::RmsNorm(y, 1, group, wf.data() + g * group, 1e-5f, false, y);
      }
    }
    DeviceBuffer<float> d_x(x), d_z(z), d_out(n);
    DeviceBuffer<bf16> d_w(w);
    CUDA_OK(GroupedGatedRmsNorm(d_x.get(), d_z.get(), c.rows, c.dim, c.groups, d_w.get(), 1e-5f,
                                d_out.get(), nullptr));
    ExpectClose(d_out.Download(), want, 1e-5f, 1e-6f,
                "grouped gated rmsnorm dim " + std::to_string(c.dim));
  }
}

// ---- RoPE ----

TEST(CudaKernelsBasicTest, RotaryEmbeddingPartialNeox) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t tokens, heads, head_dim, rotary_dim;
    float theta;
  };
  for (const Case& c :
       {Case{13, 3, 256, 64, 1e7f}, Case{5, 2, 64, 64, 1e4f}, Case{9, 4, 128, 32, 5e6f}}) {
    const int64_t n = c.tokens * c.heads * c.head_dim, half = c.rotary_dim / 2;
    const std::vector<float> x = RandomFloats(n, 14);
    std::mt19937 rng(15);
    std::vector<int32_t> pos(c.tokens);
    for (int32_t& p : pos) p = static_cast<int32_t>(rng() % 3000);
    pos[0] = 0;
    std::vector<float> want = x;
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        // The reference's fp32 inv_freq and angle; sin/cos correctly rounded.
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.rotary_dim);
        const float inv_freq = 1.0f / std::pow(c.theta, exponent);
        const float angle = static_cast<float>(pos[t]) * inv_freq;
        const float cs = static_cast<float>(std::cos(static_cast<double>(angle)));
        const float sn = static_cast<float>(std::sin(static_cast<double>(angle)));
        for (int64_t h = 0; h < c.heads; ++h) {
          float* v = want.data() + (t * c.heads + h) * c.head_dim;
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * cs - x2 * sn;
          v[i + half] = x2 * cs + x1 * sn;
        }
      }
    }
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<int32_t> d_pos(pos);
    CUDA_OK(RotaryEmbedding(d_x.get(), d_pos.get(), c.tokens, c.heads, c.head_dim, c.rotary_dim,
                            c.theta, nullptr));
    const std::vector<float> got = d_x.Download();
    // A 1-ulp difference in inv_freq moves an angle of ~3000 by ~2e-4.
    ExpectClose(got, want, 1e-5f, 5e-4f, "rope head_dim " + std::to_string(c.head_dim));
    // Dims past rotary_dim pass through bit-exactly.
    for (int64_t th = 0; th < c.tokens * c.heads; ++th) {
      for (int64_t d = c.rotary_dim; d < c.head_dim; ++d) {
        ASSERT_EQ(got[th * c.head_dim + d], x[th * c.head_dim + d]);
      }
    }
  }
}

// ---- Causal conv1d ----

// Reference: x [tokens][channels], state [channels][K-1] (updated), weight [channels][K].
std::vector<float> RefConv(const std::vector<float>& x, int64_t tokens, int64_t channels, int64_t k,
                           const std::vector<float>& w, const std::vector<float>* bias,
                           std::vector<float>* state, bool silu) {
  std::vector<float> out(tokens * channels);
  std::vector<float> next(state->size());
  for (int64_t c = 0; c < channels; ++c) {
    auto in = [&](int64_t i) {
      return i < 0 ? (*state)[c * (k - 1) + (k - 1) + i] : x[i * channels + c];
    };
    for (int64_t t = 0; t < tokens; ++t) {
      float acc = bias != nullptr ? (*bias)[c] : 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += w[c * k + j] * in(t - (k - 1) + j);
      out[t * channels + c] = silu ? HostSilu(acc) : acc;
    }
    for (int64_t j = 0; j < k - 1; ++j) next[c * (k - 1) + j] = in(tokens - (k - 1) + j);
  }
  *state = next;
  return out;
}

TEST(CudaKernelsBasicTest, CausalConv1dMatchesReference) {
  SKIP_WITHOUT_CUDA();
  const int64_t channels = 300;
  for (int64_t k : {4, 2, 1, 7}) {
    for (int64_t tokens : {1, 2, 3, 70, 129}) {
      for (bool with_bias : {false, true}) {
        const bool silu = with_bias;
        const std::vector<float> x = RandomFloats(tokens * channels, 16 + tokens);
        const std::vector<bf16> w = RandomBf16(channels * k, 17 + k, 0.5f);
        const std::vector<bf16> b = RandomBf16(channels, 18, 0.5f);
        std::vector<float> state = RandomFloats(channels * (k - 1), 19 + k);
        const std::vector<float> wf = ToFloats(w), bf = ToFloats(b);
        DeviceBuffer<float> d_x(x), d_state(state), d_out(tokens * channels);
        DeviceBuffer<bf16> d_w(w), d_b(b);
        const std::vector<float> want =
            RefConv(x, tokens, channels, k, wf, with_bias ? &bf : nullptr, &state, silu);
        CUDA_OK(CausalConv1d(d_x.get(), tokens, channels, k, d_w.get(),
                             with_bias ? d_b.get() : nullptr, d_state.get(), silu, d_out.get(),
                             nullptr));
        const std::string what = "conv k " + std::to_string(k) + " tokens " +
                                 std::to_string(tokens) + " bias " + std::to_string(with_bias);
        ExpectClose(d_out.Download(), want, 1e-5f, 1e-6f, what);
        ExpectClose(d_state.Download(), state, 0, 0, what + " state");
      }
    }
  }
}

TEST(CudaKernelsBasicTest, CausalConv1dStateCarriesAcrossCalls) {
  SKIP_WITHOUT_CUDA();
  const int64_t channels = 257, k = 4, t1 = 5, t2 = 130, total = t1 + t2;
  const std::vector<float> x = RandomFloats(total * channels, 20);
  const std::vector<bf16> w = RandomBf16(channels * k, 21, 0.5f), b = RandomBf16(channels, 22);
  DeviceBuffer<bf16> d_w(w), d_b(b);
  // One call over everything, from zeros.
  DeviceBuffer<float> d_x(x), d_state_one(channels * (k - 1)), d_out_one(total * channels);
  CUDA_OK(CausalConv1d(d_x.get(), total, channels, k, d_w.get(), d_b.get(), d_state_one.get(), true,
                       d_out_one.get(), nullptr));
  // Two calls.
  DeviceBuffer<float> d_state_two(channels * (k - 1)), d_out_two(total * channels);
  CUDA_OK(CausalConv1d(d_x.get(), t1, channels, k, d_w.get(), d_b.get(), d_state_two.get(), true,
                       d_out_two.get(), nullptr));
  CUDA_OK(CausalConv1d(d_x.get() + t1 * channels, t2, channels, k, d_w.get(), d_b.get(),
                       d_state_two.get(), true, d_out_two.get() + t1 * channels, nullptr));
  ExpectClose(d_out_two.Download(), d_out_one.Download(), 0, 0, "split conv output");
  ExpectClose(d_state_two.Download(), d_state_one.Download(), 0, 0, "split conv state");
}

TEST(CudaKernelsBasicTest, CausalConv1dStepEqualsTokenByTokenConv) {
  SKIP_WITHOUT_CUDA();
  const int64_t channels = 193, k = 4, batch = 3, tokens = 6;
  const std::vector<bf16> w = RandomBf16(channels * k, 23, 0.5f), b = RandomBf16(channels, 24);
  DeviceBuffer<bf16> d_w(w), d_b(b);
  // Per sequence: x [tokens][channels], its own random starting state.
  std::vector<std::vector<float>> xs, states;
  for (int64_t s = 0; s < batch; ++s) {
    xs.push_back(RandomFloats(tokens * channels, 25 + s));
    states.push_back(RandomFloats(channels * (k - 1), 30 + s));
  }
  // Reference: the prefill conv over each sequence's tokens.
  std::vector<std::vector<float>> want_out, want_state;
  for (int64_t s = 0; s < batch; ++s) {
    DeviceBuffer<float> d_x(xs[s]), d_state(states[s]), d_out(tokens * channels);
    CUDA_OK(CausalConv1d(d_x.get(), tokens, channels, k, d_w.get(), d_b.get(), d_state.get(), true,
                         d_out.get(), nullptr));
    want_out.push_back(d_out.Download());
    want_state.push_back(d_state.Download());
  }
  // The step kernel over the batch, token by token; states in one pool, in reverse order.
  std::vector<float> pool(batch * channels * (k - 1));
  for (int64_t s = 0; s < batch; ++s) {
    std::copy(states[s].begin(), states[s].end(),
              pool.begin() + (batch - 1 - s) * channels * (k - 1));
  }
  DeviceBuffer<float> d_pool(pool);
  std::vector<float*> ptrs(batch);
  for (int64_t s = 0; s < batch; ++s) ptrs[s] = d_pool.get() + (batch - 1 - s) * channels * (k - 1);
  DeviceBuffer<float*> d_ptrs(ptrs);
  DeviceBuffer<float> d_x(batch * channels), d_out(batch * channels);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> x(batch * channels);
    for (int64_t s = 0; s < batch; ++s) {
      std::copy(xs[s].begin() + t * channels, xs[s].begin() + (t + 1) * channels,
                x.begin() + s * channels);
    }
    ASSERT_EQ(cudaMemcpy(d_x.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    CUDA_OK(CausalConv1dStep(d_x.get(), batch, channels, k, d_w.get(), d_b.get(), d_ptrs.get(),
                             true, d_out.get(), nullptr));
    const std::vector<float> out = d_out.Download();
    for (int64_t s = 0; s < batch; ++s) {
      ExpectClose(std::vector<float>(out.begin() + s * channels, out.begin() + (s + 1) * channels),
                  std::vector<float>(want_out[s].begin() + t * channels,
                                     want_out[s].begin() + (t + 1) * channels),
                  1e-6f, 1e-7f, "step t " + std::to_string(t) + " seq " + std::to_string(s));
    }
  }
  const std::vector<float> final_pool = d_pool.Download();
  for (int64_t s = 0; s < batch; ++s) {
    ExpectClose(std::vector<float>(final_pool.begin() + (batch - 1 - s) * channels * (k - 1),
                                   final_pool.begin() + (batch - s) * channels * (k - 1)),
                want_state[s], 0, 0, "step state seq " + std::to_string(s));
  }
}

// ---- Paged KV cache and attention ----

int64_t BlockFloats(int64_t kv_heads, int64_t head_dim) {
  return 2 * kKvBlockTokens * kv_heads * head_dim;
}

// Offset of K (v = false) or V of (position, head) in the cache, per the documented layout.
int64_t CacheOffset(const std::vector<int32_t>& table, int64_t pos, int64_t kv_heads,
                    int64_t head_dim, int64_t head, bool v) {
  return table[pos / kKvBlockTokens] * BlockFloats(kv_heads, head_dim) +
         (v ? kKvBlockTokens * kv_heads * head_dim : 0) +
         ((pos % kKvBlockTokens) * kv_heads + head) * head_dim;
}

// A block table of `blocks` distinct, shuffled ids out of a pool of `pool` blocks.
std::vector<int32_t> ShuffledTable(int64_t blocks, int64_t pool, uint32_t seed) {
  std::vector<int32_t> ids(pool);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  ids.resize(blocks);
  return ids;
}

TEST(CudaKernelsBasicTest, KvCacheWriteLayout) {
  SKIP_WITHOUT_CUDA();
  const int64_t kv_heads = 2, head_dim = 64, start = 13, tokens = 30, pool = 8;
  const std::vector<int32_t> table = {5, 2, 7, 0};
  const std::vector<float> k = RandomFloats(tokens * kv_heads * head_dim, 40);
  const std::vector<float> v = RandomFloats(tokens * kv_heads * head_dim, 41);
  std::vector<float> cache(pool * BlockFloats(kv_heads, head_dim), -7.0f);
  std::vector<float> want = cache;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t src = (t * kv_heads + h) * head_dim + d;
        want[CacheOffset(table, start + t, kv_heads, head_dim, h, false) + d] = k[src];
        want[CacheOffset(table, start + t, kv_heads, head_dim, h, true) + d] = v[src];
      }
    }
  }
  DeviceBuffer<float> d_k(k), d_v(v), d_cache(cache);
  DeviceBuffer<int32_t> d_table(table);
  CUDA_OK(KvCacheWrite(d_k.get(), d_v.get(), tokens, start, kv_heads, head_dim, d_table.get(),
                       d_cache.get(), nullptr));
  ExpectClose(d_cache.Download(), want, 0, 0, "kv cache");
}

// Reference attention of one query row against keys/values [len][head_dim] gathered from the
// host cache; double accumulation.
void RefAttentionRow(const float* q, const std::vector<float>& cache,
                     const std::vector<int32_t>& table, int64_t len, int64_t kv_heads,
                     int64_t head_dim, int64_t kvh, float scale, float* out) {
  std::vector<double> s(len);
  double m = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    const float* kr = &cache[CacheOffset(table, j, kv_heads, head_dim, kvh, false)];
    double dot = 0;
    for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * kr[d];
    s[j] = dot * scale;
    m = std::max(m, s[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - m));
  for (int64_t d = 0; d < head_dim; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < len; ++j) {
      acc += s[j] * cache[CacheOffset(table, j, kv_heads, head_dim, kvh, true) + d];
    }
    out[d] = static_cast<float>(acc / sum);
  }
}

struct PrefillCase {
  int64_t head_dim, heads, kv_heads, tokens, start;
};

class AttentionPrefillTest : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(AttentionPrefillTest, MatchesReference) {
  SKIP_WITHOUT_CUDA();
  const PrefillCase c = GetParam();
  const int64_t total = c.start + c.tokens;
  const int64_t blocks = (total + kKvBlockTokens - 1) / kKvBlockTokens;
  const std::vector<int32_t> table = ShuffledTable(blocks, blocks + 5, 50 + total);
  const int64_t pool = blocks + 5, kv_row = c.kv_heads * c.head_dim;
  // The cache: garbage everywhere, the first `start` positions written on the host, the new
  // tokens by KvCacheWrite. Keys are scaled up so the softmax is far from uniform.
  std::vector<float> cache = RandomFloats(pool * BlockFloats(c.kv_heads, c.head_dim), 51, 100.0f);
  const std::vector<float> old_k = RandomFloats(c.start * kv_row, 52, 0.5f);
  const std::vector<float> old_v = RandomFloats(c.start * kv_row, 53);
  for (int64_t t = 0; t < c.start; ++t) {
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      for (int64_t d = 0; d < c.head_dim; ++d) {
        cache[CacheOffset(table, t, c.kv_heads, c.head_dim, h, false) + d] =
            old_k[(t * c.kv_heads + h) * c.head_dim + d];
        cache[CacheOffset(table, t, c.kv_heads, c.head_dim, h, true) + d] =
            old_v[(t * c.kv_heads + h) * c.head_dim + d];
      }
    }
  }
  const std::vector<float> k = RandomFloats(c.tokens * kv_row, 54, 0.5f);
  const std::vector<float> v = RandomFloats(c.tokens * kv_row, 55);
  const std::vector<float> q = RandomFloats(c.tokens * c.heads * c.head_dim, 56, 2.0f);
  DeviceBuffer<float> d_cache(cache), d_k(k), d_v(v), d_q(q),
      d_out(c.tokens * c.heads * c.head_dim);
  DeviceBuffer<int32_t> d_table(table);
  CUDA_OK(KvCacheWrite(d_k.get(), d_v.get(), c.tokens, c.start, c.kv_heads, c.head_dim,
                       d_table.get(), d_cache.get(), nullptr));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  CUDA_OK(AttentionPrefill(d_q.get(), c.tokens, c.start, c.heads, c.kv_heads, c.head_dim, scale,
                           d_table.get(), d_cache.get(), d_out.get(), nullptr));
  const std::vector<float> got = d_out.Download();
  const std::vector<float> written = d_cache.Download();
  std::vector<float> want(got.size());
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t off = (t * c.heads + h) * c.head_dim;
      RefAttentionRow(&q[off], written, table, c.start + t + 1, c.kv_heads, c.head_dim, h / group,
                      scale, &want[off]);
    }
  }
  ExpectClose(got, want, 1e-4f, 1e-5f, "prefill");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionPrefillTest,
    ::testing::Values(PrefillCase{64, 4, 4, 37, 0},      // MHA, from scratch, 3 blocks
                      PrefillCase{128, 8, 4, 20, 19},    // GQA 2, start mid-block
                      PrefillCase{256, 8, 2, 33, 45},    // GQA 4, Qwen head_dim
                      PrefillCase{256, 16, 2, 7, 3},     // GQA 8
                      PrefillCase{128, 32, 2, 5, 60},    // GQA 16 (Nemotron), one row block/token
                      PrefillCase{128, 16, 4, 1, 100},   // a single token after a long prefix
                      PrefillCase{80, 6, 3, 17, 5},      // head_dim not a multiple of 32
                      PrefillCase{32, 2, 1, 70, 16},     // small head, start on a block boundary
                      PrefillCase{128, 4, 2, 1, 0},      // one token, empty cache
                      PrefillCase{256, 16, 2, 64, 0},    // Qwen shapes, many row blocks
                      PrefillCase{128, 8, 2, 150, 77}),  // many key tiles and row blocks
    [](const ::testing::TestParamInfo<PrefillCase>& info) {
      const PrefillCase& c = info.param;
      return "d" + std::to_string(c.head_dim) + "_h" + std::to_string(c.heads) + "_kv" +
             std::to_string(c.kv_heads) + "_t" + std::to_string(c.tokens) + "_s" +
             std::to_string(c.start);
    });

// Every sequence of a batch against the reference, in one block per KV head (no workspace) and
// split over many blocks (flash-decoding with a workspace): short contexts that leave most splits
// empty, contexts that end inside a tile, and a long one spread over every split.
TEST(CudaKernelsBasicTest, AttentionDecodeBatch) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t head_dim, heads, kv_heads;
  };
  for (const Case& c : {Case{128, 8, 2}, Case{256, 16, 2}, Case{64, 4, 4}, Case{128, 32, 2}}) {
    const std::vector<int32_t> lens = {1, 16, 17, 75, 33, 1000};
    const int64_t batch = static_cast<int64_t>(lens.size()), max_blocks = 63, pool = 120;
    // Block tables: disjoint shuffled ids per sequence, padded with -1 past each sequence's end.
    const std::vector<int32_t> ids = ShuffledTable(pool, pool, 60);
    std::vector<int32_t> tables(batch * max_blocks, -1);
    std::vector<std::vector<int32_t>> per_seq(batch);
    int64_t next = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t blocks = (lens[b] + kKvBlockTokens - 1) / kKvBlockTokens;
      for (int64_t i = 0; i < blocks; ++i) {
        tables[b * max_blocks + i] = ids[next++];
        per_seq[b].push_back(tables[b * max_blocks + i]);
      }
    }
    const std::vector<float> cache =
        RandomFloats(pool * BlockFloats(c.kv_heads, c.head_dim), 61, 0.7f);
    const std::vector<float> q = RandomFloats(batch * c.heads * c.head_dim, 62, 2.0f);
    std::vector<float> want(batch * c.heads * c.head_dim);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t off = (b * c.heads + h) * c.head_dim;
        RefAttentionRow(&q[off], cache, per_seq[b], lens[b], c.kv_heads, c.head_dim,
                        h / (c.heads / c.kv_heads), ScaleOf(c.head_dim), &want[off]);
      }
    }
    const int64_t workspace_floats =
        AttentionDecodeWorkspaceFloats(batch, c.heads, c.kv_heads, c.head_dim);
    const int64_t splits = AttentionDecodeSplits(batch, c.heads, c.kv_heads);
    EXPECT_GE(splits, 1);
    EXPECT_LE(splits, 64);
    EXPECT_EQ(workspace_floats > 0, AttentionDecodeSplits(1, c.heads, c.kv_heads) > 1);
    DeviceBuffer<float> d_cache(cache), d_q(q), d_workspace(workspace_floats);
    DeviceBuffer<int32_t> d_lens(lens), d_tables(tables);
    for (bool split : {false, true}) {
      DeviceBuffer<float> d_out(batch * c.heads * c.head_dim);
      CUDA_OK(AttentionDecode(d_q.get(), batch, c.heads, c.kv_heads, c.head_dim,
                              ScaleOf(c.head_dim), d_lens.get(), d_tables.get(), max_blocks,
                              d_cache.get(), d_out.get(), split ? d_workspace.get() : nullptr,
                              nullptr));
      ExpectClose(d_out.Download(), want, 1e-4f, 1e-5f,
                  "decode head_dim " + std::to_string(c.head_dim) + " heads " +
                      std::to_string(c.heads) + (split ? " split " + std::to_string(splits) : ""));
    }
  }
}

// Decode of the last token equals the last row of a prefill over the same cache.
TEST(CudaKernelsBasicTest, AttentionDecodeMatchesPrefillLastRow) {
  SKIP_WITHOUT_CUDA();
  const int64_t head_dim = 256, heads = 16, kv_heads = 2, tokens = 50;
  const int64_t blocks = (tokens + kKvBlockTokens - 1) / kKvBlockTokens;
  const std::vector<int32_t> table = ShuffledTable(blocks, blocks + 3, 70);
  DeviceBuffer<float> d_cache((blocks + 3) * BlockFloats(kv_heads, head_dim));
  const std::vector<float> k = RandomFloats(tokens * kv_heads * head_dim, 71);
  const std::vector<float> v = RandomFloats(tokens * kv_heads * head_dim, 72);
  const std::vector<float> q = RandomFloats(tokens * heads * head_dim, 73);
  DeviceBuffer<float> d_k(k), d_v(v), d_q(q), d_out(tokens * heads * head_dim),
      d_dec(heads * head_dim);
  DeviceBuffer<int32_t> d_table(table), d_len(std::vector<int32_t>{static_cast<int32_t>(tokens)});
  CUDA_OK(KvCacheWrite(d_k.get(), d_v.get(), tokens, 0, kv_heads, head_dim, d_table.get(),
                       d_cache.get(), nullptr));
  const float scale = 0.0625f;
  CUDA_OK(AttentionPrefill(d_q.get(), tokens, 0, heads, kv_heads, head_dim, scale, d_table.get(),
                           d_cache.get(), d_out.get(), nullptr));
  const std::vector<float> pre = d_out.Download();
  const std::vector<float> last(pre.end() - heads * head_dim, pre.end());
  DeviceBuffer<float> d_workspace(AttentionDecodeWorkspaceFloats(1, heads, kv_heads, head_dim));
  for (float* workspace : {static_cast<float*>(nullptr), d_workspace.get()}) {
    CUDA_OK(AttentionDecode(d_q.get() + (tokens - 1) * heads * head_dim, 1, heads, kv_heads,
                            head_dim, scale, d_len.get(), d_table.get(), blocks, d_cache.get(),
                            d_dec.get(), workspace, nullptr));
    // Split, the keys are summed in another order: float noise, not the one-pass bits.
    ExpectClose(d_dec.Download(), last, workspace == nullptr ? 1e-5f : 1e-4f, 1e-6f,
                workspace == nullptr ? "decode vs prefill" : "split decode vs prefill");
  }
}

TEST(CudaKernelsBasicTest, AttentionRejectsUnsupportedShapes) {
  SKIP_WITHOUT_CUDA();
  DeviceBuffer<float> d(16);
  DeviceBuffer<int32_t> table(std::vector<int32_t>{0});
  // head_dim above 256, heads not a multiple of kv_heads.
  EXPECT_EQ(
      AttentionPrefill(d.get(), 1, 0, 2, 1, 257, 1.0f, table.get(), d.get(), d.get(), nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(AttentionDecode(d.get(), 1, 3, 2, 64, 1.0f, table.get(), table.get(), 1, d.get(),
                            d.get(), d.get(), nullptr),
            cudaErrorInvalidValue);
  // Nothing to do is not an error.
  EXPECT_EQ(AttentionPrefill(d.get(), 0, 0, 2, 1, 64, 1.0f, table.get(), d.get(), d.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- Sampling ----

struct SampleInputs {
  std::vector<float> logits;  // [batch][vocab]
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> steps;
};

std::vector<int32_t> RunSample(const SampleInputs& in, int64_t vocab) {
  const int64_t batch = static_cast<int64_t>(in.temperature.size());
  DeviceBuffer<float> d_logits(in.logits), d_t(in.temperature), d_p(in.top_p);
  DeviceBuffer<int32_t> d_k(in.top_k), d_out(batch);
  DeviceBuffer<uint64_t> d_seeds(in.seeds);
  DeviceBuffer<int64_t> d_steps(in.steps);
  EXPECT_EQ(Sample(d_logits.get(), batch, vocab, d_t.get(), d_k.get(), d_p.get(), d_seeds.get(),
                   d_steps.get(), d_out.get(), nullptr),
            cudaSuccess);
  return d_out.Download();
}

// `batch` copies of one logits row with the given sampling settings; step = row index.
SampleInputs Replicated(const std::vector<float>& row, int64_t batch, float temperature,
                        int32_t top_k, float top_p, uint64_t seed) {
  SampleInputs in;
  for (int64_t b = 0; b < batch; ++b) {
    in.logits.insert(in.logits.end(), row.begin(), row.end());
    in.temperature.push_back(temperature);
    in.top_k.push_back(top_k);
    in.top_p.push_back(top_p);
    in.seeds.push_back(seed);
    in.steps.push_back(b);
  }
  return in;
}

int32_t HostArgmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // first maximum
}

TEST(CudaKernelsBasicTest, SampleGreedyIsArgmax) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 250007, batch = 5;
  SampleInputs in;
  in.logits = RandomFloats(batch * vocab, 80, 3.0f);
  // Row 1: a tie for the maximum (the lower index wins); row 2: all negative; row 3: max last.
  in.logits[1 * vocab + 1000] = 50.0f;
  in.logits[1 * vocab + 200000] = 50.0f;
  for (int64_t i = 0; i < vocab; ++i)
    in.logits[2 * vocab + i] = -std::fabs(in.logits[2 * vocab + i]) - 1;
  in.logits[3 * vocab + vocab - 1] = 1e9f;
  for (int64_t b = 0; b < batch; ++b) {
    in.temperature.push_back(0.0f);
    in.top_k.push_back(b == 4 ? 50 : 0);
    in.top_p.push_back(b == 4 ? 0.5f : 1.0f);
    in.seeds.push_back(1234 + b);
    in.steps.push_back(b);
  }
  const std::vector<int32_t> out = RunSample(in, vocab);
  for (int64_t b = 0; b < batch; ++b) {
    EXPECT_EQ(out[b], HostArgmax(&in.logits[b * vocab], vocab)) << "row " << b;
  }
  EXPECT_EQ(out[1], 1000);
  EXPECT_EQ(out[3], vocab - 1);
}

TEST(CudaKernelsBasicTest, SampleTopK1AndTinyTopPAreArgmax) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 50021, batch = 64;
  SampleInputs in;
  in.logits = RandomFloats(batch * vocab, 81, 0.5f);  // flat: sampling would rarely hit argmax
  for (int64_t b = 0; b < batch; ++b) {
    in.temperature.push_back(1.0f + 0.1f * static_cast<float>(b % 5));
    in.top_k.push_back(b % 2 == 0 ? 1 : 0);
    in.top_p.push_back(b % 2 == 0 ? 1.0f : 1e-7f);
    in.seeds.push_back(99);
    in.steps.push_back(b);
  }
  const std::vector<int32_t> out = RunSample(in, vocab);
  for (int64_t b = 0; b < batch; ++b) {
    EXPECT_EQ(out[b], HostArgmax(&in.logits[b * vocab], vocab)) << "row " << b;
  }
}

TEST(CudaKernelsBasicTest, SampleIsReproducible) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 1000, batch = 256;
  const std::vector<float> row(vocab, 0.0f);  // uniform
  SampleInputs in = Replicated(row, batch, 1.0f, 0, 1.0f, 7);
  const std::vector<int32_t> a = RunSample(in, vocab), b = RunSample(in, vocab);
  EXPECT_EQ(a, b);
  // Different steps give different draws: a uniform vocab of 1000 over 256 steps.
  const std::set<int32_t> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 150u);
  for (int32_t t : a) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, vocab);
  }
  // Another seed changes the draws; the same (seed, step) in another batch position does not.
  SampleInputs other = Replicated(row, batch, 1.0f, 0, 1.0f, 8);
  const std::vector<int32_t> c = RunSample(other, vocab);
  int same = 0;
  for (int64_t i = 0; i < batch; ++i) same += a[i] == c[i];
  EXPECT_LT(same, 20);
  SampleInputs reversed = in;
  std::reverse(reversed.steps.begin(), reversed.steps.end());
  const std::vector<int32_t> r = RunSample(reversed, vocab);
  for (int64_t i = 0; i < batch; ++i) EXPECT_EQ(r[i], a[batch - 1 - i]);
}

// Frequency of `token` among `out` is within 5 sigma of p.
void ExpectFrequency(const std::vector<int32_t>& out, int32_t token, double p,
                     const std::string& what) {
  const double n = static_cast<double>(out.size());
  const double freq = static_cast<double>(std::count(out.begin(), out.end(), token)) / n;
  EXPECT_NEAR(freq, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-9) << what;
}

TEST(CudaKernelsBasicTest, SampleTopK2Distribution) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 1000, batch = 8192;
  std::vector<float> row = RandomFloats(vocab, 82, 0.5f);
  row[321] = 5.0f;
  row[17] = 4.5f;
  for (float temperature : {1.0f, 2.0f}) {
    const std::vector<int32_t> out =
        RunSample(Replicated(row, batch, temperature, 2, 1.0f, 5), vocab);
    for (int32_t t : out) ASSERT_TRUE(t == 321 || t == 17) << t;
    const double p = 1.0 / (1.0 + std::exp(-0.5 / temperature));
    ExpectFrequency(out, 321, p, "top_k 2, temperature " + std::to_string(temperature));
  }
}

TEST(CudaKernelsBasicTest, SampleTopPAndFullDistribution) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 5, batch = 16384;
  // Probabilities 0.5, 0.3, 0.1, 0.06, 0.04 (in shuffled token order).
  const double probs[] = {0.1, 0.5, 0.04, 0.3, 0.06};
  std::vector<float> row(vocab);
  for (int64_t i = 0; i < vocab; ++i) row[i] = static_cast<float>(std::log(probs[i]) + 3.0);
  // top_p 0.7: the nucleus is {1, 3} (0.8 >= 0.7), renormalised 5:3.
  std::vector<int32_t> out = RunSample(Replicated(row, batch, 1.0f, 0, 0.7f, 11), vocab);
  for (int32_t t : out) ASSERT_TRUE(t == 1 || t == 3) << t;
  ExpectFrequency(out, 1, 0.625, "top_p 0.7");
  // top_p 0.85: {1, 3, 0} (0.9).
  out = RunSample(Replicated(row, batch, 1.0f, 0, 0.85f, 12), vocab);
  for (int32_t t : out) ASSERT_TRUE(t == 1 || t == 3 || t == 0) << t;
  ExpectFrequency(out, 0, 0.1 / 0.9, "top_p 0.85");
  // top_k 3 and top_p 0.99: the top 3 (top_p applies within them).
  out = RunSample(Replicated(row, batch, 1.0f, 3, 0.99f, 13), vocab);
  for (int32_t t : out) ASSERT_TRUE(t == 1 || t == 3 || t == 0) << t;
  ExpectFrequency(out, 3, 0.3 / 0.9, "top_k 3 top_p 0.99");
  // No truncation: every token at its probability.
  out = RunSample(Replicated(row, batch, 1.0f, 0, 1.0f, 14), vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    ExpectFrequency(out, static_cast<int32_t>(i), probs[i], "full, token " + std::to_string(i));
  }
}

TEST(CudaKernelsBasicTest, SampleTopKBreaksTiesByIndex) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 10, batch = 3000;
  const std::vector<float> row(vocab, 1.0f);
  const std::vector<int32_t> out = RunSample(Replicated(row, batch, 1.0f, 3, 1.0f, 15), vocab);
  for (int32_t t : out) ASSERT_TRUE(t >= 0 && t < 3) << t;
  for (int32_t t = 0; t < 3; ++t) ExpectFrequency(out, t, 1.0 / 3, "tie " + std::to_string(t));
}

TEST(CudaKernelsBasicTest, SampleLargeVocabTopK) {
  SKIP_WITHOUT_CUDA();
  const int64_t vocab = 248320, batch = 8;
  std::vector<float> row = RandomFloats(vocab, 83, 1.0f);
  // The 40 largest logits: every draw must be one of them.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const std::set<int32_t> top(order.begin(), order.begin() + 40);
  const std::vector<int32_t> out = RunSample(Replicated(row, batch, 0.8f, 40, 0.95f, 16), vocab);
  for (int32_t t : out) EXPECT_TRUE(top.count(t) == 1) << t;
}

// The launchers are capturable: a decode-like sequence captured into a CUDA graph and
// replayed gives the same results as direct launches.
TEST(CudaKernelsBasicTest, LaunchersWorkInsideGraphCapture) {
  SKIP_WITHOUT_CUDA();
  const int64_t heads = 8, kv_heads = 2, head_dim = 128, vocab = 3001, batch = 2;
  const std::vector<int32_t> lens = {20, 5}, tables = {3, 1, 0, 2};
  const std::vector<float> cache = RandomFloats(4 * BlockFloats(kv_heads, head_dim), 90);
  const std::vector<float> q = RandomFloats(batch * heads * head_dim, 91);
  const std::vector<bf16> w = RandomBf16(head_dim, 92, 0.1f, 1.0f);
  SampleInputs in;
  in.logits = RandomFloats(batch * vocab, 93);
  in.temperature = {0.0f, 0.9f};
  in.top_k = {0, 20};
  in.top_p = {1.0f, 0.9f};
  in.seeds = {1, 2};
  in.steps = {3, 4};
  DeviceBuffer<float> d_cache(cache), d_q(q), d_logits(in.logits), d_t(in.temperature),
      d_p(in.top_p);
  DeviceBuffer<int32_t> d_lens(lens), d_tables(tables), d_k(in.top_k);
  DeviceBuffer<bf16> d_w(w);
  DeviceBuffer<uint64_t> d_seeds(in.seeds);
  DeviceBuffer<int64_t> d_steps(in.steps);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Split decode attention (a workspace) inside the graph: two kernels, a fixed split count.
  DeviceBuffer<float> d_workspace(AttentionDecodeWorkspaceFloats(batch, heads, kv_heads, head_dim));
  auto run = [&](float* attn, float* normed, int32_t* tokens) {
    EXPECT_EQ(AttentionDecode(d_q.get(), batch, heads, kv_heads, head_dim, 0.088f, d_lens.get(),
                              d_tables.get(), 2, d_cache.get(), attn, d_workspace.get(), stream),
              cudaSuccess);
    EXPECT_EQ(RmsNorm(attn, batch * heads, head_dim, d_w.get(), 1e-6f, true, normed, stream),
              cudaSuccess);
    EXPECT_EQ(Sample(d_logits.get(), batch, vocab, d_t.get(), d_k.get(), d_p.get(), d_seeds.get(),
                     d_steps.get(), tokens, stream),
              cudaSuccess);
  };
  DeviceBuffer<float> a1(batch * heads * head_dim), n1(batch * heads * head_dim),
      a2(batch * heads * head_dim), n2(batch * heads * head_dim);
  DeviceBuffer<int32_t> t1(batch), t2(batch);
  run(a1.get(), n1.get(), t1.get());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  run(a2.get(), n2.get(), t2.get());
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(a2.Download(), a1.Download());
  EXPECT_EQ(n2.Download(), n1.Download());
  EXPECT_EQ(t2.Download(), t1.Download());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace tandem::workers::cuda
