#include "gateway/pool/worker_pools.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_worker_client.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

void ProbeAll(ModelPool& pool, int* changes) {
  for (const auto& e : *pool.endpoints()) e->Probe(absl::Seconds(1), [changes] { ++*changes; });
}

TEST(ModelPoolTest, PicksTheReadyEndpointWithFewestOutstanding) {
  ModelPool pool("qwen");
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "a:1", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "b:2", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "c:3", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_LOADING)));
  int changes = 0;
  ProbeAll(pool, &changes);
  EXPECT_EQ(changes, 3);  // two became ready; one got a not-ready reason
  EXPECT_EQ(pool.ReadyCount(), 2);
  (*pool.endpoints())[0]->AddOutstanding(2);
  auto picked = pool.Pick();
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ((*picked)->address(), "b:2");
  (*pool.endpoints())[1]->AddOutstanding(5);
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
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "wrong:2", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "drain:3", grpc::Status::OK, Info("nemotron", tandem::v1::WorkerInfo::STATE_DRAINING)));
  int changes = 0;
  ProbeAll(pool, &changes);
  auto picked = pool.Pick();
  EXPECT_EQ(picked.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(picked.status().message());
  EXPECT_THAT(message, HasSubstr("model 'nemotron' has no usable worker"));
  EXPECT_THAT(message, HasSubstr("down:1: health check: UNAVAILABLE: connection refused"));
  EXPECT_THAT(message, HasSubstr("wrong:2: serves model 'qwen', configured as 'nemotron'"));
  EXPECT_THAT(message, HasSubstr("drain:3: state STATE_DRAINING"));
}

TEST(ModelPoolTest, StatusReportsCapabilitiesFromWorkerInfo) {
  ModelPool pool("qwen");
  EXPECT_TRUE(pool.Status().model_id().empty());
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "a:1", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  int changes = 0;
  ProbeAll(pool, &changes);
  const auto s = pool.Status();
  EXPECT_EQ(s.model_id(), "id/qwen");
  EXPECT_TRUE(s.capabilities().vision());
  EXPECT_EQ(s.capabilities().max_output_tokens(), 123);
  EXPECT_EQ(s.ready_workers(), 1);
  EXPECT_EQ(s.total_workers(), 1);
}

TEST(ModelPoolTest, HealthNotServingMakesAnEndpointNotReady) {
  ModelPool pool("qwen");
  auto state = std::make_shared<FakeState>(
      FakeState{grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)});
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("a:1", state));
  int changes = 0;
  ProbeAll(pool, &changes);
  EXPECT_EQ(pool.ReadyCount(), 1);
  state->serving = false;
  ProbeAll(pool, &changes);
  EXPECT_EQ(pool.ReadyCount(), 0);
  EXPECT_THAT(std::string(pool.Pick().status().message()),
              HasSubstr("a:1: health check: NOT_SERVING"));
}

TEST(ModelPoolTest, SlowProbesDoNotEjectButARefusedConnectionDoes) {
  ModelPool pool("qwen");
  auto state = std::make_shared<FakeState>(
      FakeState{grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)});
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("a:1", state));
  Endpoint& e = *(*pool.endpoints())[0];
  e.set_probe_timeouts(3);
  int changes = 0;
  ProbeAll(pool, &changes);
  ASSERT_TRUE(e.ready());
  // A busy worker (or saturated host) answers probes late: two timeouts are tolerated.
  state->status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
  ProbeAll(pool, &changes);
  ProbeAll(pool, &changes);
  EXPECT_TRUE(e.ready());
  EXPECT_FALSE(e.unresponsive());
  ProbeAll(pool, &changes);
  EXPECT_FALSE(e.ready());
  // Silent, not failing: calls on it still waiting for a first token are given up.
  EXPECT_TRUE(e.unresponsive());
  // Back, then gone for real: a refused connection is not ready at once (and fails its calls
  // by itself: nothing to give up).
  state->status = grpc::Status::OK;
  ProbeAll(pool, &changes);
  ASSERT_TRUE(e.ready());
  EXPECT_FALSE(e.unresponsive());
  state->status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused");
  ProbeAll(pool, &changes);
  EXPECT_FALSE(e.ready());
  EXPECT_FALSE(e.unresponsive());
}

