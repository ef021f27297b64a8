#include "common/request_validation.h"

#include "common/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage> OneMessage(const std::string& text) {
  google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage> m;
  auto* msg = m.Add();
  msg->set_role("user");
  msg->add_content()->set_text(text);
  return m;
}

TEST(ValidateMessagesTest, AcceptsAWellFormedChat) {
  auto m = OneMessage("hello");
  auto* a = m.Add();
  a->set_role("assistant");
  a->add_content()->set_text("hi");
  auto* img = m[0].add_content()->mutable_image();
  img->set_data("bytes");
  img->set_mime_type("image/jpeg");
  EXPECT_TRUE(ValidateMessages(m, {}).ok());
}

TEST(ValidateMessagesTest, NamesTheOffendingField) {
  RequestLimits limits;
  google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage> none;
  EXPECT_THAT(ValidateMessages(none, limits).message(), HasSubstr("messages: at least one"));

  auto role = OneMessage("x");
  role[0].set_role("wizard");
  EXPECT_THAT(ValidateMessages(role, limits).message(), HasSubstr("messages[0].role"));

  auto bad_role_bytes = OneMessage("x");
  bad_role_bytes[0].set_role("\xFF");
  EXPECT_THAT(ValidateMessages(bad_role_bytes, limits).message(),
              HasSubstr("unknown role \"\\xff\""));

  auto empty = OneMessage("ok");
  empty.Add()->set_role("user");
  EXPECT_THAT(ValidateMessages(empty, limits).message(), HasSubstr("messages[1].content"));

  auto unset_part = OneMessage("ok");
  unset_part[0].add_content();
  EXPECT_THAT(ValidateMessages(unset_part, limits).message(),
              HasSubstr("messages[0].content[1]: neither text nor image"));

  auto mime = OneMessage("ok");
  auto* img = mime[0].add_content()->mutable_image();
  img->set_data("x");
  img->set_mime_type("text/plain");
  EXPECT_THAT(ValidateMessages(mime, limits).message(), HasSubstr("image.mime_type"));
}

TEST(ValidateMessagesTest, ImageTypesComeFromTheSupportedList) {
  for (const char* ok :
       {"image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif", "IMAGE/PNG"}) {
    EXPECT_TRUE(IsSupportedImageMimeType(ok)) << ok;
  }
  for (const char* bad : {"image/../../etc/passwd", "image/", "image/png; x=1", "image/svg+xml",
                          "text/plain", "", "image/png\n", "image/\xff"}) {
    EXPECT_FALSE(IsSupportedImageMimeType(bad)) << bad;
    auto m = OneMessage("ok");
    auto* img = m[0].add_content()->mutable_image();
    img->set_data("x");
    img->set_mime_type(bad);
    const absl::Status s = ValidateMessages(m, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(IsValidUtf8(std::string(s.message()))) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  }
}

TEST(ValidateMessagesTest, CallerTextInErrorsIsEscapedAndBounded) {
  auto forged = OneMessage("x");
  forged[0].set_role("x\n[2026-01-01T00:00:00.000] [tandem-gateway] [info] forged");
  const absl::Status s = ValidateMessages(forged, {});
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("x\\n[2026"));

  auto huge = OneMessage("x");
  huge[0].set_role(std::string(4 << 20, 'r'));
  const absl::Status big = ValidateMessages(huge, {});
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(big.message().size(), 256u) << "the 4 MiB role is echoed whole";
  EXPECT_THAT(big.message(), HasSubstr("(4194304 bytes)"));
}

TEST(ValidateRequestIdTest, OnlyVisibleAsciiFitsMetadataAndLogs) {
  for (const char* ok : {"a", "req-123", "01J9Z3K5X7:trace/42@svc", "x=y+z_~"}) {
    EXPECT_TRUE(ValidateRequestId(ok).ok()) << ok;
  }
  EXPECT_TRUE(ValidateRequestId(std::string(kMaxRequestIdBytes, 'a')).ok());
  for (const std::string& bad :
       {std::string("caf\xc3\xa9-1"), std::string("tab\there"), std::string("new\nline"),
        std::string("sp ace"), std::string(""), std::string("nul\0x", 5), std::string("\x7f"),
        std::string(kMaxRequestIdBytes + 1, 'a')}) {
    const absl::Status s = ValidateRequestId(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("request_id"));
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
    EXPECT_TRUE(IsValidUtf8(std::string(s.message())));
  }
}

