#include "router/request_features.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::router {
namespace {
// Matches HashedClassifier::kMaxTextBytes: no point copying what it will not read.
constexpr size_t kClassifierTextBytes = 8192;
}  // namespace

int64_t EstimateTokens(std::string_view text) {
  int64_t ascii = 0;
  int64_t code_points = 0;
  for (unsigned char c : text) {
    if (c < 0x80) {
      ++ascii;
    } else if ((c & 0xC0) != 0x80) {
      ++code_points;  // lead byte of a multi-byte sequence
    }
  }
  return (ascii + 3) / 4 + code_points;
}

RequestFeatures ExtractFeatures(const tandem::v1::GenerateRequest& request,
                                std::span<const int64_t> image_tokens) {
  RequestFeatures f;
  f.num_messages = request.messages_size();
  int64_t tokens = 0;
  f.tool_count = request.tools_size();
  for (const auto& message : request.messages()) {
    const std::string& role = message.role();
    if (role == "user") {
      ++f.num_turns;
      f.agent_steps = 0;
    } else if (role == "assistant" && message.tool_calls_size() > 0) {
      ++f.agent_steps;
    }
    f.last_role = role;
    tokens += kPerMessageTemplateTokens;
    for (const auto& part : message.content()) {
      if (part.has_image()) {
        const size_t i = static_cast<size_t>(f.image_count++);
        f.image_tokens += i < image_tokens.size() ? image_tokens[i] : kUnknownImageTokens;
      } else {
        f.prompt_bytes += static_cast<int64_t>(part.text().size());
        if (role == "system") f.system_prompt_bytes += static_cast<int64_t>(part.text().size());
        tokens += EstimateTokens(part.text());
        ScanContentCues(part.text(), &f.cues);
        if (role != "assistant" && f.classifier_text.size() < kClassifierTextBytes) {
          if (!f.classifier_text.empty()) f.classifier_text += '\n';
          f.classifier_text.append(
              part.text().substr(0, kClassifierTextBytes - f.classifier_text.size()));
        }
      }
    }
  }
  f.prompt_tokens = tokens + f.image_tokens;
  const auto& hints = request.hints();
  switch (hints.objective()) {
    case tandem::v1::OBJECTIVE_ACCURACY:
      f.objective = Objective::kAccuracy;
      break;
    case tandem::v1::OBJECTIVE_LATENCY:
      f.objective = Objective::kLatency;
      break;
    default:
      f.objective = Objective::kAuto;
      break;
  }
  f.pinned_model = hints.model();
  switch (hints.reasoning().mode()) {
    case tandem::v1::REASONING_MODE_ON:
      f.reasoning = ReasoningMode::kOn;
      break;
    case tandem::v1::REASONING_MODE_OFF:
      f.reasoning = ReasoningMode::kOff;
      break;
    default:
      f.reasoning = ReasoningMode::kDefault;
      break;
  }
  f.thinking_budget = std::max(0, hints.reasoning().thinking_budget_tokens());
  if (request.sampling().has_max_tokens()) f.max_tokens = request.sampling().max_tokens();
  f.labels.insert(request.labels().begin(), request.labels().end());
  f.session_id = request.session_id();
  if (!f.session_id.empty()) f.session_turn = 1;
  if (auto it = request.labels().find("app"); it != request.labels().end()) f.app = it->second;
  return f;
}

const char* ObjectiveName(Objective o) {
  switch (o) {
    case Objective::kAccuracy:
      return "accuracy";
    case Objective::kLatency:
      return "latency";
    default:
      return "auto";
  }
}

const char* ReasoningModeName(ReasoningMode r) {
  switch (r) {
    case ReasoningMode::kOn:
      return "on";
    case ReasoningMode::kOff:
      return "off";
    default:
      return "default";
  }
}

std::vector<std::pair<std::string, std::string>> DescribeFeatures(const RequestFeatures& f) {
  std::vector<std::pair<std::string, std::string>> out = {
      {"prompt_tokens",
       absl::StrCat(f.prompt_tokens, f.prompt_tokens_exact ? " (tokenizer)" : " (estimate)")},
      {"prompt_bytes", absl::StrCat(f.prompt_bytes)},
      {"image_count", absl::StrCat(f.image_count)},
      {"image_tokens", absl::StrCat(f.image_tokens)},
      {"num_messages", absl::StrCat(f.num_messages)},
      {"num_turns", absl::StrCat(f.num_turns)},
      {"tool_count", absl::StrCat(f.tool_count)},
      {"last_role", f.last_role.empty() ? "none" : f.last_role},
      {"agent_steps", absl::StrCat(f.agent_steps)},
      {"system_prompt_bytes", absl::StrCat(f.system_prompt_bytes)},
      {"objective", ObjectiveName(f.objective)},
      {"pinned_model", f.pinned_model},
      {"reasoning", ReasoningModeName(f.reasoning)},
      {"max_tokens", f.max_tokens == 0 ? "default" : absl::StrCat(f.max_tokens)},
      {"tenant", f.tenant.empty() ? "(anonymous)" : f.tenant},
      {"app", f.app},
      {"code_cues", absl::StrCat(f.cues.code)},
      {"math_cues", absl::StrCat(f.cues.math)},
      {"reasoning_cues", absl::StrCat(f.cues.reasoning)},
      {"structured_output_cues", absl::StrCat(f.cues.structured_output)},
      {"deadline_ms", f.deadline_ms < 0 ? "none" : absl::StrCat(f.deadline_ms)},
      {"session.turn", f.session_id.empty() ? "none" : absl::StrCat(f.session_turn)},
      {"session.model", f.session_model.empty() ? "none" : f.session_model},
  };
  for (const auto& [model, tokens] : f.prefix_hit_tokens) {
    out.push_back({absl::StrCat("prefix_hit_tokens.", model), absl::StrCat(tokens)});
  }
  return out;
}

}  // namespace tandem::router
