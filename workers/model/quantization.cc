#include "workers/model/quantization.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tandem::workers::model {
namespace {

using Json = nlohmann::json;

std::string Shown(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("quantization_config.", field, ": ", why,
                   " (block FP8 is read as quant_method "
                   "fp8, fmt e4m3, weight_block_size [rows, cols], activation_scheme dynamic)"));
}

absl::StatusOr<QuantScheme> ParseFp8(const Json& q) {
  QuantScheme s;
  s.method = QuantScheme::Method::kFp8Block;
  if (auto fmt = q.find("fmt"); fmt != q.end() && !(fmt->is_string() && *fmt == "e4m3")) {
    return Invalid("fmt", absl::StrCat(Shown(*fmt), " is not e4m3"));
  }
  auto scheme = q.find("activation_scheme");
  if (scheme != q.end() && !(scheme->is_string() && *scheme == "dynamic")) {
    return Invalid("activation_scheme",
                   absl::StrCat(Shown(*scheme), ": only dynamic (no input scales) is read"));
  }
  auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    return Invalid("weight_block_size",
                   "missing: per-tensor FP8 without blocks is not read (block FP8 only)");
  }
  if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() < 1 ||
      (*block)[1].get<int64_t>() < 1 || (*block)[0].get<int64_t>() > 65536 ||
      (*block)[1].get<int64_t>() > 65536) {
    return Invalid("weight_block_size",
                   absl::StrCat(Shown(*block), " is not two block sizes in [1, 65536]"));
  }
  s.block_rows = (*block)[0].get<int64_t>();
  s.block_cols = (*block)[1].get<int64_t>();
  return s;
}

// quant_algo "FP8" (per-tensor) is read; NVFP4, W4A16_AWQ, ... are not.
absl::StatusOr<QuantScheme> ModelOpt(const Json& algo, bool kv_cache_fp8) {
  if (!(algo.is_string() && algo == "FP8")) {
    return absl::UnimplementedError(
        absl::StrCat("ModelOpt quant_algo ", Shown(algo),
                     ": the native engine reads ModelOpt's per-tensor FP8 (quant_algo FP8) only"));
  }
  QuantScheme s;
  s.method = QuantScheme::Method::kModelOptFp8;
  s.kv_cache_fp8 = kv_cache_fp8;
  return s;
}

absl::StatusOr<QuantScheme> ParseGptq(const Json& q) {
  auto bad = [](const std::string& field, const Json& v, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantization_config.", field, ": ", Shown(v), " ", what));
  };
  QuantScheme s;
  s.method = QuantScheme::Method::kGptq;
  const Json bits = q.value("bits", Json(4));
  if (!bits.is_number_integer() || bits.get<int64_t>() != 4) {
    return absl::UnimplementedError(absl::StrCat("quantization_config.bits ", Shown(bits),
                                                 ": GPTQ is read with 4-bit weights only"));
  }
  const Json group = q.value("group_size", Json(128));
  if (!group.is_number_integer() || (group.get<int64_t>() < 1 && group.get<int64_t>() != -1)) {
    return bad("group_size", group, "is not -1 or a positive size");
  }
  s.group_size = std::max<int64_t>(0, group.get<int64_t>());
  for (auto [field, out] : {std::pair{"desc_act", &s.desc_act}, std::pair{"sym", &s.sym}}) {
    const Json v = q.value(field, Json(*out));
    if (!v.is_boolean()) return bad(field, v, "is not true or false");
    *out = v.get<bool>();
  }
  const Json format = q.value("checkpoint_format", Json("gptq"));
  if (!(format.is_string() && (format == "gptq" || format == "gptq_v2"))) {
    return absl::UnimplementedError(absl::StrCat("quantization_config.checkpoint_format ",
                                                 Shown(format), ": gptq or gptq_v2 are read"));
  }
  s.gptq_v2 = format == "gptq_v2";
  return s;
}

