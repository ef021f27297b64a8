#include "gateway/http_front/openai_codec.h"

#include <string>

#include "gateway/http_front/openai_request.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::gateway::openai {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

absl::StatusOr<ChatRequest> Decode(const json& body) { return DecodeChatRequest(body.dump()); }

json Body(json extra = json::object()) {
  json b = {{"model", "auto"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  b.update(extra);
  return b;
}

TEST(OpenAiCodecTest, ErrorsNameTheFieldsTheCallerSent) {
  const absl::Status image =
      ForOpenAi(absl::InvalidArgumentError("messages[0].content[1].image.mime_type: unsupported"));
  EXPECT_EQ(image.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(image.message(), "messages[0].content[1].image_url.url: unsupported");
  EXPECT_EQ(ForOpenAi(absl::InvalidArgumentError("messages[1].tool_calls[0].arguments_json: deep"))
                .message(),
            "messages[1].tool_calls[0].function.arguments: deep");
  EXPECT_EQ(ForOpenAi(absl::InvalidArgumentError("messages[0].content[0].text: empty")).message(),
            "messages[0].content[0].text: empty");
  EXPECT_EQ(ForOpenAi(absl::UnavailableError("no worker: retry")).message(), "no worker: retry");
}

TEST(OpenAiCodecTest, DeepBodiesAreRefusedBeforeTheyAreParsed) {
  std::string deep;
  for (int i = 0; i < 150000; ++i) deep += R"({"a":)";
  deep += "1";
  deep.append(150000, '}');
  const std::string bodies[] = {
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":)"
      R"({"name":"f","parameters":{"type":"object","properties":{"p":)" +
          deep + "}}}}]}",
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","x":)" +
          std::string(60000, '[') + std::string(60000, ']') + R"(,"function":{"name":"f"}}]})",
      R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":)"
      R"({"name":"f","arguments":)" +
          deep + "}}]}]}"};
  const char* paths[] = {"tools[0].function.parameters.properties.p.a.a...", "tools[0].x[0][0]",
                         "messages[0].tool_calls[0].function.arguments.a.a"};
  for (int i = 0; i < 3; ++i) {
    auto r = DecodeChatRequest(bodies[i], 64);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("deeper than 64 levels")) << i;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(paths[i])) << r.status();
    EXPECT_FALSE(ParamOf(r.status()).empty()) << r.status();
  }
}

TEST(OpenAiCodecTest, DecodesMessagesSamplingAndOptions) {
  auto r = Decode(Body({{"model", "qwen"},
                        {"messages",
                         {{{"role", "developer"}, {"content", "be brief"}},
                          {{"role", "user"},
                           {"content",
                            {{{"type", "text"}, {"text", "what is this?"}},
                             {{"type", "image_url"},
                              {"image_url", {{"url", "data:image/png;base64,aGVsbG8="}}}}}}}}},
                        {"max_tokens", 10},
                        {"max_completion_tokens", 20},
                        {"temperature", 0.5},
                        {"top_p", 0.9},
                        {"seed", 7},
                        {"stop", "END"},
                        {"n", 1},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}},
                        {"reasoning_effort", "low"},
                        {"user", "u-1"},
                        {"frequency_penalty", 0},
                        {"metadata", {{"k", "v"}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& g = r->request;
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(g.hints().model(), "qwen");
  ASSERT_EQ(g.messages_size(), 2);
  EXPECT_EQ(g.messages(0).role(), "system");
  EXPECT_EQ(g.messages(1).content(1).image().mime_type(), "image/png");
  EXPECT_EQ(g.messages(1).content(1).image().data(), "hello");
  EXPECT_EQ(g.sampling().max_tokens(), 20);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_EQ(g.sampling().seed(), 7u);
  EXPECT_EQ(g.sampling().stop(0), "END");
  EXPECT_EQ(g.hints().reasoning().mode(), tandem::v1::REASONING_MODE_ON);
  EXPECT_EQ(g.hints().reasoning().thinking_budget_tokens(), 1024);
  EXPECT_EQ(g.labels().at("user"), "u-1");
}

TEST(OpenAiCodecTest, AutoAndAbsentModelLeaveTheRouterFree) {
  for (const json& b : {Body(), Body({{"model", ""}})}) {
    auto r = Decode(b);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->request.hints().model(), "");
  }
  json no_model = Body();
  no_model.erase("model");
  EXPECT_TRUE(Decode(no_model).ok());
}

TEST(OpenAiCodecTest, AnUnknownKeyIsNamedInOneShortPrintableLine) {
  // Found by the json_consumers fuzzer: a DEL byte and UTF-8 in a key went into the message.
  for (const std::string& key : {std::string("m\x7f"
                                             "del"),
                                 std::string("t\xc3\xa9"), std::string(100000, 'k')}) {
    auto r = Decode(Body({{key, 1}}));
    ASSERT_FALSE(r.ok());
    EXPECT_LT(r.status().message().size(), 200u);
    for (const unsigned char c : r.status().message()) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
    }
  }
  EXPECT_THAT(ParamOf(Decode(Body({{"m\x7f"
                                    "del",
                                    1}}))
                          .status()),
              HasSubstr("m\\x7f"));
}

TEST(OpenAiCodecTest, RefusalsNameTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {Body({{"n", 2}}), "n"},
      {Body({{"frobnicate", 1}}), "frobnicate"},
      {Body({{"max_tokens", 0}}), "max_tokens"},
      {Body({{"seed", -1}}), "seed"},
      {Body({{"stream", "yes"}}), "stream"},
      {Body({{"logprobs", true}}), "logprobs"},
      {Body({{"presence_penalty", 1.5}}), "presence_penalty"},
      {Body({{"tools", {{{"type", "function"}}}}}), "tools[0].function.name"},
      {Body({{"tool_choice", "required"}}), "tool_choice"},
      {Body({{"functions", json::array()}}), "functions"},
      {Body({{"reasoning_effort", "extreme"}}), "reasoning_effort"},
      {Body({{"messages", json::array()}}), "messages"},
      {Body({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), "messages[0].role"},
      {Body({{"messages", {{{"role", "user"}, {"content", 5}}}}}), "messages[0].content"},
      {Body({{"messages",
              {{{"role", "user"},
                {"content",
                 {{{"type", "image_url"}, {"image_url", {{"url", "http://x/y.png"}}}}}}}}}}),
       "messages[0].content[0].image_url.url"},
  };
  for (const auto& [body, param] : cases) {
    auto r = Decode(body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body.dump();
    EXPECT_EQ(ParamOf(r.status()), param) << r.status();
    const json error = json::parse(ErrorJson(r.status()))["error"];
    EXPECT_EQ(error["param"], param);
    EXPECT_EQ(error["type"], "invalid_request_error");
  }
}

TEST(OpenAiCodecTest, DecodesToolsCallsAndResults) {
  auto r = Decode(Body(
      {{"tools",
        {{{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Weather"},
            {"parameters", {{"type", "object"}, {"properties", {{"z", 1}, {"a", 2}}}}}}}}}},
       {"tool_choice", "auto"},
       {"messages",
        {{{"role", "user"}, {"content", "weather?"}},
         {{"role", "assistant"},
          {"content", nullptr},
          {"tool_calls",
           {{{"id", "call_1"},
             {"type", "function"},
             {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}}}}},
         {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "-3C"}}}}}));
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& g = r->request;
  ASSERT_EQ(g.tools_size(), 1);
  EXPECT_EQ(g.tools(0).name(), "get_weather");
  // The schema keeps the caller's key order (the templates print it so).
  auto ordered = DecodeChatRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",)"
      R"( "function": {"name": "f", "parameters": {"type": "object", "properties": {"z": {},)"
      R"( "a": {}}}}}]})");
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  EXPECT_EQ(ordered->request.tools(0).parameters_json(),
            R"({"type":"object","properties":{"z":{},"a":{}}})");
  ASSERT_EQ(g.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(g.messages(1).content_size(), 0);
  EXPECT_EQ(g.messages(1).tool_calls(0).id(), "call_1");
  EXPECT_EQ(g.messages(1).tool_calls(0).arguments_json(), "{\"city\": \"Oslo\"}");
  EXPECT_EQ(g.messages(2).tool_call_id(), "call_1");

  json none = Body({{"tool_choice", "none"},
                    {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}});
  auto n = Decode(none);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->request.tools_size(), 0);  // not offered
}

