#include "workers/native/qwen35_moe_config.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::workers::native::qwen35 {
namespace {

using Json = nlohmann::json;

// Reads fields of one JSON object, keeping the first error. `where` names the object in errors.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string where) : object_(object), where_(std::move(where)) {}

  const absl::Status& status() const { return status_; }
  const Json* Find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  void Fail(const char* key, const std::string& what) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(where_, ".", key, " ", what));
    }
  }
  void Unsupported(const char* key, const std::string& what) {
    if (status_.ok()) {
      status_ = absl::UnimplementedError(absl::StrCat(where_, ".", key, " ", what));
    }
  }

  // A required integer in [1, 2^30]: large enough for any real dimension, small enough that
  // products of a few never overflow int64 and that ModelShape's int32 fields hold it.
  int64_t PositiveInt(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) {
      Fail(key, "is missing (a positive integer is required)");
      return 1;
    }
    if (!v->is_number_integer()) {
      Fail(key, absl::StrCat("must be a positive integer, got ", v->dump()));
      return 1;
    }
    const int64_t n = v->get<int64_t>();
    if (n < 1 || n > (int64_t{1} << 30)) {
      Fail(key, absl::StrCat("must be a positive integer <= 2^30, got ", n));
      return 1;
    }
    return n;
  }

  double PositiveNumber(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr || !v->is_number()) {
      Fail(key, v == nullptr ? "is missing (a positive number is required)"
                             : absl::StrCat("must be a positive number, got ", v->dump()));
      return 1;
    }
    const double d = v->get<double>();
    if (!(d > 0) || !std::isfinite(d)) {
      Fail(key, absl::StrCat("must be a positive number, got ", v->dump()));
      return 1;
    }
    return d;
  }

  // An optional bool; `fallback` when absent or null.
  bool OptionalBool(const char* key, bool fallback) {
    const Json* v = Find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) {
      Fail(key, absl::StrCat("must be true or false, got ", v->dump()));
      return fallback;
    }
    return v->get<bool>();
  }

  // An optional string; `fallback` when absent or null.
  std::string OptionalString(const char* key, const std::string& fallback) {
    const Json* v = Find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_string()) {
      Fail(key, absl::StrCat("must be a string, got ", v->dump()));
      return fallback;
    }
    return v->get<std::string>();
  }

 private:
  const Json& object_;
  std::string where_;
  absl::Status status_;
};

