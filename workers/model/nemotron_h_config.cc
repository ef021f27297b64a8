#include "workers/model/nemotron_h_config.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::workers::model::nemotron_h {
namespace {

using Json = nlohmann::json;

// The JSON text of a value for error messages (never throws, even on invalid UTF-8).
std::string Show(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Typed, validated access to config.json fields. A null value counts as absent. Every error
// names the field and what was wrong, prefixed with the checkpoint directory.
class ConfigReader {
 public:
  ConfigReader(const Json& config, std::string where) : config_(config), where_(std::move(where)) {}

  const Json* Find(const char* key) const {
    if (!config_.is_object()) return nullptr;
    auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status Error(const char* key, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, ": config.json field '", key, "' ", what));
  }
  absl::Status Unsupported(const char* key, const std::string& what) const {
    return absl::UnimplementedError(absl::StrCat(where_, ": config.json field '", key, "' ", what));
  }

  // An integer in [min, max]; `fallback` when absent (required when there is none).
  absl::StatusOr<int64_t> Int(const char* key, int64_t min, int64_t max = kMaxDim,
                              std::optional<int64_t> fallback = std::nullopt) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return Error(key, "is required for nemotron_h");
    }
    if (!v->is_number_integer())
      return Error(key, absl::StrCat("must be an integer, got ", Show(*v)));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max)) {
      return Error(key, absl::StrCat("must be in [", min, ", ", max, "], got ", Show(*v)));
    }
    const int64_t x = v->get<int64_t>();
    if (x < min || x > max) {
      return Error(key, absl::StrCat("must be in [", min, ", ", max, "], got ", Show(*v)));
    }
    return x;
  }

  // A finite number; `fallback` when absent.
  absl::StatusOr<double> Number(const char* key,
                                std::optional<double> fallback = std::nullopt) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return Error(key, "is required for nemotron_h");
    }
    if (!v->is_number() || !std::isfinite(v->get<double>())) {
      return Error(key, absl::StrCat("must be a finite number, got ", Show(*v)));
    }
    return v->get<double>();
  }

  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", Show(*v)));
    return v->get<bool>();
  }

  absl::StatusOr<std::string> String(const char* key, std::optional<std::string> fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return Error(key, "is required for nemotron_h");
    }
    if (!v->is_string()) return Error(key, absl::StrCat("must be a string, got ", Show(*v)));
    return v->get<std::string>();
  }

 private:
  const Json& config_;
  std::string where_;
};

absl::StatusOr<std::vector<LayerKind>> ParseLayerKinds(const ConfigReader& r) {
  std::vector<LayerKind> kinds;
  if (const Json* p = r.Find("hybrid_override_pattern"); p != nullptr) {
    if (!p->is_string()) {
      return r.Error("hybrid_override_pattern", absl::StrCat("must be a string, got ", Show(*p)));
    }
    const std::string s = p->get<std::string>();
    for (size_t i = 0; i < s.size(); ++i) {
      switch (s[i]) {
        case 'M':
          kinds.push_back(LayerKind::kMamba);
          break;
        case '*':
          kinds.push_back(LayerKind::kAttention);
          break;
        case 'E':
          kinds.push_back(LayerKind::kMoe);
          break;
        case '-':
          kinds.push_back(LayerKind::kMlp);
          break;
        default:
          return r.Error("hybrid_override_pattern",
                         absl::StrCat("has unknown layer type '", std::string(1, s[i]),
                                      "' at layer ", i, " in \"", s,
                                      "\" (known: M = Mamba-2, * = attention, E = MoE, - = MLP)"));
      }
    }
  } else if (const Json* b = r.Find("layers_block_type"); b != nullptr) {
    // Newer transformers versions store the pattern as a list of names.
    if (!b->is_array()) {
      return r.Error("layers_block_type", absl::StrCat("must be a list, got ", Show(*b)));
    }
    for (size_t i = 0; i < b->size(); ++i) {
      const Json& e = (*b)[i];
      const std::string name = e.is_string() ? e.get<std::string>() : Show(e);
      if (name == "mamba") {
        kinds.push_back(LayerKind::kMamba);
      } else if (name == "attention") {
        kinds.push_back(LayerKind::kAttention);
      } else if (name == "moe") {
        kinds.push_back(LayerKind::kMoe);
      } else if (name == "mlp") {
        kinds.push_back(LayerKind::kMlp);
      } else {
        return r.Error("layers_block_type",
                       absl::StrCat("has unknown layer type ", Show(e), " at layer ", i,
                                    " (known: mamba, attention, moe, mlp)"));
      }
    }
  } else {
    return r.Error("hybrid_override_pattern", "is required for nemotron_h (one letter per layer)");
  }
  if (kinds.empty()) return r.Error("hybrid_override_pattern", "lists no layers");
  return kinds;
}

