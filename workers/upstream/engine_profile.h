#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tandem::workers::upstream {

// What the worker needs to know about one OpenAI-compatible engine server (vLLM, SGLang,
// trtllm-serve, llama-server, any OpenAI API): data, read from a YAML file (the shipped ones are
// workers/upstream/profiles/*.yaml, built into the binary), never branches in code.
struct EngineProfile {
  std::string name;
  // Paths on the engine's base URL; an empty metrics path: the engine exports none.
  std::string chat_path;
  std::string models_path;
  std::string health_path;
  std::string metrics_path;
  // Health statuses that mean "still loading" rather than "failing" (before the engine was
  // first ready; after that every failure counts towards dead).
  std::vector<int> starting_statuses;
  // Response fields that carry reasoning text, the first present wins (vLLM: reasoning, the
  // others reasoning_content).
  std::vector<std::string> reasoning_fields;
  // JSON objects merged into the request. A null one: the engine cannot do it, and a request
  // that needs it is refused. `budget` has the placeholder $BUDGET for the token count.
  nlohmann::json thinking_on;
  nlohmann::json thinking_off;
  std::string budget_template;
  nlohmann::json continuation;
  nlohmann::json request_extra;
  // Metric names per signal, first present wins (names across engine versions).
  std::vector<std::string> waiting_metrics;
  std::vector<std::string> running_metrics;
  std::vector<std::string> kv_cache_usage_metrics;
  std::vector<std::string> prompt_tokens_metrics;
  std::vector<std::string> generation_tokens_metrics;

  // The budget fragment for `tokens`, null when the profile has none.
  nlohmann::json Budget(int tokens) const;
};

// Parses a profile file's text; INVALID_ARGUMENT names the field at fault.
absl::StatusOr<EngineProfile> ParseEngineProfile(absl::string_view yaml_text);

// A shipped profile by name ("vllm", "sglang", "trtllm", "llamacpp", "openai"), or the file at
// a path (a name with a '/' or ending in .yaml). NOT_FOUND lists the shipped names.
absl::StatusOr<EngineProfile> LoadEngineProfile(const std::string& name_or_path);

// The shipped profiles' names.
std::vector<std::string> BuiltinProfileNames();

}  // namespace tandem::workers::upstream
