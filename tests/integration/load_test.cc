// Bounded load run with faults (ctest label `load`): steady mixed traffic through the gateway
// with the shipped default policy for TANDEM_LOAD_SECONDS (default 20 s) while a worker is
// killed with SIGKILL and restarted on its address twice. Every request must be accounted for:
// it succeeded, or it failed with a clear status; none hung past its deadline, none was lost,
// no stream lost a chunk. Prints the counts.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tests/support/stack.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using tandem::v1::GenerateRequest;

struct Tally {
  absl::Mutex mu;
  std::map<std::string, int64_t> by_status ABSL_GUARDED_BY(mu);
  int64_t sent ABSL_GUARDED_BY(mu) = 0;
  int64_t streams_short ABSL_GUARDED_BY(mu) = 0;  // OK streams missing tokens
  int64_t failovers ABSL_GUARDED_BY(mu) = 0;
  int64_t retries ABSL_GUARDED_BY(mu) = 0;
  void Add(const grpc::Status& s, const tandem::v1::Recovery& r) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock l(&mu);
    ++by_status[GrpcCodeName(s.error_code())];
    failovers += r.failovers();
    retries += r.retries();
  }
};

// Answers longer than any max_tokens here: every request must end by length with exactly its
// max_tokens, also after a failover (whose longer prompt would change a prompt-derived length).
constexpr char kAnswerLength[] = "--synthetic_output_tokens=1000";

GenerateRequest Request(std::mt19937& rng, int32_t max_tokens) {
  static const char* kTexts[] = {
      "hey, how is it going?", "Write a Python function that merges two sorted lists.",
      "Summarize the plot of Hamlet in two sentences.", "what's the weather like tomorrow",
      "Prove that there are infinitely many primes."};
  GenerateRequest r;
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text(kTexts[rng() % 5]);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  if (rng() % 3 == 0) r.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  return r;
}