absl::StatusOr<QuantScheme> ParseAwq(const Json& q) {
  QuantScheme s;
  s.method = QuantScheme::Method::kAwq;
  s.sym = false;
  const Json bits = q.value("bits", q.value("w_bit", Json(4)));
  const Json group = q.value("group_size", q.value("q_group_size", Json(128)));
  const Json version = q.value("version", Json("gemm"));
  const Json zero_point = q.value("zero_point", Json(true));
  if (!bits.is_number_integer() || bits.get<int64_t>() != 4 || !version.is_string() ||
      absl::AsciiStrToLower(version.get<std::string>()) != "gemm" || zero_point != Json(true)) {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config: AWQ with bits ", Shown(bits), ", version ",
                     Shown(version), ", zero_point ", Shown(zero_point),
                     ": AWQ is read as 4-bit GEMM packing with zero points"));
  }
  if (!group.is_number_integer() || (group.get<int64_t>() < 1 && group.get<int64_t>() != -1)) {
    return absl::InvalidArgumentError(absl::StrCat("quantization_config.group_size: ", Shown(group),
                                                   " is not -1 or a positive size"));
  }
  s.group_size = std::max<int64_t>(0, group.get<int64_t>());
  return s;
}

// compressed-tensors: one config group of 4-bit int weights, group or channel strategy, in the
// pack-quantized format.
absl::StatusOr<QuantScheme> ParseCompressedTensors(const Json& q) {
  const Json format = q.value("format", Json());
  const Json groups = q.value("config_groups", Json());
  if (!(format.is_string() && format == "pack-quantized") || !groups.is_object() ||
      groups.size() != 1 || !groups.begin()->is_object() || !groups.begin()->contains("weights") ||
      !(*groups.begin())["weights"].is_object()) {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config: compressed-tensors format ", Shown(format), " with ",
                     groups.is_object() ? groups.size() : 0,
                     " config groups: one group of pack-quantized int4 weights is read"));
  }
  const Json& w = (*groups.begin())["weights"];
  const Json bits = w.value("num_bits", Json()), type = w.value("type", Json());
  const Json strategy = w.value("strategy", Json()), group = w.value("group_size", Json());
  const bool channel = strategy == Json("channel");
  if (bits != Json(4) || type != Json("int") || !(channel || strategy == Json("group")) ||
      (!channel && !(group.is_number_integer() && group.get<int64_t>() > 0))) {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config.config_groups weights: num_bits ", Shown(bits), ", type ",
                     Shown(type), ", strategy ", Shown(strategy), ", group_size ", Shown(group),
                     ": 4-bit int weights by group (with a group_size) or by channel are read"));
  }
  QuantScheme s;
  s.method = QuantScheme::Method::kCompressedTensors;
  s.group_size = channel ? 0 : group.get<int64_t>();
  s.sym = w.value("symmetric", Json(true)) != Json(false);
  s.desc_act = w.value("actorder", Json()) == Json("group");
  return s;
}

}  // namespace

std::string QuantScheme::Describe() const {
  switch (method) {
    case Method::kNone:
      return "none";
    case Method::kFp8Block:
      return absl::StrCat("fp8 (e4m3, ", block_rows, "x", block_cols, " blocks)");
    case Method::kModelOptFp8:
      return "modelopt fp8 (e4m3, per-tensor scales)";
    case Method::kCompressedTensors:
      return absl::StrCat(
          "compressed-tensors int4 (",
          group_size > 0 ? absl::StrCat("groups of ", group_size) : std::string("per channel"),
          sym ? ", sym" : ", asym", desc_act ? ", actorder" : "", ")");
    case Method::kAwq:
      return absl::StrCat(
          "awq int4 (",
          group_size > 0 ? absl::StrCat("groups of ", group_size) : std::string("one group"),
          ", gemm)");
    case Method::kGptq:
      return absl::StrCat(
          "gptq int4 (",
          group_size > 0 ? absl::StrCat("groups of ", group_size) : std::string("one group"),
          gptq_v2 ? ", v2" : ", v1", sym ? ", sym" : ", asym", desc_act ? ", desc_act" : "", ")");
  }
  return "?";
}

