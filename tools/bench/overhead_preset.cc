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
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/json_text.h"
#include "common/status_macros.h"
#include "tandem/v1/worker.grpc.pb.h"
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
  c1_ = runner_.Interleaved({direct_, gw_unary_, gw_stream_}, 3);
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
            << MarkdownTable(c1_) << "\n### Sweep and stream runs\n\n";
  std::vector<RunResult> rest = sweep_;
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
      tandem::v1::Worker::NewStub(grpc::CreateChannel(worker, grpc::InsecureChannelCredentials()))
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

std::string OverheadPreset::Summary() const {
  const RunResult& d = c1_[0];
  const RunResult& gu = c1_[1];
  const RunResult& gs = c1_[2];
  auto us = [](double ms) { return absl::StrFormat("%.1f us", ms * 1000); };
  const int pid = options_.gateway_pid;
  return absl::StrCat(
      "\n### Gateway overhead (concurrency 1, ", base_.prompt, " prompt, max_tokens ",
      base_.max_tokens,
      "; direct = Worker.Generate on the same worker)\n\n| measure | value | "
      "target |\n|---|---|---|\n| added p50, unary | ",
      us(gu.e2e_ms.p50 - d.e2e_ms.p50), " | <= 50 us |\n| added p99, unary | ",
      us(gu.e2e_ms.p99 - d.e2e_ms.p99), " | <= 200 us |\n| added p50, stream | ",
      us(gs.e2e_ms.p50 - d.e2e_ms.p50), " | <= 50 us |\n| added p99, stream | ",
      us(gs.e2e_ms.p99 - d.e2e_ms.p99), " | <= 200 us |\n| added TTFT p50 / p99 | ",
      us(gs.ttft_ms.p50 - d.ttft_ms.p50), " / ", us(gs.ttft_ms.p99 - d.ttft_ms.p99),
      " | |\n| added per-chunk gap p50 / p99 | ", us(gs.gap_ms.p50 - d.gap_ms.p50), " / ",
      us(gs.gap_ms.p99 - d.gap_ms.p99), " | p99 <= 10 us |\n| highest rate with added p99 < ",
      Fmt(options_.p99_bound_ms), " ms | ",
      best_rate_ > 0 ? absl::StrCat(Fmt(best_rate_), " req/s") : "none of the rates",
      " | >= 10,000 req/s |\n| ", streams_.spec.concurrency, " concurrent streams | ", streams_.ok,
      " OK, ", streams_.completion_tokens, " tokens (", CodesText(streams_), ")",
      streams_clean_ ? ", none lost" : ", LOST OR FAILED", " | >= 512, no lost chunk |\n",
      "| gateway RSS idle / max under sustained load (c=1, streams) / max in the sweep / 1 s after "
      "| ",
      pid > 0
          ? absl::StrFormat("%.1f MB / %.1f MB / %.1f MB / %.1f MB", rss_idle_kb_ / 1024.0,
                            rss_load_kb_ / 1024.0, rss_sweep_kb_ / 1024.0, rss_after_kb_ / 1024.0)
          : "no --gateway_pid",
      " | <= 64 MB idle |\n");
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