TEST(OpenAiCodecTest, ToolCallsInAnswers) {
  const AnswerMeta meta{.id = "chatcmpl-r1", .created = 1, .model = "qwen"};
  tandem::v1::ToolCall call;
  call.set_id("call_r1_0");
  call.set_name("get_weather");
  call.set_arguments_json(R"({"city":"Oslo"})");
  const json whole =
      json::parse(CompletionJson(meta, "", "", {call}, tandem::v1::FINISH_REASON_TOOL_CALLS, {}));
  const json& message = whole["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"][0]["id"], "call_r1_0");
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");

  std::string event;
  AppendChunkEvent(meta, false, "", "", {call}, 2, tandem::v1::FINISH_REASON_UNSPECIFIED, &event);
  const json delta = json::parse(event.substr(6))["choices"][0]["delta"];
  EXPECT_EQ(delta["tool_calls"][0]["index"], 2);
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_FALSE(delta.contains("content"));
}

TEST(OpenAiCodecTest, NotJsonSaysWhere) {
  auto r = DecodeChatRequest("{\"messages\": [");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("stops being JSON at byte 1"));
  // The parser library's own wording stays out of answers.
  EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("json.exception")));
  EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("parse_error")));
  EXPECT_FALSE(DecodeChatRequest("[1, 2]").ok());
  EXPECT_FALSE(DecodeChatRequest(R"({"messages": []} trailing)").ok());
}