std::string QuantScheme::Name() const {
  switch (method) {
    case Method::kNone:
      return "none";
    case Method::kFp8Block:
      return "fp8-block";
    case Method::kModelOptFp8:
      return "modelopt-fp8";
    case Method::kGptq:
      return "gptq-int4";
    case Method::kAwq:
      return "awq-int4";
    case Method::kCompressedTensors:
      return "ct-int4";
  }
  return "?";
}

absl::StatusOr<QuantScheme> ParseQuantization(const Json& config) {
  auto q = config.find("quantization_config");
  if (q == config.end() || q->is_null()) return QuantScheme{};
  if (!q->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantization_config must be an object, got ", Shown(*q)));
  }
  auto method = q->find("quant_method");
  const std::string name =
      method != q->end() && method->is_string() ? method->get<std::string>() : "";
  if (name == "fp8") return ParseFp8(*q);
  if (name == "gptq") return ParseGptq(*q);
  if (name == "awq") return ParseAwq(*q);
  if (name == "compressed-tensors") return ParseCompressedTensors(*q);
  if (name == "modelopt") {
    return ModelOpt(q->value("quant_algo", Json()),
                    q->contains("kv_cache_scheme") && !(*q)["kv_cache_scheme"].is_null());
  }
  return absl::UnimplementedError(absl::StrCat(
      "quantization_config.quant_method ",
      method == q->end() ? "missing"
      : name.empty()     ? Shown(*method)
                         : absl::StrCat("'", name, "'"),
      ": the native engine reads block FP8 (quant_method fp8 with weight_block_size, the "
      "Qwen3.5 FP8 release) and ModelOpt per-tensor FP8 (quant_method modelopt, quant_algo "
      "FP8, the Nemotron-3-Nano FP8 release), and GPTQ, AWQ and compressed-tensors int4 "
      "(quant_method gptq, awq, compressed-tensors)"));
}

uint8_t FloatToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7F;
  // The positive codes 0x00..0x7E are increasing in value: the nearest is found by bisection.
  static const std::array<float, 0x7F> kPositive = [] {
    std::array<float, 0x7F> v;
    for (int c = 0; c < 0x7F; ++c) v[c] = F8E4M3ToFloat(static_cast<uint8_t>(c));
    return v;
  }();
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  const auto above = std::lower_bound(kPositive.begin(), kPositive.end(), a);
  if (above == kPositive.end()) return sign | 0x7E;  // saturate
  int code = static_cast<int>(above - kPositive.begin());
  if (code > 0 && *above != a) {
    const float up = *above - a, down = a - kPositive[code - 1];
    if (down < up || (down == up && ((code - 1) & 1) == 0)) --code;
  }
  return static_cast<uint8_t>(sign | code);
}

float F8E4M3ToFloat(uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int exponent = (code >> 3) & 0xf;
  const int mantissa = code & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // m/8 * 2^-6
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);      // 1.m * 2^(e-7)
}

absl::StatusOr<QuantScheme> ParseHfQuantConfig(const Json& hf) {
  const Json* producer = hf.contains("producer") ? &hf["producer"] : nullptr;
  if (producer == nullptr || !producer->is_object() || producer->value("name", "") != "modelopt" ||
      !hf.contains("quantization") || !hf["quantization"].is_object()) {
    return absl::InvalidArgumentError(
        "hf_quant_config.json: not ModelOpt's (needs producer.name modelopt and a quantization "
        "object)");
  }
  const Json& q = hf["quantization"];
  const Json kv = q.value("kv_cache_quant_algo", Json());
  return ModelOpt(q.value("quant_algo", Json()), kv.is_string() && kv == "FP8");
}

}  // namespace tandem::workers::model
