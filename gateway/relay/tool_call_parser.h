#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/common.pb.h"

namespace tandem::gateway {

// Finds the tool calls in a model's answer as it streams. Both shipped models call tools in the
// same XML form (their chat templates' instructions):
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
// Text outside calls passes through (a possible start of "<tool_call>" at a piece's end is held
// back until the next piece says); a call is returned whole once its closing tag came, with its
// arguments as a JSON object typed by the tool's parameter schema (integer, number, boolean,
// object and array values parsed; strings, and anything that does not parse, kept as strings).
// A call that does not parse, names an undeclared tool or never closes is given back as text.
class ToolCallParser {
 public:
  // `tools`: the request's (their schemas type the arguments). Calls get the ids
  // "call_" + id_stem + "_" + index.
  ToolCallParser(const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
                 std::string id_stem);

  // Appends to `text` what `piece` adds outside calls, and to `calls` the calls it completes.
  void Feed(absl::string_view piece, std::string* text, std::vector<tandem::v1::ToolCall>* calls);
  // The end of the answer, which the worker ended with `worker_reason`: appends what is still
  // held to `text` and returns the answer's finish reason: TOOL_CALLS when calls were made,
  // MALFORMED_TOOL_CALL when the model stopped with a call that did not parse or stayed open
  // (LENGTH stays LENGTH: the answer was cut off).
  tandem::v1::FinishReason Finish(tandem::v1::FinishReason worker_reason, std::string* text);

 private:
  // A complete "<tool_call>...</tool_call>": the call, or false when it does not parse.
  bool Parse(absl::string_view body, tandem::v1::ToolCall* call) const;
  nlohmann::ordered_json Typed(const std::string& tool, const std::string& param,
                               const std::string& value) const;

  nlohmann::json schemas_;  // tool name -> its parameters' "properties" object
  const std::string id_stem_;
  std::string pending_;  // held text: a possible tag start, or an open call
  bool in_call_ = false;
  bool malformed_ = false;
  int calls_ = 0;
};

}  // namespace tandem::gateway
