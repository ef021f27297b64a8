#include "workers/worker_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "workers/scheduler.h"
#include "workers/simulator/synthetic_engine.h"
#include "workers/simulator/synthetic_profile.h"

namespace tandem::workers {
namespace {

using tandem::v1::WorkerGenerateChunk;
using tandem::v1::WorkerGenerateRequest;
using tandem::v1::WorkerInfo;
using ::testing::HasSubstr;

WorkerGenerateRequest Request(const std::string& text, int32_t max_tokens) {
  WorkerGenerateRequest r;
  r.set_request_id("test-1");
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text(text);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

// The service over a real loopback gRPC server, in front of the load simulator with no delay.
class WorkerServiceTest : public ::testing::Test {
 protected:
  WorkerServiceTest()
      : engine_(*SyntheticProfileFor("qwen"), SyntheticEngineOptions{0, 8}, Clock::Real()),
        metrics_(registry_, WorkerMetrics::Labels{"qwen", "id", "synthetic", "cpu", "cpu"}),
        scheduler_(&engine_, &metrics_, Clock::Real(), Scheduler::Options{4, 4}),
        service_(&engine_, &scheduler_, &metrics_, DeviceDescription{"cpu", "cpu"},
                 RequestLimits{}) {
    scheduler_.Start();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = tandem::v1::Worker::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                            grpc::InsecureChannelCredentials()));
  }
  ~WorkerServiceTest() override {
    server_->Shutdown();
    scheduler_.Stop();
  }

  // Reads the whole stream: the text and the last chunk's finish reason.
  grpc::Status Generate(const WorkerGenerateRequest& request, std::string* text,
                        tandem::v1::FinishReason* finish) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    WorkerGenerateChunk chunk;
    while (reader->Read(&chunk)) {
      *text += chunk.text();
      if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
        *finish = chunk.finish_reason();
      }
    }
    return reader->Finish();
  }

  prometheus::Registry registry_;
  SyntheticEngine engine_;
  WorkerMetrics metrics_;
  Scheduler scheduler_;
  WorkerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<tandem::v1::Worker::Stub> stub_;
};

TEST_F(WorkerServiceTest, GetInfoReportsTheModelAndItsState) {
  grpc::ClientContext context;
  WorkerInfo info;
  ASSERT_TRUE(stub_->GetInfo(&context, tandem::v1::WorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.model_name(), "qwen");
  EXPECT_EQ(info.state(), WorkerInfo::STATE_LOADING);
  EXPECT_GT(info.max_output_tokens(), 0);
  service_.SetState(WorkerInfo::STATE_READY);
  grpc::ClientContext again;
  ASSERT_TRUE(stub_->GetInfo(&again, tandem::v1::WorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.state(), WorkerInfo::STATE_READY);
}

TEST_F(WorkerServiceTest, ARequestStreamsItsAnswerAndEndsWithAFinishReason) {
  service_.SetState(WorkerInfo::STATE_READY);
  std::string text;
  tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
  ASSERT_TRUE(Generate(Request("hello", 4), &text, &finish).ok());
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(finish, tandem::v1::FINISH_REASON_LENGTH);  // 4 tokens of the simulator's 8
}

TEST_F(WorkerServiceTest, AWorkerNotReadyRefusesWithUnavailableAndSaysWhy) {
  std::string text;
  tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
  grpc::Status s = Generate(Request("hello", 4), &text, &finish);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("loading its model"));
  service_.SetState(WorkerInfo::STATE_DRAINING);
  s = Generate(Request("hello", 4), &text, &finish);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("draining"));
}

TEST_F(WorkerServiceTest, AnInvalidRequestIsInvalidArgumentAndCounted) {
  service_.SetState(WorkerInfo::STATE_READY);
  std::string text;
  tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
  const double before = metrics_.rejected_invalid.Value();
  grpc::Status s = Generate(Request("hello", 0), &text, &finish);  // max_tokens must be >= 1
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  WorkerGenerateRequest no_messages = Request("hello", 4);
  no_messages.clear_messages();
  s = Generate(no_messages, &text, &finish);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(metrics_.rejected_invalid.Value(), before + 2);
}

}  // namespace
}  // namespace tandem::workers
