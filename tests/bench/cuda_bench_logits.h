#pragma once

// cuda_benchmark's logits mode (--logits_prompts=IN --logits_out=PREFIX): the logits the CUDA
// engine's model computes for given token ids, written for scripts/gpu_kit/compare_transformers.py
// to compare with transformers on the same checkpoint. It lives in cuda_benchmark because that
// binary is already in the GPU kit with the model loader this needs.
//
// IN: JSON lines {"id": "...", "tokens": [ids]}. For each prompt of P tokens, rows of logits:
//   - "prefix": the prefill of its first L tokens for L = 1..min(P, positions), each from a fresh
//     state: the logits at position L - 1 through the multi-token prefill path;
//   - "prefill": the whole prompt's prefill, position P - 1 (chunked past 512 tokens);
//   - "decode": the greedy continuation, steps - 1 single-token decode steps (uncaptured) at
//     positions P.., each fed the previous argmax.
// PREFIX.f32: the rows as float32, [rows][vocab], in the machine's (little-endian) byte order.
// PREFIX.json: {"vocab", "rows", "prompts": [{"id", "tokens", "generated", "rows": [{"row",
// "position", "path"}]}]}; "generated" are the `steps` greedy tokens (argmax of the "prefill" row
// and of each "decode" row).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/cuda_bench_device.h"
#include "workers/cuda/cuda_model.h"

namespace tandem::workers::cuda::bench {

struct LogitsPrompt {
  std::string id;
  std::vector<int32_t> tokens;
};

inline absl::StatusOr<std::vector<LogitsPrompt>> ReadLogitsPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<LogitsPrompt> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("tokens") || !j["tokens"].is_array() ||
        j["tokens"].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": want {\"id\", \"tokens\": [ids]} per line, got ", line));
    }
    LogitsPrompt p;
    p.id = j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>()
                                                   : absl::StrCat("p", out.size());
    for (const auto& t : j["tokens"]) {
      if (!t.is_number_integer()) return absl::InvalidArgumentError(path + ": non-integer token");
      p.tokens.push_back(t.get<int32_t>());
    }
    out.push_back(std::move(p));
  }
  return out;
}

inline int32_t Argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The rows file and the description of every row written to it.
class LogitsRows {
 public:
  explicit LogitsRows(const std::string& path) : out_(path, std::ios::binary) {}
  bool ok() const { return out_.good(); }
  int64_t count() const { return count_; }
  // Writes `row` as the logits at `position` computed by `path`; its index goes to `rows`.
  void Add(const std::vector<float>& row, int64_t position, const char* path,
           nlohmann::ordered_json* rows) {
    out_.write(reinterpret_cast<const char*>(row.data()),
               static_cast<std::streamsize>(row.size() * sizeof(float)));
    rows->push_back({{"row", count_++}, {"position", position}, {"path", path}});
  }

 private:
  std::ofstream out_;
  int64_t count_ = 0;
};

// The rows of one prompt (see the file comment).
inline absl::Status DumpPromptLogits(CudaModel& m, const LogitsPrompt& p, int steps, int positions,
                                     cudaStream_t stream, LogitsRows* file,
                                     nlohmann::ordered_json* out) {
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  Pools pools;
  RETURN_IF_ERROR(pools.Allocate(m, 1, n + steps + 1));
  const SequenceSlot seq = pools.Sequence(0);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int64_t len = 1; len <= std::min<int64_t>(n, positions); ++len) {
    RETURN_IF_ERROR(m.ResetSlot(0, stream));
    RETURN_IF_ERROR(m.Prefill(p.tokens.data(), len, 0, seq, pools.logits(), stream));
    ASSIGN_OR_RETURN(const std::vector<float> row, pools.LogitsRow(0));
    file->Add(row, len - 1, "prefix", &rows);
  }
  RETURN_IF_ERROR(m.ResetSlot(0, stream));
  RETURN_IF_ERROR(m.Prefill(p.tokens.data(), n, 0, seq, pools.logits(), stream));
  ASSIGN_OR_RETURN(std::vector<float> row, pools.LogitsRow(0));
  file->Add(row, n - 1, "prefill", &rows);
  std::vector<int32_t> generated = {Argmax(row)};
  for (int step = 1; step < steps; ++step) {
    const int32_t position = static_cast<int32_t>(n + step - 1);
    RETURN_IF_ERROR(pools.SetDecodeInputs({generated.back()}, {position}));
    RETURN_IF_ERROR(m.Decode(pools.Batch(), stream));
    TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream), "logits decode step");
    ASSIGN_OR_RETURN(row, pools.LogitsRow(0));
    file->Add(row, position, "decode", &rows);
    generated.push_back(Argmax(row));
  }
  out->push_back(
      {{"id", p.id}, {"tokens", p.tokens}, {"generated", generated}, {"rows", std::move(rows)}});
  return absl::OkStatus();
}

// Every prompt of `prompts_path` into `prefix`.f32 and `prefix`.json.
inline absl::Status DumpLogits(CudaModel& m, const std::string& prompts_path,
                               const std::string& prefix, int steps, int positions,
                               cudaStream_t stream) {
  if (steps < 1 || positions < 0) {
    return absl::InvalidArgumentError("--logits_steps must be >= 1, --logits_positions >= 0");
  }
  ASSIGN_OR_RETURN(const std::vector<LogitsPrompt> prompts, ReadLogitsPrompts(prompts_path));
  LogitsRows file(prefix + ".f32");
  if (!file.ok()) return absl::InternalError(absl::StrCat("cannot write ", prefix, ".f32"));
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const LogitsPrompt& p : prompts) {
    if (absl::Status s = DumpPromptLogits(m, p, steps, positions, stream, &file, &out); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("prompt ", p.id, ": ", s.message()));
    }
  }
  if (!file.ok()) return absl::InternalError(absl::StrCat("short write to ", prefix, ".f32"));
  std::ofstream meta(prefix + ".json");
  meta << nlohmann::ordered_json{{"vocab", m.shape().vocab_size},
                                 {"rows", file.count()},
                                 {"prompts", std::move(out)}}
              .dump()
       << "\n";
  if (!meta) return absl::InternalError(absl::StrCat("cannot write ", prefix, ".json"));
  return absl::OkStatus();
}

}  // namespace tandem::workers::cuda::bench