TEST(ModelPoolTest, StalledStreamsMakeAnEndpointUnresponsiveUntilReadmitted) {
  EndpointOptions options;
  options.stall_threshold = 2;
  ModelPool pool("qwen", options);
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "a:1", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  Endpoint& e = *(*pool.endpoints())[0];
  int changes = 0;
  ProbeAll(pool, &changes);
  const auto now = std::chrono::steady_clock::now();
  e.RecordCall(CallOutcome::kStalled, now);
  EXPECT_FALSE(e.unresponsive());  // one stall may be the network
  e.RecordCall(CallOutcome::kStalled, now);
  EXPECT_FALSE(e.usable());
  EXPECT_TRUE(e.unresponsive());
  // Its ejection ends and a probe is answered: readmitted, trusted again.
  e.Tick(now + std::chrono::seconds(10));
  ProbeAll(pool, &changes);
  EXPECT_TRUE(e.usable());
  EXPECT_FALSE(e.unresponsive());
}

TEST(ModelPoolTest, DispatchCapacityIsTheBatchPlusHeadroomWithinTheWorkersQueue) {
  ModelPool pool("qwen");
  for (const auto& [address, batch, queue] :
       std::vector<std::tuple<std::string, int, int>>{{"a:1", 4, 1}, {"b:1", 8, 16}}) {
    tandem::v1::WorkerInfo info = Info("qwen", tandem::v1::WorkerInfo::STATE_READY);
    info.mutable_load()->set_max_batch_size(batch);
    info.mutable_load()->set_max_queue(queue);
    pool.AddEndpoint(std::make_unique<FakeWorkerClient>(address, grpc::Status::OK, info));
  }
  EXPECT_EQ(pool.DispatchCapacity(2), 0);  // nothing probed yet: no batch size known
  int changes = 0;
  ProbeAll(pool, &changes);
  EXPECT_EQ(pool.DispatchCapacity(0), 4 + 8);
  EXPECT_EQ(pool.DispatchCapacity(2), (4 + 1) + (8 + 2));  // a's queue holds only one
  EXPECT_EQ(pool.DispatchCapacity(-1), (4 + 1) + (8 + 16));
}

TEST(CallOutcomeTest, BadRequestsNeverCountAgainstAWorker) {
  for (auto code : {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
                    grpc::StatusCode::OUT_OF_RANGE, grpc::StatusCode::RESOURCE_EXHAUSTED,
                    grpc::StatusCode::CANCELLED, grpc::StatusCode::PERMISSION_DENIED,
                    grpc::StatusCode::UNAUTHENTICATED, grpc::StatusCode::NOT_FOUND,
                    grpc::StatusCode::UNIMPLEMENTED}) {
    EXPECT_EQ(ClassifyCall(code, false), CallOutcome::kNeutral) << code;
  }
  EXPECT_EQ(ClassifyCall(grpc::StatusCode::UNAVAILABLE, false), CallOutcome::kWorkerFault);
  EXPECT_EQ(ClassifyCall(grpc::StatusCode::DEADLINE_EXCEEDED, false), CallOutcome::kWorkerFault);
  // The caller's own deadline passing is not the worker's fault.
  EXPECT_EQ(ClassifyCall(grpc::StatusCode::DEADLINE_EXCEEDED, true), CallOutcome::kNeutral);
  EXPECT_EQ(ClassifyCall(grpc::StatusCode::INTERNAL, false), CallOutcome::kInternal);
  EXPECT_EQ(ClassifyCall(grpc::StatusCode::OK, false), CallOutcome::kSuccess);
}

