#include "workers/cpu/nemotron_h_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/cpu/cpu_kernels.h"
#include "workers/model/nemotron_h_config.h"

// The fp32 reference forward pass of Nemotron-H (docs/models.md §2). Per layer:
// h += Mixer(RMSNorm(h)), with the mixer one of Mamba-2, attention (no RoPE), MoE or dense MLP.
// Prefill pushes all tokens of a call through each Linear at once (MoE: each expert's tokens at
// once) and attention runs as per-head matrix products on the cache; only the Mamba conv and
// recurrence run token by token.

namespace tandem::workers::cpu {
namespace {

using model::nemotron_h::Config;
using model::nemotron_h::LayerKind;

// A non-gated relu2 MLP: down(relu(up(x))^2). up [inter, hidden], down [hidden, inter].
struct MlpWeights {
  int64_t inter = 0;
  std::vector<float> up;
  std::vector<float> down;
};

struct MambaWeights {
  std::vector<float> in_proj;   // [in_proj_rows, hidden], rows z | xBC | dt
  std::vector<float> conv_w;    // [conv_kernel][conv_dim]: transposed from [conv_dim, 1, K]
  std::vector<float> conv_b;    // [conv_dim], zeros without a conv bias
  std::vector<float> dt_bias;   // [heads]
  std::vector<float> a;         // [heads], A = -exp(A_log)
  std::vector<float> d;         // [heads]
  std::vector<float> norm;      // [d_inner]
  std::vector<float> out_proj;  // [hidden, d_inner]
};

struct AttentionWeights {
  std::vector<float> q, k, v, o;
};

struct MoeWeights {
  std::vector<float> gate;  // [experts, hidden]
  std::vector<float> bias;  // [experts] e_score_correction_bias (selection only)
  std::vector<MlpWeights> experts;
  MlpWeights shared;
};

struct Layer {
  LayerKind kind = LayerKind::kMamba;
  int64_t slot = 0;  // index among the layers of its kind (into the state's arrays)
  std::vector<float> norm;
  MambaWeights mamba;
  AttentionWeights attn;
  MoeWeights moe;
  MlpWeights mlp;
};

class NemotronHState : public SequenceState {
 public:
  struct Mamba {
    // The last conv_kernel pre-conv xBC rows, oldest first ([K][conv_dim]; zeros before the
    // sequence start), and the recurrent state H [heads][head_dim][state], fp32.
    std::vector<float> conv;
    std::vector<float> ssm;
  };
  struct Kv {
    std::vector<float> k;  // [position][kv_heads * head_dim]
    std::vector<float> v;
  };

  explicit NemotronHState(const void* owner) : owner_(owner) {}
  int64_t position() const override { return position_; }
  std::unique_ptr<SequenceState> Clone() const override {
    return std::make_unique<NemotronHState>(*this);
  }
  int64_t bytes() const override {
    int64_t n = 0;
    for (const Mamba& m : mamba_) n += static_cast<int64_t>(m.conv.size() + m.ssm.size());
    for (const Kv& kv : kv_) n += static_cast<int64_t>(kv.k.size() + kv.v.size());
    return n * static_cast<int64_t>(sizeof(float));
  }

  const void* owner_;
  int64_t position_ = 0;
  std::vector<Mamba> mamba_;
  std::vector<Kv> kv_;
};

class NemotronHModel : public CpuModel {
 public:
  NemotronHModel(Config config, model::ModelShape shape)
      : c_(std::move(config)), shape_(std::move(shape)) {}

  absl::Status Load(const model::Checkpoint& ck);

  const model::ModelShape& shape() const override { return shape_; }
  std::unique_ptr<SequenceState> NewState() const override;
  absl::Status Forward(SequenceState* state, absl::Span<const int32_t> tokens, bool all_logits,
                       std::vector<float>* logits) const override;

