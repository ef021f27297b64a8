#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "workers/model/random_weights.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {

// One tensor to write: fp32 values stored as `dtype` (BF16 rounds to nearest even).
struct TensorData {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  // Instead of `values`: element i is RandomWeight(*random, i), generated while it is written,
  // so a random checkpoint of any size is written in bounded memory.
  std::optional<RandomFill> random = std::nullopt;
  // Stored as this instead of the file's dtype (F32, BF16 or F16 from `values`; F8_E4M3 or I32
  // from `raw`).
  std::optional<DType> dtype = std::nullopt;
  // Instead of `values`: the stored bytes themselves (F8_E4M3 codes, packed I32), as stored.
  std::vector<uint8_t> raw = {};
};

// Writes tensors in the safetensors format (8-byte header length, JSON header padded to 8
// bytes, data in sorted-name order). With `shard_bytes` > 0 the tensors are split into
// model-0000N-of-0000M.safetensors files plus model.safetensors.index.json, as HF does;
// otherwise one model.safetensors. `dir` must exist.
absl::Status WriteSafetensors(const std::string& dir, std::vector<TensorData> tensors, DType dtype,
                              uint64_t shard_bytes = 0);

// fp32 -> bf16 with round-to-nearest-even (NaN kept NaN).
uint16_t FloatToBf16(float f);
// fp32 -> IEEE half with round-to-nearest-even.
uint16_t FloatToF16(float f);

}  // namespace tandem::workers::model
