#include "gateway/relay/tool_call_parser.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/json_depth.h"

namespace tandem::gateway {
namespace {

constexpr absl::string_view kToolCallOpen = "<tool_call>";
constexpr absl::string_view kToolCallClose = "</tool_call>";

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t PartialToolCallTag(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

bool ValidToolCallName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-';
  });
}

}  // namespace

ToolCallParser::ToolCallParser(const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
                               std::string id_stem)
    : schemas_(nlohmann::json::object()), id_stem_(std::move(id_stem)) {
  for (const tandem::v1::Tool& t : tools) {
    // The intake checked the depth (--max_json_depth); the ceiling keeps this parser bounded on
    // its own, since the copy below and later lookups recurse per level.
    const std::string& text = t.parameters_json();
    nlohmann::json params = text.empty() || JsonNestingDepth(text) > kMaxJsonDepthCeiling
                                ? nlohmann::json::object()
                                : nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    nlohmann::json props = nlohmann::json::object();
    if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
      props = params["properties"];
    }
    schemas_[t.name()] = std::move(props);
  }
}

void ToolCallParser::Feed(absl::string_view piece, std::string* text,
                          std::vector<tandem::v1::ToolCall>* calls) {
  pending_.append(piece.data(), piece.size());
  absl::string_view rest = pending_;
  std::string keep;
  while (!rest.empty()) {
    if (!in_call_) {
      const size_t open = rest.find(kToolCallOpen);
      if (open == absl::string_view::npos) {
        const size_t held = PartialToolCallTag(rest, kToolCallOpen);
        text->append(rest.data(), rest.size() - held);
        keep = std::string(rest.substr(rest.size() - held));
        break;
      }
      text->append(rest.data(), open);
      rest.remove_prefix(open);
      in_call_ = true;
    }
    const size_t close = rest.find(kToolCallClose);
    if (close == absl::string_view::npos) {
      keep = std::string(rest);  // the open call, until its end comes
      break;
    }
    const absl::string_view whole = rest.substr(0, close + kToolCallClose.size());
    tandem::v1::ToolCall call;
    if (Parse(whole.substr(kToolCallOpen.size(), close - kToolCallOpen.size()), &call)) {
      call.set_id(absl::StrCat("call_", id_stem_, "_", calls_++));
      calls->push_back(std::move(call));
    } else {
      malformed_ = true;
      text->append(whole.data(), whole.size());
    }
    in_call_ = false;
    rest.remove_prefix(whole.size());
  }
  pending_ = std::move(keep);
}

tandem::v1::FinishReason ToolCallParser::Finish(tandem::v1::FinishReason worker_reason,
                                                std::string* text) {
  if (in_call_) malformed_ = true;
  text->append(pending_);
  pending_.clear();
  in_call_ = false;
  if (worker_reason != tandem::v1::FINISH_REASON_STOP) return worker_reason;
  if (malformed_) return tandem::v1::FINISH_REASON_MALFORMED_TOOL_CALL;
  return calls_ > 0 ? tandem::v1::FINISH_REASON_TOOL_CALLS : worker_reason;
}

bool ToolCallParser::Parse(absl::string_view body, tandem::v1::ToolCall* call) const {
  body = absl::StripAsciiWhitespace(body);
  if (!absl::ConsumePrefix(&body, "<function=")) return false;
  const size_t gt = body.find('>');
  if (gt == absl::string_view::npos) return false;
  const std::string name(body.substr(0, gt));
  if (!ValidToolCallName(name) || !schemas_.contains(name)) return false;
  body.remove_prefix(gt + 1);
  if (!absl::ConsumeSuffix(&body, "</function>")) {
    body = absl::StripTrailingAsciiWhitespace(body);
    if (!absl::ConsumeSuffix(&body, "</function>")) return false;
  }
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  while (true) {
    body = absl::StripLeadingAsciiWhitespace(body);
    if (body.empty()) break;
    if (!absl::ConsumePrefix(&body, "<parameter=")) return false;
    const size_t pgt = body.find('>');
    const size_t end = body.find("</parameter>");
    if (pgt == absl::string_view::npos || end == absl::string_view::npos || end < pgt) {
      return false;
    }
    const std::string param(body.substr(0, pgt));
    absl::string_view value = body.substr(pgt + 1, end - pgt - 1);
    // The templates put the value on lines of its own: one newline each side is framing.
    absl::ConsumePrefix(&value, "\n");
    absl::ConsumeSuffix(&value, "\n");
    args[param] = Typed(name, param, std::string(value));
    body.remove_prefix(end + std::string_view("</parameter>").size());
  }
  call->set_name(name);
  call->set_arguments_json(args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return true;
}

nlohmann::ordered_json ToolCallParser::Typed(const std::string& tool, const std::string& param,
                                             const std::string& value) const {
  const nlohmann::json& props = schemas_[tool];
  if (!props.contains(param) || !props[param].is_object() || !props[param].contains("type") ||
      !props[param]["type"].is_string()) {
    return value;
  }
  const std::string type = absl::AsciiStrToLower(props[param]["type"].get<std::string>());
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (type == "string") return value;
  if (lower == "null" || lower == "none") return nullptr;
  if (type == "integer") {
    int64_t i = 0;
    if (absl::SimpleAtoi(lower, &i)) return i;
  } else if (type == "number") {
    double d = 0;
    if (absl::SimpleAtod(lower, &d) && std::isfinite(d)) {
      if (d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
      return d;
    }
  } else if (type == "boolean") {
    if (lower == "true") return true;
    if (lower == "false") return false;
  } else if (type == "object" || type == "array") {
    // The model's text: deeper than the ceiling stays text, so dump() below cannot recurse
    // without bound.
    if (JsonNestingDepth(value) > kMaxJsonDepthCeiling) return value;
    auto j = nlohmann::ordered_json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && (type == "object" ? j.is_object() : j.is_array())) return j;
  }
  return value;  // does not parse as its type: the model's text, as it wrote it
}

}  // namespace tandem::gateway
