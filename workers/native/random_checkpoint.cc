#include "workers/native/random_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "workers/native/checkpoint_writer.h"

namespace tandem::workers::native {
namespace {

// Draws tensors with the spreads the golden fixtures use (tests/golden/MANIFEST.md), scaled so
// activations stay bounded at larger widths.
class Weights {
 public:
  Weights(uint64_t seed, int32_t hidden)
      : rng_(seed), scale_(std::sqrt(64.0f / static_cast<float>(hidden))) {}

  void Normal(const std::string& name, std::vector<int64_t> shape, float std, float mean = 0) {
    TensorData t{name, std::move(shape), {}};
    t.values.resize(Count(t.shape));
    std::normal_distribution<float> d(mean, std);
    for (float& v : t.values) v = d(rng_);
    tensors_.push_back(std::move(t));
  }
  void Uniform(const std::string& name, std::vector<int64_t> shape, float lo, float hi,
               bool log = false) {
    TensorData t{name, std::move(shape), {}};
    t.values.resize(Count(t.shape));
    std::uniform_real_distribution<float> d(lo, hi);
    for (float& v : t.values) v = log ? std::log(d(rng_)) : d(rng_);
    tensors_.push_back(std::move(t));
  }
  void Projection(const std::string& name, std::vector<int64_t> shape) {
    Normal(name, std::move(shape), 0.08f * scale_);
  }
  std::vector<TensorData> Take() { return std::move(tensors_); }

