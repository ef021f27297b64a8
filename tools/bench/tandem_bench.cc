// tandem-bench: load generator for the gateway (tandem.v1.Gateway Generate / GenerateStream) and
// for a worker directly (tandem.v1.Worker Generate), on gRPC's callback API: one process drives
// thousands of concurrent calls without a thread each.
//
//   tandem-bench --target=gateway --address=127.0.0.1:7000 --api=stream --concurrency=8
//   tandem-bench --target=worker --address=127.0.0.1:7101 --rate=1000 --arrival=poisson
//   tandem-bench ... --rates=100,1000,5000 --json=out.json --svg=out.svg
//   tandem-bench --preset=seeds --address=GATEWAY
//   tandem-bench --preset=overhead --worker_address=W --gateway_address=G --gateway_pid=PID
//
// Open loop (--rate, fixed or Poisson arrivals): latency counts from each request's scheduled
// start, so a client that falls behind shows up as latency instead of lowering the load.
// Closed loop (--concurrency): N calls in flight, each completion starts the next.
//
// --check_text (plain runs): requests are greedy (temperature 0), and the text of every OK answer
// is compared with a fault-free reference for the same request: the text of an OK answer the
// gateway neither retried nor failed over (Recovery). Against a deterministic engine (the
// synthetic one), a failed-over answer must read exactly as an uninterrupted one.
//
// This file has the flags; the rest is in this folder: driver.h (the calls of one run),
// runner.h (runs, rounds, warm-ups), plain_run.h and the presets (seeds_preset.h,
// overhead_preset.h), and the writers of the results (markdown.h, json_report.h, svg_plot.h,
// output_files.h).

#include <sys/prctl.h>

#include <fstream>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "tools/bench/driver.h"
#include "tools/bench/output_files.h"
#include "tools/bench/overhead_preset.h"
#include "tools/bench/plain_run.h"
#include "tools/bench/prefix_preset.h"
#include "tools/bench/run_spec.h"
#include "tools/bench/runner.h"
#include "tools/bench/seeds_preset.h"
#include "tools/bench/text_check.h"

ABSL_FLAG(std::string, preset, "", "'' (one run or one sweep), 'seeds', 'overhead' or 'prefix'");
ABSL_FLAG(std::string, prefix_targets, "",
          "prefix: the gateways to compare, LABEL=HOST:PORT entries separated by ';'");
ABSL_FLAG(int, prefix_conversations, 8, "prefix: chat conversations");
ABSL_FLAG(int, prefix_turns, 6, "prefix: turns per chat conversation");
ABSL_FLAG(int, prefix_system_words, 2000,
          "prefix: words of the chat's shared system prompt (the agent's instructions: half)");
ABSL_FLAG(int, prefix_private_words, 0,
          "prefix: words of a document each chat conversation sends in its first turn (its own "
          "context, held by no other conversation)");
ABSL_FLAG(int, prefix_agent_loops, 4, "prefix: agent loops");
ABSL_FLAG(int, prefix_agent_steps, 8, "prefix: steps per agent loop");
ABSL_FLAG(int, prefix_unshared, 32, "prefix: independent prompts of the unshared workload");
ABSL_FLAG(int, prefix_concurrency, 4, "prefix: conversations, loops or prompts in flight");
ABSL_FLAG(std::string, target, "gateway",
          "gateway (tandem.v1.Gateway), worker (tandem.v1.Worker) or openai (POST "
          "/v1/chat/completions streamed, thinking off: a gateway's --http_listen or an "
          "OpenAI-compatible engine such as llama-server; closed loop)");
ABSL_FLAG(std::string, address, "127.0.0.1:7000", "HOST:PORT of the target");
ABSL_FLAG(std::string, api, "stream",
          "stream (GenerateStream; Worker.Generate) or unary (Gateway.Generate; on a worker the "
          "stream is read to its end and only end-to-end latency is reported)");
ABSL_FLAG(std::string, model, "", "pin the model (hints.model) on the gateway; '' lets it route");
ABSL_FLAG(std::string, prompt, "short",
          "prompt size: short (~16 tokens), medium (~128), long (~700)");
ABSL_FLAG(int, max_tokens, 64, "sampling.max_tokens of every request");
ABSL_FLAG(double, rate, 0, "open loop: requests per second (0: closed loop)");
ABSL_FLAG(std::string, arrival, "poisson", "open-loop arrivals: poisson or fixed");
ABSL_FLAG(int, concurrency, 1, "closed loop: calls in flight");
ABSL_FLAG(std::string, rates, "", "sweep of open-loop rates, e.g. 100,1000,5000");
ABSL_FLAG(std::string, concurrencies, "", "sweep of closed-loop concurrencies, e.g. 1,2,4,8");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5), "length of each run (when --requests=0)");
ABSL_FLAG(int, requests, 0, "requests per run (0: run for --duration)");
ABSL_FLAG(int, warmup_requests, 50, "requests before each series, not measured");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60), "deadline of each call");
ABSL_FLAG(int, max_inflight, 20000,
          "open loop: arrivals beyond this many in flight are dropped "
          "and counted as CLIENT_OVERLOAD");
