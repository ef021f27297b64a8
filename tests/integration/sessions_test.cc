// Session-aware routing end to end: real workers and two gateway replicas sharing a session key,
// a policy reload in the middle of a session, and a replica without the key.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tests/support/policies.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kSessionsRules[] = R"(  - name: images
    when: {image_count: {gt: 0}}
    action: {route: qwen}
MOVE  - name: session
    when: {session.model: {present: true}}
    action: {route_to_session: true, fallback: [qwen, nemotron]}
  - name: latency
    when: {class: latency_critical}
    action: {route: nemotron, reasoning: off}
  - name: accuracy
    action: {route: qwen}
)";

// Version 1 keeps every session on its model; version 2 moves accuracy-critical turns to qwen
// before the session rule is reached.
std::string Policy(int version) {
  std::string p = TwoClassPolicy("sessions-" + std::to_string(version), kSessionsRules);
  p.replace(p.find("MOVE"), 4,
            version == 1 ? ""
                         : "  - name: accuracy_moves\n    when: {class: accuracy_critical}\n"
                           "    action: {route: qwen}\n");
  return p;
}

class SessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto workers = StartWorkers({"qwen", "nemotron"}, {"--synthetic_time_scale=0"});
    ASSERT_TRUE(workers.ok()) << workers.status();
    qwen_ = std::move(workers->servers[0]);
    nemotron_ = std::move(workers->servers[1]);
    policy_ = WriteTempFile("sessions.yaml", Policy(1));
    key_ = WriteTempFile("session.key", std::string(48, 's') + "\n");
  }

  Server Gateway(bool shared_key) {
    std::vector<std::string> args = {"--policy=" + policy_, "--policy_watch_interval=50ms"};
    if (shared_key) args.push_back("--session_key_file=" + key_);
    auto g = StartServingGateway(
        {"qwen=" + qwen_.grpc_address, "nemotron=" + nemotron_.grpc_address}, args);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return {};
    return std::move(*g);
  }

  // One turn of session "conv-1"; `token` is the previous answer's, `via_metadata` sends the id
  // and token as x-session-id and x-tandem-session-token instead of fields.
  tandem::v1::RouteInfo Turn(const Server& gateway, tandem::v1::Objective objective,
                             const std::string& token, bool via_metadata = false,
                             grpc::Status* status = nullptr) {
    auto stub = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway.grpc_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(10));
    tandem::v1::GenerateRequest r = Prompt("next turn", 2);
    r.mutable_hints()->set_objective(objective);
    if (via_metadata) {
      ctx.AddMetadata("x-session-id", "conv-1");
      if (!token.empty()) ctx.AddMetadata("x-tandem-session-token", token);
    } else {
      r.set_session_id("conv-1");
      r.set_session_token(token);
    }
    tandem::v1::GenerateResponse resp;
    const grpc::Status s = stub->Generate(&ctx, r, &resp);
    if (status != nullptr) *status = s;
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.route();
  }

  Server qwen_, nemotron_;
  std::string policy_, key_;
};

