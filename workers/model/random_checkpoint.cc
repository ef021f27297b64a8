#include "workers/model/random_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "workers/model/checkpoint_writer.h"
#include "workers/model/model_config.h"

namespace tandem::workers::model {
namespace {

using Json = nlohmann::json;

// The spread of each kind of tensor. Projections use 1/sqrt(fan_in), so a unit-RMS input gives
// an output of RMS 1/sqrt(3) at any width; the state-space parameters are uniform draws in
// ranges like the golden fixtures' (tests/golden/MANIFEST.md).
struct Spread {
  float center;
  float half_width;
};
Spread Projection(int64_t fan_in) {
  return {0.0f, static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)))};
}
constexpr Spread kEmbedding{0.0f, 1.0f};
// Plain RMSNorm weights (y = w * norm(x)) at 1, and Qwen's zero-centred ones (y = (1 + w) *
// norm(x)) at 0: both scale by about 1.
constexpr Spread kNorm{1.0f, 0.1f};
constexpr Spread kNormOnePlus{0.0f, 0.1f};
// The vision tower's biases (its linears, LayerNorms and patch embedding have them): small
// next to the projections' outputs, so they shift activations without dominating them.
constexpr Spread kBias{0.0f, 0.05f};
// The learned position table is added to the patch embeddings (RMS about 1/sqrt(3) * the
// pixels' RMS): a comparable spread, so positions count without swamping the image.
constexpr Spread kPositions{0.0f, 0.5f};

// Collects the tensors of one model with their generators for one seed.
class SpecList {
 public:
  explicit SpecList(uint64_t seed) : seed_(seed) {}
  void Add(const std::string& name, std::vector<int64_t> shape, Spread spread) {
    specs_.push_back(RandomTensorSpec{
        name, std::move(shape),
        RandomFill{RandomTensorKey(seed_, name), spread.center, spread.half_width}});
  }
  std::vector<RandomTensorSpec> Take() { return std::move(specs_); }

 private:
  const uint64_t seed_;
  std::vector<RandomTensorSpec> specs_;
};

void QwenSpecs(const qwen35::TextConfig& c, const std::string& prefix, SpecList* w) {
  const int64_t H = c.hidden_size, hv = c.linear_value_heads, D = c.head_dim;
  const int64_t E = c.num_experts, I = c.moe_intermediate, Is = c.shared_intermediate;
  w->Add(prefix + "embed_tokens.weight", {c.vocab_size, H}, kEmbedding);
  if (!c.tie_word_embeddings) w->Add("lm_head.weight", {c.vocab_size, H}, Projection(H));
  w->Add(prefix + "norm.weight", {H}, kNormOnePlus);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = absl::StrCat(prefix, "layers.", i, ".");
    w->Add(l + "input_layernorm.weight", {H}, kNormOnePlus);
    w->Add(l + "post_attention_layernorm.weight", {H}, kNormOnePlus);
    if (c.full_attention[i]) {
      const int64_t q_rows = c.num_heads * D * (c.attn_output_gate ? 2 : 1);
      w->Add(l + "self_attn.q_proj.weight", {q_rows, H}, Projection(H));
      w->Add(l + "self_attn.k_proj.weight", {c.num_kv_heads * D, H}, Projection(H));
      w->Add(l + "self_attn.v_proj.weight", {c.num_kv_heads * D, H}, Projection(H));
      w->Add(l + "self_attn.o_proj.weight", {H, c.num_heads * D}, Projection(c.num_heads * D));
      w->Add(l + "self_attn.q_norm.weight", {D}, kNormOnePlus);
      w->Add(l + "self_attn.k_norm.weight", {D}, kNormOnePlus);
    } else {
      w->Add(l + "linear_attn.in_proj_qkv.weight", {c.conv_dim(), H}, Projection(H));
      w->Add(l + "linear_attn.in_proj_z.weight", {c.value_dim(), H}, Projection(H));
      w->Add(l + "linear_attn.in_proj_b.weight", {hv, H}, Projection(H));
      w->Add(l + "linear_attn.in_proj_a.weight", {hv, H}, Projection(H));
      w->Add(l + "linear_attn.conv1d.weight", {c.conv_dim(), 1, c.conv_kernel},
             Projection(c.conv_kernel));
      // A_log in [log 0.05, 0] (decay rates exp(A_log) in [0.05, 1]); dt_bias in [-2, 1].
      w->Add(l + "linear_attn.A_log", {hv}, {-1.5f, 1.5f});
      w->Add(l + "linear_attn.dt_bias", {hv}, {-0.5f, 1.5f});
      w->Add(l + "linear_attn.norm.weight", {c.linear_value_dim}, kNorm);
      w->Add(l + "linear_attn.out_proj.weight", {H, c.value_dim()}, Projection(c.value_dim()));
    }
    w->Add(l + "mlp.gate.weight", {E, H}, Projection(H));
    w->Add(l + "mlp.experts.gate_up_proj", {E, 2 * I, H}, Projection(H));
    w->Add(l + "mlp.experts.down_proj", {E, H, I}, Projection(I));
    w->Add(l + "mlp.shared_expert.gate_proj.weight", {Is, H}, Projection(H));
    w->Add(l + "mlp.shared_expert.up_proj.weight", {Is, H}, Projection(H));
    w->Add(l + "mlp.shared_expert.down_proj.weight", {H, Is}, Projection(Is));
    w->Add(l + "mlp.shared_expert_gate.weight", {1, H}, Projection(H));
  }
}