TEST(OpenAiCodecTest, DuplicateKeysAreRefusedNamingWhere) {
  struct Case {
    std::string body;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"({"model": "qwen", "messages": [{"role": "user", "content": "x"}], "model": "nemotron"})",
       R"(the request body: the key "model" is given twice)"},
      {R"({"messages": [{"role": "user", "content": "x", "role": "system"}]})",
       R"(messages[0]: the key "role" is given twice)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",)"
       R"( "function": {"name": "f", "parameters": {"properties": {"a": 1, "a": 2}}}}]})",
       R"(tools[0].function.parameters.properties: the key "a" is given twice)"},
      {"{\"messages\": [], \"a b\": {\"x\": 1, \"x\": 1}}", R"(["a b"]: the key "x")"},
  };
  for (const Case& c : cases) {
    auto r = DecodeChatRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message));
  }
  // The same key in sibling objects is fine.
  EXPECT_TRUE(
      DecodeChatRequest(
          R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})")
          .ok());
}

TEST(OpenAiCodecTest, OpenAisOwnRulesForStreamOptionsLimitsAndToolMessages) {
  auto options = Decode(Body({{"stream_options", {{"include_usage", true}}}}));
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(ParamOf(options.status()), "stream_options");
  EXPECT_TRUE(Decode(Body({{"stream", true}, {"stream_options", {{"include_usage", true}}}})).ok());
  EXPECT_TRUE(Decode(Body({{"stream_options", nullptr}})).ok());

  auto huge = Decode(Body({{"max_tokens", int64_t{1} << 31}}));
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("from 1 to 2147483647"));

  const json assistant = {{"role", "assistant"},
                          {"tool_calls",
                           {{{"id", "call_1"},
                             {"type", "function"},
                             {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}};
  const json user = {{"role", "user"}, {"content", "x"}};
  auto unmatched = Decode(Body(
      {{"messages",
        {user, assistant, {{"role", "tool"}, {"tool_call_id", "call_9"}, {"content", "r"}}}}}));
  ASSERT_FALSE(unmatched.ok());
  EXPECT_EQ(ParamOf(unmatched.status()), "messages[2].tool_call_id");
  EXPECT_THAT(std::string(unmatched.status().message()), HasSubstr("matches no tool call"));
  auto missing =
      Decode(Body({{"messages", {user, assistant, {{"role", "tool"}, {"content", "r"}}}}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("required"));
  // A call answered before it was made matches nothing either.
  auto early = Decode(Body(
      {{"messages",
        {user, {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "r"}}, assistant}}}));
  EXPECT_FALSE(early.ok());
  EXPECT_TRUE(Decode(Body({{"messages",
                            {user,
                             assistant,
                             {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "r"}}}}}))
                  .ok());
}

TEST(OpenAiCodecTest, AnUnknownPathIsNotAnUnknownModel) {
  const json model = json::parse(ErrorJson(absl::NotFoundError("model 'x' is not served")));
  EXPECT_EQ(model["error"]["code"], "model_not_found");
  const json path =
      json::parse(ErrorJson(absl::NotFoundError("no such endpoint"), ErrorCode::kNone));
  EXPECT_TRUE(path["error"]["code"].is_null());
  EXPECT_EQ(path["error"]["type"], "invalid_request_error");
}

TEST(OpenAiCodecTest, IntakeMessagesMapToOpenAiParams) {
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("sampling.temperature: must be in [0, 2]")),
            "temperature");
  EXPECT_EQ(ParamOf(absl::NotFoundError("hints.model: unknown model 'x'")), "model");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("messages[0].content[0].text: empty")),
            "messages[0].content[0].text");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("messages[2].content[1].image.mime_type: bad")),
            "messages[2].content[1].image_url.url");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("messages[1].tool_calls[0].arguments_json: x")),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("tools[3].parameters_json: x")),
            "tools[3].function.parameters");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("tools[3].name: x")), "tools[3].function.name");
  EXPECT_EQ(ParamOf(absl::UnavailableError("model 'qwen' has no usable worker; retry later")), "");
}