TEST(ValidateReasoningTest, ModeAndBudgetInRange) {
  tandem::v1::ReasoningOptions r;
  EXPECT_TRUE(ValidateReasoning(r, "hints.reasoning").ok());
  r.set_mode(tandem::v1::REASONING_MODE_ON);
  r.set_thinking_budget_tokens(512);
  EXPECT_TRUE(ValidateReasoning(r, "hints.reasoning").ok());
  r.set_thinking_budget_tokens(-1);
  EXPECT_THAT(ValidateReasoning(r, "hints.reasoning").message(),
              HasSubstr("hints.reasoning.thinking_budget_tokens: -1"));
  r.set_thinking_budget_tokens(0);
  r.set_mode(static_cast<tandem::v1::ReasoningMode>(7));
  EXPECT_THAT(ValidateReasoning(r, "hints.reasoning").message(),
              HasSubstr("hints.reasoning.mode: 7 is not a ReasoningMode"));
}

TEST(ValidateMessagesTest, EnforcesCountAndSizeLimits) {
  RequestLimits limits;
  limits.max_messages = 2;
  limits.max_images = 1;
  limits.max_image_bytes = 4;
  auto many = OneMessage("a");
  *many.Add() = many[0];
  *many.Add() = many[0];
  EXPECT_EQ(ValidateMessages(many, limits).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ValidateMessages(many, limits).message(), HasSubstr("3 messages; the limit is 2"));

  auto big = OneMessage("a");
  auto* img = big[0].add_content()->mutable_image();
  img->set_data("12345");
  img->set_mime_type("image/png");
  EXPECT_THAT(ValidateMessages(big, limits).message(), HasSubstr("5 bytes; the limit is 4"));

  auto two = OneMessage("a");
  for (int i = 0; i < 2; ++i) {
    auto* im = two[0].add_content()->mutable_image();
    im->set_data("1");
    im->set_mime_type("image/png");
  }
  EXPECT_THAT(ValidateMessages(two, limits).message(), HasSubstr("more than 1 images"));
}

std::string Nested(int levels) {
  std::string out = R"({"type":"object","properties":{"p":)";
  for (int i = 0; i < levels; ++i) out += R"({"a":)";
  out += "1";
  out.append(levels, '}');
  return out + "}}";
}

TEST(ValidateToolsTest, JsonNestingIsBoundedBeforeItIsParsed) {
  RequestLimits limits;
  limits.max_json_depth = 16;
  google::protobuf::RepeatedPtrField<tandem::v1::Tool> tools;
  auto* tool = tools.Add();
  tool->set_name("f");
  tool->set_parameters_json(Nested(14));  // 2 levels of schema around it: 16
  EXPECT_TRUE(ValidateTools(tools, limits).ok());
  tool->set_parameters_json(Nested(15));
  absl::Status s = ValidateTools(tools, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tools[0].parameters_json: JSON nested deeper than 16 levels "
                        "(--max_json_depth) at properties.p.a.a"));
  // A megabyte bomb is refused by the same scan, at the default limit.
  tool->set_parameters_json(Nested(170000));
  s = ValidateTools(tools, {});
  EXPECT_THAT(std::string(s.message()), HasSubstr("deeper than 64 levels"));
}

TEST(ValidateMessagesTest, ToolCallArgumentsNestingIsBounded) {
  google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage> m = OneMessage("hi");
  auto* assistant = m.Add();
  assistant->set_role("assistant");
  auto* call = assistant->add_tool_calls();
  call->set_name("f");
  call->set_arguments_json(R"({"x":[1,2]})");
  EXPECT_TRUE(ValidateMessages(m, {}).ok());
  call->set_arguments_json(Nested(200000));
  const absl::Status s = ValidateMessages(m, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("messages[1].tool_calls[0].arguments_json: JSON nested deeper than 64"));
  call->set_arguments_json("[1]");
  EXPECT_THAT(std::string(ValidateMessages(m, {}).message()), HasSubstr("not a JSON object"));
}