 private:
  static size_t Count(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  std::mt19937_64 rng_;
  const float scale_;
  std::vector<TensorData> tensors_;
};

nlohmann::json Eos(int32_t id) { return id < 0 ? nlohmann::json(nullptr) : nlohmann::json(id); }

void Qwen(const RandomModelOptions& o, nlohmann::json* config, Weights* w) {
  const int64_t H = o.hidden_size, E = o.num_experts, I = o.moe_intermediate_size,
                Is = o.shared_intermediate_size, hd = o.head_dim;
  const int64_t Hk = o.linear_key_heads, Hv = o.linear_value_heads, dk = o.linear_head_dim,
                dv = o.linear_head_dim;
  const int64_t conv_dim = 2 * Hk * dk + Hv * dv;
  std::vector<std::string> types;
  for (int i = 0; i < o.num_layers; ++i) {
    types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  }
  nlohmann::json text = {{"model_type", "qwen3_5_moe_text"},
                         {"vocab_size", o.vocab_size},
                         {"hidden_size", H},
                         {"num_hidden_layers", o.num_layers},
                         {"num_attention_heads", o.num_attention_heads},
                         {"num_key_value_heads", o.num_kv_heads},
                         {"head_dim", hd},
                         {"hidden_act", "silu"},
                         {"max_position_embeddings", o.max_positions},
                         {"rms_norm_eps", 1e-6},
                         {"tie_word_embeddings", false},
                         {"attention_bias", false},
                         {"attn_output_gate", true},
                         {"full_attention_interval", 4},
                         {"layer_types", types},
                         {"linear_conv_kernel_dim", 4},
                         {"linear_key_head_dim", dk},
                         {"linear_value_head_dim", dv},
                         {"linear_num_key_heads", Hk},
                         {"linear_num_value_heads", Hv},
                         {"mamba_ssm_dtype", "float32"},
                         {"moe_intermediate_size", I},
                         {"shared_expert_intermediate_size", Is},
                         {"num_experts", E},
                         {"num_experts_per_tok", o.experts_per_token},
                         {"mtp_num_hidden_layers", 0},
                         {"partial_rotary_factor", 0.25},
                         {"rope_parameters",
                          {{"mrope_interleaved", true},
                           {"mrope_section", {hd / 16, hd / 32, hd / 32}},
                           {"partial_rotary_factor", 0.25},
                           {"rope_theta", 10000000},
                           {"rope_type", "default"}}},
                         {"bos_token_id", nullptr},
                         {"eos_token_id", Eos(o.eos_token_id)},
                         {"pad_token_id", nullptr}};
  *config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
             {"model_type", "qwen3_5_moe"},
             {"tie_word_embeddings", false},
             {"text_config", text}};
  const std::string p = "model.language_model.";
  w->Normal(p + "embed_tokens.weight", {o.vocab_size, H}, 0.3f);
  for (int i = 0; i < o.num_layers; ++i) {
    const std::string l = absl::StrCat(p, "layers.", i, ".");
    w->Normal(l + "input_layernorm.weight", {H}, 0.1f);
    w->Normal(l + "post_attention_layernorm.weight", {H}, 0.1f);
    if (types[i] == "linear_attention") {
      w->Uniform(l + "linear_attn.A_log", {Hv}, 0.05f, 1.0f, /*log=*/true);
      w->Uniform(l + "linear_attn.conv1d.weight", {conv_dim, 1, 4}, -0.5f, 0.5f);
      w->Uniform(l + "linear_attn.dt_bias", {Hv}, -2.0f, 1.0f);
      w->Projection(l + "linear_attn.in_proj_a.weight", {Hv, H});
      w->Projection(l + "linear_attn.in_proj_b.weight", {Hv, H});
      w->Projection(l + "linear_attn.in_proj_qkv.weight", {conv_dim, H});
      w->Projection(l + "linear_attn.in_proj_z.weight", {Hv * dv, H});
      w->Normal(l + "linear_attn.norm.weight", {dv}, 0.1f, 1.0f);
      w->Projection(l + "linear_attn.out_proj.weight", {H, Hv * dv});
    } else {
      w->Projection(l + "self_attn.q_proj.weight", {o.num_attention_heads * hd * 2, H});
      w->Projection(l + "self_attn.k_proj.weight", {o.num_kv_heads * hd, H});
      w->Projection(l + "self_attn.v_proj.weight", {o.num_kv_heads * hd, H});
      w->Projection(l + "self_attn.o_proj.weight", {H, o.num_attention_heads * hd});
      w->Normal(l + "self_attn.q_norm.weight", {hd}, 0.1f);
      w->Normal(l + "self_attn.k_norm.weight", {hd}, 0.1f);
    }
    w->Normal(l + "mlp.gate.weight", {E, H}, 0.15f);
    w->Projection(l + "mlp.experts.gate_up_proj", {E, 2 * I, H});
    w->Projection(l + "mlp.experts.down_proj", {E, H, I});
    w->Projection(l + "mlp.shared_expert.gate_proj.weight", {Is, H});
    w->Projection(l + "mlp.shared_expert.up_proj.weight", {Is, H});
    w->Projection(l + "mlp.shared_expert.down_proj.weight", {H, Is});
    w->Projection(l + "mlp.shared_expert_gate.weight", {1, H});
  }
  w->Normal(p + "norm.weight", {H}, 0.1f);
  w->Normal("lm_head.weight", {o.vocab_size, H}, 0.1f);
}

void Nemotron(const RandomModelOptions& o, nlohmann::json* config, Weights* w) {
  const int64_t H = o.hidden_size, E = o.num_experts, I = o.moe_intermediate_size,
                Is = o.shared_intermediate_size, hd = o.head_dim;
  const int64_t nh = o.mamba_heads, d_inner = o.mamba_heads * o.mamba_head_dim, ng = o.mamba_groups,
                ds = o.ssm_state_size;
  const int64_t conv_dim = d_inner + 2 * ng * ds;
  std::string pattern = o.pattern;
  if (pattern.empty()) {
    for (int i = 0; i < o.num_layers; ++i) pattern += "MEM*E"[i % 5];
  }
  *config = {{"architectures", {"NemotronHForCausalLM"}},
             {"model_type", "nemotron_h"},
             {"vocab_size", o.vocab_size},
             {"hidden_size", H},
             {"hybrid_override_pattern", pattern},
             {"num_hidden_layers", static_cast<int>(pattern.size())},
             {"num_attention_heads", o.num_attention_heads},
             {"num_key_value_heads", o.num_kv_heads},
             {"head_dim", hd},
             {"attention_bias", false},
             {"max_position_embeddings", o.max_positions},
             {"intermediate_size", I},
             {"mlp_hidden_act", "relu2"},
             {"mlp_bias", false},
             {"mamba_num_heads", nh},
             {"mamba_head_dim", o.mamba_head_dim},
             {"mamba_hidden_act", "silu"},
             {"mamba_proj_bias", false},
             {"mamba_ssm_cache_dtype", "float32"},
             {"n_groups", ng},
             {"ssm_state_size", ds},
             {"conv_kernel", 4},
             {"expand", 2},
             {"chunk_size", 128},
             {"time_step_min", 0.001},
             {"time_step_max", 0.1},
             {"time_step_floor", 0.0001},
             {"use_conv_bias", true},
             {"use_bias", false},
             {"n_routed_experts", E},
             {"n_shared_experts", 1},
             {"moe_intermediate_size", I},
             {"moe_shared_expert_intermediate_size", Is},
             {"num_experts_per_tok", o.experts_per_token},
             {"routed_scaling_factor", 2.5},
             {"n_group", 1},
             {"topk_group", 1},
             {"norm_topk_prob", true},
             {"layer_norm_epsilon", 1e-5},
             {"tie_word_embeddings", false},
             {"bos_token_id", nullptr},
             {"eos_token_id", Eos(o.eos_token_id)},
             {"pad_token_id", nullptr}};
  w->Normal("backbone.embeddings.weight", {o.vocab_size, H}, 0.3f);
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string l = absl::StrCat("backbone.layers.", i, ".");
    w->Normal(l + "norm.weight", {H}, 0.1f, 1.0f);
    const std::string m = l + "mixer.";
    if (pattern[i] == 'M') {
      w->Uniform(m + "A_log", {nh}, 1.0f, 8.0f, /*log=*/true);
      w->Uniform(m + "D", {nh}, 0.5f, 1.5f);
      w->Uniform(m + "conv1d.bias", {conv_dim}, -0.2f, 0.2f);
      w->Uniform(m + "conv1d.weight", {conv_dim, 1, 4}, -0.5f, 0.5f);
      w->Uniform(m + "dt_bias", {nh}, -4.0f, -1.0f);
      w->Projection(m + "in_proj.weight", {d_inner + conv_dim + nh, H});
      w->Normal(m + "norm.weight", {d_inner}, 0.1f, 1.0f);
      w->Projection(m + "out_proj.weight", {H, d_inner});
    } else if (pattern[i] == 'E') {
      for (int64_t e = 0; e < E; ++e) {
        w->Projection(absl::StrCat(m, "experts.", e, ".up_proj.weight"), {I, H});
        w->Projection(absl::StrCat(m, "experts.", e, ".down_proj.weight"), {H, I});
      }
      w->Normal(m + "gate.weight", {E, H}, 0.15f);
      w->Normal(m + "gate.e_score_correction_bias", {E}, 0.05f);
      w->Projection(m + "shared_experts.up_proj.weight", {Is, H});
      w->Projection(m + "shared_experts.down_proj.weight", {H, Is});
    } else {
      w->Projection(m + "q_proj.weight", {o.num_attention_heads * hd, H});
      w->Projection(m + "k_proj.weight", {o.num_kv_heads * hd, H});
      w->Projection(m + "v_proj.weight", {o.num_kv_heads * hd, H});
      w->Projection(m + "o_proj.weight", {H, o.num_attention_heads * hd});
    }
  }
  w->Normal("backbone.norm_f.weight", {H}, 0.1f, 1.0f);
  w->Normal("lm_head.weight", {o.vocab_size, H}, 0.1f);
}

}  // namespace