// A LayerNorm (y = w * (x - mean) / std + b, plain: w at 1) and a linear layer with a bias.
void AddLayerNorm(const std::string& name, int64_t dim, SpecList* w) {
  w->Add(name + ".weight", {dim}, kNorm);
  w->Add(name + ".bias", {dim}, kBias);
}
void AddLinear(const std::string& name, int64_t out, int64_t in, SpecList* w) {
  w->Add(name + ".weight", {out, in}, Projection(in));
  w->Add(name + ".bias", {out}, kBias);
}

// The vision tower (model.visual.*), as the released checkpoint names it.
void VisionSpecs(const qwen35::VisionConfig& v, SpecList* w) {
  const int64_t H = v.hidden_size, I = v.intermediate_size, M = v.merged_dim();
  const std::string p = "model.visual.";
  // Conv3d [hidden, channels, T, P, P]: its fan-in is one patch's values.
  w->Add(p + "patch_embed.proj.weight",
         {H, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size},
         Projection(v.patch_dim()));
  w->Add(p + "patch_embed.proj.bias", {H}, kBias);
  w->Add(p + "pos_embed.weight", {v.num_position_embeddings, H}, kPositions);
  for (int64_t b = 0; b < v.depth; ++b) {
    const std::string l = absl::StrCat(p, "blocks.", b, ".");
    AddLayerNorm(l + "norm1", H, w);
    AddLinear(l + "attn.qkv", 3 * H, H, w);
    AddLinear(l + "attn.proj", H, H, w);
    AddLayerNorm(l + "norm2", H, w);
    AddLinear(l + "mlp.linear_fc1", I, H, w);
    AddLinear(l + "mlp.linear_fc2", H, I, w);
  }
  // The merger normalises each patch, concatenates merge^2 of them and projects to the text
  // model's width.
  AddLayerNorm(p + "merger.norm", H, w);
  AddLinear(p + "merger.linear_fc1", M, M, w);
  AddLinear(p + "merger.linear_fc2", v.out_hidden_size, M, w);
}

