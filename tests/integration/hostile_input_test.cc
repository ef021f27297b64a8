// Requests built to break the gateway (bytes that are illegal in gRPC metadata, log-line
// forgery, multi-megabyte names, protobuf that does not parse) and a property test over
// generated requests: the gateway must stay up, answer INVALID_ARGUMENT with a useful message, and
// log at most one bounded, escaped line per refusal, within --rejected_log_per_second.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kLongestLogLine = 2048;

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(
        StartTwoModelStack({"--rejected_log_per_second=5"}, &qwen_, &nemotron_, &gateway_));
    channel_ = grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials());
    stub_ = tandem::v1::Gateway::NewStub(channel_);
  }

  grpc::Status Call(const tandem::v1::GenerateRequest& request,
                    const std::multimap<std::string, std::string>& metadata = {}) {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(20));
    for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
    tandem::v1::GenerateResponse response;
    return stub_->Generate(&ctx, request, &response);
  }

  // Raw bytes to a method, as a client with its own encoder (or none) would send them.
  grpc::Status CallRaw(const std::string& method, const std::string& bytes) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(20));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  // The gateway process is alive and still answers.
  void ExpectServing() {
    ASSERT_EQ(kill(gateway_.process->pid(), 0), 0) << "the gateway is gone";
    const grpc::Status s = Call(Prompt("still there?", 4));
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  }

  std::vector<std::string> LogLines() const {
    return absl::StrSplit(gateway_.process->ReadLog(), '\n', absl::SkipEmpty());
  }

  Server qwen_, nemotron_, gateway_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

TEST_F(HostileInputTest, RequestIdsThatCannotBeMetadataAreRefusedNotFatal) {
  // A stream in flight on another call must survive what follows.
  grpc::ClientContext stream_ctx;
  Deadline(&stream_ctx, std::chrono::seconds(30));
  auto stream = stub_->GenerateStream(&stream_ctx, Prompt("a long answer please", 64));
  tandem::v1::GenerateStreamChunk chunk;
  ASSERT_TRUE(stream->Read(&chunk));

  for (const std::string& id :
       {std::string("caf\xc3\xa9-1"), std::string("tab\there"), std::string("line\nFORGED line"),
        std::string("sp ace"), std::string("nul\0byte", 8), std::string(129, 'a')}) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    r.set_request_id(id);
    grpc::Status s = Call(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("request_id"));
  }
  // The same through x-request-id: gRPC's client accepts a space there (a legal header value).
  grpc::Status s = Call(Prompt("hi", 4), {{"x-request-id", "two words"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(Call(Prompt("hi", 4), {{"x-request-id", "fine-id-42"}}).ok());

  while (stream->Read(&chunk)) {
  }
  const grpc::Status stream_status = stream->Finish();
  EXPECT_TRUE(stream_status.ok()) << stream_status.error_message();
  ExpectServing();
}

TEST_F(HostileInputTest, CallerTextIsEscapedAndBoundedInErrorsAndLogs) {
  struct Case {
    std::function<void(tandem::v1::GenerateRequest*)> edit;
    std::string field;
  };
  const std::string forged = "x\n[2026-01-01T00:00:00.000] [tandem-gateway] [info] FORGED";
  const std::vector<Case> cases = {
      {[&](auto* r) { r->mutable_messages(0)->set_role(forged); }, "messages[0].role"},
      {[](auto* r) { r->mutable_messages(0)->set_role(std::string(4 << 20, 'r')); },
       "messages[0].role"},
      {[&](auto* r) { r->mutable_hints()->set_model(forged); }, "hints.model"},
      {[](auto* r) { r->mutable_hints()->set_model(std::string(4 << 20, 'm')); }, "hints.model"},
      {[](auto* r) { r->mutable_hints()->set_model("no-such-model"); }, "hints.model"},
      {[](auto* r) { (*r->mutable_labels())[std::string(4 << 20, 'k')] = "v"; }, "labels["},
      {[](auto* r) {
         auto* img = r->mutable_messages(0)->add_content()->mutable_image();
         img->set_data("x");
         img->set_mime_type("image/../../etc/passwd");
       },
       "image.mime_type"},
      {[](auto* r) { r->mutable_hints()->mutable_reasoning()->set_thinking_budget_tokens(-5); },
       "thinking_budget_tokens"},
      {[](auto* r) {
         r->mutable_hints()->mutable_reasoning()->set_mode(
             static_cast<tandem::v1::ReasoningMode>(9));
       },
       "hints.reasoning.mode"},
      {[](auto* r) { r->mutable_hints()->set_objective(static_cast<tandem::v1::Objective>(-3)); },
       "hints.objective"},
  };
  for (const Case& c : cases) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    c.edit(&r);
    grpc::Status s = Call(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(s.error_message(), HasSubstr(c.field));
    EXPECT_LT(s.error_message().size(), 512u) << c.field;
    EXPECT_EQ(s.error_message().find('\n'), std::string::npos) << c.field;
  }
  ExpectServing();
  for (const std::string& line : LogLines()) {
    EXPECT_LE(line.size(), kLongestLogLine) << line.substr(0, 200);
    EXPECT_FALSE(absl::StrContains(line, "] FORGED") && !absl::StrContains(line, "\\n"))
        << "a forged log line: " << line;
  }
}

TEST_F(HostileInputTest, UnparsableProtobufIsInvalidArgumentWithoutALogLineEach) {
  tandem::v1::GenerateRequest r = Prompt("hi", 4);
  r.set_request_id("@@");
  std::string invalid_utf8 = r.SerializeAsString();
  const size_t at = invalid_utf8.find("@@");
  invalid_utf8[at] = '\xc3';
  invalid_utf8[at + 1] = '(';
  for (const char* method : {"/tandem.v1.Gateway/Generate", "/tandem.v1.Gateway/Route"}) {
    for (int i = 0; i < 20; ++i) {
      grpc::Status s = CallRaw(method, invalid_utf8);
      ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("request_id: not valid UTF-8"));
    }
    grpc::Status s = CallRaw(method, std::string("\x0a\x7f\x01\x02", 4));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("malformed protobuf"));
  }
  ExpectServing();
  for (const std::string& line : LogLines()) {
    EXPECT_FALSE(absl::StrContains(line, "libprotobuf")) << line;
    EXPECT_FALSE(absl::StrContains(line, "invalid UTF-8 data")) << line;
  }
}

