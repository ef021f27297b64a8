#include "workers/model/qwen35_moe_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::workers::model::qwen35 {
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

absl::Status Invalid(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// Where the text model's fields are: text_config of the composite (multimodal) config, or the
// config itself for a bare text config.
struct TextSection {
  const Json* fields = nullptr;
  std::string where;  // "config.text_config" or "config", for errors
  bool composite = false;
};

absl::StatusOr<TextSection> FindTextSection(const Json& config) {
  auto type_it = config.find("model_type");
  const std::string type =
      type_it != config.end() && type_it->is_string() ? type_it->get<std::string>() : std::string();
  if (type == "qwen3_5_moe_text") return TextSection{&config, "config", false};
  if (type != "qwen3_5_moe") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.model_type must be qwen3_5_moe or qwen3_5_moe_text, got '", type, "'"));
  }
  auto it = config.find("text_config");
  if (it == config.end() || !it->is_object()) {
    return absl::InvalidArgumentError(
        "config.text_config is missing or not an object (model_type qwen3_5_moe keeps the text "
        "model's fields there)");
  }
  auto tt = it->find("model_type");
  if (tt != it->end() && !(tt->is_string() && tt->get<std::string>() == "qwen3_5_moe_text")) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.text_config.model_type must be qwen3_5_moe_text, got ", tt->dump()));
  }
  return TextSection{&*it, "config.text_config", true};
}

// The required dimensions; errors stay in `r`.
void ReadDimensions(FieldReader& r, TextConfig* c) {
  c->vocab_size = r.PositiveInt("vocab_size");
  c->hidden_size = r.PositiveInt("hidden_size");
  c->num_layers = r.PositiveInt("num_hidden_layers");
  c->max_positions = r.PositiveInt("max_position_embeddings");
  c->rms_norm_eps = static_cast<float>(r.PositiveNumber("rms_norm_eps"));
  c->num_heads = r.PositiveInt("num_attention_heads");
  c->num_kv_heads = r.PositiveInt("num_key_value_heads");
  c->head_dim = r.PositiveInt("head_dim");
  c->attn_output_gate = r.OptionalBool("attn_output_gate", true);
  c->conv_kernel = r.PositiveInt("linear_conv_kernel_dim");
  c->linear_key_heads = r.PositiveInt("linear_num_key_heads");
  c->linear_value_heads = r.PositiveInt("linear_num_value_heads");
  c->linear_key_dim = r.PositiveInt("linear_key_head_dim");
  c->linear_value_dim = r.PositiveInt("linear_value_head_dim");
  c->num_experts = r.PositiveInt("num_experts");
  c->experts_per_token = r.PositiveInt("num_experts_per_tok");
  c->moe_intermediate = r.PositiveInt("moe_intermediate_size");
  c->shared_intermediate = r.PositiveInt("shared_expert_intermediate_size");
}

// Options the reference does not implement, refused rather than run subtly wrong.
void RefuseUnsupported(FieldReader& r) {
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
}

absl::Status CheckHeadsAndExperts(const TextConfig& c, const std::string& where) {
  if (c.num_heads % c.num_kv_heads != 0) {
    return Invalid(where,
                   absl::StrCat("num_attention_heads ", c.num_heads,
                                " is not a multiple of num_key_value_heads ", c.num_kv_heads));
  }
  if (c.linear_value_heads % c.linear_key_heads != 0) {
    return Invalid(where,
                   absl::StrCat("linear_num_value_heads ", c.linear_value_heads,
                                " is not a multiple of linear_num_key_heads ", c.linear_key_heads));
  }
  if (c.experts_per_token > c.num_experts) {
    return Invalid(where, absl::StrCat("num_experts_per_tok ", c.experts_per_token,
                                       " exceeds num_experts ", c.num_experts));
  }
  return absl::OkStatus();
}

