#include "gateway/http_front/openai_codec.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/json_text.h"

namespace tandem::gateway::openai {
namespace {

void AppendUsage(const tandem::v1::Usage& u, std::string* out) {
  absl::StrAppend(out, R"("usage":{"prompt_tokens":)", u.prompt_tokens(),
                  R"(,"completion_tokens":)", u.completion_tokens(), R"(,"total_tokens":)",
                  u.total_tokens(), R"(,"prompt_tokens_details":{"cached_tokens":)",
                  u.cached_prompt_tokens(), "}}");
}

// [{"index"?, "id", "type": "function", "function": {"name", "arguments"}}, ...]
void AppendToolCalls(const std::vector<tandem::v1::ToolCall>& calls, int first_index, bool indexed,
                     std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->push_back('{');
    if (indexed) absl::StrAppend(out, R"("index":)", first_index + static_cast<int>(i), ",");
    absl::StrAppend(out, R"("id":)");
    AppendJsonString(calls[i].id(), out);
    absl::StrAppend(out, R"(,"type":"function","function":{"name":)");
    AppendJsonString(calls[i].name(), out);
    absl::StrAppend(out, R"(,"arguments":)");
    AppendJsonString(calls[i].arguments_json(), out);
    absl::StrAppend(out, "}}");
  }
  out->push_back(']');
}

void AppendHead(const AnswerMeta& meta, const char* object, std::string* out) {
  absl::StrAppend(out, R"({"id":)");
  AppendJsonString(meta.id, out);
  absl::StrAppend(out, R"(,"object":")", object, R"(","created":)", meta.created, R"(,"model":)");
  AppendJsonString(meta.model, out);
}

}  // namespace

namespace {

// The FIELD of a "FIELD: message" status (no space in it), or empty.
absl::string_view FieldOf(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos || colon == 0 ||
      message.substr(0, colon).find(' ') != absl::string_view::npos) {
    return {};
  }
  return message.substr(0, colon);
}

// "messages[3].tool_calls[0]" -> the part after the "[N]" that follows `head`, or nullopt.
std::optional<absl::string_view> AfterIndex(absl::string_view field, absl::string_view head,
                                            absl::string_view* prefix) {
  if (!absl::StartsWith(field, head)) return std::nullopt;
  const size_t close = field.find(']', head.size());
  if (close == absl::string_view::npos) return std::nullopt;
  *prefix = field.substr(0, close + 1);
  return field.substr(close + 1);
}

// The OpenAI path of a field of the gRPC request the body became.
std::string OpenAiField(absl::string_view field) {
  if (absl::ConsumePrefix(&field, "sampling.")) return std::string(field);
  if (field == "hints.model") return "model";
  if (absl::StartsWith(field, "hints.reasoning")) return "reasoning_effort";
  if (absl::StartsWith(field, "labels")) return "user";
  absl::string_view prefix;
  if (auto rest = AfterIndex(field, "tools[", &prefix)) {
    if (*rest == ".name") return absl::StrCat(prefix, ".function.name");
    if (*rest == ".description") return absl::StrCat(prefix, ".function.description");
    if (*rest == ".parameters_json") return absl::StrCat(prefix, ".function.parameters");
    return std::string(field);
  }
  absl::string_view message;
  const std::optional<absl::string_view> in_message = AfterIndex(field, "messages[", &message);
  if (!in_message) return std::string(field);
  absl::string_view part;
  if (auto rest = AfterIndex(*in_message, ".content[", &part)) {
    // The image of a part came from its data: URL.
    if (absl::StartsWith(*rest, ".image")) return absl::StrCat(message, part, ".image_url.url");
    return std::string(field);
  }
  absl::string_view call;
  if (auto rest = AfterIndex(*in_message, ".tool_calls[", &call)) {
    if (*rest == ".name") return absl::StrCat(message, call, ".function.name");
    if (*rest == ".arguments_json") return absl::StrCat(message, call, ".function.arguments");
  }
  return std::string(field);
}

}  // namespace

std::string ParamOf(const absl::Status& status) {
  const absl::string_view field = FieldOf(status.message());
  return field.empty() ? "" : OpenAiField(field);
}

absl::Status ForOpenAi(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument &&
      absl::StartsWith(status.message(), "hints.model: unknown model")) {
    return absl::NotFoundError(status.message());
  }
  // A request's own fields by the names the caller sent (messages[0].content[1].image_url.url,
  // not the gRPC request's image.mime_type).
  const absl::string_view field = FieldOf(status.message());
  if (absl::StartsWith(field, "messages[") || absl::StartsWith(field, "tools[")) {
    const std::string named = OpenAiField(field);
    if (named != field) {
      return absl::Status(status.code(),
                          absl::StrCat(named, status.message().substr(field.size())));
    }
  }
  return status;
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;  // the client went away (nginx's code)
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status) { return ErrorJson(status, ErrorCode::kDefault); }

