#include "workers/upstream/chat_stream_decoder.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tandem::workers::upstream {
namespace {

using nlohmann::json;

absl::string_view StringField(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  return it->get_ref<const std::string&>();
}

// An integer field, or `fallback` when absent or not an integer (never throws: engine data).
int32_t IntField(const json& j, const char* key, int32_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  const int64_t v = it->get<int64_t>();
  return v < 0 || v > INT32_MAX ? fallback : static_cast<int32_t>(v);
}

// A parameter value as the models write it: strings bare, anything else as JSON.
std::string ParameterText(const json& v) {
  return v.is_string() ? v.get<std::string>()
                       : v.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

ChatStreamDecoder::ChatStreamDecoder(const EngineProfile& profile, bool thinking)
    : profile_(profile), thinking_(thinking), think_closed_(!thinking), strip_open_tag_(thinking) {}

void ChatStreamDecoder::Reasoning(absl::string_view text, Piece* out) {
  if (text.empty()) return;
  if (think_closed_) {  // reasoning the request did not ask for, or after the answer began
    Content(text, out);
    return;
  }
  strip_open_tag_ = false;
  out->text.append(text.data(), text.size());
  reasoning_ended_with_newline_ = text.back() == '\n';
}

void ChatStreamDecoder::CloseThink(Piece* out) {
  if (think_closed_) return;
  think_closed_ = true;
  strip_open_tag_ = false;
  out->text.append(reasoning_ended_with_newline_ ? "</think>\n\n" : "\n</think>\n\n");
}

void ChatStreamDecoder::Content(absl::string_view text, Piece* out) {
  if (text.empty()) return;
  if (strip_open_tag_) {
    // No reasoning parser on the engine: the raw answer, think block and all. Only the opening
    // tag (which a native worker's prompt holds) is dropped.
    strip_open_tag_ = false;
    think_closed_ = true;
    if (text.substr(0, 7) == "<think>") {
      text.remove_prefix(7);
      if (!text.empty() && text[0] == '\n') text.remove_prefix(1);
    } else {
      out->text.append("</think>\n\n");  // the engine's template did not think
    }
    out->text.append(text.data(), text.size());
    return;
  }
  CloseThink(out);
  out->text.append(text.data(), text.size());
}

void ChatStreamDecoder::WriteCalls(Piece* out) {
  if (calls_.empty()) return;
  CloseThink(out);
  for (const auto& [index, call] : calls_) {
    absl::StrAppend(&out->text, "<tool_call>\n<function=", call.name, ">\n");
    json args = json::parse(call.arguments.empty() ? "{}" : call.arguments, nullptr, false);
    if (args.is_object()) {
      for (const auto& [key, value] : args.items()) {
        absl::StrAppend(&out->text, "<parameter=", key, ">\n", ParameterText(value),
                        "\n</parameter>\n");
      }
    } else {
      // Arguments that are not an object: written as they came, for the gateway's parser to
      // report as a malformed call.
      absl::StrAppend(&out->text, call.arguments, "\n");
    }
    out->text.append("</function>\n</tool_call>");
  }
  calls_.clear();
}

absl::Status ChatStreamDecoder::Choice(const void* choice_json, Piece* out) {
  const json& choice = *static_cast<const json*>(choice_json);
  if (!choice.is_object()) return absl::InternalError("engine stream: a choice is not an object");
  auto delta_it = choice.find("delta");
  if (delta_it == choice.end()) delta_it = choice.find("message");  // a whole response
  const size_t before = out->text.size();
  if (delta_it != choice.end() && delta_it->is_object()) {
    const json& delta = *delta_it;
    for (const std::string& field : profile_.reasoning_fields) {
      absl::string_view r = StringField(delta, field.c_str());
      if (!r.empty()) {
        Reasoning(r, out);
        break;
      }
    }
    Content(StringField(delta, "content"), out);
    if (auto tc = delta.find("tool_calls"); tc != delta.end() && tc->is_array()) {
      for (const json& c : *tc) {
        if (!c.is_object()) continue;
        const int index = IntField(c, "index", static_cast<int32_t>(calls_.size()));
        PendingCall& call = calls_[index];
        if (auto fn = c.find("function"); fn != c.end() && fn->is_object()) {
          {
            absl::string_view v = StringField(*fn, "name");
            call.name.append(v.data(), v.size());
          }
          {
            absl::string_view v = StringField(*fn, "arguments");
            call.arguments.append(v.data(), v.size());
          }
        }
      }
    }
  }
  if (out->text.size() > before) {
    ++out->tokens;
    ++counted_tokens_;
  }
  if (auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string()) {
    const std::string& r = fr->get_ref<const std::string&>();
    saw_finish_ = true;
    // Tool calls are written into the text; the gateway's parser reports TOOL_CALLS from them.
    // An answer the engine gave up on (vLLM's and SGLang's "abort", vLLM's "error") is not whole.
    finish_reason_ =
        r == "length" ? tandem::v1::FINISH_REASON_LENGTH : tandem::v1::FINISH_REASON_STOP;
    if (r == "abort" || r == "error") aborted_ = r;
  }
  return absl::OkStatus();
}

absl::Status ChatStreamDecoder::Feed(absl::string_view data, Piece* out) {
  if (data == "[DONE]") {
    done_ = true;
    return absl::OkStatus();
  }
  json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InternalError(absl::StrCat("engine stream: an event that is not a JSON object (",
                                            data.substr(0, 64), ")"));
  }
  if (auto e = j.find("error"); e != j.end()) {
    std::string message = e->is_object() ? std::string(StringField(*e, "message")) : e->dump();
    return absl::InternalError(absl::StrCat("engine error: ", message.substr(0, 256)));
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    prompt_tokens_ = IntField(*u, "prompt_tokens", prompt_tokens_);
    usage_completion_tokens_ = IntField(*u, "completion_tokens", usage_completion_tokens_);
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) {
    if (j.contains("usage")) return absl::OkStatus();
    return absl::InternalError("engine stream: a chunk without choices");
  }
  for (const json& c : *choices) {
    if (absl::Status s = Choice(&c, out); !s.ok()) return s;
  }
  if (!choices->empty() && saw_finish_) WriteCalls(out);
  return absl::OkStatus();
}

absl::Status ChatStreamDecoder::Finish(Piece* out) {
  if (!saw_finish_) {
    return absl::InternalError("engine stream ended before its finish reason (cut short)");
  }
  if (!aborted_.empty()) {
    return absl::InternalError(
        absl::StrCat("the engine ended the answer with finish_reason '", aborted_, "'"));
  }
  WriteCalls(out);
  done_ = true;
  return absl::OkStatus();
}

}  // namespace tandem::workers::upstream
