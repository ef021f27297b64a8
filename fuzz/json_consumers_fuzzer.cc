// libFuzzer target: one text as the JSON every consumer of a caller's JSON receives — a tool's
// parameters schema and a tool call's arguments (validated as the intake and the worker do, then
// printed by both chat templates' tool prompts and typed by the gateway's tool-call parser), and
// a whole OpenAI request body (the HTTP front's decoder, then its error mapping). Whatever the
// nesting, nothing may recurse past the depth limit: the corpus holds depth bombs of each shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/request_validation.h"
#include "gateway/http_front/openai_codec.h"
#include "gateway/http_front/openai_request.h"
#include "gateway/relay/tool_call_parser.h"
#include "tandem/v1/gateway.pb.h"
#include "workers/tokenizer/tool_prompt.h"

namespace {

// Error messages go to clients and logs as they are: one printable line each.
void CheckMessage(const absl::Status& s) {
  for (const unsigned char c : s.message()) {
    if (c < 0x20 || c >= 0x7f) std::abort();
  }
}

void AsToolSchema(const std::string& text, const tandem::RequestLimits& limits) {
  tandem::v1::GenerateRequest r;
  tandem::v1::Tool* tool = r.add_tools();
  tool->set_name("f");
  tool->set_parameters_json(text);
  const absl::Status s = tandem::ValidateTools(r.tools(), limits);
  CheckMessage(s);
  if (!s.ok()) return;
  (void)tandem::workers::QwenToolsBlock(r.tools());
  (void)tandem::workers::NemotronToolsBlock(r.tools());
  tandem::gateway::ToolCallParser parser(r.tools(), "fuzz");
  std::string out;
  std::vector<tandem::v1::ToolCall> calls;
  // The model's answer quotes the text back as a parameter's value.
  parser.Feed(absl::StrCat("<tool_call>\n<function=f>\n<parameter=p>\n", text,
                           "\n</parameter>\n</function>\n</tool_call>"),
              &out, &calls);
  (void)parser.Finish(tandem::v1::FINISH_REASON_STOP, &out);
}

void AsToolArguments(const std::string& text, const tandem::RequestLimits& limits) {
  tandem::v1::GenerateRequest r;
  tandem::v1::ChatMessage* m = r.add_messages();
  m->set_role("assistant");
  tandem::v1::ToolCall* call = m->add_tool_calls();
  call->set_name("f");
  call->set_arguments_json(text);
  const absl::Status s = tandem::ValidateMessages(r.messages(), limits);
  CheckMessage(s);
  if (s.ok()) (void)tandem::workers::ToolCallXml(*call);
}

void AsOpenAiBody(const std::string& text, const tandem::RequestLimits& limits) {
  absl::StatusOr<tandem::gateway::openai::ChatRequest> r =
      tandem::gateway::openai::DecodeChatRequest(text, limits.max_json_depth);
  if (!r.ok()) {
    CheckMessage(tandem::gateway::openai::ForOpenAi(r.status()));
    (void)tandem::gateway::openai::ErrorJson(r.status());
    return;
  }
  CheckMessage(tandem::ValidateTools(r->request.tools(), limits));
  CheckMessage(tandem::ValidateMessages(r->request.messages(), limits));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const tandem::RequestLimits limits;
  AsToolSchema(text, limits);
  AsToolArguments(text, limits);
  AsOpenAiBody(text, limits);
  return 0;
}
