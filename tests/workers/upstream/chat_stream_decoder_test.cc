#include "workers/upstream/chat_stream_decoder.h"

#include "gtest/gtest.h"
#include "tests/workers/upstream/fixture.h"
#include "workers/upstream/engine_profile.h"
#include "workers/upstream/sse_parser.h"

namespace tandem::workers::upstream {
namespace {

struct Decoded {
  absl::Status status;
  std::string text;
  int32_t tokens = 0;
  ChatStreamDecoder::Piece last;
  tandem::v1::FinishReason reason = tandem::v1::FINISH_REASON_UNSPECIFIED;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

Decoded Decode(const std::string& profile_name, const std::string& sse, bool thinking) {
  auto profile = LoadEngineProfile(profile_name);
  EXPECT_TRUE(profile.ok()) << profile.status();
  ChatStreamDecoder d(*profile, thinking);
  SseParser parser(1 << 20);
  std::vector<SseParser::Event> events;
  Decoded out;
  out.status = parser.Feed(sse, &events);
  for (const auto& e : events) {
    if (!out.status.ok() || d.done()) break;
    ChatStreamDecoder::Piece p;
    out.status = d.Feed(e.data, &p);
    out.text += p.text;
    out.tokens += p.tokens;
  }
  if (out.status.ok()) {
    ChatStreamDecoder::Piece p;
    out.status = d.Finish(&p);
    out.text += p.text;
  }
  out.reason = d.finish_reason();
  out.prompt_tokens = d.prompt_tokens();
  out.completion_tokens = d.completion_tokens();
  return out;
}

TEST(ChatStreamDecoderTest, VllmReasoningBecomesTheThinkBlockOfANativeAnswer) {
  for (const char* file : {"vllm_chat.sse", "vllm_old_chat.sse"}) {
    Decoded d = Decode("vllm", Fixture(file), /*thinking=*/true);
    ASSERT_TRUE(d.status.ok()) << file << ": " << d.status;
    EXPECT_EQ(d.text, "The user greets me. Reply briefly.\n</think>\n\nHello there!") << file;
    EXPECT_EQ(d.reason, tandem::v1::FINISH_REASON_STOP);
    EXPECT_EQ(d.prompt_tokens, 14);
    EXPECT_EQ(d.completion_tokens, 12) << "usage wins over the chunks counted";
    EXPECT_EQ(d.tokens, 4);
  }
}

TEST(ChatStreamDecoderTest, StreamedToolCallsAreWrittenInTheModelsXmlOnceWhole) {
  Decoded d = Decode("vllm", Fixture("vllm_tool_calls.sse"), /*thinking=*/true);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.text,
            "Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
            "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "</function>\n</tool_call>");
  // The gateway's parser turns the XML into tool_calls and reports TOOL_CALLS.
  EXPECT_EQ(d.reason, tandem::v1::FINISH_REASON_STOP);
}

TEST(ChatStreamDecoderTest, SglangTrtllmAndLlamaServerStreamsDecode) {
  Decoded s = Decode("sglang", Fixture("sglang_chat.sse"), /*thinking=*/true);
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.text, "Short answer.\n</think>\n\nYes.");
  EXPECT_EQ(s.reason, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(s.completion_tokens, 4);

  Decoded t = Decode("trtllm", Fixture("trtllm_chat.sse"), /*thinking=*/false);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(t.text, "Four.");
  EXPECT_EQ(t.prompt_tokens, 7);

  Decoded l = Decode("llamacpp", Fixture("llamacpp_chat.sse"), /*thinking=*/true);
  ASSERT_TRUE(l.status.ok()) << l.status;
  EXPECT_EQ(l.completion_tokens, 3);
  EXPECT_EQ(l.reason, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(l.text.find("</think>"), std::string::npos) << "never closed: all reasoning";
}

TEST(ChatStreamDecoderTest, RawThinkingFromAnEngineWithoutAReasoningParserPassesThrough) {
  const std::string sse =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"<think>\\nhm\\n</think>\\n\\n"
      "ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
  Decoded d = Decode("openai", sse, /*thinking=*/true);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.text, "hm\n</think>\n\nok");
  EXPECT_EQ(d.completion_tokens, 1) << "no usage: the chunks counted";
}

TEST(ChatStreamDecoderTest, ContentWithoutReasoningClosesTheThinkBlockFirst) {
  const std::string sse =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"plain\"},"
      "\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
  EXPECT_EQ(Decode("vllm", sse, /*thinking=*/true).text, "</think>\n\nplain");
  EXPECT_EQ(Decode("vllm", sse, /*thinking=*/false).text, "plain");
}

TEST(ChatStreamDecoderTest, FieldsOfTheWrongTypeAreIgnoredNotFatal) {
  const std::string sse =
      "data: {\"choices\":[{\"index\":\"zero\",\"delta\":{\"content\":\"a\",\"tool_calls\":"
      "[{\"index\":null,\"function\":{\"name\":7}}]},\"finish_reason\":\"stop\"}],"
      "\"usage\":{\"prompt_tokens\":null,\"completion_tokens\":\"many\"}}\n\ndata: [DONE]\n\n";
  Decoded d = Decode("vllm", sse, /*thinking=*/false);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.prompt_tokens, 0);
  EXPECT_EQ(d.completion_tokens, 1);
}

TEST(ChatStreamDecoderTest, LiesAndCutsAreErrors) {
  // Garbage, an error object, a stream that ends before its finish reason.
  EXPECT_EQ(Decode("vllm", "data: not json\n\n", true).status.code(), absl::StatusCode::kInternal);
  Decoded e =
      Decode("vllm", "data: {\"error\":{\"message\":\"out of memory\",\"code\":500}}\n\n", true);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(e.status.message().find("out of memory"), absl::string_view::npos);
  const std::string vllm = Fixture("vllm_chat.sse");
  const std::string cut = vllm.substr(0, vllm.find("Hello"));
  EXPECT_EQ(Decode("vllm", cut, true).status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Decode("vllm", "data: {\"id\":\"x\"}\n\n", true).status.code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace tandem::workers::upstream
