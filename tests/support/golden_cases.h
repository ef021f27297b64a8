#pragma once

// Looking up the cases of a golden cases.json (tests/support/golden_files.h reads the file) from
// a test: one copy for the CUDA model and vision suites.
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::testing {

// The case named `name` in cases["cases"]; records a failure and returns null when there is none.
inline const nlohmann::json& GoldenCase(const nlohmann::json& cases, const std::string& name) {
  for (const nlohmann::json& c : cases["cases"]) {
    if (c["name"] == name) return c;
  }
  static const nlohmann::json kNone;
  ADD_FAILURE() << "no case " << name;
  return kNone;
}

}  // namespace tandem::testing