// Vocabulary, widths, the layer pattern, the norm and the embeddings.
absl::Status ParseBasics(const ConfigReader& r, Config* c) {
  ASSIGN_OR_RETURN(c->vocab, r.Int("vocab_size", 1, std::numeric_limits<int32_t>::max()));
  ASSIGN_OR_RETURN(c->hidden, r.Int("hidden_size", 1));
  ASSIGN_OR_RETURN(c->max_positions,
                   r.Int("max_position_embeddings", 1, std::numeric_limits<int32_t>::max()));
  ASSIGN_OR_RETURN(c->kinds, ParseLayerKinds(r));
  ASSIGN_OR_RETURN(const int64_t layers,
                   r.Int("num_hidden_layers", 1, kMaxDim, static_cast<int64_t>(c->kinds.size())));
  if (layers != static_cast<int64_t>(c->kinds.size())) {
    return r.Error("num_hidden_layers",
                   absl::StrCat("is ", layers, " but hybrid_override_pattern lists ",
                                c->kinds.size(), " layers"));
  }
  double eps = 0;
  if (r.Find("layer_norm_epsilon") != nullptr || r.Find("norm_eps") == nullptr) {
    ASSIGN_OR_RETURN(eps, r.Number("layer_norm_epsilon"));
  } else {
    ASSIGN_OR_RETURN(eps, r.Number("norm_eps"));
  }
  if (eps <= 0) return r.Error("layer_norm_epsilon", "must be positive");
  c->eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(c->tie_embeddings, r.Bool("tie_word_embeddings", false));
  return absl::OkStatus();
}

// eos_token_id: an int, a list of ints, or null.
absl::Status ParseEos(const ConfigReader& r, Config* c) {
  const Json* e = r.Find("eos_token_id");
  if (e == nullptr) return absl::OkStatus();
  std::vector<Json> ids = e->is_array() ? e->get<std::vector<Json>>() : std::vector<Json>{*e};
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c->vocab) {
      return r.Error("eos_token_id", absl::StrCat("must be a token id in [0, ", c->vocab,
                                                  ") or a list of them, got ", Show(*e)));
    }
    c->eos.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ParseAttention(const ConfigReader& r, Config* c) {
  ASSIGN_OR_RETURN(c->heads, r.Int("num_attention_heads", 1));
  ASSIGN_OR_RETURN(c->kv_heads, r.Int("num_key_value_heads", 1, kMaxDim, c->heads));
  if (c->heads % c->kv_heads != 0) {
    return r.Error(
        "num_key_value_heads",
        absl::StrCat("(", c->kv_heads, ") must divide num_attention_heads (", c->heads, ")"));
  }
  if (c->hidden % c->heads != 0 && r.Find("head_dim") == nullptr) {
    return r.Error("head_dim", "is required when num_attention_heads does not divide hidden_size");
  }
  ASSIGN_OR_RETURN(c->head_dim, r.Int("head_dim", 1, kMaxDim, c->hidden / c->heads));
  ASSIGN_OR_RETURN(const bool bias, r.Bool("attention_bias", false));
  if (bias) return r.Unsupported("attention_bias", "true is not supported (Nemotron-H has none)");
  return absl::OkStatus();
}

// time_step_limit: [min, max], max null for none.
absl::Status ParseTimeStepLimit(const ConfigReader& r, Config* c) {
  const Json* lim = r.Find("time_step_limit");
  if (lim == nullptr) return absl::OkStatus();
  if (!lim->is_array() || lim->size() != 2 || !(*lim)[0].is_number() ||
      !((*lim)[1].is_number() || (*lim)[1].is_null()) || (*lim)[0].get<double>() < 0) {
    return r.Error("time_step_limit",
                   absl::StrCat("must be [min, max] with 0 <= min, got ", Show(*lim)));
  }
  c->dt_min = static_cast<float>((*lim)[0].get<double>());
  if ((*lim)[1].is_number()) c->dt_max = static_cast<float>((*lim)[1].get<double>());
  if (c->dt_max < c->dt_min) return r.Error("time_step_limit", "has max < min");
  return absl::OkStatus();
}

