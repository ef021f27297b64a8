#include "gateway/config.h"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

GatewayConfig ValidConfig() {
  GatewayConfig c;
  c.server_credentials = grpc::InsecureServerCredentials();
  c.worker_plaintext = true;
  c.tenants.allow_unauthenticated = true;
  return c;
}

TEST(GatewayConfigTest, DefaultsWithCredentialsAreValid) {
  EXPECT_TRUE(ValidConfig().Validate().ok()) << ValidConfig().Validate();
}

TEST(GatewayConfigTest, MutualTlsToWorkersNeedsAllThreeFiles) {
  GatewayConfig c = ValidConfig();
  c.worker_plaintext = false;
  c.worker_tls.ca = "ca.pem";
  c.worker_tls.cert = "cert.pem";
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("--worker_tls_key"));
  c.worker_tls.key = "key.pem";
  EXPECT_TRUE(c.Validate().ok());
  c.worker_plaintext = true;
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("contradict"));
}

TEST(GatewayConfigTest, ServingEveryoneWithoutKeysIsExplicit) {
  GatewayConfig c = ValidConfig();
  c.tenants.allow_unauthenticated = false;
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("--tenants=FILE"));
  c.tenants_path = "tenants.yaml";
  EXPECT_TRUE(c.Validate().ok());
}

// Each out-of-range value is refused with InvalidArgument naming its flag; every other value
// stays valid, so each case tests one check.
TEST(GatewayConfigTest, EachOutOfRangeValueNamesItsFlag) {
  struct Case {
    std::string flag;
    std::function<void(GatewayConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"--grpc_memory_limit", [](GatewayConfig& c) { c.grpc_memory_limit = -1; }},
      {"--grpc_receive_headroom_bytes",
       [](GatewayConfig& c) { c.grpc_receive_headroom_bytes = -1; }},
      {"--max_connection_age", [](GatewayConfig& c) { c.max_connection_age = -absl::Seconds(1); }},
      {"--worker_probe_interval", [](GatewayConfig& c) { c.pools.probe_interval = {}; }},
      {"--worker_probe_timeouts", [](GatewayConfig& c) { c.pools.probe_timeouts = 0; }},
      {"--dns_interval", [](GatewayConfig& c) { c.pools.dns_interval = absl::Milliseconds(5); }},
      {"--eject_after_stalls", [](GatewayConfig& c) { c.pools.endpoint.stall_threshold = 0; }},
      {"--base_ejection",
       [](GatewayConfig& c) { c.pools.endpoint.max_ejection = absl::Milliseconds(1); }},
      {"--scrape_interval",
       [](GatewayConfig& c) { c.signals.scrape_interval = absl::Milliseconds(10); }},
      {"--promql_timeout", [](GatewayConfig& c) { c.signals.promql_timeout = {}; }},
      {"--policy_watch_interval", [](GatewayConfig& c) { c.policy_watch_interval = {}; }},
      {"--max_labels", [](GatewayConfig& c) { c.intake.limits.max_labels = -1; }},
      {"--max_prompt_tokens", [](GatewayConfig& c) { c.intake.max_prompt_tokens = -1; }},
      {"--max_request_bytes", [](GatewayConfig& c) { c.intake.max_request_bytes = 100; }},
      {"--default_max_tokens", [](GatewayConfig& c) { c.intake.default_max_tokens = 0; }},
      {"--shadow_timeout", [](GatewayConfig& c) { c.dispatch.shadow_timeout = {}; }},
      {"--worker_deadline_offset",
       [](GatewayConfig& c) { c.dispatch.worker_deadline_offset = -absl::Seconds(1); }},
      {"--default_deadline", [](GatewayConfig& c) { c.dispatch.default_deadline = {}; }},
      {"--max_attempts", [](GatewayConfig& c) { c.dispatch.max_attempts = 0; }},
      {"--retry_budget_ratio", [](GatewayConfig& c) { c.dispatch.retry_budget_ratio = 1.5; }},
      {"--stall_timeout_multiple",
       [](GatewayConfig& c) { c.dispatch.stall_timeout_multiple = 0.5; }},
      {"--max_queue_wait", [](GatewayConfig& c) { c.dispatch.max_queue_wait = {}; }},
      {"--max_tenant_labels", [](GatewayConfig& c) { c.tenants.max_tenant_labels = 0; }},
      {"--max_queued", [](GatewayConfig& c) { c.queue.max_queued_per_tenant = -1; }},
      {"--dispatch_headroom", [](GatewayConfig& c) { c.dispatch_headroom = -2; }},
      {"--decision_log_queue",
       [](GatewayConfig& c) {
         c.decision_log_path = "decisions.jsonl";
         c.decision_log_queue = 0;
       }},
      {"--drain_timeout", [](GatewayConfig& c) { c.drain_timeout = -absl::Seconds(1); }},
  };
  for (const Case& k : cases) {
    GatewayConfig c = ValidConfig();
    k.set(c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.flag;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.flag));
  }
}

}  // namespace
}  // namespace tandem::gateway

namespace tandem::gateway {
namespace {

TEST(GatewayConfigTest, DefaultLimitsAreConsistent) {
  GatewayConfig c = ValidConfig();
  c.http_listen = "127.0.0.1:0";
  // The largest image fits a gRPC request, and its base64 an HTTP body.
  EXPECT_THAT(c.LimitWarnings(), ::testing::IsEmpty());
  // gRPC reads past our limit, so that an oversized request gets INVALID_ARGUMENT from us.
  EXPECT_GT(c.GrpcReceiveLimit(), c.intake.max_request_bytes);
  EXPECT_EQ(c.GrpcReceiveLimit(), c.intake.max_request_bytes + c.grpc_receive_headroom_bytes);
}

TEST(GatewayConfigTest, ALimitAnotherMakesUnreachableIsNamed) {
  GatewayConfig c = ValidConfig();
  c.intake.max_request_bytes = 8 << 20;
  c.intake.limits.max_image_bytes = 20 << 20;
  ASSERT_EQ(c.LimitWarnings().size(), 1u);
  EXPECT_THAT(c.LimitWarnings()[0], HasSubstr("--max_image_bytes (20971520) exceeds "
                                              "--max_request_bytes (8388608)"));
  // Over HTTP the image is base64: 7 MiB of image is 9.3 MiB of body.
  c.intake.limits.max_image_bytes = 7 << 20;
  EXPECT_THAT(c.LimitWarnings(), ::testing::IsEmpty());
  c.http_listen = "127.0.0.1:0";
  ASSERT_EQ(c.LimitWarnings().size(), 1u);
  EXPECT_THAT(c.LimitWarnings()[0], HasSubstr("base64"));
  EXPECT_THAT(c.LimitWarnings()[0], HasSubstr("--max_request_bytes (8388608)"));
  // The receive limit never overflows gRPC's int.
  c.intake.max_request_bytes = int64_t{3} << 30;
  EXPECT_EQ(c.GrpcReceiveLimit(), std::numeric_limits<int>::max());
}

}  // namespace
}  // namespace tandem::gateway
