#pragma once

#include <string>

#include "absl/status/status.h"
#include "tools/bench/output_files.h"
#include "tools/bench/run_spec.h"
#include "tools/bench/runner.h"
#include "tools/bench/text_check.h"

namespace tandem::bench {

struct PlainRunOptions {
  std::string rates;          // --rates: a sweep of open-loop rates; "" for none
  std::string concurrencies;  // --concurrencies: a sweep of closed-loop levels; "" for none
  // --check_text: where the runner's calls put their answers (the runner's own); null: off.
  const TextCheck* text_check = nullptr;
};

// No --preset: `base` once, or once per rate or concurrency of a sweep, after a warm-up. Prints
// the Markdown table (and the text check) and writes the files.
absl::Status RunPlain(const Runner& runner, const RunSpec& base, const PlainRunOptions& options,
                      const OutputFiles& out);

}  // namespace tandem::bench