absl::Status WriteRandomCheckpoint(const RandomModelOptions& o, const std::string& dir) {
  if (o.vocab_size < 2 || o.hidden_size < 8 || o.num_layers < 1 || o.num_experts < 1 ||
      o.experts_per_token < 1 || o.experts_per_token > o.num_experts ||
      o.num_attention_heads % o.num_kv_heads != 0 || o.head_dim % 32 != 0 ||
      o.linear_value_heads % o.linear_key_heads != 0 || o.mamba_heads % o.mamba_groups != 0) {
    return absl::InvalidArgumentError(
        "random model: sizes out of range (vocab >= 2, hidden >= 8, layers >= 1, "
        "1 <= experts_per_token <= experts, heads a multiple of kv_heads, head_dim a multiple "
        "of 32, value heads a multiple of key heads, mamba heads a multiple of groups)");
  }
  for (const char c : o.pattern) {
    if (c != 'M' && c != 'E' && c != '*') {
      return absl::InvalidArgumentError("pattern: only M (Mamba-2), E (MoE) and * (attention)");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  nlohmann::json config;
  Weights w(o.seed, o.hidden_size);
  if (o.architecture == "qwen3_5_moe") {
    Qwen(o, &config, &w);
  } else if (o.architecture == "nemotron_h") {
    Nemotron(o, &config, &w);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture '", o.architecture, "': expected qwen3_5_moe or nemotron_h"));
  }
  config["tandem_random_weights"] = true;
  {
    std::ofstream out(dir + "/config.json");
    out << config.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/config.json"));
  }
  return WriteSafetensors(dir, w.Take(), o.dtype, o.shard_bytes);
}

}  // namespace tandem::workers::native