ABSL_FLAG(int, channels, 1, "gRPC channels (TCP connections) to spread calls over");
ABSL_FLAG(uint64_t, seed, 1, "seed of Poisson arrivals");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");
ABSL_FLAG(bool, check_text, false,
          "plain runs: send greedy requests (sampling.temperature 0) and compare the text of "
          "every OK answer with a fault-free reference for the same request (an OK answer with "
          "no retry or failover in its Recovery); mismatches are counted in the output and in "
          "--json (text_check). For deterministic engines such as the synthetic one");
ABSL_FLAG(std::string, svg, "", "write a plot of latency percentiles against load to this file");
ABSL_FLAG(absl::Duration, ready_timeout, absl::Seconds(20),
          "wait this long for the target to be ready");
// Presets.
ABSL_FLAG(std::string, models, "qwen,nemotron",
          "seeds: models to pin (plus the gateway's routing)");
ABSL_FLAG(int, iterations, 5, "seeds: iterations per prompt size and per concurrency level");
ABSL_FLAG(std::string, cpu_pids, "",
          "processes whose CPU time (user + system, /proc/PID/stat) every run reports per OK "
          "request, as LABEL=PID,... e.g. gateway=1234,worker=1235");
ABSL_FLAG(std::string, write_grpc_request, "",
          "write the request of --target, --prompt, --max_tokens and --model as one gRPC "
          "length-prefixed message to this file (for h2load -d), and exit");
ABSL_FLAG(std::string, worker_address, "", "overhead: the worker called directly");
ABSL_FLAG(std::string, gateway_address, "", "overhead: a gateway in front of that same worker");
ABSL_FLAG(int, gateway_pid, 0, "overhead: gateway process id, for its RSS (/proc/PID/status)");
ABSL_FLAG(int, streams, 512, "overhead: concurrent gateway streams checked for lost chunks");
ABSL_FLAG(int, throughput_inflight, 128,
          "overhead: calls in flight of the throughput comparison (direct vs gateway unary)");
ABSL_FLAG(bool, sweep_past_failure, false,
          "overhead: keep sweeping after the first rate that is not sustained (errors, drops or "
          "< 90% of the offered rate)");
ABSL_FLAG(double, overhead_p99_bound_ms, 1.0, "overhead: added p99 bound of the rate sweep");

