#include "workers/cpu/qwen35_vision_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "workers/cpu/cpu_kernels.h"

namespace tandem::workers::cpu {
namespace {

constexpr float kLayerNormEps = 1e-6f;
constexpr float kRotaryTheta = 10000.0f;
constexpr char kPrefix[] = "model.visual.";

// LayerNorm with weight and bias over `dim`, per row; in place when out == x.
void LayerNorm(const float* x, int64_t n, int64_t dim, const float* w, const float* b, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * dim;
    float mean = 0;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= static_cast<float>(dim);
    float var = 0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(var + kLayerNormEps);
    float* o = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

// y[n][rows] = x W^T + bias.
void LinearBias(const float* x, int64_t n, int64_t cols, const std::vector<float>& w,
                const std::vector<float>& bias, float* out) {
  const int64_t rows = static_cast<int64_t>(bias.size());
  Linear(x, n, cols, w.data(), rows, out);
  for (int64_t r = 0; r < n; ++r) {
    float* o = out + r * rows;
    for (int64_t i = 0; i < rows; ++i) o[i] += bias[i];
  }
}

float GeluTanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

float GeluErf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }

}  // namespace

bool Qwen35VisionModel::CheckpointHasEncoder(const model::Checkpoint& checkpoint) {
  return checkpoint.Has(absl::StrCat(kPrefix, "patch_embed.proj.weight"));
}

absl::StatusOr<std::unique_ptr<Qwen35VisionModel>> Qwen35VisionModel::Load(
    const model::Checkpoint& checkpoint, const model::qwen35::VisionConfig& config) {
  std::unique_ptr<Qwen35VisionModel> m(new Qwen35VisionModel(config));
  if (absl::Status s = m->LoadWeights(checkpoint); !s.ok()) return s;
  return m;
}

absl::Status Qwen35VisionModel::LoadWeights(const model::Checkpoint& checkpoint) {
  absl::Status status;
  auto load = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float>* out) {
    if (!status.ok()) return;
    auto t = checkpoint.GetFloat(kPrefix + name, shape);
    if (!t.ok()) {
      status = t.status();
      return;
    }
    *out = std::move(*t);
  };
  const int64_t H = c_.hidden_size, I = c_.intermediate_size, M = c_.merged_dim();
  const int64_t P = c_.patch_size;
  load("patch_embed.proj.weight", {H, c_.in_channels, c_.temporal_patch_size, P, P}, &patch_w_);
  load("patch_embed.proj.bias", {H}, &patch_b_);
  load("pos_embed.weight", {c_.num_position_embeddings, H}, &pos_embed_);
  blocks_.resize(c_.depth);
  for (int64_t i = 0; i < c_.depth; ++i) {
    Block& b = blocks_[i];
    const std::string p = absl::StrCat("blocks.", i, ".");
    load(p + "norm1.weight", {H}, &b.norm1_w);
    load(p + "norm1.bias", {H}, &b.norm1_b);
    load(p + "attn.qkv.weight", {3 * H, H}, &b.qkv_w);
    load(p + "attn.qkv.bias", {3 * H}, &b.qkv_b);
    load(p + "attn.proj.weight", {H, H}, &b.proj_w);
    load(p + "attn.proj.bias", {H}, &b.proj_b);
    load(p + "norm2.weight", {H}, &b.norm2_w);
    load(p + "norm2.bias", {H}, &b.norm2_b);
    load(p + "mlp.linear_fc1.weight", {I, H}, &b.fc1_w);
    load(p + "mlp.linear_fc1.bias", {I}, &b.fc1_b);
    load(p + "mlp.linear_fc2.weight", {H, I}, &b.fc2_w);
    load(p + "mlp.linear_fc2.bias", {H}, &b.fc2_b);
  }
  load("merger.norm.weight", {H}, &merger_norm_w_);
  load("merger.norm.bias", {H}, &merger_norm_b_);
  load("merger.linear_fc1.weight", {M, M}, &merger_fc1_w_);
  load("merger.linear_fc1.bias", {M}, &merger_fc1_b_);
  load("merger.linear_fc2.weight", {c_.out_hidden_size, M}, &merger_fc2_w_);
  load("merger.linear_fc2.bias", {c_.out_hidden_size}, &merger_fc2_b_);
  if (!status.ok()) return status;
  // HF: VisionRotaryEmbedding(head_dim / 2): inv_freq = 1 / theta^(arange(0, dim, 2) / dim).
  const int64_t dim = c_.head_dim() / 2;
  for (int64_t j = 0; j < dim / 2; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(dim);
    inv_freq_.push_back(1.0f / std::pow(kRotaryTheta, exponent));
  }
  return absl::OkStatus();
}

