#pragma once

// Reading the golden fixtures (tests/golden/ARCH: a random checkpoint, config.json and
// cases.json with the reference logits): one reader for the CPU, CUDA and engine suites.

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace tandem::testing {

// The whole file; empty when it cannot be read.
inline std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The file as JSON; a discarded value (is_discarded()) when missing or malformed.
inline nlohmann::json ReadJsonFile(const std::string& path) {
  return nlohmann::json::parse(ReadFileText(path), nullptr, /*allow_exceptions=*/false);
}

inline std::vector<float> JsonFloats(const nlohmann::json& j) {
  std::vector<float> v;
  v.reserve(j.size());
  for (const nlohmann::json& x : j) v.push_back(x.get<float>());
  return v;
}

inline std::vector<int32_t> JsonInts(const nlohmann::json& j) {
  std::vector<int32_t> v;
  v.reserve(j.size());
  for (const nlohmann::json& x : j) v.push_back(x.get<int32_t>());
  return v;
}

// A golden case's name and prompt ids (its "name" and "prompt_ids" in cases.json).
inline std::pair<std::string, std::vector<int32_t>> NameAndPrompt(const nlohmann::json& c) {
  return {c["name"].get<std::string>(), JsonInts(c["prompt_ids"])};
}

}  // namespace tandem::testing