// Layer types: the explicit list, else every full_attention_interval-th layer is full.
absl::Status ParseLayerTypes(FieldReader& r, const std::string& where, TextConfig* c) {
  if (const Json* lt = r.Find("layer_types"); lt != nullptr && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c->num_layers) {
      return Invalid(where, absl::StrCat("layer_types must be a list of num_hidden_layers (",
                                         c->num_layers, ") strings, got ", lt->dump()));
    }
    for (const Json& t : *lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
      if (s != "full_attention" && s != "linear_attention") {
        return Invalid(where, absl::StrCat("layer_types entries must be full_attention or "
                                           "linear_attention, got ",
                                           t.dump()));
      }
      c->full_attention.push_back(s == "full_attention");
    }
    return absl::OkStatus();
  }
  int64_t interval = 4;  // the HF default
  if (r.Find("full_attention_interval") != nullptr) {
    interval = r.PositiveInt("full_attention_interval");
    if (!r.status().ok()) return r.status();
  }
  for (int64_t i = 0; i < c->num_layers; ++i) c->full_attention.push_back((i + 1) % interval == 0);
  return absl::OkStatus();
}

// The RoPE fields: in rope_parameters (current HF), else the legacy flat fields of the text
// config.
class RopeFields {
 public:
  RopeFields(const FieldReader& text, const Json* rope) : text_(text), rope_(rope) {}

  // The field and its name for errors (e.g. "rope_parameters.rope_theta"); null when absent.
  std::pair<const Json*, std::string> Get(const char* key) const {
    if (rope_ != nullptr) {
      auto it = rope_->find(key);
      if (it != rope_->end()) return {&*it, absl::StrCat("rope_parameters.", key)};
    }
    return {text_.Find(key), key};
  }

 private:
  const FieldReader& text_;
  const Json* rope_;  // rope_parameters, or null
};

absl::Status ParseRopeTheta(const RopeFields& rope, const std::string& where, TextConfig* c) {
  auto [theta, name] = rope.Get("rope_theta");
  if (theta == nullptr || !theta->is_number() || !(theta->get<double>() > 0)) {
    return Invalid(where, absl::StrCat(name, " must be a positive number, got ",
                                       theta == nullptr ? "nothing" : theta->dump()));
  }
  c->rope_theta = static_cast<float>(theta->get<double>());
  auto [type, type_name] = rope.Get("rope_type");
  if (type != nullptr && !(type->is_string() && type->get<std::string>() == "default")) {
    return absl::UnimplementedError(
        absl::StrCat(where, ".", type_name, " ", type->dump(), " is not supported (only default)"));
  }
  return absl::OkStatus();
}

absl::Status ParseRotaryDim(const RopeFields& rope, const std::string& where, TextConfig* c) {
  double factor = 0.25;  // the HF default for this class
  auto [f, name] = rope.Get("partial_rotary_factor");
  if (f != nullptr) {
    if (!f->is_number() || !(f->get<double>() > 0) || f->get<double>() > 1) {
      return Invalid(where, absl::StrCat(name, " must be in (0, 1], got ", f->dump()));
    }
    factor = f->get<double>();
  }
  c->rotary_dim = static_cast<int64_t>(static_cast<double>(c->head_dim) * factor);
  if (c->rotary_dim < 2 || c->rotary_dim % 2 != 0) {
    return Invalid(
        where, absl::StrCat("head_dim ", c->head_dim, " x partial_rotary_factor ", factor,
                            " gives ", c->rotary_dim, " rotary dims; it must be even and >= 2"));
  }
  return absl::OkStatus();
}

// mrope_section: frequency slots per (t, h, w) axis, summing to rotary_dim / 2. HF's default
// ([11, 11, 10]) applies when it fits; otherwise every slot reads t. Text-only positions are
// equal on all three axes, so only image prompts see the sections. The interleaved layout is the
// only one this model uses.
absl::Status ParseMropeSection(const RopeFields& rope, const std::string& where, TextConfig* c) {
  auto [interleaved, interleaved_name] = rope.Get("mrope_interleaved");
  if (interleaved != nullptr && !interleaved->is_null() &&
      !(interleaved->is_boolean() && interleaved->get<bool>())) {
    return absl::UnimplementedError(absl::StrCat(where, ".", interleaved_name, " ",
                                                 interleaved->dump(),
                                                 " is not supported (Qwen3.5 interleaves)"));
  }
  c->mrope_interleaved = true;
  auto [sections, name] = rope.Get("mrope_section");
  if (sections == nullptr || sections->is_null()) {
    if (c->rotary_dim / 2 == 32) c->mrope_section = {11, 11, 10};
    return absl::OkStatus();
  }
  int64_t sum = 0;
  bool ok = sections->is_array() && sections->size() == 3;
  if (ok) {
    for (const Json& s : *sections) {
      ok = ok && s.is_number_integer() && s.get<int64_t>() >= 0;
      if (ok) sum += s.get<int64_t>();
    }
  }
  if (!ok || sum != c->rotary_dim / 2) {
    return Invalid(where,
                   absl::StrCat(name, " must be 3 non-negative integers summing to rotary_dim/2 = ",
                                c->rotary_dim / 2, ", got ", sections->dump()));
  }
  for (const Json& s : *sections) c->mrope_section.push_back(s.get<int32_t>());
  return absl::OkStatus();
}

