#include "gateway/intake.h"

#include <chrono>
#include <memory>
#include <string>

#include "gateway/router_holder.h"
#include "gateway/worker_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/builtin_router.h"
#include "tests/support/fake_worker_client.h"
#include "tests/support/golden_files.h"
#include "tests/support/requests.h"
#include "workers/vision/image_decoder.h"

namespace tandem::gateway {
namespace {

using ::tandem::testing::Prompt;
using tandem::v1::WorkerInfo;
using ::testing::HasSubstr;

constexpr auto kNoDeadline = std::chrono::system_clock::time_point::max();

// Two models, one ready worker each (their GetInfo says max_output_tokens 123), routed by the
// built-in rules.
class IntakeTest : public ::testing::Test {
 protected:
  IntakeTest() : pools_(WorkerPoolsOptions{}, [] {}), router_(Router()) {
    for (const std::string model : {"qwen", "nemotron"}) {
      pools_.AddEndpoint(model,
                         std::make_unique<FakeWorkerClient>(model + ":1", grpc::Status::OK,
                                                            Info(model, WorkerInfo::STATE_READY)));
      for (const auto& e : *pools_.Find(model)->endpoints()) e->Probe(absl::Seconds(1), [] {});
    }
  }

  static std::shared_ptr<router::BuiltinRouter> Router() {
    return std::make_shared<router::BuiltinRouter>(router::BuiltinRouterConfig{});
  }

  Intake MakeIntake(IntakeOptions options = {}) { return Intake(&router_, &pools_, options); }

