#include "common/request_validation.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log_text.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

bool KnownRole(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool";
}

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", field, what));
}

}  // namespace

absl::Status ValidateRequestId(absl::string_view request_id) {
  if (IsPlainToken(request_id, kMaxRequestIdBytes)) return absl::OkStatus();
  return Invalid("request_id",
                 absl::StrFormat("%s is not 1 to %d visible ASCII characters (no spaces, control "
                                 "or non-ASCII bytes)",
                                 QuoteForLog(request_id), kMaxRequestIdBytes));
}

absl::Status ValidateReasoning(const tandem::v1::ReasoningOptions& reasoning,
                               absl::string_view field) {
  if (!tandem::v1::ReasoningMode_IsValid(reasoning.mode())) {
    return Invalid(absl::StrCat(field, ".mode"),
                   absl::StrFormat("%d is not a ReasoningMode (0 unspecified, 1 on, 2 off)",
                                   static_cast<int>(reasoning.mode())));
  }
  if (reasoning.thinking_budget_tokens() < 0) {
    return Invalid(absl::StrCat(field, ".thinking_budget_tokens"),
                   absl::StrFormat("%d; must be >= 0 (0: no separate budget)",
                                   reasoning.thinking_budget_tokens()));
  }
  return absl::OkStatus();
}

bool IsSupportedImageMimeType(absl::string_view mime_type) {
  // image/jpg is not registered but several OpenAI clients send it for JPEG.
  for (const char* known : {"image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif"}) {
    if (absl::EqualsIgnoreCase(mime_type, known)) return true;
  }
  return false;
}

