#include "workers/upstream/chat_request.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tandem::workers::upstream {
namespace {

using nlohmann::json;

absl::StatusOr<json> Content(const tandem::v1::ChatMessage& m, bool vision) {
  bool has_image = false;
  std::string text;
  for (const auto& p : m.content()) {
    if (p.has_image()) has_image = true;
    if (p.has_text()) text += p.text();
  }
  if (!has_image) return json(text);
  if (!vision) {
    return absl::InvalidArgumentError(
        "messages: this worker's engine takes no images (--upstream_vision)");
  }
  json parts = json::array();
  for (const auto& p : m.content()) {
    if (p.has_text()) {
      parts.push_back({{"type", "text"}, {"text", p.text()}});
    } else if (p.has_image()) {
      const std::string mime = p.image().mime_type().empty() ? "image/png" : p.image().mime_type();
      parts.push_back({{"type", "image_url"},
                       {"image_url",
                        {{"url", absl::StrCat("data:", mime, ";base64,",
                                              absl::Base64Escape(p.image().data()))}}}});
    }
  }
  return parts;
}

absl::StatusOr<json> Messages(const tandem::v1::WorkerGenerateRequest& r, bool vision) {
  json out = json::array();
  for (const auto& m : r.messages()) {
    json j = {{"role", m.role()}};
    absl::StatusOr<json> content = Content(m, vision);
    if (!content.ok()) return content.status();
    j["content"] = *std::move(content);
    if (m.tool_calls_size() > 0) {
      json calls = json::array();
      for (const auto& c : m.tool_calls()) {
        calls.push_back({{"id", c.id()},
                         {"type", "function"},
                         {"function", {{"name", c.name()}, {"arguments", c.arguments_json()}}}});
      }
      j["tool_calls"] = std::move(calls);
    }
    if (m.has_tool_call_id()) j["tool_call_id"] = m.tool_call_id();
    out.push_back(std::move(j));
  }
  return out;
}

json Tools(const tandem::v1::WorkerGenerateRequest& r) {
  json tools = json::array();
  for (const auto& t : r.tools()) {
    json fn = {{"name", t.name()}};
    if (t.has_description()) fn["description"] = t.description();
    json params = t.parameters_json().empty()
                      ? json::object()
                      : json::parse(t.parameters_json(), nullptr, /*allow_exceptions=*/false);
    fn["parameters"] = params.is_discarded() ? json::object() : std::move(params);
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return tools;
}

absl::Status Refuse(const EngineProfile& p, absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("the '", p.name, "' engine profile has no control for ", what));
}

// Thinking on/off, its budget and continuation, each the profile's own fragment.
absl::Status MergeControls(const tandem::v1::WorkerGenerateRequest& r, const EngineProfile& p,
                           json* body) {
  const auto mode = r.reasoning().mode();
  if (mode == tandem::v1::REASONING_MODE_ON) {
    if (p.thinking_on.is_null()) return Refuse(p, "turning thinking on");
    body->merge_patch(p.thinking_on);
  } else if (mode == tandem::v1::REASONING_MODE_OFF) {
    if (p.thinking_off.is_null()) return Refuse(p, "turning thinking off");
    body->merge_patch(p.thinking_off);
  }
  if (mode != tandem::v1::REASONING_MODE_OFF && r.reasoning().thinking_budget_tokens() > 0) {
    json budget = p.Budget(r.reasoning().thinking_budget_tokens());
    if (budget.is_null()) return Refuse(p, "a thinking budget");
    body->merge_patch(budget);
  }
  if (r.continue_final_message()) {
    if (p.continuation.is_null()) return Refuse(p, "continuing a partial answer");
    body->merge_patch(p.continuation);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> BuildChatRequest(const tandem::v1::WorkerGenerateRequest& request,
                                             const EngineProfile& profile,
                                             const ChatRequestOptions& options) {
  json body = {{"model", options.served_model}, {"stream", options.stream}};
  absl::StatusOr<json> messages = Messages(request, options.vision);
  if (!messages.ok()) return messages.status();
  body["messages"] = *std::move(messages);
  if (request.tools_size() > 0) body["tools"] = Tools(request);
  const auto& s = request.sampling();
  if (s.has_max_tokens()) body["max_tokens"] = s.max_tokens();
  if (s.has_temperature()) body["temperature"] = s.temperature();
  if (s.has_top_p()) body["top_p"] = s.top_p();
  if (s.top_k() > 0) body["top_k"] = s.top_k();
  if (s.has_seed()) body["seed"] = s.seed();
  if (s.stop_size() > 0)
    body["stop"] = json(std::vector<std::string>(s.stop().begin(), s.stop().end()));
  if (!profile.request_extra.is_null()) body.merge_patch(profile.request_extra);
  if (!options.stream) body.erase("stream_options");
  if (absl::Status st = MergeControls(request, profile, &body); !st.ok()) return st;
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tandem::workers::upstream