  WorkerPools pools_;
  RouterHolder router_;
};

TEST_F(IntakeTest, DecideRoutesWithoutChoosingAWorker) {
  tandem::v1::GenerateRequest request = Prompt("hello");
  request.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  Admission a;
  ASSERT_TRUE(MakeIntake().Decide(request, "", kNoDeadline, &a).ok());
  EXPECT_EQ(a.decision.model, "nemotron");
  EXPECT_EQ(a.pool, pools_.Find("nemotron"));
  EXPECT_EQ(a.endpoint, nullptr);
  EXPECT_FALSE(a.request_id.empty());
  EXPECT_EQ(a.worker_request.messages_size(), 0);
}

TEST_F(IntakeTest, AdmitPicksAWorkerAndCapsTheDefaultMaxTokensAtTheModels) {
  tandem::v1::GenerateRequest request = Prompt("hello");
  request.mutable_sampling()->clear_max_tokens();
  request.set_request_id("caller-id");
  IntakeOptions options;
  options.default_max_tokens = 1000;  // the fake workers report 123
  Admission a;
  ASSERT_TRUE(MakeIntake(options).Admit(request, "", kNoDeadline, &a).ok());
  ASSERT_NE(a.endpoint, nullptr);
  EXPECT_EQ(a.endpoint->address(), a.decision.model + ":1");
  EXPECT_EQ(a.request_id, "caller-id");
  EXPECT_EQ(a.worker_request.request_id(), "caller-id");
  EXPECT_EQ(a.worker_request.sampling().max_tokens(), 123);
  EXPECT_EQ(a.worker_request.messages_size(), 1);
}

TEST_F(IntakeTest, TheMetadataRequestIdNamesARequestWithoutOne) {
  Admission a;
  ASSERT_TRUE(MakeIntake().Decide(Prompt("hi"), "from-metadata", kNoDeadline, &a).ok());
  EXPECT_EQ(a.request_id, "from-metadata");
}

TEST_F(IntakeTest, EachGatewayLimitIsInvalidArgumentNamingItsFlag) {
  IntakeOptions options;
  options.max_request_bytes = 1024;
  options.max_tokens_limit = 10;
  options.max_prompt_tokens = 50;
  const Intake intake = MakeIntake(options);
  Admission a;
  absl::Status s = intake.Decide(Prompt(std::string(2000, 'x'), 5), "", kNoDeadline, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_request_bytes"));
  s = intake.Decide(Prompt("hi", 11), "", kNoDeadline, &a);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_tokens_limit"));
  std::string words;
  for (int i = 0; i < 150; ++i) words += "word ";  // well over 50 tokens, under 1024 bytes
  s = intake.Decide(Prompt(words, 5), "", kNoDeadline, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_prompt_tokens"));
}

TEST_F(IntakeTest, MaxTokensOverTheModelsLimitIsRefusedOnceTheModelIsKnown) {
  Admission a;
  const absl::Status s = MakeIntake().Decide(Prompt("hi", 124), "", kNoDeadline, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("exceeds the limit of model"));
}

TEST_F(IntakeTest, AnInvalidRequestIdIsReplacedAndRefused) {
  tandem::v1::GenerateRequest request = Prompt("hi");
  request.set_request_id("bad\nid");
  Admission a;
  const absl::Status s = MakeIntake().Decide(request, "", kNoDeadline, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.request_id, "bad\nid");
  EXPECT_FALSE(a.request_id.empty());
}

TEST_F(IntakeTest, ATenantIsBoundToItsModelsAndNamedByAuthenticationNotLabels) {
  auto tenant = std::make_shared<policies::TenantSpec>();
  tenant->name = "team-a";
  tenant->models = {"nemotron"};
  tandem::v1::GenerateRequest request = Prompt("hi");
  (*request.mutable_labels())["tenant"] = "someone-else";
  request.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_ACCURACY);  // qwen
  Admission a;
  const absl::Status s = MakeIntake().Decide(request, "", kNoDeadline, &a, tenant);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tenant 'team-a' may not use model 'qwen'"));
  EXPECT_EQ(a.features.tenant, "team-a");
}

// A user prompt "hi" with one PNG image of `data`.
tandem::v1::GenerateRequest WithImage(std::string data) {
  tandem::v1::GenerateRequest request = Prompt("hi");
  tandem::v1::Image* image = request.mutable_messages(0)->add_content()->mutable_image();
  image->set_data(std::move(data));
  image->set_mime_type("image/png");
  return request;
}

// An image costs the vision model its grid's tokens: routing thresholds, --max_prompt_tokens and
// tenants' token buckets see them in prompt_tokens.
TEST_F(IntakeTest, AnImageAddsItsGridsTokensToThePrompt) {
  const std::string png =
      testing::ReadFileText(TANDEM_SOURCE_DIR "/tests/golden/qwen3_5_moe_vl/a_wide_352x192.png");
  ASSERT_FALSE(png.empty());
  if (workers::vision::ProbeImageSize(png, "image/png").status().code() ==
      absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "vision::ProbeImageSize is not implemented yet";
  }
  Admission a;
  ASSERT_TRUE(MakeIntake().Decide(WithImage(png), "", kNoDeadline, &a).ok());
  EXPECT_EQ(a.decision.model, "qwen");
  // 192 x 352 needs no resize: 6 x 11 tokens, plus vision_start and vision_end.
  EXPECT_EQ(a.features.image_tokens, 66 + 2);
  EXPECT_EQ(a.features.prompt_tokens, router::kPerMessageTemplateTokens + 1 + 68);
}

// A header that cannot be read (the worker refuses the image itself) counts the fixed estimate.
TEST_F(IntakeTest, AnUnreadableImageCountsTheFixedEstimate) {
  Admission a;
  ASSERT_TRUE(MakeIntake().Decide(WithImage("not a png"), "", kNoDeadline, &a).ok());
  EXPECT_EQ(a.features.image_count, 1);
  EXPECT_EQ(a.features.image_tokens, router::kUnknownImageTokens);
  EXPECT_EQ(a.features.prompt_tokens,
            router::kPerMessageTemplateTokens + 1 + router::kUnknownImageTokens);
  // It counts against --max_prompt_tokens like text.
  IntakeOptions options;
  options.max_prompt_tokens = 1000;
  const absl::Status s = MakeIntake(options).Decide(WithImage("not a png"), "", kNoDeadline, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("about 1032 prompt tokens"));
}

TEST_F(IntakeTest, PickTargetSkipsExcludedWorkersAndSaysWhenNoneIsLeft) {
  // A second qwen worker: the first excluded, the second is picked; both excluded, the built-in
  // rules have no fallback model, so nothing is left.
  pools_.AddEndpoint("qwen",
                     std::make_unique<FakeWorkerClient>("qwen:2", grpc::Status::OK,
                                                        Info("qwen", WorkerInfo::STATE_READY)));
  for (const auto& e : *pools_.Find("qwen")->endpoints()) e->Probe(absl::Seconds(1), [] {});
  tandem::v1::GenerateRequest request = Prompt("hi");
  request.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_ACCURACY);
  const Intake intake = MakeIntake();
  Admission a;
  ASSERT_TRUE(intake.Admit(request, "", kNoDeadline, &a).ok());
  const Endpoint* first = a.endpoint.get();
  absl::StatusOr<Target> other = intake.PickTarget(a, {first});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->endpoint.get(), first);
  EXPECT_EQ(other->pool, a.pool);
  EXPECT_EQ(other->max_output_tokens, 123);
  const absl::StatusOr<Target> none = intake.PickTarget(a, {first, other->endpoint.get()});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tandem::gateway