void NemotronSpecs(const nemotron_h::Config& c, SpecList* w) {
  using nemotron_h::LayerKind;
  const int64_t H = c.hidden;
  w->Add("backbone.embeddings.weight", {c.vocab, H}, kEmbedding);
  if (!c.tie_embeddings) w->Add("lm_head.weight", {c.vocab, H}, Projection(H));
  w->Add("backbone.norm_f.weight", {H}, kNorm);
  for (size_t i = 0; i < c.kinds.size(); ++i) {
    const std::string l = absl::StrCat("backbone.layers.", i, ".");
    const std::string m = l + "mixer.";
    w->Add(l + "norm.weight", {H}, kNorm);
    switch (c.kinds[i]) {
      case LayerKind::kMamba: {
        const int64_t nh = c.m_heads, cd = c.conv_dim();
        w->Add(m + "in_proj.weight", {c.in_proj_rows(), H}, Projection(H));
        w->Add(m + "conv1d.weight", {cd, 1, c.conv_kernel}, Projection(c.conv_kernel));
        if (c.conv_bias) w->Add(m + "conv1d.bias", {cd}, {0.0f, 0.2f});
        // A_log in [0, log 8] (A = -exp(A_log) in [-8, -1]), dt_bias in [-4, -1], D in
        // [0.5, 1.5].
        w->Add(m + "A_log", {nh}, {1.04f, 1.04f});
        w->Add(m + "dt_bias", {nh}, {-2.5f, 1.5f});
        w->Add(m + "D", {nh}, {1.0f, 0.5f});
        w->Add(m + "norm.weight", {c.d_inner()}, kNorm);
        w->Add(m + "out_proj.weight", {H, c.d_inner()}, Projection(c.d_inner()));
        break;
      }
      case LayerKind::kAttention: {
        const int64_t qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
        w->Add(m + "q_proj.weight", {qd, H}, Projection(H));
        w->Add(m + "k_proj.weight", {kvd, H}, Projection(H));
        w->Add(m + "v_proj.weight", {kvd, H}, Projection(H));
        w->Add(m + "o_proj.weight", {H, qd}, Projection(qd));
        break;
      }
      case LayerKind::kMoe: {
        w->Add(m + "gate.weight", {c.experts, H}, Projection(H));
        // Small next to the spread of the router scores, so it barely tilts selection.
        w->Add(m + "gate.e_score_correction_bias", {c.experts}, {0.0f, 0.01f});
        for (int64_t e = 0; e < c.experts; ++e) {
          const std::string ep = absl::StrCat(m, "experts.", e, ".");
          w->Add(ep + "up_proj.weight", {c.moe_inter, H}, Projection(H));
          w->Add(ep + "down_proj.weight", {H, c.moe_inter}, Projection(c.moe_inter));
        }
        w->Add(m + "shared_experts.up_proj.weight", {c.shared_inter, H}, Projection(H));
        w->Add(m + "shared_experts.down_proj.weight", {H, c.shared_inter},
               Projection(c.shared_inter));
        break;
      }
      case LayerKind::kMlp: {
        w->Add(m + "up_proj.weight", {c.mlp_inter, H}, Projection(H));
        w->Add(m + "down_proj.weight", {H, c.mlp_inter}, Projection(c.mlp_inter));
        break;
      }
    }
  }
}

Json Eos(int32_t id) { return id < 0 ? Json(nullptr) : Json(id); }

