#include "workers/model/model_config.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/model/quantization.h"

namespace tandem::workers::model {
namespace {

using Json = nlohmann::json;

absl::StatusOr<Architecture> ArchitectureOf(const Json& config, const std::string& where) {
  if (absl::StatusOr<QuantScheme> q = ParseQuantization(config); !q.ok()) {
    return absl::Status(q.status().code(), absl::StrCat(where, ": ", q.status().message()));
  }
  auto it = config.find("model_type");
  const std::string type =
      it != config.end() && it->is_string() ? it->get<std::string>() : std::string();
  if (type == "qwen3_5_moe" || type == "qwen3_5_moe_text") return Architecture::kQwen35Moe;
  if (type == "nemotron_h") return Architecture::kNemotronH;
  return absl::UnimplementedError(
      absl::StrCat(where, ": model_type '", type,
                   "' is not supported; the native engine runs qwen3_5_moe and nemotron_h"));
}

absl::StatusOr<bool> RandomWeightsMark(const Json& config, const std::string& where) {
  auto it = config.find("tandem_random_weights");
  if (it == config.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": config.json field 'tandem_random_weights' must be true or false, got ",
        it->dump(-1, ' ', false, Json::error_handler_t::replace)));
  }
  return it->get<bool>();
}

absl::Status ParseHyperparameters(const Json& config, const std::string& where, ModelConfig* out) {
  switch (out->architecture()) {
    case Architecture::kQwen35Moe: {
      absl::StatusOr<qwen35::TextConfig> c = qwen35::ParseConfig(config);
      if (!c.ok()) {
        return absl::Status(c.status().code(), absl::StrCat(where, ": ", c.status().message()));
      }
      absl::StatusOr<std::optional<qwen35::VisionConfig>> vision =
          qwen35::ParseVisionConfig(config, *c);
      if (!vision.ok()) {
        return absl::Status(vision.status().code(),
                            absl::StrCat(where, ": ", vision.status().message()));
      }
      out->vision = *vision;
      out->shape = qwen35::Shape(*c);
      out->hyperparameters = *std::move(c);
      return absl::OkStatus();
    }
    case Architecture::kNemotronH: {
      ASSIGN_OR_RETURN(nemotron_h::Config c, nemotron_h::ParseConfig(config, where));
      out->shape = nemotron_h::Shape(c);
      out->hyperparameters = std::move(c);
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown architecture");
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const Json& config, const std::string& where) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": config.json is not a JSON object"));
  }
  ModelConfig out;
  ASSIGN_OR_RETURN(out.shape.architecture, ArchitectureOf(config, where));
  ASSIGN_OR_RETURN(out.random_weights, RandomWeightsMark(config, where));
  RETURN_IF_ERROR(ParseHyperparameters(config, where, &out));
  return out;
}

Json ParseConfigJson(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    const absl::string_view rest = text.substr(i);
    if (absl::StartsWith(rest, "-Infinity")) {
      out.append("-1e308");
      i += 8;
    } else if (absl::StartsWith(rest, "Infinity")) {
      out.append("1e308");
      i += 7;
    } else if (absl::StartsWith(rest, "NaN")) {
      out.append("null");
      i += 2;
    } else {
      in_string = c == '"';
      out.push_back(c);
    }
  }
  return Json::parse(out, nullptr, /*allow_exceptions=*/false);
}

absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view config_json,
                                                 const std::string& where) {
  const Json config = ParseConfigJson(config_json);
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": config.json is not a JSON object"));
  }
  return ParseModelConfig(config, where);
}

}  // namespace tandem::workers::model