std::string ErrorJson(const absl::Status& status, ErrorCode code_choice) {
  const char* type = "server_error";
  const char* code = nullptr;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      type = "authentication_error";
      code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      type = "invalid_request_error";
      code = code_choice == ErrorCode::kNone ? nullptr : "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      type = "timeout_error";
      break;
    case absl::StatusCode::kUnavailable:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  std::string out = R"({"error":{"message":)";
  AppendJsonString(status.message(), &out);
  absl::StrAppend(&out, R"(,"type":")", type, R"(","param":)");
  const std::string param = ParamOf(status);
  param.empty() ? absl::StrAppend(&out, "null") : AppendJsonString(param, &out);
  absl::StrAppend(&out, R"(,"code":)", code == nullptr ? "null" : absl::StrCat("\"", code, "\""),
                  "}}");
  return out;
}

const char* FinishReasonName(tandem::v1::FinishReason reason) {
  switch (reason) {
    case tandem::v1::FINISH_REASON_STOP:
      return "stop";
    case tandem::v1::FINISH_REASON_LENGTH:
      return "length";
    case tandem::v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    case tandem::v1::FINISH_REASON_MALFORMED_TOOL_CALL:
      return "malformed_tool_call";
    default:
      return "";
  }
}

std::string CompletionJson(const AnswerMeta& meta, absl::string_view reasoning,
                           absl::string_view content,
                           const std::vector<tandem::v1::ToolCall>& calls,
                           tandem::v1::FinishReason finish, const tandem::v1::Usage& usage) {
  std::string out;
  out.reserve(256 + reasoning.size() + content.size());
  AppendHead(meta, "chat.completion", &out);
  absl::StrAppend(&out, R"(,"choices":[{"index":0,"message":{"role":"assistant","content":)");
  if (content.empty() && !calls.empty()) {
    absl::StrAppend(&out, "null");
  } else {
    AppendJsonString(content, &out);
  }
  if (!calls.empty()) {
    absl::StrAppend(&out, R"(,"tool_calls":)");
    AppendToolCalls(calls, 0, /*indexed=*/false, &out);
  }
  if (!reasoning.empty()) {
    absl::StrAppend(&out, R"(,"reasoning_content":)");
    AppendJsonString(reasoning, &out);
  }
  absl::StrAppend(&out, R"(},"logprobs":null,"finish_reason":")", FinishReasonName(finish),
                  R"("}],)");
  AppendUsage(usage, &out);
  out.push_back('}');
  return out;
}

void AppendChunkEvent(const AnswerMeta& meta, bool first, absl::string_view reasoning,
                      absl::string_view content, const std::vector<tandem::v1::ToolCall>& calls,
                      int first_call_index, tandem::v1::FinishReason finish, std::string* out) {
  absl::StrAppend(out, "data: ");
  AppendHead(meta, "chat.completion.chunk", out);
  absl::StrAppend(out, R"(,"choices":[{"index":0,"delta":{)");
  const char* sep = "";
  if (first) {
    absl::StrAppend(out, R"("role":"assistant")");
    sep = ",";
  }
  if (!reasoning.empty()) {
    absl::StrAppend(out, sep, R"("reasoning_content":)");
    AppendJsonString(reasoning, out);
    sep = ",";
  }
  if (!content.empty() || (first && reasoning.empty() && calls.empty())) {
    absl::StrAppend(out, sep, R"("content":)");
    AppendJsonString(content, out);
    sep = ",";
  }
  if (!calls.empty()) {
    absl::StrAppend(out, sep, R"("tool_calls":)");
    AppendToolCalls(calls, first_call_index, /*indexed=*/true, out);
  }
  const char* name = FinishReasonName(finish);
  absl::StrAppend(out, R"(},"logprobs":null,"finish_reason":)",
                  *name == '\0' ? "null" : absl::StrCat("\"", name, "\""), "}]}\n\n");
}

void AppendUsageEvent(const AnswerMeta& meta, const tandem::v1::Usage& usage, std::string* out) {
  absl::StrAppend(out, "data: ");
  AppendHead(meta, "chat.completion.chunk", out);
  absl::StrAppend(out, R"(,"choices":[],)");
  AppendUsage(usage, out);
  absl::StrAppend(out, "}\n\n");
}

void AppendErrorEvent(const absl::Status& status, std::string* out) {
  absl::StrAppend(out, "data: ", ErrorJson(status), "\n\n");
}

void AppendDoneEvent(std::string* out) { absl::StrAppend(out, "data: [DONE]\n\n"); }

std::string ModelListJson(const std::vector<tandem::v1::ModelStatus>& models, int64_t created) {
  std::string out = R"({"object":"list","data":[)";
  for (const tandem::v1::ModelStatus& m : models) {
    absl::StrAppend(&out, ModelJson(m.name(), m.model_id(), created), ",");
  }
  absl::StrAppend(&out, ModelJson("auto", "", created), "]}");
  return out;
}

std::string ModelJson(absl::string_view id, absl::string_view root, int64_t created) {
  std::string out = R"({"id":)";
  AppendJsonString(id, &out);
  absl::StrAppend(&out, R"(,"object":"model","created":)", created, R"(,"owned_by":"tandem")");
  if (!root.empty()) {
    absl::StrAppend(&out, R"(,"root":)");
    AppendJsonString(root, &out);
  }
  out.push_back('}');
  return out;
}

}  // namespace tandem::gateway::openai
