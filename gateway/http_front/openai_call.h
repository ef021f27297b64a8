#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "gateway/dispatch/generation_call.h"
#include "gateway/http_front/http_caller_context.h"
#include "gateway/http_front/openai_codec.h"
#include "gateway/http_front/openai_request.h"
#include "gateway/relay/relay_writes.h"
#include "gateway/relay/think_splitter.h"
#include "gateway/relay/tool_call_parser.h"

namespace tandem::gateway {

// POST /v1/chat/completions: the same request path as Generate and GenerateStream (intake,
// router, tenants, queue, retries, failover, hedging), answered in OpenAI's JSON, whole or as
// Server-Sent Events. The routing decision travels in x-tandem-* response headers. Owns itself:
// the last reference (its own until the answer is handed to the connection, the attempts',
// the timers') deletes it.
class OpenAiCall final : public GenerationCall {
 public:
  // Starts the call: `decoded` is the decoded body or why it could not be (answered once the
  // caller is authenticated).
  static void Start(Dispatcher* dispatcher, std::shared_ptr<HttpExchange> exchange,
                    absl::StatusOr<openai::ChatRequest> decoded,
                    std::chrono::system_clock::time_point deadline);

 private:
  struct Link;

  OpenAiCall(Dispatcher* dispatcher, std::shared_ptr<HttpExchange> exchange,
             std::unique_ptr<HttpCallerContext> caller, HttpCallerContext* caller_view);

  void Relay(const tandem::v1::WorkerGenerateChunk& chunk) override;
  void Complete(const grpc::Status& status) override;

  // The chunk's text as reasoning_, content_ and piece_calls_ (finish_ updated).
  void Split(const tandem::v1::WorkerGenerateChunk& chunk, bool last);
  void OnWriteDone(bool ok);
  void FinishOnce();
  // The answer's head: status, content type and the x-tandem-* headers.
  HttpResponse Head(int status, const char* content_type) const;
  void RespondError(const grpc::Status& status);
  // What every event of the answer repeats; called only from the relay and the end, never at
  // once.
  const openai::AnswerMeta& Meta();

  const std::shared_ptr<HttpExchange> exchange_;
  HttpCallerContext* const http_;  // owned by GenerationCall
  const std::shared_ptr<Link> link_;
  bool stream_ = false;
  bool include_usage_ = false;
  const int64_t created_;  // Unix seconds
  std::optional<openai::AnswerMeta> meta_;
  // Written by Relay only, one chunk at a time.
  ThinkSplitter splitter_{true};
  std::string reasoning_;  // of one streamed chunk
  std::string content_;
  std::vector<tandem::v1::ToolCall> piece_calls_;
  std::string unparsed_;          // content before the tool-call parser
  std::string answer_reasoning_;  // of a whole answer
  std::string answer_content_;
  std::vector<tandem::v1::ToolCall> answer_calls_;
  // Made at the first chunk when the request has tools.
  std::optional<ToolCallParser> parser_;
  bool parser_checked_ = false;
  int calls_sent_ = 0;  // tool calls streamed so far (their delta index)
  std::string out_;
  tandem::v1::FinishReason finish_ = tandem::v1::FINISH_REASON_UNSPECIFIED;
  bool started_stream_ = false;
  RelayWrites writes_;
};

}  // namespace tandem::gateway