TEST(BreakerTest, EjectsAfterConsecutiveFaultsAndReadmitsOnATimedProbe) {
  EndpointOptions options;
  options.failure_threshold = 3;
  options.base_ejection = absl::Milliseconds(200);
  options.max_ejection = absl::Milliseconds(800);
  ModelPool pool("qwen", options);
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
      "a:1", grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  int changes = 0;
  ProbeAll(pool, &changes);
  Endpoint& e = *(*pool.endpoints())[0];
  const auto t0 = std::chrono::steady_clock::now();
  // Bad requests never eject; a success resets the count.
  for (int i = 0; i < 10; ++i) e.RecordCall(CallOutcome::kNeutral, t0);
  e.RecordCall(CallOutcome::kWorkerFault, t0);
  e.RecordCall(CallOutcome::kWorkerFault, t0);
  e.RecordCall(CallOutcome::kSuccess, t0);
  e.RecordCall(CallOutcome::kWorkerFault, t0);
  e.RecordCall(CallOutcome::kWorkerFault, t0);
  EXPECT_EQ(e.breaker(), BreakerState::kClosed);
  e.RecordCall(CallOutcome::kWorkerFault, t0);
  EXPECT_EQ(e.breaker(), BreakerState::kOpen);
  EXPECT_FALSE(e.usable());
  EXPECT_THAT(std::string(pool.Pick().status().message()), HasSubstr("ejected"));
  // The timer, not traffic, moves it to half-open; the next probe readmits a healthy worker.
  e.Tick(t0 + std::chrono::milliseconds(100));
  EXPECT_EQ(e.breaker(), BreakerState::kOpen);
  e.Tick(t0 + std::chrono::milliseconds(201));
  EXPECT_EQ(e.breaker(), BreakerState::kHalfOpen);
  ProbeAll(pool, &changes);
  EXPECT_EQ(e.breaker(), BreakerState::kClosed);
  EXPECT_TRUE(e.usable());
  EXPECT_EQ(e.Describe().ejections(), 1);
}

TEST(BreakerTest, AFailedHalfOpenProbeEjectsAgainForLonger) {
  auto state = std::make_shared<FakeState>(
      FakeState{grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)});
  EndpointOptions options;
  options.failure_threshold = 1;
  ModelPool pool("qwen", options);
  pool.AddEndpoint(std::make_unique<FakeWorkerClient>("a:1", state));
  int changes = 0;
  ProbeAll(pool, &changes);
  Endpoint& e = *(*pool.endpoints())[0];
  e.RecordCall(CallOutcome::kWorkerFault, std::chrono::steady_clock::now());
  ASSERT_EQ(e.breaker(), BreakerState::kOpen);
  state->status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused");
  e.Tick(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  ASSERT_EQ(e.breaker(), BreakerState::kHalfOpen);
  ProbeAll(pool, &changes);
  EXPECT_EQ(e.breaker(), BreakerState::kOpen);
  EXPECT_EQ(e.Describe().ejections(), 2);
  EXPECT_GT(e.Describe().ejected_for_seconds(), 0.2);  // 400 ms this time
}

TEST(ModelPoolTest, PickSkipsExcludedEndpointsAndPowerOfTwoPrefersLessLoad) {
  ModelPool pool("qwen");
  for (const char* a : {"a:1", "b:2", "c:3"}) {
    pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
        a, grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  }
  int changes = 0;
  ProbeAll(pool, &changes);
  const auto& list = *pool.endpoints();
  auto picked = pool.Pick(PickStrategy::kLeastOutstanding, {list[0].get(), list[1].get()});
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ((*picked)->address(), "c:3");
  EXPECT_THAT(std::string(pool.Pick(PickStrategy::kLeastOutstanding,
                                    {list[0].get(), list[1].get(), list[2].get()})
                              .status()
                              .message()),
              HasSubstr("already failed this request"));
  // a and b carry deep queues; c is idle: two random choices never pick the worse of a pair,
  // so c wins whenever it is drawn and a/b tie otherwise.
  list[0]->set_scraped_load(50);
  list[1]->set_scraped_load(50);
  list[2]->set_scraped_load(0);
  int c = 0;
  for (int i = 0; i < 300; ++i) c += (*pool.Pick(PickStrategy::kPowerOfTwo))->address() == "c:3";
  // c is in 2 of the 3 possible pairs.
  EXPECT_GT(c, 150);
}