namespace {

bool ValidToolName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// OK for an object's JSON text (empty counts as {}) nesting at most max_json_depth levels. The
// depth is scanned first: nothing deeper is ever parsed, here or later.
absl::Status CheckJsonObject(const std::string& text, const std::string& field,
                             const RequestLimits& limits) {
  if (text.empty()) return absl::OkStatus();
  if (absl::Status s = CheckJsonDepth(text, limits.max_json_depth, field); !s.ok()) return s;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Invalid(field, "not a JSON object");
  return absl::OkStatus();
}

absl::Status ValidateToolCalls(const tandem::v1::ChatMessage& message, const std::string& prefix,
                               const RequestLimits& limits) {
  if (message.tool_calls().empty()) return absl::OkStatus();
  if (message.role() != "assistant") {
    return Invalid(prefix + ".tool_calls", "only assistant messages carry tool calls");
  }
  for (int c = 0; c < message.tool_calls_size(); ++c) {
    const auto& call = message.tool_calls(c);
    const std::string field = absl::StrFormat("%s.tool_calls[%d]", prefix, c);
    if (!ValidToolName(call.name())) {
      return Invalid(field + ".name", absl::StrCat(QuoteForLog(call.name()),
                                                   " is not 1-64 bytes of [A-Za-z0-9_.-]"));
    }
    if (absl::Status s = CheckJsonObject(call.arguments_json(), field + ".arguments_json", limits);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTools(const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
                           const RequestLimits& limits) {
  if (tools.size() > limits.max_tools) {
    return Invalid("tools", absl::StrFormat("%d tools; the limit is %d (--max_tools)", tools.size(),
                                            limits.max_tools));
  }
  std::set<std::string> names;
  for (int t = 0; t < tools.size(); ++t) {
    const auto& tool = tools[t];
    const std::string field = absl::StrFormat("tools[%d]", t);
    if (!ValidToolName(tool.name())) {
      return Invalid(field + ".name", absl::StrCat(QuoteForLog(tool.name()),
                                                   " is not 1-64 bytes of [A-Za-z0-9_.-]"));
    }
    if (!names.insert(tool.name()).second) {
      return Invalid(field + ".name", absl::StrCat(QuoteForLog(tool.name()), " is given twice"));
    }
    if (!IsValidUtf8(tool.description())) {
      return Invalid(field + ".description", "not valid UTF-8");
    }
    if (absl::Status s = CheckJsonObject(tool.parameters_json(), field + ".parameters_json", limits);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateMessages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const RequestLimits& limits) {
  if (messages.empty()) return Invalid("messages", "at least one message is required");
  if (messages.size() > limits.max_messages) {
    return Invalid("messages", absl::StrFormat("%d messages; the limit is %d", messages.size(),
                                               limits.max_messages));
  }
  int images = 0;
  for (int m = 0; m < messages.size(); ++m) {
    const auto& message = messages[m];
    const std::string prefix = absl::StrFormat("messages[%d]", m);
    if (!KnownRole(message.role())) {
      return Invalid(prefix + ".role",
                     absl::StrFormat("unknown role %s; expected system, user, assistant or tool",
                                     QuoteForLog(message.role())));
    }
    if (absl::Status s = ValidateToolCalls(message, prefix, limits); !s.ok()) return s;
    if (message.content().empty() && message.tool_calls().empty()) {
      return Invalid(prefix + ".content", "no content parts");
    }
    if (message.content_size() > limits.max_parts_per_message) {
      return Invalid(prefix + ".content",
                     absl::StrFormat("%d parts; the limit is %d", message.content_size(),
                                     limits.max_parts_per_message));
    }
    for (int p = 0; p < message.content_size(); ++p) {
      const auto& part = message.content(p);
      const std::string field = absl::StrFormat("%s.content[%d]", prefix, p);
      switch (part.part_case()) {
        case tandem::v1::ContentPart::kText:
          if (part.text().empty()) return Invalid(field + ".text", "empty text");
          if (!IsValidUtf8(part.text())) return Invalid(field + ".text", "not valid UTF-8");
          break;
        case tandem::v1::ContentPart::kImage: {
          const auto& image = part.image();
          if (++images > limits.max_images) {
            return Invalid(field + ".image",
                           absl::StrFormat("more than %d images", limits.max_images));
          }
          if (image.data().empty()) return Invalid(field + ".image.data", "empty image");
          if (static_cast<int64_t>(image.data().size()) > limits.max_image_bytes) {
            return Invalid(field + ".image.data",
                           absl::StrFormat("%d bytes; the limit is %d", image.data().size(),
                                           limits.max_image_bytes));
          }
          if (!IsSupportedImageMimeType(image.mime_type())) {
            return Invalid(field + ".image.mime_type",
                           absl::StrFormat("unsupported image type %s; expected image/png, "
                                           "image/jpeg, image/webp or image/gif",
                                           QuoteForLog(image.mime_type())));
          }
          break;
        }
        default:
          return Invalid(field, "neither text nor image is set");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSampling(const tandem::v1::SamplingParams& s, int32_t max_output_tokens,
                              const RequestLimits& limits) {
  if (s.has_max_tokens()) {
    if (s.max_tokens() <= 0) {
      return Invalid("sampling.max_tokens", absl::StrFormat("%d; must be >= 1", s.max_tokens()));
    }
    if (max_output_tokens > 0 && s.max_tokens() > max_output_tokens) {
      return Invalid("sampling.max_tokens", absl::StrFormat("%d exceeds the model's limit of %d",
                                                            s.max_tokens(), max_output_tokens));
    }
  }
  if (s.has_temperature() &&
      (!std::isfinite(s.temperature()) || s.temperature() < 0 || s.temperature() > 2)) {
    return Invalid("sampling.temperature",
                   absl::StrFormat("%g; must be in [0, 2]", s.temperature()));
  }
  if (s.has_top_p() && (!std::isfinite(s.top_p()) || s.top_p() <= 0 || s.top_p() > 1)) {
    return Invalid("sampling.top_p", absl::StrFormat("%g; must be in (0, 1]", s.top_p()));
  }
  if (s.top_k() < 0) {
    return Invalid("sampling.top_k", absl::StrFormat("%d; must be >= 0", s.top_k()));
  }
  if (s.stop_size() > limits.max_stop_sequences) {
    return Invalid("sampling.stop", absl::StrFormat("%d sequences; the limit is %d", s.stop_size(),
                                                    limits.max_stop_sequences));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string field = absl::StrFormat("sampling.stop[%d]", i);
    if (s.stop(i).empty()) return Invalid(field, "empty stop sequence");
    if (static_cast<int32_t>(s.stop(i).size()) > limits.max_stop_sequence_bytes) {
      return Invalid(field, absl::StrFormat("%d bytes; the limit is %d", s.stop(i).size(),
                                            limits.max_stop_sequence_bytes));
    }
    if (!IsValidUtf8(s.stop(i))) return Invalid(field, "not valid UTF-8");
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels,
                            const RequestLimits& limits) {
  if (static_cast<int64_t>(labels.size()) > limits.max_labels) {
    return Invalid("labels", absl::StrFormat("%d labels; the limit is %d (--max_labels)",
                                             labels.size(), limits.max_labels));
  }
  // The key names the field in errors, quoted and cut. Built only for an error, not per label.
  auto field = [](const std::string& key) {
    return absl::StrCat("labels[", QuoteForLog(key), "]");
  };
  for (const auto& [key, value] : labels) {
    if (key.empty()) return Invalid("labels", "empty key");
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return Invalid(field(key), "keys and values must be valid UTF-8");
    }
    if (static_cast<int64_t>(std::max(key.size(), value.size())) > limits.max_label_bytes) {
      return Invalid(field(key), absl::StrFormat("key or value over %d bytes (--max_label_bytes)",
                                                 limits.max_label_bytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