TEST(LoadTest, SteadyTrafficSurvivesWorkerKillsAndRestartsWithEveryRequestAccountedFor) {
  const char* env = std::getenv("TANDEM_LOAD_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 20;
  ASSERT_GT(seconds, 0);

  // Two replicas per model, realistic simulated timing (~7 ms per decode step).
  std::map<std::string, Server> workers;
  std::vector<std::string> entries;
  for (const std::string name : {"qwen-a", "qwen-b", "nemotron-a", "nemotron-b"}) {
    const std::string model = name.substr(0, name.find('-'));
    auto w = StartWorker(model, {"--synthetic_time_scale=1", kAnswerLength});
    ASSERT_TRUE(w.ok()) << w.status();
    entries.push_back(model + "=" + w->grpc_address);
    workers[name] = std::move(*w);
  }
  auto gateway =
      StartGateway(entries, {"--policy=" + tandem::testing::SourcePath("/policies/default.yaml")});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  ASSERT_TRUE(WaitForHealth(gateway->grpc_address, "model/qwen", true).ok());
  ASSERT_TRUE(WaitForHealth(gateway->grpc_address, "model/nemotron", true).ok());
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(gateway->grpc_address, grpc::InsecureChannelCredentials()));

  Tally tally;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  constexpr int kClients = 8;
  constexpr auto kDeadline = std::chrono::seconds(20);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      while (!stop) {
        const int32_t max_tokens = 8 + static_cast<int32_t>(rng() % 40);
        const GenerateRequest req = Request(rng, max_tokens);
        {
          absl::MutexLock l(&tally.mu);
          ++tally.sent;
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
        if (c % 2 == 0) {
          tandem::v1::GenerateResponse resp;
          const grpc::Status s = stub->Generate(&ctx, req, &resp);
          tally.Add(s, resp.recovery());
          if (s.ok() && resp.usage().completion_tokens() != max_tokens) {
            absl::MutexLock l(&tally.mu);
            ++tally.streams_short;
          }
        } else {
          auto reader = stub->GenerateStream(&ctx, req);
          tandem::v1::GenerateStreamChunk chunk, last;
          std::string text;
          while (reader->Read(&chunk)) {
            last = chunk;
            text += chunk.text();
          }
          const grpc::Status s = reader->Finish();
          tally.Add(s, last.recovery());
          // The whole answer arrived: every requested token, ending with a finish reason.
          if (s.ok() && (last.usage().completion_tokens() != max_tokens || text.empty() ||
                         last.finish_reason() == tandem::v1::FINISH_REASON_UNSPECIFIED)) {
            absl::MutexLock l(&tally.mu);
            ++tally.streams_short;
          }
        }
      }
    });
  }

  // Faults: at 1/4 and 3/5 of the run, kill a worker and restart it on its address.
  const auto start = std::chrono::steady_clock::now();
  auto wait_until = [&](double fraction) {
    std::this_thread::sleep_until(
        start + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000 * fraction)));
  };
  int kills = 0;
  for (const auto& [fraction, name] :
       std::vector<std::pair<double, std::string>>{{0.25, "qwen-a"}, {0.6, "nemotron-b"}}) {
    wait_until(fraction);
    Server& w = workers[name];
    const std::string address = w.grpc_address;
    const std::string model = name.substr(0, name.find('-'));
    w.process->Signal(SIGKILL);
    ASSERT_NE(w.process->Wait(absl::Seconds(10)), -1);
    ++kills;
    wait_until(fraction + 0.05);
    auto again =
        StartWorker(model, {"--synthetic_time_scale=1", kAnswerLength, "--listen=" + address});
    ASSERT_TRUE(again.ok()) << again.status();
    workers[name] = std::move(*again);
    std::printf("[load] killed and restarted %s (%s) at %.0f%% of the run\n", name.c_str(),
                address.c_str(), fraction * 100);
  }
  wait_until(1.0);
  stop = true;
  for (auto& t : clients) t.join();

  absl::MutexLock l(&tally.mu);  // the clients are gone; for the annotations
  int64_t accounted = 0;
  std::printf("[load] %d s, %d clients, %d kills: %lld requests\n", seconds, kClients, kills,
              static_cast<long long>(tally.sent));
  for (const auto& [status, n] : tally.by_status) {
    std::printf("[load]   %-20s %lld\n", status.c_str(), static_cast<long long>(n));
    accounted += n;
  }
  std::printf("[load]   retries %lld, mid-stream failovers %lld, short answers %lld\n",
              static_cast<long long>(tally.retries), static_cast<long long>(tally.failovers),
              static_cast<long long>(tally.streams_short));
  EXPECT_EQ(accounted, tally.sent);
  EXPECT_EQ(tally.streams_short, 0);
  // None hung: nothing ran into the client's deadline.
  EXPECT_EQ(tally.by_status.count("DEADLINE_EXCEEDED"), 0u);
  // Failures carry a clear status: load (RESOURCE_EXHAUSTED) or a worker gone with nowhere to
  // go (UNAVAILABLE); never an unexplained one.
  for (const auto& [status, n] : tally.by_status) {
    EXPECT_TRUE(status == "OK" || status == "UNAVAILABLE" || status == "RESOURCE_EXHAUSTED")
        << status << " x" << n;
  }
  EXPECT_GE(tally.by_status["OK"], tally.sent * 99 / 100);
  // The gateway counted exactly what the clients sent.
  auto text = HttpGet(gateway->metrics_address, "/metrics");
  ASSERT_TRUE(text.ok());
  double served = 0;
  for (const auto& [status, n] : tally.by_status) {
    for (const char* model : {"qwen", "nemotron", "none"}) {
      for (const char* klass :
           {"accuracy_critical", "latency_critical", "long_context", "pinned", "none"}) {
        served += MetricValue(*text, "tandem_gateway_requests_total",
                              {{"model_name", model}, {"class", klass}, {"code", status}})
                      .value_or(0);
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(served), tally.sent);
}

}  // namespace
}  // namespace tandem::testing