// eos_token_id: null, one id, or a list of ids.
absl::Status ParseEos(const Json& value, const std::string& where, int64_t vocab,
                      std::vector<int32_t>* out) {
  std::vector<Json> ids;
  if (value.is_null()) return absl::OkStatus();
  if (value.is_array()) {
    ids.assign(value.begin(), value.end());
  } else {
    ids.push_back(value);
  }
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".eos_token_id must be null, a token id below vocab_size ", vocab,
                       " or a list of them, got ", value.dump()));
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TextConfig> ParseConfig(const Json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("qwen3_5_moe: config is not an object");
  }
  auto type_it = config.find("model_type");
  const std::string type =
      type_it != config.end() && type_it->is_string() ? type_it->get<std::string>() : std::string();
  const Json* text = &config;
  std::string where = "config";
  if (type == "qwen3_5_moe") {
    auto it = config.find("text_config");
    if (it == config.end() || !it->is_object()) {
      return absl::InvalidArgumentError(
          "config.text_config is missing or not an object (model_type qwen3_5_moe keeps the text "
          "model's fields there)");
    }
    text = &*it;
    where = "config.text_config";
    auto tt = text->find("model_type");
    if (tt != text->end() && !(tt->is_string() && tt->get<std::string>() == "qwen3_5_moe_text")) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.text_config.model_type must be qwen3_5_moe_text, got ", tt->dump()));
    }
  } else if (type != "qwen3_5_moe_text") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.model_type must be qwen3_5_moe or qwen3_5_moe_text, got '", type, "'"));
  }

  TextConfig c;
  FieldReader r(*text, where);
  c.vocab_size = r.PositiveInt("vocab_size");
  c.hidden_size = r.PositiveInt("hidden_size");
  c.num_layers = r.PositiveInt("num_hidden_layers");
  c.max_positions = r.PositiveInt("max_position_embeddings");
  c.rms_norm_eps = static_cast<float>(r.PositiveNumber("rms_norm_eps"));
  c.num_heads = r.PositiveInt("num_attention_heads");
  c.num_kv_heads = r.PositiveInt("num_key_value_heads");
  c.head_dim = r.PositiveInt("head_dim");
  c.attn_output_gate = r.OptionalBool("attn_output_gate", true);
  c.conv_kernel = r.PositiveInt("linear_conv_kernel_dim");
  c.linear_key_heads = r.PositiveInt("linear_num_key_heads");
  c.linear_value_heads = r.PositiveInt("linear_num_value_heads");
  c.linear_key_dim = r.PositiveInt("linear_key_head_dim");
  c.linear_value_dim = r.PositiveInt("linear_value_head_dim");
  c.num_experts = r.PositiveInt("num_experts");
  c.experts_per_token = r.PositiveInt("num_experts_per_tok");
  c.moe_intermediate = r.PositiveInt("moe_intermediate_size");
  c.shared_intermediate = r.PositiveInt("shared_expert_intermediate_size");
  if (const std::string act = r.OptionalString("hidden_act", "silu"); act != "silu") {
    r.Unsupported("hidden_act", absl::StrCat("'", act, "' is not supported (only silu)"));
  }
  if (r.OptionalBool("attention_bias", false)) {
    r.Unsupported("attention_bias", "true is not supported (Qwen3.5 attention has no biases)");
  }
  if (!r.OptionalBool("norm_topk_prob", true)) {
    r.Unsupported("norm_topk_prob", "false is not supported (the router always renormalises)");
  }
  if (const Json* v = r.Find("decoder_sparse_step");
      v != nullptr && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
    r.Unsupported("decoder_sparse_step", "other than 1 is not supported (every layer is MoE)");
  }
  if (const Json* v = r.Find("mlp_only_layers");
      v != nullptr && !v->is_null() && !(v->is_array() && v->empty())) {
    r.Unsupported("mlp_only_layers", "must be empty (dense MLP layers are not supported)");
  }
  if (const std::string dt = r.OptionalString("mamba_ssm_dtype", "float32"); dt != "float32") {
    r.Unsupported("mamba_ssm_dtype", absl::StrCat("'", dt, "': the reference keeps fp32 state"));
  }
  if (!r.status().ok()) return r.status();

  // Cross-field checks.
  auto invalid = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", msg));
  };
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid(absl::StrCat("num_attention_heads ", c.num_heads,
                                " is not a multiple of num_key_value_heads ", c.num_kv_heads));
  }
  if (c.linear_value_heads % c.linear_key_heads != 0) {
    return invalid(absl::StrCat("linear_num_value_heads ", c.linear_value_heads,
                                " is not a multiple of linear_num_key_heads ", c.linear_key_heads));
  }
  if (c.experts_per_token > c.num_experts) {
    return invalid(absl::StrCat("num_experts_per_tok ", c.experts_per_token,
                                " exceeds num_experts ", c.num_experts));
  }

  // Layer types: the explicit list, else every full_attention_interval-th layer is full.
  if (const Json* lt = r.Find("layer_types"); lt != nullptr && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.num_layers) {
      return invalid(absl::StrCat("layer_types must be a list of num_hidden_layers (", c.num_layers,
                                  ") strings, got ", lt->dump()));
    }
    for (const Json& t : *lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
      if (s != "full_attention" && s != "linear_attention") {
        return invalid(absl::StrCat(
            "layer_types entries must be full_attention or linear_attention, got ", t.dump()));
      }
      c.full_attention.push_back(s == "full_attention");
    }
  } else {
    int64_t interval = 4;  // the HF default
    if (r.Find("full_attention_interval") != nullptr) {
      interval = r.PositiveInt("full_attention_interval");
      if (!r.status().ok()) return r.status();
    }
    for (int64_t i = 0; i < c.num_layers; ++i) c.full_attention.push_back((i + 1) % interval == 0);
  }

  // RoPE: rope_parameters (current HF), else the legacy flat rope_theta / partial_rotary_factor.
  const Json* rope = r.Find("rope_parameters");
  if (rope != nullptr && !rope->is_null() && !rope->is_object()) {
    return invalid(absl::StrCat("rope_parameters must be an object, got ", rope->dump()));
  }
  if (rope != nullptr && rope->is_null()) rope = nullptr;
  auto rope_field = [&](const char* key) -> std::pair<const Json*, std::string> {
    if (rope != nullptr) {
      auto it = rope->find(key);
      if (it != rope->end()) return {&*it, absl::StrCat("rope_parameters.", key)};
    }
    return {r.Find(key), key};
  };
  {
    auto [theta, name] = rope_field("rope_theta");
    if (theta == nullptr || !theta->is_number() || !(theta->get<double>() > 0)) {
      return invalid(absl::StrCat(name, " must be a positive number, got ",
                                  theta == nullptr ? "nothing" : theta->dump()));
    }
    c.rope_theta = static_cast<float>(theta->get<double>());
  }
  {
    auto [type_value, name] = rope_field("rope_type");
    if (type_value != nullptr &&
        !(type_value->is_string() && type_value->get<std::string>() == "default")) {
      return absl::UnimplementedError(absl::StrCat(where, ".", name, " ", type_value->dump(),
                                                   " is not supported (only default)"));
    }
  }
  {
    double factor = 0.25;  // the HF default for this class
    auto [f, name] = rope_field("partial_rotary_factor");
    if (f != nullptr) {
      if (!f->is_number() || !(f->get<double>() > 0) || f->get<double>() > 1) {
        return invalid(absl::StrCat(name, " must be in (0, 1], got ", f->dump()));
      }
      factor = f->get<double>();
    }
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
      return invalid(absl::StrCat("head_dim ", c.head_dim, " x partial_rotary_factor ", factor,
                                  " gives ", c.rotary_dim,
                                  " rotary dims; it must be even and >= 2"));
    }
  }
  {
    // Text-only positions are equal on all three mRoPE axes, so the sections do not change the
    // result; they must still describe the rotary frequencies exactly.
    auto [sections, name] = rope_field("mrope_section");
    if (sections != nullptr && !sections->is_null()) {
      int64_t sum = 0;
      bool ok = sections->is_array();
      if (ok) {
        for (const Json& s : *sections) {
          ok = ok && s.is_number_integer() && s.get<int64_t>() >= 0;
          if (ok) sum += s.get<int64_t>();
        }
      }
      if (!ok || sum != c.rotary_dim / 2) {
        return invalid(absl::StrCat(
            name, " must be non-negative integers summing to rotary_dim/2 = ", c.rotary_dim / 2,
            ", got ", sections->dump()));
      }
    }
  }

  // tie_word_embeddings lives at the top level of the composite config (HF reads it there), and
  // in text_config of a bare text config.
  {
    FieldReader top(config, "config");
    const bool text_tie = r.OptionalBool("tie_word_embeddings", false);
    c.tie_word_embeddings =
        text == &config ? text_tie : top.OptionalBool("tie_word_embeddings", text_tie);
    if (!r.status().ok()) return r.status();
    if (!top.status().ok()) return top.status();
  }
  {
    const Json* eos = r.Find("eos_token_id");
    std::string eos_where = where;
    if ((eos == nullptr || eos->is_null()) && text != &config) {
      auto it = config.find("eos_token_id");
      if (it != config.end()) {
        eos = &*it;
        eos_where = "config";
      }
    }
    if (eos != nullptr) {
      if (absl::Status s = ParseEos(*eos, eos_where, c.vocab_size, &c.eos_token_ids); !s.ok()) {
        return s;
      }
    }
  }
  return c;
}

}  // namespace tandem::workers::native::qwen35
