#include "gateway/intake/intake.h"

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gateway/intake/router_holder.h"
#include "gateway/pool/worker_pools.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/policy_loader.h"
#include "router/builtin_router.h"
#include "router/policy_router.h"
#include "tests/support/fake_worker_client.h"
#include "tests/support/golden_files.h"
#include "tests/support/requests.h"
#include "tests/support/test_paths.h"
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

// Rules with fallbacks: latency-critical turns to nemotron (then qwen, shadowed on qwen), pins
// with nemotron as their fallback, the rest to qwen alone.
std::shared_ptr<const router::Router> FallbackRouter() {
  std::vector<policies::PolicyError> errors;
  auto policy = policies::ParsePolicy(R"(schema: 1
version: fallbacks-1
models: {qwen: {vision: true}, nemotron: {}}
classes: [a]
default_class: a
rules:
  - name: pinned
    when: {hint.model: {present: true}}
    action: {route_to_pinned: true, fallback: [nemotron]}
  - name: latency
    when: {objective: latency}
    action: {route: nemotron, fallback: [qwen], shadow: qwen}
  - name: accuracy
    action: {route: qwen}
)",
                                      "fallbacks.yaml", &errors);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? std::make_shared<router::PolicyRouter>(*policy) : nullptr;
}

std::shared_ptr<const policies::TenantSpec> TenantWith(std::set<std::string> models) {
  auto tenant = std::make_shared<policies::TenantSpec>();
  tenant->name = "team-a";
  tenant->models = std::move(models);
  return tenant;
}

TEST_F(IntakeTest, ATenantsModelsFilterTheRulesCandidatesBeforeRefusing) {
  router_.Swap(FallbackRouter());
  const Intake intake = MakeIntake();
  tandem::v1::GenerateRequest latency = Prompt("hi");
  latency.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);

  // nemotron is not the tenant's: the rule's fallback qwen serves, and no shadow goes to a model
  // the tenant may not use (here qwen is its own, so the shadow would equal the model).
  Admission a;
  absl::Status s = intake.Admit(latency, "", kNoDeadline, &a, TenantWith({"qwen"}));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(a.decision.model, "qwen");
  EXPECT_EQ(a.pool, pools_.Find("qwen"));
  EXPECT_EQ(a.endpoint->address(), "qwen:1");
  EXPECT_TRUE(a.decision.fallback.empty()) << "qwen was the only candidate left";
  EXPECT_THAT(a.decision.reason,
              HasSubstr("tenant 'team-a' may not use 'nemotron': its fallback 'qwen'"));
  EXPECT_TRUE(a.fell_back_from.empty()) << "not a fallback for want of workers";

  // The shadow model is outside the tenant's models: dropped; nemotron stays the model.
  Admission b;
  ASSERT_TRUE(intake.Decide(latency, "", kNoDeadline, &b, TenantWith({"nemotron"})).ok());
  EXPECT_EQ(b.decision.model, "nemotron");
  EXPECT_TRUE(b.decision.shadow.empty());
  EXPECT_TRUE(b.decision.fallback.empty()) << "qwen is not the tenant's to fail over to";

  // A tenant with every model keeps the decision as the rule made it.
  Admission c;
  ASSERT_TRUE(intake.Decide(latency, "", kNoDeadline, &c, TenantWith({"qwen", "nemotron"})).ok());
  EXPECT_EQ(c.decision.model, "nemotron");
  EXPECT_EQ(c.decision.shadow, "qwen");
  EXPECT_EQ(c.decision.fallback, std::vector<std::string>{"qwen"});

  // None of the candidates is the tenant's: refused, naming all of them.
  auto other = TenantWith({"other"});
  s = intake.Decide(latency, "", kNoDeadline, &a, other);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "tenant 'team-a' may not use model 'nemotron' (chosen by rule 'latency') nor its "
            "fallback 'qwen'; its models: other");
  // A rule without fallbacks names its model alone.
  s = intake.Decide(Prompt("hi"), "", kNoDeadline, &a, TenantWith({"nemotron"}));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "tenant 'team-a' may not use model 'qwen' (chosen by rule 'accuracy'); its models: "
            "nemotron");
}

TEST_F(IntakeTest, APinnedModelTheTenantMayNotUseIsRefusedWhateverItsFallbacks) {
  router_.Swap(FallbackRouter());
  tandem::v1::GenerateRequest pinned = Prompt("hi");
  pinned.mutable_hints()->set_model("qwen");
  Admission a;
  const absl::Status s = MakeIntake().Decide(pinned, "", kNoDeadline, &a, TenantWith({"nemotron"}));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tenant 'team-a' may not use model 'qwen' (pinned by hints.model"));
}

TEST_F(IntakeTest, EveryLaterAttemptStaysWithinTheTenantsModels) {
  router_.Swap(FallbackRouter());
  const Intake intake = MakeIntake();
  tandem::v1::GenerateRequest latency = Prompt("hi");
  latency.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  // A tenant of nemotron alone: once its one worker failed, retries, failovers and hedges find
  // nothing, though the rule's fallback qwen has a worker.
  Admission a;
  ASSERT_TRUE(intake.Admit(latency, "", kNoDeadline, &a, TenantWith({"nemotron"})).ok());
  EXPECT_EQ(a.endpoint->address(), "nemotron:1");
  absl::StatusOr<Target> next = intake.PickTarget(a, {a.endpoint.get()});
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable) << next.status();
  // Without the tenant the same admission fails over to qwen.
  Admission open;
  ASSERT_TRUE(intake.Admit(latency, "", kNoDeadline, &open).ok());
  next = intake.PickTarget(open, {open.endpoint.get()});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->pool, pools_.Find("qwen"));

  // An admission whose decision names a model outside the tenant's (built by hand: Decide never
  // leaves one) still never dispatches there: its allowed fallback, else PERMISSION_DENIED.
  Admission forged = open;
  forged.tenant = TenantWith({"qwen"});
  forged.decision.model = "nemotron";
  forged.decision.fallback = {"qwen"};
  next = intake.PickTarget(forged, {});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->pool, pools_.Find("qwen"));
  forged.decision.fallback.clear();
  next = intake.PickTarget(forged, {});
  EXPECT_EQ(next.status().code(), absl::StatusCode::kPermissionDenied) << next.status();
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
  const std::string png = testing::ReadFileText(
      tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl/a_wide_352x192.png"));
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