Json QwenConfig(const RandomModelOptions& o) {
  const int64_t hd = o.head_dim;
  std::vector<std::string> types;
  for (int i = 0; i < o.num_layers; ++i) {
    types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  }
  Json text = {{"model_type", "qwen3_5_moe_text"},
               {"vocab_size", o.vocab_size},
               {"hidden_size", o.hidden_size},
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
               {"linear_key_head_dim", o.linear_head_dim},
               {"linear_value_head_dim", o.linear_head_dim},
               {"linear_num_key_heads", o.linear_key_heads},
               {"linear_num_value_heads", o.linear_value_heads},
               {"mamba_ssm_dtype", "float32"},
               {"moe_intermediate_size", o.moe_intermediate_size},
               {"shared_expert_intermediate_size", o.shared_intermediate_size},
               {"num_experts", o.num_experts},
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
  Json config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                 {"model_type", "qwen3_5_moe"},
                 {"tie_word_embeddings", false},
                 {"text_config", text}};
  if (o.vision) {
    // -1: the vocabulary's last three ids.
    const auto id = [&](int32_t chosen, int32_t from_end) {
      return chosen >= 0 ? chosen : o.vocab_size - from_end;
    };
    config["vision_start_token_id"] = id(o.vision_start_token_id, 3);
    config["vision_end_token_id"] = id(o.vision_end_token_id, 2);
    config["image_token_id"] = id(o.image_token_id, 1);
    config["vision_config"] = {{"model_type", "qwen3_5_moe_vision"},
                               {"depth", o.vision_depth},
                               {"hidden_size", o.vision_hidden_size},
                               {"hidden_act", "gelu_pytorch_tanh"},
                               {"intermediate_size", o.vision_intermediate_size},
                               {"num_heads", o.vision_heads},
                               {"in_channels", 3},
                               {"patch_size", o.vision_patch_size},
                               {"spatial_merge_size", o.vision_merge_size},
                               {"temporal_patch_size", o.vision_temporal_patch_size},
                               {"out_hidden_size", o.hidden_size},
                               {"num_position_embeddings", o.vision_position_embeddings},
                               {"deepstack_visual_indexes", Json::array()}};
  }
  return config;
}

// The checks of a random Qwen config's vision part the engines' parser leaves out: its ids
// must name three different tokens, none of them the end of sequence.
absl::Status CheckVision(const Json& config, const RandomModelOptions& o) {
  absl::StatusOr<qwen35::TextConfig> text = qwen35::ParseConfig(config);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::optional<qwen35::VisionConfig>> vision =
      qwen35::ParseVisionConfig(config, *text);
  if (!vision.ok()) return vision.status();
  if (!vision->has_value()) return absl::OkStatus();
  const qwen35::VisionConfig& v = **vision;
  const int32_t start = v.vision_start_token_id, end = v.vision_end_token_id,
                image = v.image_token_id;
  if (start == end || start == image || end == image || start == o.eos_token_id ||
      end == o.eos_token_id || image == o.eos_token_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision_start_token_id ", start, ", vision_end_token_id ", end, " and image_token_id ",
        image, " must be three different ids, none of them eos_token_id ", o.eos_token_id));
  }
  return absl::OkStatus();
}

