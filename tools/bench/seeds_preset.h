#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/bench/output_files.h"
#include "tools/bench/run_result.h"
#include "tools/bench/run_spec.h"
#include "tools/bench/runner.h"

namespace tandem::bench {

// --preset=seeds, the second seed's methodology, through a gateway: for each pinned model and the
// gateway's routing, single streamed requests at each prompt size, then closed-loop concurrency
// 1 to 16 with its scaling efficiency. Prints two summary tables and every run; writes the files.
class SeedsPreset {
 public:
  // `base`: the flags' spec (its address is the gateway's); `iterations` per prompt size and per
  // concurrency level.
  SeedsPreset(const Runner& runner, const RunSpec& base, int iterations);

  // `models`: --models, comma-separated.
  absl::Status Run(const std::string& models, const OutputFiles& out);

 private:
  // Appends a model's rows (`name` is the model or "routed") to the tables and runs.
  void SingleRequests(const RunSpec& m, const std::string& name);
  void Concurrency(const RunSpec& m, const std::string& name);

  const Runner& runner_;
  RunSpec base_;
  const int iterations_;
  std::string single_table_, scaling_table_;  // Markdown
  std::vector<std::string> json_single_, json_scaling_;
  std::vector<RunResult> all_;
};

}  // namespace tandem::bench
