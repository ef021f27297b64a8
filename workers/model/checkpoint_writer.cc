#include "workers/model/checkpoint_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::workers::model {

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint16_t FloatToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN, infinity
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half, m x 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(std::fabs(f) * 16777216.0f));
  }
  // Rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits, ties to even; a
  // carry runs into the exponent, and past 65504 into infinity.
  const uint32_t h = ((a + 0x0fffu + ((a >> 13) & 1u)) >> 13) - 0x1c000u;
  return sign | static_cast<uint16_t>(std::min<uint32_t>(h, 0x7c00u));
}

namespace {

bool Raw(DType d) { return d == DType::kF8E4M3 || d == DType::kI32 || d == DType::kI64; }

// Elements of a tensor to write: its values, or its shape's when generated.
uint64_t Count(const TensorData& t) {
  if (!t.raw.empty()) return t.raw.size() / DTypeBytes(*t.dtype);
  if (!t.random.has_value()) return t.values.size();
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

absl::Status WriteFile(const std::string& path, const std::vector<const TensorData*>& tensors,
                       DType dtype) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const TensorData* t : tensors) {
    const uint64_t bytes = Count(*t) * DTypeBytes(t->dtype.value_or(dtype));
    header[t->name] = {{"dtype", DTypeName(t->dtype.value_or(dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint16_t> half;
  std::vector<float> chunk;
  for (const TensorData* t : tensors) {
    const DType as = t->dtype.value_or(dtype);
    if (!t->raw.empty()) {
      out.write(reinterpret_cast<const char*>(t->raw.data()),
                static_cast<std::streamsize>(t->raw.size()));
    } else if (t->random.has_value()) {
      // Generated in chunks of 1M elements (4 MiB).
      const uint64_t n = Count(*t);
      for (uint64_t at = 0; at < n; at += chunk.size()) {
        chunk.resize(std::min<uint64_t>(n - at, uint64_t{1} << 20));
        for (size_t i = 0; i < chunk.size(); ++i) {
          chunk[i] = RandomWeight(*t->random, static_cast<int64_t>(at + i));
        }
        if (as == DType::kF32) {
          out.write(reinterpret_cast<const char*>(chunk.data()),
                    static_cast<std::streamsize>(chunk.size() * 4));
        } else {
          half.resize(chunk.size());
          for (size_t i = 0; i < half.size(); ++i) half[i] = FloatToBf16(chunk[i]);
          out.write(reinterpret_cast<const char*>(half.data()),
                    static_cast<std::streamsize>(half.size() * 2));
        }
      }
    } else if (as == DType::kF32) {
      out.write(reinterpret_cast<const char*>(t->values.data()),
                static_cast<std::streamsize>(t->values.size() * 4));
    } else {
      half.resize(t->values.size());
      for (size_t i = 0; i < half.size(); ++i) {
        half[i] = as == DType::kF16 ? FloatToF16(t->values[i]) : FloatToBf16(t->values[i]);
      }
      out.write(reinterpret_cast<const char*>(half.data()),
                static_cast<std::streamsize>(half.size() * 2));
    }
  }
  if (!out) return absl::InternalError(absl::StrCat("short write to ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& dir, std::vector<TensorData> tensors, DType dtype,
                              uint64_t shard_bytes) {
  if (dtype == DType::kF16) return absl::UnimplementedError("writing F16 is not supported");
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorData& a, const TensorData& b) { return a.name < b.name; });
  std::vector<std::vector<const TensorData*>> shards(1);
  uint64_t in_shard = 0;
  for (const TensorData& t : tensors) {
    if ((t.dtype.has_value() && Raw(*t.dtype)) != !t.raw.empty() ||
        (t.dtype == DType::kF16 && t.random.has_value())) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.name,
          ": F8_E4M3, I32 and I64 are written from raw bytes, F32, BF16 and F16 from values"));
    }
    const uint64_t bytes = Count(t) * DTypeBytes(t.dtype.value_or(dtype));
    if (shard_bytes > 0 && in_shard > 0 && in_shard + bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += bytes;
  }
  if (shard_bytes == 0) return WriteFile(dir + "/model.safetensors", shards[0], dtype);
  nlohmann::json index;
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    if (absl::Status s = WriteFile(dir + "/" + name, shards[i], dtype); !s.ok()) return s;
    for (const TensorData* t : shards[i]) {
      index["weight_map"][t->name] = name;
      total += Count(*t) * DTypeBytes(t->dtype.value_or(dtype));
    }
  }
  index["metadata"] = {{"total_size", total}};
  std::ofstream out(dir + "/model.safetensors.index.json");
  out << index.dump(2) << "\n";
  return out ? absl::OkStatus() : absl::InternalError("cannot write the index");
}

}  // namespace tandem::workers::model
