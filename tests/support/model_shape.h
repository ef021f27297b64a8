#pragma once

// The shape checks of the golden models' tests (tests/golden/ARCH), against one table each.
#include <cstdint>

#include "gtest/gtest.h"
#include "workers/model/model_shape.h"

namespace tandem::testing {

// What a golden model's shape must be.
struct ExpectedShape {
  workers::model::Architecture architecture;
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t num_layers;
  int64_t max_positions;
  int64_t kv_bytes_per_token;
  int64_t state_bytes;
};

inline void ExpectShape(const workers::model::ModelShape& s, const ExpectedShape& want) {
  EXPECT_EQ(s.architecture, want.architecture);
  EXPECT_EQ(s.vocab_size, want.vocab_size);
  EXPECT_EQ(s.hidden_size, want.hidden_size);
  EXPECT_EQ(s.num_layers, want.num_layers);
  EXPECT_EQ(s.max_positions, want.max_positions);
  EXPECT_EQ(s.kv_bytes_per_token, want.kv_bytes_per_token);
  EXPECT_EQ(s.state_bytes, want.state_bytes);
}

}  // namespace tandem::testing
