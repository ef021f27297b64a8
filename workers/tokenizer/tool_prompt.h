#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/chat.pb.h"

// Tools in the prompt, as the released chat templates of Qwen3.5 and Nemotron-3-Nano write them
// (Hugging Face's Jinja with trim_blocks and lstrip_blocks, `tojson` as Python's json.dumps and
// `| string` as Python's str()). Both models call tools in the same XML form:
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
namespace tandem::workers {

// Prompt text in order, each piece marked as template markup (special tokens recognised) or as
// caller text (never read as special tokens: a tool description cannot forge a turn).
struct ToolPromptPiece {
  std::string text;
  bool markup;
};
using ToolPromptPieces = std::vector<ToolPromptPiece>;

// The instructions both templates put after the </tools> block.
extern const absl::string_view kToolCallInstructions;

// Python's json.dumps with its defaults: ", " and ": " separators, keys in the order given,
// non-ASCII kept.
std::string PythonJson(const nlohmann::ordered_json& value);
// Python's str() of a JSON value: strings as they are, True/False/None, numbers, and Python's
// repr for lists and dicts.
std::string PythonStr(const nlohmann::ordered_json& value);
// An argument value as both templates print it: objects and arrays as PythonJson, anything else
// as PythonStr.
std::string TemplateArgument(const nlohmann::ordered_json& value);

// Qwen3.5: each tool as {"type": "function", "function": {...}} in JSON, one a line, between
// "# Tools\n\nYou have access to the following functions:\n\n<tools>" and "\n</tools>".
ToolPromptPieces QwenToolsBlock(const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools);
// Nemotron-3-Nano: the same header, each tool in XML (<function>, <name>, <description>,
// <parameters>, <parameter>, <type>, <enum>, <required>, other schema keys by name).
ToolPromptPieces NemotronToolsBlock(
    const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools);

// One call in the XML form, without a trailing newline after </tool_call>.
ToolPromptPieces ToolCallXml(const tandem::v1::ToolCall& call);

}  // namespace tandem::workers