namespace tandem::bench {
namespace {

absl::StatusOr<RunSpec> BaseSpec() {
  RunSpec s;
  const std::string target = absl::GetFlag(FLAGS_target);
  if (target == "gateway") {
    s.target = Target::kGateway;
  } else if (target == "worker") {
    s.target = Target::kWorker;
  } else if (target == "openai") {
    s.target = Target::kOpenAi;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--target=", target, ": gateway, worker or openai"));
  }
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api == "stream") {
    s.api = Api::kStream;
  } else if (api == "unary") {
    s.api = Api::kUnary;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--api=", api, ": stream or unary"));
  }
  const std::string arrival = absl::GetFlag(FLAGS_arrival);
  if (arrival != "poisson" && arrival != "fixed") {
    return absl::InvalidArgumentError(absl::StrCat("--arrival=", arrival, ": poisson or fixed"));
  }
  s.poisson = arrival == "poisson";
  s.address = absl::GetFlag(FLAGS_address);
  s.model = absl::GetFlag(FLAGS_model);
  s.prompt = absl::GetFlag(FLAGS_prompt);
  RETURN_IF_ERROR(PromptWords(s.prompt).status());
  s.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (s.max_tokens <= 0) return absl::InvalidArgumentError("--max_tokens must be positive");
  s.rate = absl::GetFlag(FLAGS_rate);
  s.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (s.concurrency <= 0) return absl::InvalidArgumentError("--concurrency must be positive");
  s.duration = absl::GetFlag(FLAGS_duration);
  s.requests = absl::GetFlag(FLAGS_requests);
  s.seed = absl::GetFlag(FLAGS_seed);
  s.label = absl::StrCat(TargetName(s.target), " ", ApiName(s.api));
  return s;
}

// `text_check`: where answers go with --check_text (plain runs only).
absl::StatusOr<RunnerOptions> RunnerOptionsFromFlags(TextCheck* text_check) {
  RunnerOptions o;
  ASSIGN_OR_RETURN(o.cpu_processes, ParseWatchedProcesses(absl::GetFlag(FLAGS_cpu_pids)));
  o.driver.timeout = absl::GetFlag(FLAGS_timeout);
  o.driver.max_inflight = absl::GetFlag(FLAGS_max_inflight);
  o.driver.text_check = absl::GetFlag(FLAGS_check_text) ? text_check : nullptr;
  o.channels = absl::GetFlag(FLAGS_channels);
  o.warmup_requests = absl::GetFlag(FLAGS_warmup_requests);
  o.ready_timeout = absl::GetFlag(FLAGS_ready_timeout);
  return o;
}

OverheadOptions OverheadOptionsFromFlags() {
  OverheadOptions o;
  o.worker_address = absl::GetFlag(FLAGS_worker_address);
  o.gateway_address = absl::GetFlag(FLAGS_gateway_address);
  o.gateway_pid = absl::GetFlag(FLAGS_gateway_pid);
  o.streams = absl::GetFlag(FLAGS_streams);
  o.throughput_inflight = absl::GetFlag(FLAGS_throughput_inflight);
  o.rates = absl::GetFlag(FLAGS_rates);
  o.sweep_past_failure = absl::GetFlag(FLAGS_sweep_past_failure);
  o.p99_bound_ms = absl::GetFlag(FLAGS_overhead_p99_bound_ms);
  return o;
}

// --write_grpc_request: the body h2load sends, the same message the driver would.
absl::Status WriteGrpcRequest(const std::string& path) {
  ASSIGN_OR_RETURN(const RunSpec spec, BaseSpec());
  const Driver driver(spec, {}, DriverOptions{});
  const std::string message = spec.target == Target::kGateway
                                  ? driver.gateway_request().SerializeAsString()
                                  : driver.worker_request().SerializeAsString();
  // gRPC's framing: a compressed flag (0) and the message length, 4 bytes big-endian.
  std::string frame(5, '\0');
  for (int i = 0; i < 4; ++i)
    frame[1 + i] = static_cast<char>((message.size() >> (24 - 8 * i)) & 0xff);
  frame += message;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << frame;
  out.close();
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status Main() {
  if (const std::string path = absl::GetFlag(FLAGS_write_grpc_request); !path.empty()) {
    return WriteGrpcRequest(path);
  }
  TextCheck text_check;
  ASSIGN_OR_RETURN(const RunnerOptions runner_options, RunnerOptionsFromFlags(&text_check));
  const Runner runner(runner_options);
  const OutputFiles out{absl::GetFlag(FLAGS_json), absl::GetFlag(FLAGS_svg)};
  const std::string preset = absl::GetFlag(FLAGS_preset);
  if (preset.empty()) {
    ASSIGN_OR_RETURN(const RunSpec base, BaseSpec());
    PlainRunOptions options;
    options.rates = absl::GetFlag(FLAGS_rates);
    options.concurrencies = absl::GetFlag(FLAGS_concurrencies);
    if (absl::GetFlag(FLAGS_check_text)) options.text_check = &text_check;
    return RunPlain(runner, base, options, out);
  }
  if (absl::GetFlag(FLAGS_check_text)) {
    return absl::InvalidArgumentError("--check_text is for plain runs (no --preset)");
  }
  if (preset == "seeds") {
    ASSIGN_OR_RETURN(const RunSpec base, BaseSpec());
    return SeedsPreset(runner, base, absl::GetFlag(FLAGS_iterations))
        .Run(absl::GetFlag(FLAGS_models), out);
  }
  if (preset == "overhead") {
    ASSIGN_OR_RETURN(const RunSpec base, BaseSpec());
    return OverheadPreset(runner, base, OverheadOptionsFromFlags()).Run(out);
  }
  if (preset == "prefix") {
    ASSIGN_OR_RETURN(const auto targets, ParsePrefixTargets(absl::GetFlag(FLAGS_prefix_targets)));
    PrefixOptions o;
    o.conversations = absl::GetFlag(FLAGS_prefix_conversations);
    o.turns = absl::GetFlag(FLAGS_prefix_turns);
    o.system_words = absl::GetFlag(FLAGS_prefix_system_words);
    o.private_words = absl::GetFlag(FLAGS_prefix_private_words);
    o.agent_loops = absl::GetFlag(FLAGS_prefix_agent_loops);
    o.agent_steps = absl::GetFlag(FLAGS_prefix_agent_steps);
    o.unshared_requests = absl::GetFlag(FLAGS_prefix_unshared);
    o.concurrency = absl::GetFlag(FLAGS_prefix_concurrency);
    o.max_tokens = absl::GetFlag(FLAGS_max_tokens);
    o.model = absl::GetFlag(FLAGS_model).empty() ? "qwen" : absl::GetFlag(FLAGS_model);
    return RunPrefixPreset(targets, o, absl::GetFlag(FLAGS_json));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--preset=", preset, ": seeds, overhead or prefix"));
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "load generator for tandem-gateway and tandem-worker (see the comment at the top of "
      "tools/bench/tandem_bench.cc)");
  absl::ParseCommandLine(argc, argv);
  prctl(PR_SET_TIMERSLACK, 1UL);  // precise open-loop arrivals without spinning
  const absl::Status status = tandem::bench::Main();
  if (!status.ok()) {
    std::cerr << "tandem-bench: " << status << "\n";
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
