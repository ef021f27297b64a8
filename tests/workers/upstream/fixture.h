#pragma once

#include <string>

#include "common/file.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tandem::workers::upstream {

// A file of tests/workers/upstream/fixtures (README.md there says where each comes from).
inline std::string Fixture(const std::string& name) {
  auto text =
      ReadFileToString(tandem::testing::SourcePath("/tests/workers/upstream/fixtures/") + name);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

}  // namespace tandem::workers::upstream