TEST_F(HostileInputTest, AFloodOfInvalidRequestsIsLoggedWithinTheRate) {
  const auto start = std::chrono::steady_clock::now();
  constexpr int kRequests = 200;
  for (int i = 0; i < kRequests; ++i) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    r.mutable_messages(0)->set_role("wizard");
    ASSERT_EQ(Call(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int refusals_logged = 0;
  for (const std::string& line : LogLines()) {
    if (absl::StrContains(line, "unknown role")) ++refusals_logged;
  }
  // --rejected_log_per_second=5: a burst of 10, then 5 a second.
  EXPECT_LE(refusals_logged, 10 + 5 * (seconds + 1)) << "in " << seconds << " s";
  EXPECT_GE(refusals_logged, 1);
  ExpectServing();
}

// Generated requests of every shape; the gateway answers each with a status a client can act on
// and never goes down. TANDEM_PROPERTY_REQUESTS sets how many (longer runs by hand).
TEST_F(HostileInputTest, GeneratedRequestsAlwaysGetAValidStatus) {
  const char* env = std::getenv("TANDEM_PROPERTY_REQUESTS");
  const int requests = env != nullptr ? std::atoi(env) : 300;
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  // Strings that have broken parsers, headers and logs.
  auto text = [&]() -> std::string {
    switch (pick(9)) {
      case 0:
        return "";
      case 1:
        return "user";
      case 2:
        return "caf\xc3\xa9";
      case 3:
        return std::string("a\0b", 3);
      case 4:
        return "line\nbreak\r\t";
      case 5:
        return std::string(pick(3) == 0 ? 300 : 70, 'x');
      case 6:
        return "\xf0\x9f\x98\x80";
      case 7:
        return "qwen";
      default: {
        std::string s(pick(16), ' ');
        for (char& c : s) c = static_cast<char>(0x20 + pick(0x5f));
        return s;
      }
    }
  };
  const std::set<grpc::StatusCode> acceptable = {
      grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT,
      grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::PERMISSION_DENIED};
  for (int i = 0; i < requests; ++i) {
    tandem::v1::GenerateRequest r = Prompt("hello", 1 + pick(4));
    if (pick(2)) r.set_request_id(text());
    if (pick(3) == 0) r.mutable_messages(0)->set_role(text());
    if (pick(3) == 0) r.mutable_hints()->set_model(text());
    if (pick(4) == 0) (*r.mutable_labels())[text()] = text();
    if (pick(4) == 0)
      r.mutable_hints()->set_objective(static_cast<tandem::v1::Objective>(pick(5) - 1));
    if (pick(4) == 0) {
      r.mutable_hints()->mutable_reasoning()->set_mode(
          static_cast<tandem::v1::ReasoningMode>(pick(5) - 1));
      r.mutable_hints()->mutable_reasoning()->set_thinking_budget_tokens(pick(200) - 50);
    }
    if (pick(5) == 0) {
      auto* img = r.mutable_messages(0)->add_content()->mutable_image();
      img->set_data(pick(2) ? "png" : "");
      img->set_mime_type(pick(2) ? "image/png" : text());
    }
    if (pick(6) == 0) r.mutable_sampling()->add_stop(text());
    std::multimap<std::string, std::string> metadata;
    if (pick(4) == 0) {
      // Legal header values only: gRPC's own client refuses (aborts on) the rest.
      std::string v(1 + pick(20), ' ');
      for (char& c : v) c = static_cast<char>(0x20 + pick(0x5f));
      metadata.emplace("x-request-id", v);
    }
    const grpc::Status s = pick(10) == 0 ? CallRaw("/tandem.v1.Gateway/Generate",
                                                   r.SerializePartialAsString() + text())
                                         : Call(r, metadata);
    ASSERT_TRUE(acceptable.contains(s.error_code()))
        << "request " << i << " (seed " << seed << "): " << s.error_code() << " "
        << s.error_message() << "\n"
        << r.ShortDebugString().substr(0, 500);
    if (!s.ok()) {
      EXPECT_FALSE(s.error_message().empty()) << "request " << i << " (seed " << seed << ")";
    }
  }
  ExpectServing();
  for (const std::string& line : LogLines()) {
    EXPECT_LE(line.size(), kLongestLogLine) << line.substr(0, 200);
  }
}

}  // namespace
}  // namespace tandem::testing