std::vector<std::pair<int64_t, int64_t>> Qwen35VisionModel::PatchCoordinates(
    const VisionGrid& grid) const {
  const int64_t m = c_.spatial_merge_size, blocks_w = grid.w / m;
  std::vector<std::pair<int64_t, int64_t>> coords;
  coords.reserve(grid.patches());
  for (int64_t f = 0; f < grid.t; ++f) {
    for (int64_t n = 0; n < grid.h * grid.w; ++n) {
      const int64_t block = n / (m * m), within = n % (m * m);
      const int64_t row = (block / blocks_w) * m + within / m;
      const int64_t col = (block % blocks_w) * m + within % m;
      coords.emplace_back(row, col);
    }
  }
  return coords;
}

void Qwen35VisionModel::AddPositions(const VisionGrid& grid, float* x, float* pos_out) const {
  const int64_t H = c_.hidden_size, S = c_.position_side();
  const std::vector<std::pair<int64_t, int64_t>> coords = PatchCoordinates(grid);
  // Bilinear with align_corners=True: source coordinate = index * (S - 1) / (size - 1).
  auto taps = [S](int64_t index, int64_t size, int64_t* i0, int64_t* i1, float* frac) {
    const float pos = static_cast<float>(index) * static_cast<float>(S - 1) /
                      static_cast<float>(std::max<int64_t>(size - 1, 1));
    *i0 = static_cast<int64_t>(std::floor(pos));
    *i1 = std::min(*i0 + 1, S - 1);
    *frac = pos - static_cast<float>(*i0);
  };
  for (size_t n = 0; n < coords.size(); ++n) {
    int64_t y0, y1, x0, x1;
    float fy, fx;
    taps(coords[n].first, grid.h, &y0, &y1, &fy);
    taps(coords[n].second, grid.w, &x0, &x1, &fx);
    const float w00 = (1 - fy) * (1 - fx), w01 = (1 - fy) * fx, w10 = fy * (1 - fx), w11 = fy * fx;
    const float* e00 = pos_embed_.data() + (y0 * S + x0) * H;
    const float* e01 = pos_embed_.data() + (y0 * S + x1) * H;
    const float* e10 = pos_embed_.data() + (y1 * S + x0) * H;
    const float* e11 = pos_embed_.data() + (y1 * S + x1) * H;
    float* xr = x + n * H;
    for (int64_t i = 0; i < H; ++i) {
      const float pe = w00 * e00[i] + w01 * e01[i] + w10 * e10[i] + w11 * e11[i];
      if (pos_out != nullptr) pos_out[n * H + i] = pe;
      xr[i] += pe;
    }
  }
}

void Qwen35VisionModel::Attention(const Block& b, const float* x, int64_t n,
                                  const std::vector<std::pair<int64_t, int64_t>>& coords,
                                  float* h) const {
  const int64_t H = c_.hidden_size, nh = c_.num_heads, D = c_.head_dim();
  const int64_t half = D / 2, quarter = D / 4;
  std::vector<float> qkv(n * 3 * H);
  LinearBias(x, n, H, b.qkv_w, b.qkv_b, qkv.data());
  // 2-D rotary on q and k over the full head: slots 0..D/4-1 follow the row, the next D/4 the
  // column; NeoX pairs (i, i + D/2).
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const int64_t pos = i < quarter ? coords[t].first : coords[t].second;
      const float angle = static_cast<float>(pos) * inv_freq_[i % quarter];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t hd = 0; hd < nh; ++hd) {
        float* v = qkv.data() + t * 3 * H + part * H + hd * D;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * cos_t[i] - x2 * sin_t[i];
          v[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
        }
      }
    }
  }
  // Non-causal softmax attention within the image, one head at a time, in blocks of query rows
  // so the score buffer stays within ~64 MiB for any image.
  constexpr int64_t kMaxScores = int64_t{1} << 24;
  const int64_t block = std::clamp<int64_t>(kMaxScores / n, 1, n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> scores(block * n), o(n * H);
  for (int64_t hd = 0; hd < nh; ++hd) {
    const float* q = qkv.data() + hd * D;
    const float* k = qkv.data() + H + hd * D;
    const float* v = qkv.data() + 2 * H + hd * D;
    for (int64_t r0 = 0; r0 < n; r0 += block) {
      const int64_t rows = std::min(block, n - r0);
      MatMul(q + r0 * 3 * H, 3 * H, k, 3 * H, /*b_transposed=*/true, rows, n, D, scores.data(), n);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores.data() + r * n;
        for (int64_t s = 0; s < n; ++s) row[s] *= scale;
        Softmax(row, n);
      }
      MatMul(scores.data(), n, v, 3 * H, /*b_transposed=*/false, rows, D, n,
             o.data() + r0 * H + hd * D, H);
    }
  }
  std::vector<float> proj(n * H);
  LinearBias(o.data(), n, H, b.proj_w, b.proj_b, proj.data());
  for (int64_t i = 0; i < n * H; ++i) h[i] += proj[i];
}

