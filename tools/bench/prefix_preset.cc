#include "tools/bench/prefix_preset.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/json_text.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tools/bench/json_report.h"
#include "tools/bench/markdown.h"

namespace tandem::bench {
namespace {

using Stub = tandem::v1::Gateway::Stub;

// Plain words: about one token each in the released tokenizers.
constexpr const char* kWords[] = {
    "the",    "parcel",  "depot",  "route",  "driver", "customer", "order",   "invoice", "late",
    "early",  "weather", "storm",  "bridge", "river",  "city",     "north",   "south",   "east",
    "west",   "truck",   "train",  "ship",   "port",   "crane",    "box",     "label",   "scan",
    "track",  "status",  "delay",  "refund", "claim",  "policy",   "rule",    "answer",  "polite",
    "short",  "clear",   "never",  "always", "check",  "verify",   "account", "address", "street",
    "number", "code",    "phone",  "email",  "reply",  "question", "problem", "solve",   "step",
    "plan",   "tool",    "search", "fetch",  "result", "table",    "file",    "report",  "summary",
    "detail", "market",  "price",  "stock",  "supply", "demand",   "season",  "winter",  "summer",
    "green",  "blue",    "red",    "small",  "large",  "heavy",    "light",   "fast"};

std::string Words(int n, std::mt19937& rng) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i == 0 ? "" : " ", kWords[pick(rng)]);
  return out;
}

void Add(tandem::v1::GenerateRequest* r, const char* role, const std::string& text) {
  auto* m = r->add_messages();
  m->set_role(role);
  m->add_content()->set_text(text);
}

// Calls and what they measured, from every worker thread of one workload.
class Tally {
 public:
  // The answer's text, or nullopt when the call failed.
  std::optional<std::string> Call(Stub* stub, const tandem::v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    tandem::v1::GenerateResponse resp;
    const grpc::Status s = stub->Generate(&ctx, req, &resp);
    absl::MutexLock l(&mu_);
    if (!s.ok()) {
      ++result_.failed;
      return std::nullopt;
    }
    ttft_.push_back(resp.timings().time_to_first_token_seconds() * 1e3);
    result_.prompt_tokens += resp.usage().prompt_tokens();
    result_.cached_tokens += resp.usage().cached_prompt_tokens();
    return resp.text();
  }
  PrefixResult Done(std::string target, std::string workload) {
    absl::MutexLock l(&mu_);
    result_.target = std::move(target);
    result_.workload = std::move(workload);
    result_.ttft_ms = Summarize(ttft_);
    return result_;
  }

 private:
  absl::Mutex mu_;
  std::vector<double> ttft_ ABSL_GUARDED_BY(mu_);
  PrefixResult result_ ABSL_GUARDED_BY(mu_);
};

// Runs job(i) for i in [0, jobs) on `concurrency` threads.
void RunJobs(int jobs, int concurrency, const std::function<void(int)>& job) {
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, concurrency); ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < jobs; i = next++) job(i);
    });
  }
  for (auto& t : threads) t.join();
}

tandem::v1::GenerateRequest Base(const PrefixOptions& o) {
  tandem::v1::GenerateRequest r;
  r.mutable_hints()->set_model(o.model);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(o.max_tokens);
  return r;
}

// Conversations that share one system prompt, each growing turn by turn.
PrefixResult Chat(Stub* stub, const PrefixOptions& o, uint32_t seed, const std::string& label) {
  std::mt19937 rng(seed);
  const std::string system = Words(o.system_words, rng);
  Tally tally;
  RunJobs(o.conversations, o.concurrency, [&](int c) {
    std::mt19937 own(seed * 1000 + static_cast<uint32_t>(c));
    tandem::v1::GenerateRequest req = Base(o);
    Add(&req, "system", system);
    Add(&req, "user", Words(40 + o.private_words, own));
    for (int turn = 0; turn < o.turns; ++turn) {
      const std::optional<std::string> answer = tally.Call(stub, req);
      if (!answer) return;
      Add(&req, "assistant", *answer);
      Add(&req, "user", Words(30, own));
    }
  });
  return tally.Done(label, "chat");
}

