#pragma once

#include "absl/types/span.h"

namespace tandem::workers::upstream {

// The shipped profiles (workers/upstream/profiles/*.yaml), built into the binary by CMake so a
// worker needs no file next to it.
struct BuiltinProfile {
  const char* name;
  const char* yaml;
};

absl::Span<const BuiltinProfile> BuiltinProfiles();

}  // namespace tandem::workers::upstream