Json NemotronConfig(const RandomModelOptions& o) {
  std::string pattern = o.pattern;
  if (pattern.empty()) {
    for (int i = 0; i < o.num_layers; ++i) pattern += "MEM*E"[i % 5];
  }
  return {{"architectures", {"NemotronHForCausalLM"}},
          {"model_type", "nemotron_h"},
          {"vocab_size", o.vocab_size},
          {"hidden_size", o.hidden_size},
          {"hybrid_override_pattern", pattern},
          {"num_hidden_layers", static_cast<int>(pattern.size())},
          {"num_attention_heads", o.num_attention_heads},
          {"num_key_value_heads", o.num_kv_heads},
          {"head_dim", o.head_dim},
          {"attention_bias", false},
          {"max_position_embeddings", o.max_positions},
          {"intermediate_size", o.moe_intermediate_size},
          {"mlp_hidden_act", "relu2"},
          {"mlp_bias", false},
          {"mamba_num_heads", o.mamba_heads},
          {"mamba_head_dim", o.mamba_head_dim},
          {"mamba_hidden_act", "silu"},
          {"mamba_proj_bias", false},
          {"mamba_ssm_cache_dtype", "float32"},
          {"n_groups", o.mamba_groups},
          {"ssm_state_size", o.ssm_state_size},
          {"conv_kernel", 4},
          {"expand", 2},
          {"chunk_size", 128},
          {"time_step_min", 0.001},
          {"time_step_max", 0.1},
          {"time_step_floor", 0.0001},
          {"use_conv_bias", true},
          {"use_bias", false},
          {"n_routed_experts", o.num_experts},
          {"n_shared_experts", 1},
          {"moe_intermediate_size", o.moe_intermediate_size},
          {"moe_shared_expert_intermediate_size", o.shared_intermediate_size},
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
}

// Every tensor of the model `config` describes, with its generator for `seed`.
std::vector<RandomTensorSpec> SpecsOf(const ModelConfig& config, uint64_t seed) {
  SpecList specs(seed);
  switch (config.architecture()) {
    case Architecture::kQwen35Moe: {
      const auto& c = std::get<qwen35::TextConfig>(config.hyperparameters);
      // The loaders' prefixes: the composite model nests the text model, a bare one does not.
      QwenSpecs(c, c.composite ? "model.language_model." : "model.", &specs);
      if (config.vision.has_value()) VisionSpecs(*config.vision, &specs);
      break;
    }
    case Architecture::kNemotronH:
      NemotronSpecs(std::get<nemotron_h::Config>(config.hyperparameters), &specs);
      break;
  }
  return specs.Take();
}

// The id a tokenizer.json gives the token `content`, as the worker's tokenizer (BpeTokenizer)
// takes it: an added token's, else the vocabulary's.
std::optional<int32_t> TokenIdIn(const Json& tokenizer, const std::string& content) {
  if (auto added = tokenizer.find("added_tokens"); added != tokenizer.end() && added->is_array()) {
    for (const Json& a : *added) {
      if (a.is_object() && a.value("content", Json()) == content && a.contains("id") &&
          a["id"].is_number_integer()) {
        return a["id"].get<int32_t>();
      }
    }
  }
  auto model = tokenizer.find("model");
  if (model == tokenizer.end() || !model->is_object()) return std::nullopt;
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) return std::nullopt;
  auto id = vocab->find(content);
  if (id == vocab->end() || !id->is_number_integer()) return std::nullopt;
  return id->get<int32_t>();
}

// The config with the marks that tell the worker (CheckModelName) its weights are random.
Json Marked(Json config, uint64_t seed) {
  config["tandem_random_weights"] = true;
  config["tandem_random_seed"] = seed;
  return config;
}

}  // namespace

int64_t RandomTensorSpec::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<Json> RandomModelConfig(const RandomModelOptions& o) {
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
  absl::StatusOr<Architecture> architecture = ParseArchitecture(o.architecture);
  if (!architecture.ok()) return architecture.status();
  switch (*architecture) {
    case Architecture::kQwen35Moe: {
      Json config = QwenConfig(o);
      if (absl::Status s = CheckVision(config, o); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("random model: ", s.message()));
      }
      return config;
    }
    case Architecture::kNemotronH:
      return NemotronConfig(o);
  }
  return absl::InternalError("unknown architecture");
}

absl::StatusOr<std::vector<RandomTensorSpec>> RandomTensorSpecs(const Json& config, uint64_t seed) {
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(config, "config.json");
  if (!parsed.ok()) return parsed.status();
  return SpecsOf(*parsed, seed);
}

absl::Status VisionTokenIdsFromTokenizer(const Json& tokenizer, RandomModelOptions* o) {
  if (!tokenizer.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  }
  std::string missing;
  int32_t ids[3] = {0, 0, 0};
  const char* const kTokens[3] = {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>"};
  for (int i = 0; i < 3; ++i) {
    std::optional<int32_t> id = TokenIdIn(tokenizer, kTokens[i]);
    if (id.has_value()) {
      ids[i] = *id;
    } else {
      absl::StrAppend(&missing, missing.empty() ? "" : ", ", kTokens[i]);
    }
  }
  if (!missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("the tokenizer has no ", missing, " token (the vision markers)"));
  }
  o->vision_start_token_id = ids[0];
  o->vision_end_token_id = ids[1];
  o->image_token_id = ids[2];
  return absl::OkStatus();
}