tandem::v1::GenerateRequest Chat(const std::vector<std::string>& turns) {
  tandem::v1::GenerateRequest r;
  for (size_t i = 0; i < turns.size(); ++i) {
    auto* m = r.add_messages();
    m->set_role(i == 0 ? "system" : (i % 2 == 1 ? "user" : "assistant"));
    m->add_content()->set_text(turns[i]);
  }
  return r;
}

TEST(ModelPoolTest, PrefixPickFollowsTheConversationUnlessItsWorkerIsTooBusy) {
  ModelPool pool("qwen", {}, nullptr,
                 {.index_entries = 1000, .max_imbalance = 2, .min_hit_tokens = 8});
  for (const char* a : {"a:1", "b:2"}) {
    pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
        a, grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  }
  int changes = 0;
  ProbeAll(pool, &changes);
  const auto& list = *pool.endpoints();
  const std::string system(400, 's');
  const PromptPrefix one = PromptPrefixOf("", Chat({system, "first question"}));
  PickInfo info;
  // Nothing known yet: the least loaded, and now it holds the conversation.
  list[0]->AddOutstanding(1);
  auto picked = pool.Pick(PickStrategy::kPrefix, {}, &one, &info);
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ((*picked)->address(), "b:2");
  EXPECT_STREQ(info.rule, "load");
  // The next turn resends it: to b even though a is now the less loaded.
  list[0]->AddOutstanding(-1);
  list[1]->AddOutstanding(1);
  const PromptPrefix two =
      PromptPrefixOf("", Chat({system, "first question", "an answer", "second question"}));
  EXPECT_EQ((*pool.Pick(PickStrategy::kPrefix, {}, &two, &info))->address(), "b:2");
  EXPECT_STREQ(info.rule, "prefix");
  EXPECT_GT(info.prefix_hit_tokens, 100);
  // Another tenant's partition, the same text: nothing known for it.
  const PromptPrefix other = PromptPrefixOf("tenant-b", Chat({system, "first question"}));
  EXPECT_EQ((*pool.Pick(PickStrategy::kPrefix, {}, &other, &info))->address(), "a:1");
  EXPECT_STREQ(info.rule, "load");
  // b far busier than a: the conversation moves rather than queue.
  list[1]->AddOutstanding(5);
  EXPECT_EQ((*pool.Pick(PickStrategy::kPrefix, {}, &two, &info))->address(), "a:1");
  EXPECT_STREQ(info.rule, "load");
  // An excluded holder (it failed this request) is never picked.
  list[1]->AddOutstanding(-6);
  EXPECT_EQ((*pool.Pick(PickStrategy::kPrefix, {list[1].get()}, &two, &info))->address(), "a:1");
}

// What a policy's prefix_hit_tokens.MODEL reads: the best usable worker's expected hit, recorded
// by every pick rule (not only the prefix pick), per cache partition.
TEST(ModelPoolTest, ExpectedHitTokensIsTheBestWorkersWhateverThePickRule) {
  ModelPool pool("qwen", {}, nullptr, {.index_entries = 1000, .min_hit_tokens = 8});
  for (const char* a : {"a:1", "b:2"}) {
    pool.AddEndpoint(std::make_unique<FakeWorkerClient>(
        a, grpc::Status::OK, Info("qwen", tandem::v1::WorkerInfo::STATE_READY)));
  }
  int changes = 0;
  ProbeAll(pool, &changes);
  const std::string system(400, 's');
  const PromptPrefix one = PromptPrefixOf("", Chat({system, "first question"}));
  const PromptPrefix two =
      PromptPrefixOf("", Chat({system, "first question", "an answer", "second question"}));
  EXPECT_EQ(pool.ExpectedHitTokens(two), 0);
  EXPECT_EQ(pool.ExpectedHitTokens(PromptPrefix{}), 0);
  auto picked = pool.Pick(PickStrategy::kRoundRobin, {}, &one);
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ(pool.ExpectedHitTokens(two), one.tokens.back());
  EXPECT_EQ(pool.ExpectedHitTokens(PromptPrefixOf("tenant-b", Chat({system}))), 0);
}

