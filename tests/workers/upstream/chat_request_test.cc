#include "workers/upstream/chat_request.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::workers::upstream {
namespace {

using nlohmann::json;

tandem::v1::WorkerGenerateRequest Request() {
  tandem::v1::WorkerGenerateRequest r;
  auto* s = r.add_messages();
  s->set_role("system");
  s->add_content()->set_text("Be brief.");
  auto* u = r.add_messages();
  u->set_role("user");
  u->add_content()->set_text("Weather ");
  u->add_content()->set_text("in Paris?");
  auto* a = r.add_messages();
  a->set_role("assistant");
  auto* call = a->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments_json(R"({"city":"Paris"})");
  auto* t = r.add_messages();
  t->set_role("tool");
  t->set_tool_call_id("call_1");
  t->add_content()->set_text("sunny");
  auto* tool = r.add_tools();
  tool->set_name("get_weather");
  tool->set_description("Weather by city.");
  tool->set_parameters_json(R"({"type":"object","properties":{"city":{"type":"string"}}})");
  r.mutable_sampling()->set_max_tokens(64);
  r.mutable_sampling()->set_temperature(0.5f);
  r.mutable_sampling()->set_top_k(20);
  r.mutable_sampling()->set_seed(7);
  r.mutable_sampling()->add_stop("END");
  return r;
}

json Build(const tandem::v1::WorkerGenerateRequest& r, const std::string& profile,
           bool vision = false) {
  auto p = LoadEngineProfile(profile);
  EXPECT_TRUE(p.ok()) << p.status();
  auto body = BuildChatRequest(r, *p, {"served/model", vision, true});
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? json::parse(*body) : json();
}

TEST(ChatRequestTest, EveryFieldMapsToTheOpenAiRequest) {
  json j = Build(Request(), "vllm");
  EXPECT_EQ(j["model"], "served/model");
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true) << "usage is always asked for";
  ASSERT_EQ(j["messages"].size(), 4u);
  EXPECT_EQ(j["messages"][1]["content"], "Weather in Paris?");
  EXPECT_EQ(j["messages"][2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["messages"][2]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(j["messages"][3]["tool_call_id"], "call_1");
  EXPECT_EQ(j["tools"][0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(j["max_tokens"], 64);
  EXPECT_FLOAT_EQ(j["temperature"].get<float>(), 0.5f);
  EXPECT_EQ(j["top_k"], 20);
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["stop"][0], "END");
  EXPECT_FALSE(j.contains("chat_template_kwargs")) << "the model's default thinking";
}

TEST(ChatRequestTest, ThinkingAndItsBudgetUseEachEnginesOwnControl) {
  auto r = Request();
  r.mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_ON);
  r.mutable_reasoning()->set_thinking_budget_tokens(512);
  json v = Build(r, "vllm");
  EXPECT_EQ(v["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(v["thinking_token_budget"], 512);
  json l = Build(r, "llamacpp");
  EXPECT_EQ(l["thinking_budget_tokens"], 512);
  json s = Build(r, "sglang");
  EXPECT_EQ(s["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(s["chat_template_kwargs"]["thinking_budget"], 512) << "merged, not replaced";

  r.mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
  json off = Build(r, "vllm");
  EXPECT_EQ(off["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_FALSE(off.contains("thinking_token_budget")) << "no budget without thinking";
}

TEST(ChatRequestTest, ContinuationUsesTheProfilesSwitch) {
  auto r = Request();
  auto* partial = r.add_messages();
  partial->set_role("assistant");
  partial->add_content()->set_text("It is sun");
  r.set_continue_final_message(true);
  json v = Build(r, "vllm");
  EXPECT_EQ(v["continue_final_message"], true);
  EXPECT_EQ(v["add_generation_prompt"], false);
  EXPECT_EQ(v["messages"].back()["content"], "It is sun");
}

TEST(ChatRequestTest, WhatAnEngineCannotDoIsRefusedNamingTheProfile) {
  auto r = Request();
  r.mutable_reasoning()->set_thinking_budget_tokens(100);
  auto trt = LoadEngineProfile("trtllm");
  ASSERT_TRUE(trt.ok());
  auto s = BuildChatRequest(r, *trt, {"m", false, true});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("'trtllm'"), absl::string_view::npos);

  auto openai = LoadEngineProfile("openai");
  ASSERT_TRUE(openai.ok());
  auto c = Request();
  c.set_continue_final_message(true);
  EXPECT_EQ(BuildChatRequest(c, *openai, {"m", false, true}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ChatRequestTest, ImagesGoAsDataUrisOnlyToAnEngineWithVision) {
  auto r = Request();
  auto* img = r.mutable_messages(1)->add_content()->mutable_image();
  img->set_data(std::string("\x89PNG", 4));
  img->set_mime_type("image/png");
  json j = Build(r, "vllm", /*vision=*/true);
  const json& parts = j["messages"][1]["content"];
  ASSERT_TRUE(parts.is_array());
  EXPECT_EQ(parts[2]["type"], "image_url");
  EXPECT_EQ(parts[2]["image_url"]["url"], "data:image/png;base64,iVBORw==");
  auto p = LoadEngineProfile("vllm");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(BuildChatRequest(r, *p, {"m", false, true}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::workers::upstream