TEST(ValidateSamplingTest, ChecksRanges) {
  RequestLimits limits;
  tandem::v1::SamplingParams s;
  EXPECT_TRUE(ValidateSampling(s, 100, limits).ok());
  s.set_max_tokens(100);
  EXPECT_TRUE(ValidateSampling(s, 100, limits).ok());
  s.set_max_tokens(101);
  EXPECT_THAT(ValidateSampling(s, 100, limits).message(), HasSubstr("exceeds the model's limit"));
  EXPECT_TRUE(ValidateSampling(s, 0, limits).ok());  // limit unknown: not checked
  s.set_max_tokens(0);
  EXPECT_THAT(ValidateSampling(s, 100, limits).message(), HasSubstr("sampling.max_tokens"));

  tandem::v1::SamplingParams t;
  t.set_temperature(0);
  EXPECT_TRUE(ValidateSampling(t, 0, limits).ok());
  t.set_temperature(2.01f);
  EXPECT_THAT(ValidateSampling(t, 0, limits).message(), HasSubstr("sampling.temperature"));
  t.set_temperature(std::nanf(""));
  EXPECT_THAT(ValidateSampling(t, 0, limits).message(), HasSubstr("sampling.temperature"));

  tandem::v1::SamplingParams p;
  p.set_top_p(1);
  EXPECT_TRUE(ValidateSampling(p, 0, limits).ok());
  p.set_top_p(0);
  EXPECT_THAT(ValidateSampling(p, 0, limits).message(), HasSubstr("sampling.top_p"));

  tandem::v1::SamplingParams k;
  k.set_top_k(-1);
  EXPECT_THAT(ValidateSampling(k, 0, limits).message(), HasSubstr("sampling.top_k"));
}

TEST(ValidateSamplingTest, ChecksStopSequences) {
  RequestLimits limits;
  limits.max_stop_sequences = 2;
  limits.max_stop_sequence_bytes = 3;
  tandem::v1::SamplingParams s;
  s.add_stop("ab");
  EXPECT_TRUE(ValidateSampling(s, 0, limits).ok());
  s.add_stop("");
  EXPECT_THAT(ValidateSampling(s, 0, limits).message(), HasSubstr("sampling.stop[1]: empty"));
  s.set_stop(1, "abcd");
  EXPECT_THAT(ValidateSampling(s, 0, limits).message(), HasSubstr("4 bytes; the limit is 3"));
  s.set_stop(1, "x");
  s.add_stop("y");
  EXPECT_THAT(ValidateSampling(s, 0, limits).message(), HasSubstr("3 sequences"));
}

TEST(ValidateLabelsTest, LimitsAndFieldNames) {
  RequestLimits limits;
  limits.max_labels = 2;
  limits.max_label_bytes = 8;
  google::protobuf::Map<std::string, std::string> labels;
  labels["app"] = "web";
  EXPECT_TRUE(ValidateLabels(labels, limits).ok());
  labels["team"] = "x";
  labels["env"] = "y";
  EXPECT_THAT(ValidateLabels(labels, limits).message(), HasSubstr("3 labels; the limit is 2"));

  google::protobuf::Map<std::string, std::string> empty_key;
  empty_key[""] = "x";
  EXPECT_THAT(ValidateLabels(empty_key, limits).message(), HasSubstr("labels: empty key"));

  google::protobuf::Map<std::string, std::string> bad;
  bad["\xFFkey"] = "x";
  const absl::Status s = ValidateLabels(bad, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("labels[\"\\xffkey\"]: keys and values must be valid UTF-8"));

  // A long key: the field name shows at most 64 bytes of it, escaped, and says how long it was.
  google::protobuf::Map<std::string, std::string> long_key;
  std::string key = "k";
  for (int i = 0; i < 40; ++i) key += "\xC3\xA9";  // é
  long_key[key] = "v";
  limits.max_label_bytes = 1000;
  EXPECT_TRUE(ValidateLabels(long_key, limits).ok());
  limits.max_label_bytes = 16;
  const absl::Status long_status = ValidateLabels(long_key, limits);
  EXPECT_THAT(long_status.message(), HasSubstr("over 16 bytes (--max_label_bytes)"));
  EXPECT_TRUE(IsValidUtf8(std::string(long_status.message()))) << long_status.message();
  EXPECT_THAT(long_status.message(), HasSubstr("labels[\"k\\xc3\\xa9"));
  EXPECT_THAT(long_status.message(), HasSubstr("...\" (81 bytes)]"));
}

}  // namespace
}  // namespace tandem