absl::Status ParseMamba(const ConfigReader& r, Config* c) {
  ASSIGN_OR_RETURN(c->m_heads, r.Int("mamba_num_heads", 1));
  ASSIGN_OR_RETURN(c->m_head_dim, r.Int("mamba_head_dim", 1));
  ASSIGN_OR_RETURN(c->groups, r.Int("n_groups", 1));
  ASSIGN_OR_RETURN(c->state, r.Int("ssm_state_size", 1));
  ASSIGN_OR_RETURN(c->conv_kernel, r.Int("conv_kernel", 1, 64));
  ASSIGN_OR_RETURN(c->conv_bias, r.Bool("use_conv_bias", true));
  if (c->m_heads % c->groups != 0) {
    return r.Error("n_groups", absl::StrCat("(", c->groups, ") must divide mamba_num_heads (",
                                            c->m_heads, ")"));
  }
  ASSIGN_OR_RETURN(const bool proj_bias, r.Bool("mamba_proj_bias", false));
  if (proj_bias) return r.Unsupported("mamba_proj_bias", "true is not supported");
  ASSIGN_OR_RETURN(const std::string act, r.String("mamba_hidden_act", "silu"));
  if (act != "silu") {
    return r.Unsupported("mamba_hidden_act", absl::StrCat("'", act, "' is not supported (silu)"));
  }
  return ParseTimeStepLimit(r, c);
}

absl::Status ParseMoe(const ConfigReader& r, Config* c) {
  ASSIGN_OR_RETURN(c->experts, r.Int("n_routed_experts", 2));
  ASSIGN_OR_RETURN(c->top_k, r.Int("num_experts_per_tok", 1, c->experts));
  ASSIGN_OR_RETURN(c->moe_inter, r.Int("moe_intermediate_size", 1));
  ASSIGN_OR_RETURN(c->shared_inter, r.Int("moe_shared_expert_intermediate_size", 1));
  ASSIGN_OR_RETURN(const int64_t shared, r.Int("n_shared_experts", 0, kMaxDim, 1));
  if (shared != 1) {
    return r.Unsupported("n_shared_experts", absl::StrCat("is ", shared, "; only 1 is supported"));
  }
  ASSIGN_OR_RETURN(const double scale, r.Number("routed_scaling_factor"));
  c->routed_scale = static_cast<float>(scale);
  ASSIGN_OR_RETURN(c->norm_topk, r.Bool("norm_topk_prob", true));
  ASSIGN_OR_RETURN(const int64_t n_group, r.Int("n_group", 1, kMaxDim, 1));
  ASSIGN_OR_RETURN(const int64_t topk_group, r.Int("topk_group", 1, kMaxDim, 1));
  if (n_group != 1 || topk_group != 1) {
    return r.Unsupported("n_group",
                         absl::StrCat("group-limited routing (n_group ", n_group, ", topk_group ",
                                      topk_group, ") is not supported; only 1/1"));
  }
  return absl::OkStatus();
}

// The relu2 MLPs of the MoE experts and of the dense '-' layers.
absl::Status ParseMlp(const ConfigReader& r, Config* c) {
  if (c->Has(LayerKind::kMlp)) {
    ASSIGN_OR_RETURN(c->mlp_inter, r.Int("intermediate_size", 1));
  }
  ASSIGN_OR_RETURN(const std::string act, r.String("mlp_hidden_act", "relu2"));
  if (act != "relu2") {
    return r.Unsupported("mlp_hidden_act", absl::StrCat("'", act, "' is not supported (relu2)"));
  }
  ASSIGN_OR_RETURN(const bool mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Unsupported("mlp_bias", "true is not supported");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const Json& json, const std::string& where) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": config.json is not a JSON object"));
  }
  const ConfigReader r(json, where);
  Config c;
  RETURN_IF_ERROR(ParseBasics(r, &c));
  RETURN_IF_ERROR(ParseEos(r, &c));
  // Each kind of layer's fields are read only when the pattern has that kind.
  if (c.Has(LayerKind::kAttention)) RETURN_IF_ERROR(ParseAttention(r, &c));
  if (c.Has(LayerKind::kMamba)) RETURN_IF_ERROR(ParseMamba(r, &c));
  if (c.Has(LayerKind::kMoe)) RETURN_IF_ERROR(ParseMoe(r, &c));
  if (c.Has(LayerKind::kMoe) || c.Has(LayerKind::kMlp)) RETURN_IF_ERROR(ParseMlp(r, &c));
  return c;
}

ModelShape Shape(const Config& c) {
  ModelShape shape;
  shape.architecture = Architecture::kNemotronH;
  shape.vocab_size = static_cast<int32_t>(c.vocab);
  shape.hidden_size = static_cast<int32_t>(c.hidden);
  shape.num_layers = static_cast<int32_t>(c.kinds.size());
  shape.max_positions = static_cast<int32_t>(c.max_positions);
  // fp32 bytes: K and V per attention layer per token; conv window + SSM state per Mamba layer.
  shape.kv_bytes_per_token = c.Count(LayerKind::kAttention) * 2 * c.kv_heads * c.head_dim * 4;
  shape.state_bytes = c.Count(LayerKind::kMamba) *
                      (c.conv_dim() * c.conv_kernel + c.m_heads * c.m_head_dim * c.state) * 4;
  shape.eos_token_ids = c.eos;
  return shape;
}

}  // namespace tandem::workers::model::nemotron_h