TEST(OpenAiCodecTest, StatusesMapToHttp) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
}

TEST(OpenAiCodecTest, AnswersAreOpenAiJson) {
  const AnswerMeta meta{.id = "chatcmpl-r1", .created = 1700000000, .model = "qwen"};
  tandem::v1::Usage usage;
  usage.set_prompt_tokens(3);
  usage.set_completion_tokens(2);
  usage.set_total_tokens(5);
  const json whole = json::parse(
      CompletionJson(meta, "hmm", "say \"hi\"\n", {}, tandem::v1::FINISH_REASON_STOP, usage));
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "say \"hi\"\n");
  EXPECT_EQ(whole["choices"][0]["message"]["reasoning_content"], "hmm");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"]["total_tokens"], 5);

  std::string events;
  AppendChunkEvent(meta, true, "", "a", {}, 0, tandem::v1::FINISH_REASON_UNSPECIFIED, &events);
  AppendChunkEvent(meta, false, "", "", {}, 0, tandem::v1::FINISH_REASON_LENGTH, &events);
  AppendUsageEvent(meta, usage, &events);
  AppendDoneEvent(&events);
  std::vector<std::string> lines;
  for (size_t at = 0; at < events.size();) {
    const size_t end = events.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    lines.push_back(events.substr(at, end - at));
    at = end + 2;
  }
  ASSERT_EQ(lines.size(), 4u);
  const json first = json::parse(lines[0].substr(6));
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "a");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(json::parse(lines[1].substr(6))["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(json::parse(lines[2].substr(6))["choices"].empty());
  EXPECT_EQ(lines[3], "data: [DONE]");
}

TEST(OpenAiCodecTest, ModelList) {
  tandem::v1::ModelStatus qwen;
  qwen.set_name("qwen");
  qwen.set_model_id("Qwen/Qwen3.5-35B-A3B");
  const json list = json::parse(ModelListJson({qwen}, 1));
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][0]["id"], "qwen");
  EXPECT_EQ(list["data"][0]["root"], "Qwen/Qwen3.5-35B-A3B");
  EXPECT_EQ(list["data"][1]["id"], "auto");
}

}  // namespace
}  // namespace tandem::gateway::openai
