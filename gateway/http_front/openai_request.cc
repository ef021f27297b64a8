#include "gateway/http_front/openai_request.h"

#include <limits>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/json_depth.h"
#include "common/log_text.h"
#include "gateway/http_front/strict_json.h"
#include "nlohmann/json.hpp"

namespace tandem::gateway::openai {
namespace {

// Ordered: a tool's schema keeps its keys in the caller's order, as the chat templates print it.
using json = nlohmann::ordered_json;

// "PARAM: message": the form every refusal naming a field takes, here and in the intake, so that
// ParamOf finds the field after the status crossed gRPC's (payload-less) status type.
absl::Status BadParam(absl::string_view param, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(param, ": ", message));
}

// The fields OpenAI defines that Tandem accepts only at their neutral value (a client library
// may send them by default), with a check of that value.
bool Neutral(const std::string& key, const json& v) {
  if (v.is_null()) return true;
  if (key == "frequency_penalty" || key == "presence_penalty") return v.is_number() && v == 0;
  if (key == "logprobs" || key == "store") return v.is_boolean() && !v.get<bool>();
  if (key == "logit_bias") return v.is_object() && v.empty();
  if (key == "response_format") return v.is_object() && v.value("type", "") == "text";
  return false;
}

// Accepted and ignored whatever their value: they do not change the answer.
bool Ignored(const std::string& key) {
  return key == "metadata" || key == "service_tier" || key == "parallel_tool_calls";
}

absl::Status DecodeImage(const json& part, const std::string& where, tandem::v1::Image* image) {
  const json* url = nullptr;
  if (auto it = part.find("image_url"); it != part.end()) {
    if (it->is_object() && it->contains("url")) url = &(*it)["url"];
    if (it->is_string()) url = &*it;
  }
  if (url == nullptr || !url->is_string()) {
    return BadParam(where + ".image_url.url", "expected a string");
  }
  const std::string& u = url->get_ref<const std::string&>();
  // The gateway never fetches a URL for a caller (that would let any caller make it reach any
  // host it can): images come inline.
  absl::string_view rest = u;
  if (!absl::ConsumePrefix(&rest, "data:")) {
    return BadParam(where + ".image_url.url",
                    "only data: URLs (data:image/png;base64,...) are accepted");
  }
  const size_t comma = rest.find(',');
  if (comma == absl::string_view::npos || !absl::EndsWith(rest.substr(0, comma), ";base64")) {
    return BadParam(where + ".image_url.url", "expected data:MIME;base64,DATA");
  }
  std::string bytes;
  if (!absl::Base64Unescape(rest.substr(comma + 1), &bytes)) {
    return BadParam(where + ".image_url.url", "the data is not valid base64");
  }
  image->set_mime_type(std::string(rest.substr(0, comma - 7)));
  image->set_data(std::move(bytes));
  return absl::OkStatus();
}

absl::Status DecodeContent(const json& content, const std::string& where,
                           tandem::v1::ChatMessage* m) {
  if (content.is_string()) {
    m->add_content()->set_text(content.get<std::string>());
    return absl::OkStatus();
  }
  if (!content.is_array()) return BadParam(where, "expected a string or an array of parts");
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string pw = absl::StrCat(where, "[", j, "]");
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type == "text") {
      auto it = part.find("text");
      if (it == part.end() || !it->is_string()) return BadParam(pw + ".text", "expected a string");
      m->add_content()->set_text(it->get<std::string>());
    } else if (type == "image_url") {
      if (absl::Status s = DecodeImage(part, pw, m->add_content()->mutable_image()); !s.ok()) {
        return s;
      }
    } else {
      return BadParam(pw + ".type", "expected \"text\" or \"image_url\"");
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeToolCalls(const json& calls, const std::string& where,
                             tandem::v1::ChatMessage* m) {
  if (!calls.is_array()) return BadParam(where, "expected an array");
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::string cw = absl::StrCat(where, "[", c, "]");
    const json& call = calls[c];
    const json* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return BadParam(cw + ".function.name", "expected a string");
    }
    tandem::v1::ToolCall* out = m->add_tool_calls();
    out->set_name((*fn)["name"].get<std::string>());
    if (call.contains("id") && call["id"].is_string()) out->set_id(call["id"].get<std::string>());
    if (fn->contains("arguments")) {
      const json& a = (*fn)["arguments"];
      // OpenAI sends arguments as a JSON object's text; an object is taken too.
      if (a.is_string()) {
        out->set_arguments_json(a.get<std::string>());
      } else if (a.is_object()) {
        out->set_arguments_json(a.dump());
      } else {
        return BadParam(cw + ".function.arguments", "expected a JSON object's text");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeTools(const json& tools, tandem::v1::GenerateRequest* r) {
  if (!tools.is_array()) return BadParam("tools", "expected an array");
  for (size_t t = 0; t < tools.size(); ++t) {
    const std::string tw = absl::StrCat("tools[", t, "]");
    const json& tool = tools[t];
    if (!tool.is_object() || tool.value("type", "") != "function") {
      return BadParam(tw + ".type", "expected \"function\"");
    }
    const json* fn = tool.contains("function") ? &tool["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return BadParam(tw + ".function.name", "expected a string");
    }
    tandem::v1::Tool* out = r->add_tools();
    out->set_name((*fn)["name"].get<std::string>());
    if (fn->contains("description")) {
      if (!(*fn)["description"].is_string()) {
        return BadParam(tw + ".function.description", "expected a string");
      }
      out->set_description((*fn)["description"].get<std::string>());
    }
    if (fn->contains("parameters")) {
      if (!(*fn)["parameters"].is_object()) {
        return BadParam(tw + ".function.parameters", "expected a JSON Schema object");
      }
      out->set_parameters_json((*fn)["parameters"].dump());
    }
  }
  return absl::OkStatus();
}

// tool_choice: "auto" (the default) and "none" (the tools are not offered). A model cannot be
// forced to call ("required", or a named function), so those are refused.
absl::Status DecodeToolChoice(const json& v, ChatRequest* out) {
  if (v.is_null() || v == "auto") return absl::OkStatus();
  if (v == "none") {
    out->tool_choice_none = true;
    return absl::OkStatus();
  }
  return BadParam("tool_choice",
                  "only \"auto\" and \"none\": neither model can be forced to call a tool");
}

absl::Status DecodeMessages(const json& messages, tandem::v1::GenerateRequest* r) {
  if (!messages.is_array() || messages.empty()) {
    return BadParam("messages", "expected a non-empty array of messages");
  }
  std::set<std::string> call_ids;  // of the assistant messages so far: what a tool message answers
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& msg = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return BadParam(where, "expected an object");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string())
      return BadParam(where + ".role", "expected a string");
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for the system role
    if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
      return BadParam(where + ".role",
                      "expected \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"");
    }
    tandem::v1::ChatMessage* m = r->add_messages();
    m->set_role(name);
    if (auto calls = msg.find("tool_calls"); calls != msg.end() && !calls->is_null()) {
      if (name != "assistant")
        return BadParam(where + ".tool_calls", "only for assistant messages");
      if (absl::Status s = DecodeToolCalls(*calls, where + ".tool_calls", m); !s.ok()) return s;
    }
    if (auto id = msg.find("tool_call_id"); id != msg.end() && !id->is_null()) {
      if (!id->is_string()) return BadParam(where + ".tool_call_id", "expected a string");
      m->set_tool_call_id(id->get<std::string>());
    }
    if (name == "tool" && !call_ids.contains(m->tool_call_id())) {
      return BadParam(where + ".tool_call_id",
                      m->tool_call_id().empty()
                          ? "required: the id of the tool call this message answers"
                          : "matches no tool call of an earlier assistant message");
    }
    for (const tandem::v1::ToolCall& call : m->tool_calls()) {
      if (!call.id().empty()) call_ids.insert(call.id());
    }
    auto content = msg.find("content");
    const bool may_be_empty = m->tool_calls_size() > 0;
    if (content == msg.end() || content->is_null() ||
        (may_be_empty && content->is_string() && content->get_ref<const std::string&>().empty())) {
      if (may_be_empty) continue;
      return BadParam(where + ".content", "expected a string or an array of parts");
    }
    if (absl::Status s = DecodeContent(*content, where + ".content", m); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> PositiveInt(const json& v, const char* key) {
  if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
      v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    return BadParam(
        key, absl::StrCat("expected an integer from 1 to ", std::numeric_limits<int32_t>::max()));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

absl::Status DecodeStop(const json& v, tandem::v1::SamplingParams* sampling) {
  if (v.is_string()) {
    sampling->add_stop(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return BadParam("stop", "expected a string or an array of strings");
  for (const json& s : v) {
    if (!s.is_string()) return BadParam("stop", "expected a string or an array of strings");
    sampling->add_stop(s.get<std::string>());
  }
  return absl::OkStatus();
}

// reasoning_effort as Tandem's reasoning options: "none" and "minimal" answer directly; the
// others think, within a thinking budget of 1024 tokens (low), 8192 (medium) or none (high).
absl::Status DecodeEffort(const json& v, tandem::v1::ReasoningOptions* reasoning) {
  const std::string e = v.is_string() ? v.get<std::string>() : "";
  if (e == "none" || e == "minimal") {
    reasoning->set_mode(tandem::v1::REASONING_MODE_OFF);
  } else if (e == "low" || e == "medium" || e == "high") {
    reasoning->set_mode(tandem::v1::REASONING_MODE_ON);
    reasoning->set_thinking_budget_tokens(e == "low" ? 1024 : e == "medium" ? 8192 : 0);
  } else {
    return BadParam("reasoning_effort",
                    "expected \"none\", \"minimal\", \"low\", \"medium\" or \"high\"");
  }
  return absl::OkStatus();
}

// One top-level field of the body into `out`.
absl::Status DecodeField(const std::string& key, const json& v, ChatRequest* out) {
  tandem::v1::GenerateRequest& r = out->request;
  tandem::v1::SamplingParams* sampling = r.mutable_sampling();
  if (key == "messages") return DecodeMessages(v, &r);
  if (key == "model") {
    if (!v.is_string()) return BadParam("model", "expected a string");
    if (v != "auto") r.mutable_hints()->set_model(v.get<std::string>());
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (v.is_null()) return absl::OkStatus();
    absl::StatusOr<int32_t> n = PositiveInt(v, key.c_str());
    if (!n.ok()) return n.status();
    // max_completion_tokens (the current name) wins over the deprecated max_tokens.
    if (key == "max_completion_tokens" || !sampling->has_max_tokens()) sampling->set_max_tokens(*n);
  } else if (key == "temperature" || key == "top_p") {
    if (v.is_null()) return absl::OkStatus();
    if (!v.is_number()) return BadParam(key, "expected a number");
    const float f = v.get<float>();
    key == "temperature" ? sampling->set_temperature(f) : sampling->set_top_p(f);
  } else if (key == "seed") {
    if (v.is_null()) return absl::OkStatus();
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return BadParam("seed", "expected an integer >= 0");
    }
    sampling->set_seed(v.get<uint64_t>());
  } else if (key == "stop") {
    if (!v.is_null()) return DecodeStop(v, sampling);
  } else if (key == "n") {
    if (!v.is_null() && !(v.is_number_integer() && v == 1)) {
      return BadParam("n", "only n=1 is supported (one choice per request)");
    }
  } else if (key == "stream") {
    if (!v.is_null() && !v.is_boolean()) return BadParam("stream", "expected a boolean");
    out->stream = v.is_boolean() && v.get<bool>();
  } else if (key == "stream_options") {
    if (v.is_null()) return absl::OkStatus();
    if (!v.is_object()) return BadParam("stream_options", "expected an object");
    auto it = v.find("include_usage");
    if (it != v.end() && !it->is_boolean()) {
      return BadParam("stream_options.include_usage", "expected a boolean");
    }
    out->include_usage = it != v.end() && it->get<bool>();
  } else if (key == "reasoning_effort") {
    if (!v.is_null()) return DecodeEffort(v, r.mutable_hints()->mutable_reasoning());
  } else if (key == "user") {
    if (!v.is_string()) return BadParam("user", "expected a string");
    // A label like any other: it shows in logs and routing conditions, and grants nothing.
    if (!v.get<std::string>().empty()) (*r.mutable_labels())["user"] = v.get<std::string>();
  } else if (key == "top_k") {  // vLLM's extension, Tandem has it
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return BadParam("top_k", "expected >= 0");
    sampling->set_top_k(static_cast<int32_t>(std::min<int64_t>(v.get<int64_t>(), 1 << 30)));
  } else if (!Ignored(key)) {
    if (key == "tools") {
      if (!v.is_null()) return DecodeTools(v, &r);
    } else if (key == "tool_choice") {
      return DecodeToolChoice(v, out);
    } else if (key == "functions" || key == "function_call") {
      return BadParam(key, "the deprecated functions API: use tools and tool_choice");
    } else if (key == "frequency_penalty" || key == "presence_penalty" || key == "logprobs" ||
               key == "store" || key == "logit_bias" || key == "response_format" ||
               key == "top_logprobs") {
      if (!Neutral(key, v)) return BadParam(key, "not supported by this gateway (leave it unset)");
    } else {
      // An error message is one short printable line (it goes to logs): a key that is not a plain
      // token is named quoted, escaped and cut.
      return BadParam(IsPlainToken(key, 64) ? key : QuoteForLog(key),
                      "unrecognized request argument");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatRequest> DecodeChatRequest(absl::string_view body, int max_json_depth) {
  // The depth is scanned before the parse: nothing below (dump, copies) recurses deeper.
  absl::StatusOr<json> doc = ParseStrictJson(body, max_json_depth);
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  if (!doc->contains("messages")) return BadParam("messages", "required");
  ChatRequest out;
  for (const auto& [key, value] : doc->items()) {
    if (absl::Status s = DecodeField(key, value, &out); !s.ok()) return s;
  }
  if (auto it = doc->find("stream_options"); it != doc->end() && !it->is_null() && !out.stream) {
    return BadParam("stream_options", "only allowed when stream is true");
  }
  if (out.tool_choice_none) out.request.clear_tools();
  return out;
}

}  // namespace tandem::gateway::openai