absl::Status ParseRope(const FieldReader& r, const std::string& where, TextConfig* c) {
  const Json* rope = r.Find("rope_parameters");
  if (rope != nullptr && !rope->is_null() && !rope->is_object()) {
    return Invalid(where, absl::StrCat("rope_parameters must be an object, got ", rope->dump()));
  }
  const RopeFields fields(r, rope != nullptr && rope->is_null() ? nullptr : rope);
  RETURN_IF_ERROR(ParseRopeTheta(fields, where, c));
  RETURN_IF_ERROR(ParseRotaryDim(fields, where, c));
  return ParseMropeSection(fields, where, c);
}

// tie_word_embeddings and eos_token_id: in the text section, and for the composite config also
// at its top level (HF reads tie_word_embeddings there; eos_token_id is taken from there when
// the text section has none).
absl::Status ParseTieAndEos(const Json& config, const TextSection& text, FieldReader& r,
                            TextConfig* c) {
  FieldReader top(config, "config");
  const bool text_tie = r.OptionalBool("tie_word_embeddings", false);
  c->tie_word_embeddings =
      text.composite ? top.OptionalBool("tie_word_embeddings", text_tie) : text_tie;
  if (!r.status().ok()) return r.status();
  if (!top.status().ok()) return top.status();
  const Json* eos = r.Find("eos_token_id");
  std::string eos_where = text.where;
  if ((eos == nullptr || eos->is_null()) && text.composite) {
    auto it = config.find("eos_token_id");
    if (it != config.end()) {
      eos = &*it;
      eos_where = "config";
    }
  }
  if (eos == nullptr) return absl::OkStatus();
  return ParseEos(*eos, eos_where, c->vocab_size, &c->eos_token_ids);
}

}  // namespace

absl::StatusOr<TextConfig> ParseConfig(const Json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("qwen3_5_moe: config is not an object");
  }
  ASSIGN_OR_RETURN(const TextSection text, FindTextSection(config));
  TextConfig c;
  c.composite = text.composite;
  FieldReader r(*text.fields, text.where);
  ReadDimensions(r, &c);
  RefuseUnsupported(r);
  if (!r.status().ok()) return r.status();
  RETURN_IF_ERROR(CheckHeadsAndExperts(c, text.where));
  RETURN_IF_ERROR(ParseLayerTypes(r, text.where, &c));
  RETURN_IF_ERROR(ParseRope(r, text.where, &c));
  RETURN_IF_ERROR(ParseTieAndEos(config, text, r, &c));
  return c;
}

int64_t VisionConfig::position_side() const {
  int64_t side = static_cast<int64_t>(std::llround(std::sqrt(num_position_embeddings)));
  return side;
}