void Qwen35VisionModel::Mlp(const Block& b, const float* x, int64_t n, float* h) const {
  const int64_t H = c_.hidden_size, I = c_.intermediate_size;
  std::vector<float> mid(n * I), out(n * H);
  LinearBias(x, n, H, b.fc1_w, b.fc1_b, mid.data());
  for (float& v : mid) v = c_.tanh_gelu ? GeluTanh(v) : GeluErf(v);
  LinearBias(mid.data(), n, I, b.fc2_w, b.fc2_b, out.data());
  for (int64_t i = 0; i < n * H; ++i) h[i] += out[i];
}

absl::StatusOr<std::vector<float>> Qwen35VisionModel::Encode(absl::Span<const float> pixel_values,
                                                             absl::Span<const VisionGrid> grids,
                                                             VisionTrace* trace) const {
  const int64_t H = c_.hidden_size, m = c_.spatial_merge_size, pd = c_.patch_dim();
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    if (g.t < 1 || g.h < m || g.w < m || g.h % m != 0 || g.w % m != 0) {
      return absl::InvalidArgumentError(absl::StrCat("vision: image ", i, " has grid ", g.t, "x",
                                                     g.h, "x", g.w, "; sides must be multiples of ",
                                                     m));
    }
    total += g.patches();
  }
  if (total == 0 || static_cast<int64_t>(pixel_values.size()) != total * pd) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision: ", pixel_values.size(), " pixel values for ", total, " patches of ", pd));
  }
  std::vector<float> h(total * H), x(total * H);
  LinearBias(pixel_values.data(), total, pd, patch_w_, patch_b_, h.data());
  if (trace != nullptr) {
    trace->patch_embed = h;
    trace->pos_embeds.assign(total * H, 0.0f);
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> coords;
  std::vector<int64_t> offsets;  // first row of each attention segment (one frame)
  int64_t row = 0;
  for (const VisionGrid& g : grids) {
    AddPositions(g, h.data() + row * H,
                 trace != nullptr ? trace->pos_embeds.data() + row * H : nullptr);
    const auto all = PatchCoordinates(g);
    for (int64_t f = 0; f < g.t; ++f) {
      offsets.push_back(row + f * g.h * g.w);
      coords.emplace_back(all.begin() + f * g.h * g.w, all.begin() + (f + 1) * g.h * g.w);
    }
    row += g.patches();
  }
  if (trace != nullptr) trace->after_pos_embed = h;
  for (const Block& b : blocks_) {
    LayerNorm(h.data(), total, H, b.norm1_w.data(), b.norm1_b.data(), x.data());
    for (size_t s = 0; s < offsets.size(); ++s) {
      const int64_t n = static_cast<int64_t>(coords[s].size());
      Attention(b, x.data() + offsets[s] * H, n, coords[s], h.data() + offsets[s] * H);
    }
    LayerNorm(h.data(), total, H, b.norm2_w.data(), b.norm2_b.data(), x.data());
    Mlp(b, x.data(), total, h.data());
    if (trace != nullptr) trace->blocks.push_back(h);
  }
  // Merger: LayerNorm per patch, each 2x2 block's rows side by side, then fc1, GELU (erf), fc2.
  LayerNorm(h.data(), total, H, merger_norm_w_.data(), merger_norm_b_.data(), x.data());
  if (trace != nullptr) trace->merger_norm = x;
  const int64_t merged = total / (m * m), M = c_.merged_dim();
  std::vector<float> mid(merged * M), out(merged * c_.out_hidden_size);
  LinearBias(x.data(), merged, M, merger_fc1_w_, merger_fc1_b_, mid.data());
  for (float& v : mid) v = GeluErf(v);
  LinearBias(mid.data(), merged, M, merger_fc2_w_, merger_fc2_b_, out.data());
  return out;
}

}  // namespace tandem::workers::cpu