Json RandomPreprocessorConfig(const qwen35::VisionConfig& v) {
  return {{"image_processor_type", "Qwen2VLImageProcessorFast"},
          {"processor_class", "Qwen3VLProcessor"},
          {"do_resize", true},
          {"resample", 3},
          {"do_rescale", true},
          {"rescale_factor", 1.0 / 255.0},
          {"do_normalize", true},
          {"image_mean", {0.5, 0.5, 0.5}},
          {"image_std", {0.5, 0.5, 0.5}},
          {"do_convert_rgb", true},
          {"size", {{"shortest_edge", 65536}, {"longest_edge", 16777216}}},
          {"patch_size", v.patch_size},
          {"temporal_patch_size", v.temporal_patch_size},
          {"merge_size", v.spatial_merge_size}};
}

absl::Status WriteRandomWeights(const Json& config, uint64_t seed, DType dtype,
                                uint64_t shard_bytes, const std::string& dir) {
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(config, "config.json");
  if (!parsed.ok()) return parsed.status();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const auto write_json = [&](const char* name, const Json& json) -> absl::Status {
    std::ofstream out(dir + "/" + name);
    out << json.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/", name));
    return absl::OkStatus();
  };
  if (absl::Status s = write_json("config.json", Marked(config, seed)); !s.ok()) return s;
  // The worker reads the image processor's settings from here, as from a released checkpoint.
  if (parsed->vision.has_value()) {
    if (absl::Status s =
            write_json("preprocessor_config.json", RandomPreprocessorConfig(*parsed->vision));
        !s.ok()) {
      return s;
    }
  }
  std::vector<RandomTensorSpec> specs = SpecsOf(*parsed, seed);
  std::vector<TensorData> tensors;
  tensors.reserve(specs.size());
  for (RandomTensorSpec& s : specs) {
    tensors.push_back(
        TensorData{std::move(s.name), std::move(s.shape), {}, s.fill, std::nullopt, {}});
  }
  return WriteSafetensors(dir, std::move(tensors), dtype, shard_bytes);
}

absl::Status WriteRandomCheckpoint(const RandomModelOptions& o, const std::string& dir) {
  auto config = RandomModelConfig(o);
  if (!config.ok()) return config.status();
  return WriteRandomWeights(*config, o.seed, o.dtype, o.shard_bytes, dir);
}

absl::StatusOr<std::unique_ptr<Checkpoint>> RandomWeightsCheckpoint(const std::string& config_json,
                                                                    uint64_t seed,
                                                                    const std::string& label) {
  const Json config = ParseConfigJson(config_json);
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(config, label);
  if (!parsed.ok()) return parsed.status();
  if (config.contains("quantization_config")) {
    // The generated weights are BF16: a quantized config would claim a format they do not have.
    return absl::UnimplementedError(
        absl::StrCat(label,
                     ": --random_weights generates BF16 weights, and this config.json has a "
                     "quantization_config; drop it, or write a quantized checkpoint with "
                     "tandem-make-checkpoint --quant"));
  }
  std::vector<RandomTensorSpec> specs = SpecsOf(*parsed, seed);
  std::vector<TensorView> views;
  views.reserve(specs.size());
  for (RandomTensorSpec& s : specs) {
    TensorView v;
    v.name = std::move(s.name);
    v.dtype = DType::kBF16;  // every generated value is exactly a BF16
    v.shape = std::move(s.shape);
    v.bytes = static_cast<size_t>(v.elements()) * 2;
    v.random = s.fill;
    views.push_back(std::move(v));
  }
  return Checkpoint::FromTensors(label, Marked(config, seed).dump(2), std::move(views));
}

}  // namespace tandem::workers::model