TEST_F(SessionsTest, AnyReplicaHonoursTheSessionAndAReloadCanMoveIt) {
  const Server a = Gateway(true);
  const Server b = Gateway(true);
  const Server lone = Gateway(false);
  using tandem::v1::OBJECTIVE_ACCURACY;
  using tandem::v1::OBJECTIVE_LATENCY;

  // Turn 1 on replica a: a chat turn, routed by its content.
  tandem::v1::RouteInfo t = Turn(a, OBJECTIVE_LATENCY, "");
  EXPECT_EQ(t.model(), "nemotron");
  EXPECT_EQ(t.session().turn(), 1);
  EXPECT_EQ(t.session().source(), "new");
  ASSERT_FALSE(t.session().token().empty());

  // Turn 2 on replica b, with a's token: the content says qwen, the session keeps nemotron.
  t = Turn(b, OBJECTIVE_ACCURACY, t.session().token());
  EXPECT_EQ(t.model(), "nemotron");
  EXPECT_EQ(t.rule(), "session");
  EXPECT_EQ(t.session().source(), "token");
  EXPECT_EQ(t.session().turn(), 2);
  EXPECT_FALSE(t.session().switched());
  const std::string token2 = t.session().token();

  // Turn 3 on b without a token (id as metadata): b's own table remembers the session.
  t = Turn(b, OBJECTIVE_ACCURACY, "", /*via_metadata=*/true);
  EXPECT_EQ(t.model(), "nemotron");
  EXPECT_EQ(t.session().source(), "table");
  EXPECT_EQ(t.session().turn(), 3);

  // A replica without the shared key cannot read the token: to it the session is new.
  t = Turn(lone, OBJECTIVE_ACCURACY, token2);
  EXPECT_EQ(t.session().source(), "new");
  EXPECT_EQ(t.model(), "qwen");

  // Mid-session, a policy version that moves accuracy-critical turns before the session rule.
  { std::ofstream(policy_, std::ios::trunc) << Policy(2); }
  for (const Server* g : {&a, &b}) {
    ASSERT_EQ(
        WaitForMetric(g->metrics_address, "tandem_policy_info", {{"version", "sessions-2"}}, 1)
            .value_or(-1),
        1);
  }
  t = Turn(a, OBJECTIVE_ACCURACY, token2);
  EXPECT_EQ(t.policy_version(), "sessions-2");
  EXPECT_EQ(t.model(), "qwen");
  EXPECT_EQ(t.rule(), "accuracy_moves");
  EXPECT_TRUE(t.session().switched());
  // The next chat turn, on b with that token, stays on qwen: the session moved with it.
  t = Turn(b, OBJECTIVE_LATENCY, t.session().token());
  EXPECT_EQ(t.model(), "qwen");
  EXPECT_EQ(t.rule(), "session");
  EXPECT_EQ(t.session().source(), "token");

  auto text = HttpGet(b.metrics_address, "/metrics");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(
      MetricValue(*text, "tandem_gateway_session_turns_total", {{"source", "token"}}).value_or(-1),
      2);
  EXPECT_EQ(
      MetricValue(*text, "tandem_gateway_session_turns_total", {{"source", "table"}}).value_or(-1),
      1);
  EXPECT_EQ(MetricValue(*text, "tandem_gateway_sessions").value_or(-1), 1);
  text = HttpGet(a.metrics_address, "/metrics");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(MetricValue(*text, "tandem_gateway_session_model_switches_total").value_or(-1), 1);
  EXPECT_TRUE(PromtoolCheckMetrics(*text).ok());
}

// A caller that sends an older turn's token again cannot make the reply forget turns the
// gateway served: the turn count is what its session table knows.
TEST_F(SessionsTest, AReplayedOlderTokenReportsTheTurnsTheGatewayServed) {
  const Server g = Gateway(true);
  using tandem::v1::OBJECTIVE_ACCURACY;
  using tandem::v1::OBJECTIVE_LATENCY;
  tandem::v1::RouteInfo t = Turn(g, OBJECTIVE_LATENCY, "");
  const std::string token1 = t.session().token();
  t = Turn(g, OBJECTIVE_LATENCY, token1);
  EXPECT_EQ(t.session().turn(), 2);
  t = Turn(g, OBJECTIVE_LATENCY, t.session().token());
  EXPECT_EQ(t.session().turn(), 3);

  // Turn 1's token again: the gateway has served three turns, so this is the fourth, and the
  // session stays where the table has it.
  t = Turn(g, OBJECTIVE_ACCURACY, token1);
  EXPECT_EQ(t.session().turn(), 4);
  EXPECT_EQ(t.session().source(), "table");
  EXPECT_EQ(t.model(), "nemotron");
  EXPECT_EQ(t.rule(), "session");
  // Its new token carries that count: a replica with the same key goes on from it.
  const Server other = Gateway(true);
  t = Turn(other, OBJECTIVE_ACCURACY, t.session().token());
  EXPECT_EQ(t.session().turn(), 5);
  EXPECT_EQ(t.session().source(), "token");
}

TEST_F(SessionsTest, ABadSessionIdIsRefusedAndAForgedTokenIsIgnored) {
  const Server g = Gateway(true);
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(g.grpc_address, grpc::InsecureChannelCredentials()));
  for (const std::string& id : {std::string("has space"), std::string(129, 'x')}) {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(10));
    tandem::v1::GenerateRequest r = Prompt("hi", 2);
    r.set_session_id(id);
    tandem::v1::GenerateResponse resp;
    const grpc::Status s = stub->Generate(&ctx, r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  }
  // A token that does not verify is no token: the turn is routed as the session's first.
  const tandem::v1::RouteInfo t =
      Turn(g, tandem::v1::OBJECTIVE_ACCURACY, "1.nemotron.7.9999999999.00000000000000000000");
  EXPECT_EQ(t.session().source(), "new");
  EXPECT_EQ(t.model(), "qwen");
}

}  // namespace
}  // namespace tandem::testing
