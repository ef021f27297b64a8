#include "workers/tokenizer/tool_prompt.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"

namespace tandem::workers {
namespace {

using json = nlohmann::ordered_json;

// The worker's validation bounds the depth (--max_json_depth); the ceiling keeps the printers
// below, which recurse once per level, bounded even for a caller that skipped it.
json ParseObject(const std::string& text) {
  if (text.empty() || JsonNestingDepth(text) > kMaxJsonDepthCeiling) return json::object();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json::object() : j;
}

std::string PythonRepr(const json& v) {
  if (v.is_string()) {
    std::string out = "'";
    for (const char c : v.get_ref<const std::string&>()) {
      if (c == '\'' || c == '\\') out.push_back('\\');
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out.push_back(c);
    }
    return out + "'";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", PythonRepr(v[i]));
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      absl::StrAppend(&out, first ? "" : ", ", PythonRepr(json(k)), ": ", PythonRepr(x));
      first = false;
    }
    return out + "}";
  }
  return PythonStr(v);
}

// A schema key the Nemotron template has no element for: "\n<KEY>VALUE</KEY>".
void AppendExtraKey(const std::string& key, const json& value, std::string* out) {
  absl::StrAppend(out, "\n<", key, ">", TemplateArgument(value), "</", key, ">");
}

std::string NemotronParameters(const json& params) {
  std::string out = "\n<parameters>";
  if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
    for (const auto& [name, fields] : params["properties"].items()) {
      absl::StrAppend(&out, "\n<parameter>\n<name>", name, "</name>");
      if (fields.is_object()) {
        if (fields.contains("type")) {
          absl::StrAppend(&out, "\n<type>", PythonStr(fields["type"]), "</type>");
        }
        if (fields.contains("description")) {
          absl::StrAppend(&out, "\n<description>",
                          absl::StripAsciiWhitespace(PythonStr(fields["description"])),
                          "</description>");
        }
        if (fields.contains("enum")) {
          absl::StrAppend(&out, "\n<enum>", PythonJson(fields["enum"]), "</enum>");
        }
        for (const auto& [k, v] : fields.items()) {
          if (k != "name" && k != "type" && k != "description" && k != "enum") {
            AppendExtraKey(k, v, &out);
          }
        }
      }
      absl::StrAppend(&out, "\n</parameter>");
    }
  }
  if (params.is_object()) {
    for (const auto& [k, v] : params.items()) {
      if (k != "type" && k != "properties" && k != "required") AppendExtraKey(k, v, &out);
    }
    if (params.contains("required")) {
      absl::StrAppend(&out, "\n<required>", PythonJson(params["required"]), "</required>");
    }
  }
  absl::StrAppend(&out, "\n</parameters>");
  return out;
}

constexpr absl::string_view kToolsHeader =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";

}  // namespace

const absl::string_view kToolCallInstructions =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
    "</function> block must be nested within <tool_call></tool_call> XML tags\n- Required "
    "parameters MUST be specified\n- You may provide optional reasoning for your function call "
    "in natural language BEFORE the function call, but NOT after\n- If there is no function call "
    "available, answer the question like normal with your current knowledge and do not tell the "
    "user about function calls\n</IMPORTANT>";

std::string PythonJson(const json& v) {
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", PythonJson(v[i]));
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      absl::StrAppend(&out, first ? "" : ", ", json(k).dump(-1, ' ', false), ": ", PythonJson(x));
      first = false;
    }
    return out + "}";
  }
  return v.dump(-1, ' ', false);
}

std::string PythonStr(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_array() || v.is_object()) return PythonRepr(v);
  return v.dump();
}

std::string TemplateArgument(const json& v) {
  return v.is_object() || v.is_array() ? PythonJson(v) : PythonStr(v);
}

ToolPromptPieces QwenToolsBlock(const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools) {
  ToolPromptPieces out = {{std::string(kToolsHeader), true}};
  for (const tandem::v1::Tool& t : tools) {
    json function = json::object();
    function["name"] = t.name();
    if (t.has_description()) function["description"] = t.description();
    if (!t.parameters_json().empty()) function["parameters"] = ParseObject(t.parameters_json());
    json tool = json::object();
    tool["type"] = "function";
    tool["function"] = std::move(function);
    out.push_back({absl::StrCat("\n", PythonJson(tool)), false});
  }
  out.push_back({"\n</tools>", true});
  return out;
}

ToolPromptPieces NemotronToolsBlock(
    const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools) {
  ToolPromptPieces out = {{std::string(kToolsHeader), true}};
  for (const tandem::v1::Tool& t : tools) {
    std::string xml = absl::StrCat("\n<function>\n<name>", t.name(), "</name>");
    if (t.has_description()) {
      absl::StrAppend(&xml, "\n<description>", absl::StripAsciiWhitespace(t.description()),
                      "</description>");
    }
    absl::StrAppend(&xml, NemotronParameters(ParseObject(t.parameters_json())), "\n</function>");
    out.push_back({std::move(xml), false});
  }
  out.push_back({"\n</tools>", true});
  return out;
}

ToolPromptPieces ToolCallXml(const tandem::v1::ToolCall& call) {
  // The name is checked ([A-Za-z0-9_.-]); parameter names and values are the caller's.
  ToolPromptPieces out = {{absl::StrCat("<tool_call>\n<function=", call.name(), ">\n"), true}};
  const json args = ParseObject(call.arguments_json());
  for (const auto& [k, v] : args.items()) {
    out.push_back({"<parameter=", true});
    out.push_back({absl::StrCat(k, ">\n", TemplateArgument(v)), false});
    out.push_back({"\n</parameter>\n", true});
  }
  out.push_back({"</function>\n</tool_call>", true});
  return out;
}

}  // namespace tandem::workers
