#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::bench {

using Clock = std::chrono::steady_clock;

// `d` in milliseconds, with the fraction.
double Ms(Clock::duration d);

// kOpenAi: POST /v1/chat/completions, streamed (a gateway's --http_listen, or an engine server).
enum class Target { kGateway, kWorker, kOpenAi };
enum class Api { kUnary, kStream };

// Configuration of one run.
struct RunSpec {
  std::string label;  // series name in tables and plots, e.g. "gateway stream"
  Target target = Target::kGateway;
  std::string address;
  Api api = Api::kStream;
  std::string model;
  std::string prompt = "short";
  int max_tokens = 64;
  double rate = 0;  // requests per second; > 0: open loop
  bool poisson = true;
  int concurrency = 1;
  absl::Duration duration = absl::Seconds(5);
  int requests = 0;
  uint64_t seed = 1;  // Poisson arrivals
};

std::string TargetName(Target t);
std::string ApiName(Api a);

// Words of the prompt of a --prompt size (short, medium, long).
absl::StatusOr<int> PromptWords(const std::string& size);

// A prompt of `words` words.
std::string PromptText(int words);

// A list flag's value, "100,1000,5000": positive numbers separated by commas. Errors name the
// flag.
absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& value);

}  // namespace tandem::bench