 private:
  void MambaMixer(const Layer& l, const float* x, int64_t n, NemotronHState::Mamba* st,
                  float* out) const;
  void AttentionMixer(const Layer& l, const float* x, int64_t n, int64_t pos0,
                      NemotronHState::Kv* kv, float* out) const;
  void MoeMixer(const Layer& l, const float* x, int64_t n, float* out) const;
  // out (+)= relu2 MLP of the n rows of x.
  void RunMlp(const MlpWeights& w, const float* x, int64_t n, float* out, bool accumulate) const;

  Config c_;
  model::ModelShape shape_;
  std::vector<float> embed_;    // [vocab, hidden]
  std::vector<float> norm_f_;   // [hidden]
  std::vector<float> lm_head_;  // [vocab, hidden]; empty when tied to embed_
  std::vector<Layer> layers_;
};

absl::Status Fetch(const model::Checkpoint& ck, const std::string& name,
                   std::initializer_list<int64_t> shape, std::vector<float>* out) {
  ASSIGN_OR_RETURN(*out, ck.GetFloat(name, shape));
  return absl::OkStatus();
}

// The Load* functions read one kind of mixer's weights, whose tensors are named `m` (a layer's
// "backbone.layers.<i>.mixer.") followed by their own name; the first tensor missing or of the
// wrong shape is the error.
absl::Status LoadMamba(const model::Checkpoint& ck, const Config& c, const std::string& m,
                       MambaWeights* w) {
  const int64_t h = c.hidden, cd = c.conv_dim(), k = c.conv_kernel, nh = c.m_heads;
  RETURN_IF_ERROR(Fetch(ck, m + "in_proj.weight", {c.in_proj_rows(), h}, &w->in_proj));
  std::vector<float> conv;
  RETURN_IF_ERROR(Fetch(ck, m + "conv1d.weight", {cd, 1, k}, &conv));
  w->conv_w.resize(static_cast<size_t>(k * cd));
  for (int64_t ch = 0; ch < cd; ++ch) {
    for (int64_t j = 0; j < k; ++j) w->conv_w[j * cd + ch] = conv[ch * k + j];
  }
  if (c.conv_bias) {
    RETURN_IF_ERROR(Fetch(ck, m + "conv1d.bias", {cd}, &w->conv_b));
  } else {
    w->conv_b.assign(static_cast<size_t>(cd), 0.0f);
  }
  RETURN_IF_ERROR(Fetch(ck, m + "dt_bias", {nh}, &w->dt_bias));
  RETURN_IF_ERROR(Fetch(ck, m + "A_log", {nh}, &w->a));
  for (float& a : w->a) a = -std::exp(a);
  RETURN_IF_ERROR(Fetch(ck, m + "D", {nh}, &w->d));
  RETURN_IF_ERROR(Fetch(ck, m + "norm.weight", {c.d_inner()}, &w->norm));
  return Fetch(ck, m + "out_proj.weight", {h, c.d_inner()}, &w->out_proj);
}

absl::Status LoadAttention(const model::Checkpoint& ck, const Config& c, const std::string& m,
                           AttentionWeights* w) {
  const int64_t h = c.hidden, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
  RETURN_IF_ERROR(Fetch(ck, m + "q_proj.weight", {qd, h}, &w->q));
  RETURN_IF_ERROR(Fetch(ck, m + "k_proj.weight", {kvd, h}, &w->k));
  RETURN_IF_ERROR(Fetch(ck, m + "v_proj.weight", {kvd, h}, &w->v));
  return Fetch(ck, m + "o_proj.weight", {h, qd}, &w->o);
}

absl::Status LoadMoe(const model::Checkpoint& ck, const Config& c, const std::string& m,
                     MoeWeights* w) {
  const int64_t h = c.hidden;
  RETURN_IF_ERROR(Fetch(ck, m + "gate.weight", {c.experts, h}, &w->gate));
  RETURN_IF_ERROR(Fetch(ck, m + "gate.e_score_correction_bias", {c.experts}, &w->bias));
  w->experts.resize(static_cast<size_t>(c.experts));
  for (int64_t e = 0; e < c.experts; ++e) {
    MlpWeights& x = w->experts[e];
    const std::string ep = absl::StrCat(m, "experts.", e, ".");
    x.inter = c.moe_inter;
    RETURN_IF_ERROR(Fetch(ck, ep + "up_proj.weight", {x.inter, h}, &x.up));
    RETURN_IF_ERROR(Fetch(ck, ep + "down_proj.weight", {h, x.inter}, &x.down));
  }
  w->shared.inter = c.shared_inter;
  RETURN_IF_ERROR(
      Fetch(ck, m + "shared_experts.up_proj.weight", {w->shared.inter, h}, &w->shared.up));
  return Fetch(ck, m + "shared_experts.down_proj.weight", {h, w->shared.inter}, &w->shared.down);
}

absl::Status LoadMlp(const model::Checkpoint& ck, const Config& c, const std::string& m,
                     MlpWeights* w) {
  w->inter = c.mlp_inter;
  RETURN_IF_ERROR(Fetch(ck, m + "up_proj.weight", {w->inter, c.hidden}, &w->up));
  return Fetch(ck, m + "down_proj.weight", {c.hidden, w->inter}, &w->down);
}

absl::Status NemotronHModel::Load(const model::Checkpoint& ck) {
  const int64_t h = c_.hidden;
  // Some NVIDIA remote-code exports name the embedding in the singular.
  const std::string embed_name =
      !ck.Has("backbone.embeddings.weight") && ck.Has("backbone.embedding.weight")
          ? "backbone.embedding.weight"
          : "backbone.embeddings.weight";
  RETURN_IF_ERROR(Fetch(ck, embed_name, {c_.vocab, h}, &embed_));
  RETURN_IF_ERROR(Fetch(ck, "backbone.norm_f.weight", {h}, &norm_f_));
  if (!c_.tie_embeddings) RETURN_IF_ERROR(Fetch(ck, "lm_head.weight", {c_.vocab, h}, &lm_head_));

  int64_t slots[4] = {0, 0, 0, 0};
  layers_.resize(c_.kinds.size());
  for (size_t i = 0; i < c_.kinds.size(); ++i) {
    Layer& l = layers_[i];
    l.kind = c_.kinds[i];
    l.slot = slots[static_cast<int>(l.kind)]++;
    const std::string p = absl::StrCat("backbone.layers.", i, ".");
    const std::string m = p + "mixer.";
    RETURN_IF_ERROR(Fetch(ck, p + "norm.weight", {h}, &l.norm));
    switch (l.kind) {
      case LayerKind::kMamba:
        RETURN_IF_ERROR(LoadMamba(ck, c_, m, &l.mamba));
        break;
      case LayerKind::kAttention:
        RETURN_IF_ERROR(LoadAttention(ck, c_, m, &l.attn));
        break;
      case LayerKind::kMoe:
        RETURN_IF_ERROR(LoadMoe(ck, c_, m, &l.moe));
        break;
      case LayerKind::kMlp:
        RETURN_IF_ERROR(LoadMlp(ck, c_, m, &l.mlp));
        break;
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<SequenceState> NemotronHModel::NewState() const {
  auto s = std::make_unique<NemotronHState>(this);
  s->mamba_.resize(static_cast<size_t>(c_.Count(LayerKind::kMamba)));
  for (auto& m : s->mamba_) {
    m.conv.assign(static_cast<size_t>(c_.conv_kernel * c_.conv_dim()), 0.0f);
    m.ssm.assign(static_cast<size_t>(c_.m_heads * c_.m_head_dim * c_.state), 0.0f);
  }
  s->kv_.resize(static_cast<size_t>(c_.Count(LayerKind::kAttention)));
  return s;
}

void NemotronHModel::MambaMixer(const Layer& l, const float* x, int64_t n,
                                NemotronHState::Mamba* st, float* out) const {
  const MambaWeights& w = l.mamba;
  const int64_t di = c_.d_inner(), cd = c_.conv_dim(), rows = c_.in_proj_rows();
  const int64_t k = c_.conv_kernel, nh = c_.m_heads, hp = c_.m_head_dim, ns = c_.state;
  const int64_t g_n = c_.groups * ns, heads_per_group = nh / c_.groups;
  std::vector<float> proj(static_cast<size_t>(n * rows));
  Linear(x, n, c_.hidden, w.in_proj.data(), rows, proj.data());

  // Causal depthwise conv over time: `ext` is the K carried pre-conv rows followed by the n new
  // ones; output t reads ext rows t+1 .. t+K. The new carried state is ext's last K rows.
  std::vector<float> ext(static_cast<size_t>((k + n) * cd));
  std::memcpy(ext.data(), st->conv.data(), sizeof(float) * k * cd);
  for (int64_t t = 0; t < n; ++t) {
    std::memcpy(&ext[(k + t) * cd], &proj[t * rows + di], sizeof(float) * cd);
  }
  std::vector<float> xbc(static_cast<size_t>(n * cd));
  for (int64_t t = 0; t < n; ++t) {
    float* o = &xbc[t * cd];
    std::memcpy(o, w.conv_b.data(), sizeof(float) * cd);
    for (int64_t j = 0; j < k; ++j) {
      const float* in = &ext[(t + 1 + j) * cd];
      const float* wj = &w.conv_w[j * cd];
      for (int64_t ch = 0; ch < cd; ++ch) o[ch] += wj[ch] * in[ch];
    }
    for (int64_t ch = 0; ch < cd; ++ch) o[ch] = Silu(o[ch]);
  }
  std::memcpy(st->conv.data(), &ext[n * cd], sizeof(float) * k * cd);

  // Selective scan, token by token (equal to the chunked SSD up to rounding):
  // H = exp(dt A) H + dt x B^T ; y = H C + D x, per head, with B/C of the head's group.
  std::vector<float> y(static_cast<size_t>(n * di));
  for (int64_t t = 0; t < n; ++t) {
    const float* xs = &xbc[t * cd];
    const float* b_all = xs + di;
    const float* c_all = xs + di + g_n;
    const float* dt_raw = &proj[t * rows + di + cd];
    for (int64_t hd = 0; hd < nh; ++hd) {
      const int64_t g = hd / heads_per_group;
      const float* b = b_all + g * ns;
      const float* cv = c_all + g * ns;
      const float dt = std::clamp(Softplus(dt_raw[hd] + w.dt_bias[hd]), c_.dt_min, c_.dt_max);
      const float decay = std::exp(dt * w.a[hd]);
      for (int64_t p = 0; p < hp; ++p) {
        float* hs = &st->ssm[(hd * hp + p) * ns];
        const float xv = xs[hd * hp + p];
        const float xdt = xv * dt;
        float acc = 0.0f;
        for (int64_t s = 0; s < ns; ++s) {
          hs[s] = decay * hs[s] + xdt * b[s];
          acc += hs[s] * cv[s];
        }
        y[t * di + hd * hp + p] = acc + w.d[hd] * xv;
      }
    }
  }

  // Gated grouped RMSNorm: y * silu(z) first, then RMSNorm over each of the n_groups groups.
  const int64_t group = di / c_.groups;
  for (int64_t t = 0; t < n; ++t) {
    float* yt = &y[t * di];
    const float* z = &proj[t * rows];
    for (int64_t i = 0; i < di; ++i) yt[i] *= Silu(z[i]);
    for (int64_t g = 0; g < c_.groups; ++g) {
      RmsNorm(yt + g * group, 1, group, w.norm.data() + g * group, c_.eps,
              /*one_plus_weight=*/false, yt + g * group);
    }
  }
  Linear(y.data(), n, di, w.out_proj.data(), c_.hidden, out);
}

void NemotronHModel::AttentionMixer(const Layer& l, const float* x, int64_t n, int64_t pos0,
                                    NemotronHState::Kv* kv, float* out) const {
  const int64_t hd = c_.head_dim, qd = c_.heads * hd, kvd = c_.kv_heads * hd;
  const int64_t per_kv = c_.heads / c_.kv_heads;
  std::vector<float> q(static_cast<size_t>(n * qd));
  Linear(x, n, c_.hidden, l.attn.q.data(), qd, q.data());
  // Append this call's keys and values to the cache (no RoPE: they are stored as projected).
  kv->k.resize(static_cast<size_t>((pos0 + n) * kvd));
  kv->v.resize(static_cast<size_t>((pos0 + n) * kvd));
  Linear(x, n, c_.hidden, l.attn.k.data(), kvd, &kv->k[pos0 * kvd]);
  Linear(x, n, c_.hidden, l.attn.v.data(), kvd, &kv->v[pos0 * kvd]);

  // softmax(q k^T / sqrt(head_dim) + causal mask) v, per head, on strided views of q and the
  // cache. Queries go in blocks so the score matrix stays under kMaxScores floats; a block's
  // rows see keys 0 .. pos0+tb+i, and the masked tail of each row gets probability 0.
  constexpr int64_t kMaxScores = int64_t{1} << 24;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t block = std::clamp<int64_t>(kMaxScores / (pos0 + n), 1, 64);
  std::vector<float> o(static_cast<size_t>(n * qd));
  std::vector<float> scores(static_cast<size_t>(std::min(block, n) * (pos0 + n)));
  for (int64_t tb = 0; tb < n; tb += block) {
    const int64_t nb = std::min(block, n - tb);
    const int64_t keys = pos0 + tb + nb;
    for (int64_t head = 0; head < c_.heads; ++head) {
      const int64_t kv_off = (head / per_kv) * hd;
      MatMul(&q[tb * qd + head * hd], qd, &kv->k[kv_off], kvd, /*b_transposed=*/true, nb, keys, hd,
             scores.data(), keys);
      for (int64_t i = 0; i < nb; ++i) {
        float* row = &scores[i * keys];
        const int64_t valid = pos0 + tb + i + 1;
        for (int64_t j = 0; j < valid; ++j) row[j] *= scale;
        Softmax(row, valid);
        std::fill(row + valid, row + keys, 0.0f);
      }
      MatMul(scores.data(), keys, &kv->v[kv_off], kvd, /*b_transposed=*/false, nb, hd, keys,
             &o[tb * qd + head * hd], qd);
    }
  }
  Linear(o.data(), n, qd, l.attn.o.data(), c_.hidden, out);
}

void NemotronHModel::RunMlp(const MlpWeights& w, const float* x, int64_t n, float* out,
                            bool accumulate) const {
  std::vector<float> mid(static_cast<size_t>(n * w.inter));
  Linear(x, n, c_.hidden, w.up.data(), w.inter, mid.data());
  for (float& v : mid) v = v > 0.0f ? v * v : 0.0f;  // relu(v)^2
  Linear(mid.data(), n, w.inter, w.down.data(), c_.hidden, out, accumulate);
}

void NemotronHModel::MoeMixer(const Layer& l, const float* x, int64_t n, float* out) const {
  const MoeWeights& w = l.moe;
  const int64_t ne = c_.experts, h = c_.hidden;
  std::vector<float> logits(static_cast<size_t>(n * ne));
  Linear(x, n, h, w.gate.data(), ne, logits.data());

  // Routing: sigmoid scores; the correction bias only chooses the experts; the weights are the
  // unbiased scores of the chosen ones, normalised (+1e-20) and scaled.
  std::vector<std::vector<std::pair<int64_t, float>>> assigned(static_cast<size_t>(ne));
  std::vector<float> score(static_cast<size_t>(ne)), choice(static_cast<size_t>(ne));
  std::vector<int64_t> order(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < ne; ++e) {
      score[e] = Sigmoid(logits[t * ne + e]);
      choice[e] = score[e] + w.bias[e];
    }
    for (int64_t e = 0; e < ne; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + c_.top_k, order.end(),
                      [&](int64_t a, int64_t b) {
                        return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
                      });
    float sum = 0.0f;
    for (int64_t i = 0; i < c_.top_k; ++i) sum += score[order[i]];
    const float norm = c_.norm_topk ? 1.0f / (sum + 1e-20f) : 1.0f;
    for (int64_t i = 0; i < c_.top_k; ++i) {
      const int64_t e = order[i];
      assigned[e].push_back({t, score[e] * norm * c_.routed_scale});
    }
  }

  // The shared expert, unscaled, over all tokens; then each routed expert over its tokens.
  RunMlp(w.shared, x, n, out, /*accumulate=*/false);
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < ne; ++e) {
    const auto& tokens = assigned[e];
    if (tokens.empty()) continue;
    const int64_t m = static_cast<int64_t>(tokens.size());
    xe.resize(static_cast<size_t>(m * h));
    ye.resize(static_cast<size_t>(m * h));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(&xe[i * h], x + tokens[i].first * h, sizeof(float) * h);
    }
    RunMlp(w.experts[e], xe.data(), m, ye.data(), /*accumulate=*/false);
    for (int64_t i = 0; i < m; ++i) {
      float* o = out + tokens[i].first * h;
      const float* yi = &ye[i * h];
      const float wt = tokens[i].second;
      for (int64_t j = 0; j < h; ++j) o[j] += wt * yi[j];
    }
  }
}

absl::Status NemotronHModel::Forward(SequenceState* state, absl::Span<const int32_t> tokens,
                                     bool all_logits, std::vector<float>* logits) const {
  auto* st = dynamic_cast<NemotronHState*>(state);
  if (st == nullptr || st->owner_ != this) {
    return absl::InvalidArgumentError("nemotron_h Forward: the state was not made by this model");
  }
  const int64_t pos0 = st->position_;
  RETURN_IF_ERROR(CheckForwardInput(shape_, pos0, tokens, logits));
  const int64_t n = static_cast<int64_t>(tokens.size());

  const int64_t h = c_.hidden;
  std::vector<float> hs(static_cast<size_t>(n * h));
  for (int64_t t = 0; t < n; ++t) {
    std::memcpy(&hs[t * h], &embed_[static_cast<int64_t>(tokens[t]) * h], sizeof(float) * h);
  }
  std::vector<float> normed(hs.size()), mixed(hs.size());
  for (const Layer& l : layers_) {
    RmsNorm(hs.data(), n, h, l.norm.data(), c_.eps, /*one_plus_weight=*/false, normed.data());
    switch (l.kind) {
      case LayerKind::kMamba:
        MambaMixer(l, normed.data(), n, &st->mamba_[l.slot], mixed.data());
        break;
      case LayerKind::kAttention:
        AttentionMixer(l, normed.data(), n, pos0, &st->kv_[l.slot], mixed.data());
        break;
      case LayerKind::kMoe:
        MoeMixer(l, normed.data(), n, mixed.data());
        break;
      case LayerKind::kMlp:
        RunMlp(l.mlp, normed.data(), n, mixed.data(), /*accumulate=*/false);
        break;
    }
    for (size_t i = 0; i < hs.size(); ++i) hs[i] += mixed[i];
  }
  st->position_ = pos0 + n;

  // Only the rows whose logits are wanted go through norm_f and lm_head.
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  RmsNorm(&hs[first * h], rows, h, norm_f_.data(), c_.eps, /*one_plus_weight=*/false,
          normed.data());
  logits->resize(static_cast<size_t>(rows * c_.vocab));
  const float* head = c_.tie_embeddings ? embed_.data() : lm_head_.data();
  Linear(normed.data(), rows, h, head, c_.vocab, logits->data());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuModel>> LoadNemotronH(const model::Checkpoint& checkpoint,
                                                        const model::nemotron_h::Config& config,
                                                        const model::ModelShape& shape) {
  auto model = std::make_unique<NemotronHModel>(config, shape);
  RETURN_IF_ERROR(model->Load(checkpoint));
  return std::unique_ptr<CpuModel>(std::move(model));
}

}  // namespace tandem::workers::cpu
