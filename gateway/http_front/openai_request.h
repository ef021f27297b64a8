#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json_depth.h"
#include "tandem/v1/gateway.pb.h"

// OpenAI's chat completions request as Tandem's GenerateRequest: the decoding half of the HTTP
// front's codec (answers: gateway/http_front/openai_codec.h). Pure functions, no I/O.
namespace tandem::gateway::openai {

struct ChatRequest {
  tandem::v1::GenerateRequest request;
  bool stream = false;
  // stream_options.include_usage: a last chunk with the usage and no choices.
  bool include_usage = false;
  // tool_choice "none": the tools are not offered to the model.
  bool tool_choice_none = false;
};

// Decodes a POST /v1/chat/completions body. `model` "auto", "" or absent lets the router decide;
// any other name is a pin, in hints.model as given (the front maps upstream ids to routing
// names; the intake answers NOT_FOUND for an unknown one). INVALID_ARGUMENT naming the field at
// fault (ParamOf) for anything Tandem cannot honour: an unknown field, n > 1, a non-data image URL,
// a sampling field it does not implement set to other than its neutral value, and a body that
// nests deeper than `max_json_depth` (checked before it is parsed; the error names the path).
absl::StatusOr<ChatRequest> DecodeChatRequest(absl::string_view body,
                                              int max_json_depth = kDefaultMaxJsonDepth);

}  // namespace tandem::gateway::openai