// Agent loops: a task under a long instruction, then steps that each append the model's step and
// a tool's result, resending everything.
PrefixResult Agent(Stub* stub, const PrefixOptions& o, uint32_t seed, const std::string& label) {
  std::mt19937 rng(seed + 7);
  const std::string instructions = Words(o.system_words / 2, rng);
  Tally tally;
  RunJobs(o.agent_loops, o.concurrency, [&](int a) {
    std::mt19937 own(seed * 2000 + static_cast<uint32_t>(a));
    tandem::v1::GenerateRequest req = Base(o);
    Add(&req, "system", instructions);
    Add(&req, "user", Words(60, own));
    for (int step = 0; step < o.agent_steps; ++step) {
      const std::optional<std::string> answer = tally.Call(stub, req);
      if (!answer) return;
      Add(&req, "assistant", *answer);
      Add(&req, "user", absl::StrCat("Tool result: ", Words(150, own)));
    }
  });
  return tally.Done(label, "agent");
}

// Independent prompts: nothing to resume from.
PrefixResult Unshared(Stub* stub, const PrefixOptions& o, uint32_t seed, const std::string& label) {
  Tally tally;
  RunJobs(o.unshared_requests, o.concurrency, [&](int i) {
    std::mt19937 own(seed * 3000 + static_cast<uint32_t>(i));
    tandem::v1::GenerateRequest req = Base(o);
    Add(&req, "user", Words(500, own));
    tally.Call(stub, req);
  });
  return tally.Done(label, "unshared");
}

std::string Table(const std::vector<PrefixResult>& results) {
  std::string out =
      "| workload | target | TTFT p50 (ms) | TTFT p99 (ms) | prompt tokens | computed | from cache "
      "| failed |\n|---|---|---|---|---|---|---|---|\n";
  for (const PrefixResult& r : results) {
    const double share =
        r.prompt_tokens > 0 ? 100.0 * static_cast<double>(r.cached_tokens) / r.prompt_tokens : 0;
    absl::StrAppendFormat(&out, "| %s | %s | %s | %s | %d | %d | %.1f%% | %d |\n", r.workload,
                          r.target, Fmt(r.ttft_ms.p50), Fmt(r.ttft_ms.p99), r.prompt_tokens,
                          r.prompt_tokens - r.cached_tokens, share, r.failed);
  }
  return out;
}

std::string Json(const std::vector<PrefixResult>& results) {
  std::vector<std::string> rows;
  for (const PrefixResult& r : results) {
    rows.push_back(absl::StrCat(
        "{\"workload\":", QuoteForJson(r.workload), ",\"target\":", QuoteForJson(r.target),
        ",\"ttft_ms_p50\":", JsonNumber(r.ttft_ms.p50),
        ",\"ttft_ms_p99\":", JsonNumber(r.ttft_ms.p99), ",\"prompt_tokens\":", r.prompt_tokens,
        ",\"cached_tokens\":", r.cached_tokens, ",\"failed\":", r.failed, "}"));
  }
  return absl::StrCat("{\"preset\":\"prefix\",\"results\":[\n", absl::StrJoin(rows, ",\n"),
                      "\n]}\n");
}

}  // namespace

absl::StatusOr<std::vector<PrefixTarget>> ParsePrefixTargets(const std::string& flag) {
  std::vector<PrefixTarget> out;
  for (absl::string_view entry : absl::StrSplit(flag, ';', absl::SkipEmpty())) {
    const size_t eq = entry.rfind('=');
    if (eq == absl::string_view::npos || eq == 0 || eq + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefix_targets: '", entry, "' is not LABEL=HOST:PORT"));
    }
    out.push_back({std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1))});
  }
  if (out.empty()) return absl::InvalidArgumentError("--prefix_targets names no gateway");
  return out;
}

absl::Status RunPrefixPreset(const std::vector<PrefixTarget>& targets, const PrefixOptions& options,
                             const std::string& json_path) {
  std::vector<PrefixResult> results;
  uint32_t seed = 1;
  for (const PrefixTarget& t : targets) {
    auto stub = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(t.address, grpc::InsecureChannelCredentials()));
    // Texts of this target's own: the workers' caches hold nothing of them yet.
    ++seed;
    for (const auto& workload : {Chat, Agent, Unshared}) {
      results.push_back(workload(stub.get(), options, seed, t.label));
      std::cerr << "done " << t.label << " " << results.back().workload << "\n";
    }
  }
  std::cout << Table(results) << std::flush;
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << Json(results);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", json_path));
  }
  return absl::OkStatus();
}

}  // namespace tandem::bench
