#include "tools/bench/overhead_preset.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/json_text.h"
#include "common/status_macros.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tools/bench/channels.h"
#include "tools/bench/json_report.h"
#include "tools/bench/markdown.h"

namespace tandem::bench {

OverheadPreset::OverheadPreset(const Runner& runner, const RunSpec& base,
                               const OverheadOptions& options)
    : runner_(runner), base_(base), options_(options) {}

absl::Status OverheadPreset::Run(const OutputFiles& out) {
  RETURN_IF_ERROR(Prepare());
  MakeSpecs();
  RssSampler sampler(options_.gateway_pid);
  runner_.Warmup(direct_);
  runner_.Warmup(gw_unary_);
  runner_.Warmup(gw_stream_);
  // Concurrency 1, interleaved in three rounds so drift hits every series alike.
  c1_ = runner_.Interleaved({direct_, gw_unary_, gw_stream_, gw_stream_long_}, 3);
  RunThroughput();
  RunStreams();
  // RSS under sustainable load (warm-ups, concurrency 1, the concurrent streams), before the
  // sweep pushes the gateway past what it sustains.
  rss_load_kb_ = sampler.max_kb();
  RETURN_IF_ERROR(Sweep());
  sampler.Stop();
  rss_sweep_kb_ = sampler.max_kb();
  absl::SleepFor(absl::Seconds(1));
  if (options_.gateway_pid > 0) {
    ASSIGN_OR_RETURN(rss_after_kb_, RssKb(options_.gateway_pid));
  }

  std::cout << Summary() << sweep_table_ << "\n### Concurrency 1 runs\n\n"
            << MarkdownTable(c1_) << "\n### Throughput, sweep and stream runs\n\n";
  std::vector<RunResult> rest = throughput_;
  rest.insert(rest.end(), sweep_.begin(), sweep_.end());
  rest.push_back(streams_);
  std::cout << MarkdownTable(rest) << std::flush;
  std::vector<RunResult> all = c1_;
  all.insert(all.end(), rest.begin(), rest.end());
  return out.Write("overhead", ExtraJson(), all, sweep_,
                   "tandem-bench overhead: direct vs gateway, latency against offered load");
}

absl::Status OverheadPreset::Prepare() {
  const std::string& worker = options_.worker_address;
  if (worker.empty() || options_.gateway_address.empty()) {
    return absl::InvalidArgumentError(
        "--preset=overhead needs --worker_address and --gateway_address");
  }
  RETURN_IF_ERROR(runner_.WaitReady(Target::kWorker, worker));
  // The gateway routes with the built-in rules, so pin the model the worker serves.
  tandem::v1::WorkerInfo info;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s =
      tandem::v1::Worker::NewStub(grpc::CreateChannel(worker, CredentialsFor(Target::kWorker)))
          ->GetInfo(&context, {}, &info);
  if (!s.ok()) return FromGrpcStatus(s);
  model_ = info.model_name();
  RETURN_IF_ERROR(runner_.WaitReady(Target::kGateway, options_.gateway_address, model_));
  absl::SleepFor(absl::Milliseconds(300));  // let the gateway's first probes and scrapes settle
  if (options_.gateway_pid > 0) {
    ASSIGN_OR_RETURN(rss_idle_kb_, RssKb(options_.gateway_pid));
  }
  return absl::OkStatus();
}

void OverheadPreset::MakeSpecs() {
  base_.rate = 0;
  base_.concurrency = 1;
  direct_ = gw_unary_ = base_;
  direct_.target = Target::kWorker;
  direct_.address = options_.worker_address;
  direct_.api = Api::kStream;
  direct_.label = "direct";
  gw_unary_.target = Target::kGateway;
  gw_unary_.address = options_.gateway_address;
  gw_unary_.api = Api::kUnary;
  gw_unary_.model = model_;
  gw_unary_.label = "gateway unary";
  gw_stream_ = gw_unary_;
  gw_stream_.api = Api::kStream;
  gw_stream_.label = "gateway stream";
  gw_stream_long_ = gw_stream_;
  gw_stream_long_.max_tokens = 4 * base_.max_tokens;
  gw_stream_long_.label = "gateway stream x4";
}

void OverheadPreset::RunThroughput() {
  RunSpec d = direct_, g = gw_unary_;
  d.concurrency = g.concurrency = std::max(1, options_.throughput_inflight);
  d.label = "direct, many in flight";
  g.label = "gateway unary, many in flight";
  throughput_ = runner_.Interleaved({d, g}, 3);
}

void OverheadPreset::RunStreams() {
  RunSpec s = gw_stream_;
  s.label = "gateway streams";
  s.concurrency = std::max(1, options_.streams);
  s.requests = s.concurrency;
  streams_ = runner_.RunOnce(s);
  // Every stream must deliver the same number of completion tokens (fixed-length synthetic
  // answers): tokens / ok is checked against the concurrency-1 streams.
  const RunResult& gs = c1_[2];
  const double tokens_per_stream = gs.ok > 0 ? double(gs.completion_tokens) / gs.ok : 0;
  streams_clean_ =
      Clean(streams_) && streams_.ok == streams_.spec.concurrency &&
      std::abs(double(streams_.completion_tokens) - tokens_per_stream * streams_.ok) < 0.5;
}

absl::Status OverheadPreset::Sweep() {
  // Open loop, Poisson; direct and gateway (unary) at each rate.
  std::vector<double> rates = {500, 1000, 2000, 5000, 10000, 20000};
  if (!options_.rates.empty()) {
    ASSIGN_OR_RETURN(rates, ParseList("rates", options_.rates));
  }
  sweep_table_ =
      "\n### Rate sweep (open loop, Poisson; gateway unary vs direct)\n\n| offered (req/s) | "
      "direct "
      "achieved | gateway achieved | direct p99 (ms) | gateway p99 (ms) | added p99 (ms) | gateway "
      "codes | within bound |\n|---|---|---|---|---|---|---|---|\n";
  for (double rate : rates) {
    if (!SweepRate(rate) && !options_.sweep_past_failure) break;
    // An overloaded gateway may have marked the worker not ready; let it recover.
    RETURN_IF_ERROR(runner_.WaitReady(Target::kGateway, options_.gateway_address, model_));
  }
  return absl::OkStatus();
}

bool OverheadPreset::SweepRate(double rate) {
  RunSpec sd = direct_, sg = gw_unary_;
  sd.rate = sg.rate = rate;
  sd.poisson = sg.poisson = true;
  sd.requests = sg.requests = 0;
  sd.label = "direct";
  sg.label = "gateway unary";
  std::vector<RunResult> pair = runner_.Interleaved({sd, sg}, 3);
  RunResult rd = std::move(pair[0]);
  RunResult rg = std::move(pair[1]);
  const double added = rg.e2e_ms.p99 - rd.e2e_ms.p99;
  // Sustained: every request answered OK (none dropped by the client) at >= 90% of the
  // offered rate (Poisson counts vary by a few percent over a short run).
  const bool sustained = Clean(rd) && Clean(rg) && rg.ok == rg.issued && rd.ok == rd.issued &&
                         rg.RequestsPerSecond() >= 0.9 * rate &&
                         rd.RequestsPerSecond() >= 0.9 * rate;
  const bool within = sustained && added < options_.p99_bound_ms;
  if (within) best_rate_ = std::max(best_rate_, rate);
  absl::StrAppend(&sweep_table_, "| ", Fmt(rate), " | ", Fmt(rd.RequestsPerSecond()), " | ",
                  Fmt(rg.RequestsPerSecond()), " | ", Fmt(rd.e2e_ms.p99), " | ", Fmt(rg.e2e_ms.p99),
                  " | ", Fmt(added), " | ", CodesText(rg), " | ", within ? "yes" : "no", " |\n");
  json_sweep_.push_back(absl::StrCat("{\"rate\":", JsonNumber(rate),
                                     ",\"added_p99_ms\":", JsonNumber(added),
                                     ",\"sustained\":", sustained ? "true" : "false",
                                     ",\"within_bound\":", within ? "true" : "false", "}"));
  std::cerr << "done rate " << rate << (sustained ? "" : " (not sustained)") << "\n";
  sweep_.push_back(std::move(rd));
  sweep_.push_back(std::move(rg));
  return sustained;
}

namespace {

std::string Us(double ms) { return absl::StrFormat("%.0f us", ms * 1000); }

std::string Row(absl::string_view measure, absl::string_view direct, absl::string_view gateway,
                absl::string_view added, absl::string_view target) {
  return absl::StrCat("| ", measure, " | ", direct, " | ", gateway, " | ", added, " | ", target,
                      " |\n");
}

// "183 us" or "-" for a process not watched.
std::string CpuUs(const RunResult& r, const std::string& label) {
  const double v = r.CpuMicrosPerRequest(label);
  return v < 0 ? std::string("-") : absl::StrFormat("%.0f us", v);
}

// "gateway/worker 1.42" of one run; "-" without both.
std::string CpuRatio(const RunResult& r) {
  const double g = r.CpuMicrosPerRequest("gateway"), w = r.CpuMicrosPerRequest("worker");
  return g < 0 || w <= 0 ? std::string("-") : absl::StrFormat("gateway/worker %.2f", g / w);
}

}  // namespace

constexpr double kMinChunksForPerChunkCost = 16;

double OverheadPreset::GatewayCpuPerChunk() const {
  const RunResult& s = c1_[2];
  const RunResult& l = c1_[3];
  const double cs = s.CpuMicrosPerRequest("gateway"), cl = l.CpuMicrosPerRequest("gateway");
  if (cs < 0 || cl < 0 || s.ok <= 0 || l.ok <= 0) return -1;
  // Chunks, not tokens: a worker coalesces tokens that come faster than they are read. Each
  // stream's gaps are its chunks but one.
  auto chunks_per_stream = [](const RunResult& r) { return double(r.gap_ms.count) / r.ok + 1; };
  const double chunks = chunks_per_stream(l) - chunks_per_stream(s);
  // A few chunks more are noise over the streams' own cost, not a per-chunk cost: a worker with
  // no simulated delay coalesces most of an answer (scripts/bench_proxy_floor.sh paces one).
  return chunks >= kMinChunksForPerChunkCost ? (cl - cs) / chunks : -1;
}

std::string OverheadPreset::CpuSummary() const {
  const RunResult& d = c1_[0];
  const RunResult& gu = c1_[1];
  if (gu.cpu_seconds.count("gateway") == 0) return "";
  const RunResult& td = throughput_[0];
  const RunResult& tg = throughput_[1];
  const std::string many = absl::StrCat("c=", tg.spec.concurrency);
  const double per_chunk = GatewayCpuPerChunk();
  return absl::StrCat(
      Row("gateway CPU per unary request, c=1", "", CpuUs(gu, "gateway"), CpuRatio(gu),
          "<= 60 us, <= 0.5x the worker's"),
      Row(absl::StrCat("gateway CPU per unary request, ", many), "", CpuUs(tg, "gateway"),
          CpuRatio(tg), "<= 60 us, <= 0.5x the worker's"),
      Row("worker CPU per request, c=1", CpuUs(d, "worker"), CpuUs(gu, "worker"), "", ""),
      Row(absl::StrCat("worker CPU per request, ", many), CpuUs(td, "worker"), CpuUs(tg, "worker"),
          "", ""),
      Row("gateway CPU per relayed stream chunk", "",
          per_chunk < 0 ? std::string("-") : absl::StrFormat("%.1f us", per_chunk), "", "<= 5 us"));
}

std::string OverheadPreset::Summary() const {
  const RunResult& d = c1_[0];
  const RunResult& gu = c1_[1];
  const RunResult& gs = c1_[2];
  const RunResult& td = throughput_[0];
  const RunResult& tg = throughput_[1];
  const int pid = options_.gateway_pid;
  const double ratio =
      td.RequestsPerSecond() > 0 ? tg.RequestsPerSecond() / td.RequestsPerSecond() : 0;
  auto mb = [](int64_t kb) { return absl::StrFormat("%.1f MB", kb / 1024.0); };
  return absl::StrCat(
      "\n### Gateway overhead (", base_.prompt, " prompt, max_tokens ", base_.max_tokens,
      "; direct = Worker.Generate on the same worker)\n\n"
      "| measure | direct | gateway | added / ratio | target |\n|---|---|---|---|---|\n",
      Row("mean latency, unary, c=1", Us(d.e2e_ms.mean), Us(gu.e2e_ms.mean),
          Us(gu.e2e_ms.mean - d.e2e_ms.mean), "added <= 100 us"),
      Row("p50 latency, unary, c=1", Us(d.e2e_ms.p50), Us(gu.e2e_ms.p50),
          Us(gu.e2e_ms.p50 - d.e2e_ms.p50), ""),
      Row("p99 latency, unary, c=1", Us(d.e2e_ms.p99), Us(gu.e2e_ms.p99),
          Us(gu.e2e_ms.p99 - d.e2e_ms.p99), "added <= 250 us"),
      Row("mean / p99 latency, stream, c=1", Us(d.e2e_ms.mean) + " / " + Us(d.e2e_ms.p99),
          Us(gs.e2e_ms.mean) + " / " + Us(gs.e2e_ms.p99),
          Us(gs.e2e_ms.mean - d.e2e_ms.mean) + " / " + Us(gs.e2e_ms.p99 - d.e2e_ms.p99), ""),
      Row("TTFT p50 / p99, stream", Us(d.ttft_ms.p50) + " / " + Us(d.ttft_ms.p99),
          Us(gs.ttft_ms.p50) + " / " + Us(gs.ttft_ms.p99),
          Us(gs.ttft_ms.p50 - d.ttft_ms.p50) + " / " + Us(gs.ttft_ms.p99 - d.ttft_ms.p99), ""),
      Row("chunk gap p50 / p99, stream", Us(d.gap_ms.p50) + " / " + Us(d.gap_ms.p99),
          Us(gs.gap_ms.p50) + " / " + Us(gs.gap_ms.p99),
          Us(gs.gap_ms.p50 - d.gap_ms.p50) + " / " + Us(gs.gap_ms.p99 - d.gap_ms.p99), ""),
      Row(absl::StrCat("throughput, unary, c=", tg.spec.concurrency),
          absl::StrCat(Fmt(td.RequestsPerSecond()), " req/s"),
          absl::StrCat(Fmt(tg.RequestsPerSecond()), " req/s (", CodesText(tg), ")"),
          absl::StrFormat("%.0f%% of direct", ratio * 100), ">= 85% of direct"),
      CpuSummary(),
      Row(absl::StrCat(streams_.spec.concurrency, " concurrent streams"), "",
          absl::StrCat(streams_.ok, " OK, ", streams_.completion_tokens, " tokens (",
                       CodesText(streams_), ")",
                       streams_clean_ ? ", none lost" : ", LOST OR FAILED"),
          "", ">= 512, no lost chunk"),
      Row(absl::StrCat("highest rate with added p99 < ", Fmt(options_.p99_bound_ms), " ms"), "",
          best_rate_ > 0 ? absl::StrCat(Fmt(best_rate_), " req/s") : "none of the rates", "", ""),
      Row("gateway RSS idle / max under sustained load / max in the sweep / 1 s after", "",
          pid > 0 ? absl::StrCat(mb(rss_idle_kb_), " / ", mb(rss_load_kb_), " / ",
                                 mb(rss_sweep_kb_), " / ", mb(rss_after_kb_))
                  : "no --gateway_pid",
          pid > 0 && rss_idle_kb_ > 0
              ? absl::StrFormat("after/idle %.2f", double(rss_after_kb_) / rss_idle_kb_)
              : "",
          "after <= 2x idle"));
}

std::string OverheadPreset::ExtraJson() const {
  const RunResult& d = c1_[0];
  const RunResult& gu = c1_[1];
  const RunResult& gs = c1_[2];
  return absl::StrCat(
      ",\n\"overhead\":{\"worker_address\":", QuoteForJson(options_.worker_address),
      ",\"gateway_address\":", QuoteForJson(options_.gateway_address),
      ",\"model\":", QuoteForJson(model_),
      ",\"added_p50_ms_unary\":", JsonNumber(gu.e2e_ms.p50 - d.e2e_ms.p50),
      ",\"added_p99_ms_unary\":", JsonNumber(gu.e2e_ms.p99 - d.e2e_ms.p99),
      ",\"added_p50_ms_stream\":", JsonNumber(gs.e2e_ms.p50 - d.e2e_ms.p50),
      ",\"added_p99_ms_stream\":", JsonNumber(gs.e2e_ms.p99 - d.e2e_ms.p99),
      ",\"added_ttft_ms_p50\":", JsonNumber(gs.ttft_ms.p50 - d.ttft_ms.p50),
      ",\"added_ttft_ms_p99\":", JsonNumber(gs.ttft_ms.p99 - d.ttft_ms.p99),
      ",\"added_chunk_gap_ms_p50\":", JsonNumber(gs.gap_ms.p50 - d.gap_ms.p50),
      ",\"added_chunk_gap_ms_p99\":", JsonNumber(gs.gap_ms.p99 - d.gap_ms.p99),
      ",\"p99_bound_ms\":", JsonNumber(options_.p99_bound_ms),
      ",\"added_mean_ms_unary\":", JsonNumber(gu.e2e_ms.mean - d.e2e_ms.mean),
      ",\"throughput_inflight\":", throughput_[1].spec.concurrency,
      ",\"throughput_rps_direct\":", JsonNumber(throughput_[0].RequestsPerSecond()),
      ",\"throughput_rps_gateway\":", JsonNumber(throughput_[1].RequestsPerSecond()),
      ",\"gateway_cpu_us_per_unary_c1\":", JsonNumber(gu.CpuMicrosPerRequest("gateway")),
      ",\"worker_cpu_us_per_unary_c1\":", JsonNumber(gu.CpuMicrosPerRequest("worker")),
      ",\"gateway_cpu_us_per_unary_many\":",
      JsonNumber(throughput_[1].CpuMicrosPerRequest("gateway")),
      ",\"worker_cpu_us_per_unary_many\":",
      JsonNumber(throughput_[1].CpuMicrosPerRequest("worker")),
      ",\"gateway_cpu_us_per_chunk\":", JsonNumber(GatewayCpuPerChunk()),
      ",\"highest_rate_within_bound\":", JsonNumber(best_rate_), ",\"sweep\":[",
      absl::StrJoin(json_sweep_, ","), "]",
      ",\"streams\":{\"concurrency\":", streams_.spec.concurrency, ",\"ok\":", streams_.ok,
      ",\"completion_tokens\":", streams_.completion_tokens,
      ",\"none_lost\":", streams_clean_ ? "true" : "false", "}",
      ",\"gateway_rss_kb_idle\":", rss_idle_kb_, ",\"gateway_rss_kb_load_max\":", rss_load_kb_,
      ",\"gateway_rss_kb_after\":", rss_after_kb_, ",\"gateway_rss_kb_sweep_max\":", rss_sweep_kb_,
      "}");
}

}  // namespace tandem::bench