absl::StatusOr<std::optional<VisionConfig>> ParseVisionConfig(const Json& config,
                                                              const TextConfig& text) {
  if (!config.is_object()) return std::optional<VisionConfig>();
  auto it = config.find("vision_config");
  if (it == config.end() || it->is_null()) return std::optional<VisionConfig>();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.vision_config must be an object, got ", it->dump()));
  }
  const std::string where = "config.vision_config";
  FieldReader r(*it, where);
  VisionConfig v;
  v.depth = r.PositiveInt("depth");
  v.hidden_size = r.PositiveInt("hidden_size");
  v.intermediate_size = r.PositiveInt("intermediate_size");
  v.num_heads = r.PositiveInt("num_heads");
  v.patch_size = r.PositiveInt("patch_size");
  v.temporal_patch_size = r.PositiveInt("temporal_patch_size");
  v.spatial_merge_size = r.PositiveInt("spatial_merge_size");
  v.out_hidden_size = r.PositiveInt("out_hidden_size");
  v.num_position_embeddings = r.PositiveInt("num_position_embeddings");
  const Json* channels = r.Find("in_channels");
  if (channels != nullptr && !(channels->is_number_integer() && channels->get<int64_t>() == 3)) {
    r.Fail("in_channels", absl::StrCat("must be 3 (RGB), got ", channels->dump()));
  }
  const std::string act = r.OptionalString("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu") {
    r.Unsupported("hidden_act",
                  absl::StrCat("'", act, "' is not supported (gelu_pytorch_tanh, gelu)"));
  }
  v.tanh_gelu = act == "gelu_pytorch_tanh";
  const Json* deepstack = r.Find("deepstack_visual_indexes");
  if (deepstack != nullptr && !deepstack->is_null() &&
      !(deepstack->is_array() && deepstack->empty())) {
    r.Unsupported("deepstack_visual_indexes",
                  absl::StrCat(deepstack->dump(), " is not supported (Qwen3.5 has none)"));
  }
  if (!r.status().ok()) return r.status();
  if (v.hidden_size % v.num_heads != 0 || v.head_dim() % 4 != 0) {
    return Invalid(where, absl::StrCat("hidden_size ", v.hidden_size, " / num_heads ", v.num_heads,
                                       " must give a head dim that is a multiple of 4"));
  }
  if (v.position_side() * v.position_side() != v.num_position_embeddings) {
    return Invalid(where, absl::StrCat("num_position_embeddings must be a square, got ",
                                       v.num_position_embeddings));
  }
  if (v.out_hidden_size != text.hidden_size) {
    return Invalid(where,
                   absl::StrCat("out_hidden_size ", v.out_hidden_size,
                                " must equal the text model's hidden_size ", text.hidden_size));
  }
  FieldReader top(config, "config");
  auto token = [&](const char* key, int64_t fallback) -> int32_t {
    const Json* t = top.Find(key);
    if (t == nullptr || t->is_null()) return static_cast<int32_t>(fallback);
    if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() >= text.vocab_size) {
      top.Fail(key, absl::StrCat("must be a token id below vocab_size ", text.vocab_size, ", got ",
                                 t->dump()));
      return 0;
    }
    return static_cast<int32_t>(t->get<int64_t>());
  };
  // HF's defaults are the released vocabulary's ids.
  v.vision_start_token_id = token("vision_start_token_id", 248053);
  v.vision_end_token_id = token("vision_end_token_id", 248054);
  v.image_token_id = token("image_token_id", 248056);
  if (!top.status().ok()) return top.status();
  for (int32_t id : {v.vision_start_token_id, v.vision_end_token_id, v.image_token_id}) {
    if (id >= text.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: the vision token ids default to the released vocabulary's, above vocab_size ",
          text.vocab_size, "; set vision_start_token_id, vision_end_token_id and image_token_id"));
    }
  }
  return std::optional<VisionConfig>(v);
}

ModelShape Shape(const TextConfig& c) {
  const int64_t full = std::count(c.full_attention.begin(), c.full_attention.end(), true);
  const int64_t gdn = c.num_layers - full;
  ModelShape shape;
  shape.architecture = Architecture::kQwen35Moe;
  shape.vocab_size = static_cast<int32_t>(c.vocab_size);
  shape.hidden_size = static_cast<int32_t>(c.hidden_size);
  shape.num_layers = static_cast<int32_t>(c.num_layers);
  shape.max_positions = static_cast<int32_t>(c.max_positions);
  // fp32 bytes: K and V per full-attention layer per token; the conv window (K - 1 rows) and
  // the delta-rule state per Gated DeltaNet layer.
  shape.kv_bytes_per_token = full * 2 * c.num_kv_heads * c.head_dim * 4;
  shape.state_bytes = gdn *
                      ((c.conv_kernel - 1) * c.conv_dim() +
                       c.linear_value_heads * c.linear_key_dim * c.linear_value_dim) *
                      4;
  shape.eos_token_ids = c.eos_token_ids;
  return shape;
}

}  // namespace tandem::workers::model::qwen35