TEST(PrefixIndexTest, RemembersOnlyItsBoundOfPairs) {
  PrefixIndex index(3);
  const PromptPrefix p = PromptPrefixOf("", Chat({"sys", "u1", "a1", "u2"}));
  ASSERT_EQ(p.hashes.size(), 4u);
  index.Record(p, "a:1");
  EXPECT_EQ(index.size(), 3);
  // The oldest pair (the first message) went; the deepest remain.
  EXPECT_EQ(index.HitTokens(p, "a:1"), p.tokens[3]);
  EXPECT_EQ(index.HitTokens(PromptPrefixOf("", Chat({"sys"})), "a:1"), 0);
  EXPECT_EQ(index.HitTokens(p, "b:2"), 0);
}

TEST(WorkerPoolsTest, ConfigureParsesEntriesAndRejectsBadOnes) {
  WorkerPools pools(WorkerPoolsOptions{}, [] {});
  EXPECT_TRUE(pools.Configure({"qwen=127.0.0.1:1", "qwen=127.0.0.1:2", "nemotron=h:3"}).ok());
  ASSERT_NE(pools.Find("qwen"), nullptr);
  EXPECT_EQ(pools.Find("qwen")->endpoints()->size(), 2u);
  EXPECT_EQ(pools.Find("llama"), nullptr);

  WorkerPools bad(WorkerPoolsOptions{}, [] {});
  EXPECT_THAT(bad.Configure({"qwen"}).message(), HasSubstr("expected MODEL=HOST:PORT"));
  WorkerPools bad_dns(WorkerPoolsOptions{}, [] {});
  EXPECT_THAT(bad_dns.Configure({"qwen=dns:///workers"}).message(),
              HasSubstr("expected dns:///HOST:PORT"));
  WorkerPools empty(WorkerPoolsOptions{}, [] {});
  EXPECT_THAT(empty.Configure({}).message(), HasSubstr("--workers is empty"));
}

TEST(WorkerPoolsTest, DnsEntriesFollowTheResolverAndKeepTheLastGoodList) {
  WorkerPools pools(WorkerPoolsOptions{}, [] {});
  std::vector<std::string> answer = {"10.0.0.1:7001", "10.0.0.2:7001"};
  bool fail = false;
  pools.SetResolver(
      [&](const std::string& host, int port) -> absl::StatusOr<std::vector<std::string>> {
        EXPECT_EQ(host, "qwen-workers.tandem.svc");
        EXPECT_EQ(port, 7001);
        if (fail) return absl::UnavailableError("resolve: temporary failure");
        return answer;
      });
  pools.SetClientFactory([](const std::string& a) {
    return std::make_unique<FakeWorkerClient>(a, grpc::Status::OK,
                                              Info("qwen", tandem::v1::WorkerInfo::STATE_READY));
  });
  ASSERT_TRUE(pools.Configure({"qwen=dns:///qwen-workers.tandem.svc:7001"}).ok());
  auto list = pools.Find("qwen")->endpoints();
  ASSERT_EQ(list->size(), 2u);
  const Endpoint* kept = (*list)[1].get();
  // A pod goes, another comes: the survivor keeps its state (same object).
  answer = {"10.0.0.2:7001", "10.0.0.3:7001"};
  ASSERT_TRUE(pools.ResolveNow().ok());
  list = pools.Find("qwen")->endpoints();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].get(), kept);
  EXPECT_EQ((*list)[1]->address(), "10.0.0.3:7001");
  // Resolution fails: the last list stays.
  fail = true;
  EXPECT_FALSE(pools.ResolveNow().ok());
  EXPECT_EQ(pools.Find("qwen")->endpoints()->size(), 2u);
}

TEST(WorkerPoolsTest, GetaddrinfoResolvesLocalhost) {
  auto a = ResolveWithGetaddrinfo("localhost", 7001);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->empty());
  bool loopback = false;
  for (const auto& s : *a) loopback = loopback || s == "127.0.0.1:7001" || s == "[::1]:7001";
  EXPECT_TRUE(loopback);
}

}  // namespace
}  // namespace tandem::gateway
