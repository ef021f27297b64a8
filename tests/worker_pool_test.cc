#include "gateway/worker_pool.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

// Answers GetInfo at once with a configured result.
class FakeWorkerClient final : public WorkerClient {
 public:
  FakeWorkerClient(std::string address, grpc::Status status, tandem::v1::WorkerInfo info)
      : address_(std::move(address)), status_(std::move(status)), info_(std::move(info)) {}
  const std::string& address() const override { return address_; }
  void Generate(grpc::ClientContext*, const tandem::v1::WorkerGenerateRequest*,
                grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk>*) override {}
  void GetInfo(grpc::ClientContext*, const tandem::v1::WorkerInfoRequest*,
               tandem::v1::WorkerInfo* response, std::function<void(grpc::Status)> done) override {
    *response = info_;
    done(status_);
  }

 private:
  std::string address_;
  grpc::Status status_;
  tandem::v1::WorkerInfo info_;
};

tandem::v1::WorkerInfo Info(const std::string& model, tandem::v1::WorkerInfo::State state) {
  tandem::v1::WorkerInfo i;
  i.set_model_name(model);
  i.set_model_id("id/" + model);
  i.set_state(state);
  i.set_vision(model == "qwen");
  i.set_max_output_tokens(123);
  return i;
}

void ProbeAll(ModelPool& pool, int* changes) {
  for (const auto& e : pool.endpoints()) e->Probe(absl::Seconds(1), [changes] { ++*changes; });
}

TEST(ModelPoolTest, PicksTheReadyEndpointWithFewestOutstanding) {
  ModelPool pool("qwen");
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("a:1", grpc::Status::OK,
                                                      Info("qwen", tandem::v1::WorkerInfo::READY)));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("b:2", grpc::Status::OK,
                                                      Info("qwen", tandem::v1::WorkerInfo::READY)));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "c:3", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::LOADING)));
  int changes = 0;
  ProbeAll(pool, &changes);
  EXPECT_EQ(changes, 3);  // two became ready; one got a not-ready reason
  EXPECT_EQ(pool.ReadyCount(), 2);
  pool.endpoints()[0]->AddOutstanding(2);
  auto picked = pool.Pick();
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ((*picked)->address(), "b:2");
  pool.endpoints()[1]->AddOutstanding(5);
  EXPECT_EQ((*pool.Pick())->address(), "a:1");
  // A second probe with nothing new is not a change.
  ProbeAll(pool, &changes);
  EXPECT_EQ(changes, 3);
}

TEST(ModelPoolTest, NoReadyEndpointIsUnavailableWithEachReason) {
  ModelPool pool("nemotron");
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "down:1", grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"),
      tandem::v1::WorkerInfo()));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("wrong:2", grpc::Status::OK,
                                                      Info("qwen", tandem::v1::WorkerInfo::READY)));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "drain:3", grpc::Status::OK, Info("nemotron", tandem::v1::WorkerInfo::DRAINING)));
  int changes = 0;
  ProbeAll(pool, &changes);
  auto picked = pool.Pick();
  EXPECT_EQ(picked.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(picked.status().message());
  EXPECT_THAT(message, HasSubstr("model 'nemotron' has no ready worker"));
  EXPECT_THAT(message, HasSubstr("down:1: UNAVAILABLE: connection refused"));
  EXPECT_THAT(message, HasSubstr("wrong:2: serves model 'qwen', configured as 'nemotron'"));
  EXPECT_THAT(message, HasSubstr("drain:3: state DRAINING"));
}

TEST(ModelPoolTest, StatusReportsCapabilitiesFromWorkerInfo) {
  ModelPool pool("qwen");
  EXPECT_TRUE(pool.Status().model_id().empty());
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("a:1", grpc::Status::OK,
                                                      Info("qwen", tandem::v1::WorkerInfo::READY)));
  int changes = 0;
  ProbeAll(pool, &changes);
  const auto s = pool.Status();
  EXPECT_EQ(s.model_id(), "id/qwen");
  EXPECT_TRUE(s.capabilities().vision());
  EXPECT_EQ(s.capabilities().max_output_tokens(), 123);
  EXPECT_EQ(s.ready_workers(), 1);
  EXPECT_EQ(s.total_workers(), 1);
}

TEST(WorkerPoolsTest, ConfigureParsesEntriesAndRejectsBadOnes) {
  WorkerPools pools(absl::Milliseconds(100), [] {});
  EXPECT_TRUE(pools.Configure({"qwen=127.0.0.1:1", "qwen=127.0.0.1:2", "nemotron=h:3"}).ok());
  ASSERT_NE(pools.Find("qwen"), nullptr);
  EXPECT_EQ(pools.Find("qwen")->endpoints().size(), 2u);
  EXPECT_EQ(pools.Find("llama"), nullptr);

  WorkerPools bad(absl::Milliseconds(100), [] {});
  EXPECT_THAT(bad.Configure({"qwen"}).message(), HasSubstr("expected MODEL=HOST:PORT"));
  WorkerPools empty(absl::Milliseconds(100), [] {});
  EXPECT_THAT(empty.Configure({}).message(), HasSubstr("--workers is empty"));
}

}  // namespace
}  // namespace tandem::gateway
