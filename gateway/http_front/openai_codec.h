#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json_depth.h"
#include "tandem/v1/gateway.pb.h"

// Tandem's answers and refusals as OpenAI's chat completions API words them: the encoding half
// of the HTTP front's codec (decoding: gateway/http_front/openai_request.h). Pure functions, no
// I/O.
namespace tandem::gateway::openai {

// The request field an error names ("messages[0].content"): the OpenAI name of the FIELD of a
// "FIELD: message" status; empty when the message does not start with one.
std::string ParamOf(const absl::Status& status);

// A refusal as OpenAI's API words it: an unknown model is NOT_FOUND (404, model_not_found)
// where the router says INVALID_ARGUMENT.
absl::Status ForOpenAi(const absl::Status& status);

// The HTTP status of a refusal with `code`: 400, 401, 403, 404, 429, 503, 504, ...
int HttpStatusFor(absl::StatusCode code);

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}. NOT_FOUND is a model's
// (code "model_not_found") unless `code` says kNone (a path that is not served: code null, as
// OpenAI answers an unknown URL).
enum class ErrorCode { kDefault, kNone };
std::string ErrorJson(const absl::Status& status);
std::string ErrorJson(const absl::Status& status, ErrorCode code);

// "stop", "length", "tool_calls" (or "" while unfinished), as OpenAI names a finish reason; a
// malformed tool call (its raw text is the content) is "malformed_tool_call".
const char* FinishReasonName(tandem::v1::FinishReason reason);

// What every answer of one request shares.
struct AnswerMeta {
  std::string id;       // "chatcmpl-REQUEST_ID"
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model's upstream id
};

// A whole chat.completion. `reasoning` is the thinking text (omitted when empty); `calls` the
// tool calls (content is null when it is empty and there are calls).
std::string CompletionJson(const AnswerMeta& meta, absl::string_view reasoning,
                           absl::string_view content,
                           const std::vector<tandem::v1::ToolCall>& calls,
                           tandem::v1::FinishReason finish, const tandem::v1::Usage& usage);

// One Server-Sent Event ("data: {...}\n\n") of a chat.completion.chunk, appended to `out`: the
// delta's role when `first`, its reasoning and content when not empty, its tool calls (each
// whole, numbered from `first_call_index`), the finish reason when set.
void AppendChunkEvent(const AnswerMeta& meta, bool first, absl::string_view reasoning,
                      absl::string_view content, const std::vector<tandem::v1::ToolCall>& calls,
                      int first_call_index, tandem::v1::FinishReason finish, std::string* out);
// The usage chunk of stream_options.include_usage (no choices).
void AppendUsageEvent(const AnswerMeta& meta, const tandem::v1::Usage& usage, std::string* out);
// An error in the middle of a stream, then the end: "data: {"error": ...}\n\n".
void AppendErrorEvent(const absl::Status& status, std::string* out);
// The end of a stream: "data: [DONE]\n\n".
void AppendDoneEvent(std::string* out);

// GET /v1/models: the models, then "auto" (the router decides). Each model's `root` is its
// upstream id, when known.
std::string ModelListJson(const std::vector<tandem::v1::ModelStatus>& models, int64_t created);
// GET /v1/models/ID: one model object.
std::string ModelJson(absl::string_view id, absl::string_view root, int64_t created);

}  // namespace tandem::gateway::openai
