#include "gateway/relay/tool_call_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::gateway {
namespace {

using tandem::v1::FinishReason;
using tandem::v1::ToolCall;

google::protobuf::RepeatedPtrField<tandem::v1::Tool> Tools() {
  google::protobuf::RepeatedPtrField<tandem::v1::Tool> tools;
  auto* weather = tools.Add();
  weather->set_name("get_weather");
  weather->set_parameters_json(
      R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type":
      "integer"}, "metric": {"type": "boolean"}, "threshold": {"type": "number"}, "hours":
      {"type": "array"}, "where": {"type": "object"}}, "required": ["city"]})");
  auto* search = tools.Add();
  search->set_name("search");
  search->set_parameters_json(R"({"type": "object", "properties": {"query": {"type": "string"}}})");
  return tools;
}

struct Parsed {
  std::string text;
  std::vector<ToolCall> calls;
  FinishReason finish;
};

// Feeds `output` in pieces of `step` bytes, as a stream would bring it.
Parsed Parse(const std::string& output, size_t step,
             FinishReason worker = tandem::v1::FINISH_REASON_STOP) {
  ToolCallParser p(Tools(), "r1");
  Parsed out;
  for (size_t i = 0; i < output.size(); i += step) {
    p.Feed(output.substr(i, step), &out.text, &out.calls);
  }
  out.finish = p.Finish(worker, &out.text);
  return out;
}

// The form both models write (their templates' instructions), as recorded from a session: a
// sentence, then two calls.
const std::string kTwoCalls =
    "I'll check the weather first.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
    "San Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n"
    "</parameter>\n<parameter=threshold>\n2.5\n</parameter>\n<parameter=hours>\n[9, 12]\n"
    "</parameter>\n<parameter=where>\n{\"lat\": 37.7}\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=search>\n<parameter=query>\nfog\nin <b>SF</b>\n</parameter>\n"
    "</function>\n</tool_call>";

TEST(ToolCallParserTest, ParsesCallsWithTypedArgumentsHoweverTheStreamIsCut) {
  for (size_t step = 1; step <= kTwoCalls.size(); step += (step < 40 ? 1 : 37)) {
    const Parsed p = Parse(kTwoCalls, step);
    ASSERT_EQ(p.calls.size(), 2u) << step;
    EXPECT_EQ(p.text, "I'll check the weather first.\n\n\n") << step;
    EXPECT_EQ(p.finish, tandem::v1::FINISH_REASON_TOOL_CALLS);
    EXPECT_EQ(p.calls[0].id(), "call_r1_0");
    EXPECT_EQ(p.calls[0].name(), "get_weather");
    const auto args = nlohmann::json::parse(p.calls[0].arguments_json());
    EXPECT_EQ(args["city"], "San Francisco");
    EXPECT_EQ(args["days"], 3);
    EXPECT_EQ(args["metric"], true);
    EXPECT_EQ(args["threshold"], 2.5);
    EXPECT_EQ(args["hours"], nlohmann::json::parse("[9, 12]"));
    EXPECT_EQ(args["where"]["lat"], 37.7);
    EXPECT_EQ(p.calls[1].id(), "call_r1_1");
    EXPECT_EQ(nlohmann::json::parse(p.calls[1].arguments_json())["query"], "fog\nin <b>SF</b>");
  }
}

TEST(ToolCallParserTest, KeepsArgumentOrderAndStringsThatDoNotParseAsTheirType) {
  const Parsed p = Parse(
      "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n"
      "<parameter=city>\nOslo\n</parameter>\n<parameter=extra>\n7\n</parameter>\n</function>\n"
      "</tool_call>",
      5);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments_json(), R"({"days":"three","city":"Oslo","extra":"7"})");
}

TEST(ToolCallParserTest, TextWithoutCallsPassesAsItIs) {
  const std::string text = "a < b and <tool is not a tag; </tool_call> neither";
  const Parsed p = Parse(text, 3);
  EXPECT_EQ(p.text, text);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.finish, tandem::v1::FINISH_REASON_STOP);
}

TEST(ToolCallParserTest, MalformedCallsComeBackAsTextWithTheirReason) {
  const std::vector<std::string> bad = {
      // never closed
      "Calling.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome",
      // a tool the request did not declare
      "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>",
      // no function element
      "<tool_call>\n{\"name\": \"search\"}\n</tool_call>",
      // a parameter that never closes
      "<tool_call>\n<function=search>\n<parameter=query>\nx\n</function>\n</tool_call>",
  };
  for (const std::string& output : bad) {
    const Parsed p = Parse(output, 4);
    EXPECT_TRUE(p.calls.empty()) << output;
    EXPECT_EQ(p.text, output);
    EXPECT_EQ(p.finish, tandem::v1::FINISH_REASON_MALFORMED_TOOL_CALL) << output;
  }
  // Cut off by max_tokens: the length is the reason.
  EXPECT_EQ(Parse(bad[0], 4, tandem::v1::FINISH_REASON_LENGTH).finish,
            tandem::v1::FINISH_REASON_LENGTH);
}

}  // namespace
}  // namespace tandem::gateway
