#include "workers/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "workers/model/model_config.h"

namespace tandem::workers::model {
namespace {

float Bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// INVALID_ARGUMENT for a file that breaks the safetensors format, saying `why`.
absl::Status NotSafetensors(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid safetensors file: ", why));
}

// One tensor's entry of the header of `path`, whose data section (after the header) is `data`,
// `data_bytes` long: the tensor viewing its bytes there, and in `*range` their [begin, end)
// offsets in the data section.
absl::StatusOr<TensorView> ParseTensorEntry(const std::string& path, const std::string& name,
                                            const nlohmann::json& entry, const uint8_t* data,
                                            size_t data_bytes,
                                            std::pair<uint64_t, uint64_t>* range) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    return NotSafetensors(path,
                          absl::StrCat("tensor ", name, ": needs dtype, shape and data_offsets"));
  }
  TensorView t;
  t.name = name;
  const std::string dtype = entry["dtype"].is_string() ? entry["dtype"].get<std::string>() : "";
  if (dtype == "F32") {
    t.dtype = DType::kF32;
  } else if (dtype == "BF16") {
    t.dtype = DType::kBF16;
  } else if (dtype == "F16") {
    t.dtype = DType::kF16;
  } else if (dtype == "F8_E4M3") {
    t.dtype = DType::kF8E4M3;
  } else if (dtype == "I32") {
    t.dtype = DType::kI32;
  } else if (dtype == "I64") {
    t.dtype = DType::kI64;
  } else {
    return absl::UnimplementedError(absl::StrCat(path, ": tensor ", name, " has dtype ", dtype,
                                                 "; supported are F32, F16, BF16, and F8_E4M3, I32 "
                                                 "and I64 (quantized weights, scales, shapes)"));
  }
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return NotSafetensors(path, "bad shape of " + name);
    }
    t.shape.push_back(d.get<int64_t>());
  }
  const auto& off = entry["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return NotSafetensors(path, "bad data_offsets of " + name);
  }
  const uint64_t begin = off[0].get<uint64_t>();
  const uint64_t end = off[1].get<uint64_t>();
  if (begin > end || end > data_bytes) {
    return NotSafetensors(path, "data_offsets of " + name + " out of range");
  }
  t.bytes = end - begin;
  if (t.bytes != static_cast<uint64_t>(t.elements()) * DTypeBytes(t.dtype)) {
    return NotSafetensors(path, absl::StrCat("tensor ", name, ": ", t.bytes, " bytes for ", dtype,
                                             " ", t.ShapeString()));
  }
  t.data = data + begin;
  *range = {begin, end};
  return t;
}

}  // namespace

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
  }
  return "?";
}

size_t DTypeBytes(DType d) {
  switch (d) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kI64:
      return 8;
  }
  return 0;
}

int64_t TensorView::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

float TensorView::Element(int64_t index) const {
  if (random.has_value()) return RandomWeight(*random, index);
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, data + 4 * index, 4);
    return f;
  }
  if (dtype == DType::kF8E4M3) return F8E4M3ToFloat(data[index]);
  if (dtype == DType::kI32) {
    int32_t v;
    std::memcpy(&v, data + 4 * index, 4);
    return static_cast<float>(v);
  }
  if (dtype == DType::kI64) {
    int64_t v;
    std::memcpy(&v, data + 8 * index, 8);
    return static_cast<float>(v);
  }
  uint16_t v;
  std::memcpy(&v, data + 2 * index, 2);
  return dtype == DType::kBF16 ? Bf16ToFloat(v) : F16ToFloat(v);
}

std::vector<float> TensorView::ToFloat() const {
  const int64_t n = elements();
  std::vector<float> out(static_cast<size_t>(n));
  if (random.has_value()) {
    for (int64_t i = 0; i < n; ++i) out[i] = RandomWeight(*random, i);
  } else if (dtype == DType::kF32) {
    std::memcpy(out.data(), data, static_cast<size_t>(n) * 4);
  } else if (dtype == DType::kF8E4M3 || dtype == DType::kI32 || dtype == DType::kI64) {
    for (int64_t i = 0; i < n; ++i) out[i] = Element(i);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      out[i] = dtype == DType::kBF16 ? Bf16ToFloat(v) : F16ToFloat(v);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return NotSafetensors(path, "shorter than its 8-byte header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat("cannot mmap ", path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;
  f->map_bytes_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > size - 8 || header_len > (100u << 20)) {
    return NotSafetensors(path, "header length out of range");
  }
  const nlohmann::json header = nlohmann::json::parse(
      reinterpret_cast<const char*>(bytes + 8),
      reinterpret_cast<const char*>(bytes + 8 + header_len), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return NotSafetensors(path, "the header is not a JSON object");
  }
  const uint8_t* data = bytes + 8 + header_len;
  const size_t data_bytes = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    std::pair<uint64_t, uint64_t> range;
    absl::StatusOr<TensorView> t = ParseTensorEntry(path, name, entry, data, data_bytes, &range);
    if (!t.ok()) return t.status();
    ranges.push_back(range);
    f->tensors_.emplace(name, *std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return NotSafetensors(path, "tensors overlap");
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  auto c = std::make_unique<Checkpoint>();
  c->dir_ = dir;
  auto config = ReadFileToString(dir + "/config.json");
  if (absl::IsNotFound(config.status())) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no config.json (is this a checkpoint directory?)"));
  }
  if (!config.ok()) return config.status();  // says why: permissions, a directory, ...
  c->config_json_ = std::move(*config);
  std::vector<std::string> shards;
  if (auto index = ReadFileToString(dir + "/model.safetensors.index.json"); index.ok()) {
    const nlohmann::json j = nlohmann::json::parse(*index, nullptr, false);
    if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/model.safetensors.index.json: needs a weight_map object"));
    }
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("index entry ", name, ": bad file name"));
      }
      files.insert(file.get<std::string>());
    }
    shards.assign(files.begin(), files.end());
  } else {
    shards.push_back("model.safetensors");
  }
  for (const std::string& s : shards) {
    auto f = SafetensorsFile::Open(dir + "/" + s);
    if (!f.ok()) return f.status();
    for (const auto& [name, t] : (*f)->tensors()) {
      if (!c->index_.emplace(name, &t).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor ", name, " is in two shards"));
      }
    }
    c->files_.push_back(std::move(*f));
  }
  RETURN_IF_ERROR(c->ReadQuantization(/*from_dir=*/true));
  return c;
}

absl::Status Checkpoint::ReadQuantization(bool from_dir) {
  const nlohmann::json config = ParseConfigJson(config_json_);
  if (config.is_discarded()) return absl::OkStatus();  // the model's config parser says why
  absl::StatusOr<QuantScheme> q = ParseQuantization(config);
  if (q.ok() && q->method == QuantScheme::Method::kNone && from_dir) {
    // ModelOpt 0.29 and before wrote their own file instead of a quantization_config.
    if (absl::StatusOr<std::string> hf = ReadFileToString(dir_ + "/hf_quant_config.json");
        hf.ok()) {
      const nlohmann::json j = ParseConfigJson(*hf);
      q = j.is_discarded() ? absl::InvalidArgumentError("hf_quant_config.json is not JSON")
                           : ParseHfQuantConfig(j);
    }
  }
  if (!q.ok()) {
    return absl::Status(q.status().code(), absl::StrCat(dir_, ": ", q.status().message()));
  }
  quant_ = *q;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::FromTensors(
    std::string label, std::string config_json, std::vector<TensorView> tensors) {
  auto c = std::make_unique<Checkpoint>();
  c->dir_ = std::move(label);
  c->config_json_ = std::move(config_json);
  c->owned_ = std::move(tensors);
  for (const TensorView& t : c->owned_) {
    if (t.data == nullptr && !t.random.has_value() && t.elements() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(c->dir_, ": tensor ", t.name, " has neither data nor a generator"));
    }
    if (!c->index_.emplace(t.name, &t).second) {
      return absl::InvalidArgumentError(absl::StrCat(c->dir_, ": tensor ", t.name, " twice"));
    }
  }
  RETURN_IF_ERROR(c->ReadQuantization(/*from_dir=*/false));
  return c;
}

absl::StatusOr<const TensorView*> Checkpoint::Get(const std::string& name,
                                                  absl::Span<const int64_t> shape) const {
  if (!PackedStem(name).empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir_, ": tensor ", name, " is quantized (", quant_.Describe(),
                     "); this engine does not read quantized weights (the CPU engine does)"));
  }
  absl::StatusOr<const TensorView*> t = Find(name, shape);
  if (t.ok() && (*t)->dtype == DType::kF8E4M3) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir_, ": tensor ", name, " is quantized (F8_E4M3, ", quant_.Describe(),
                     "); this engine does not read quantized weights (the CPU engine does)"));
  }
  return t;
}

absl::StatusOr<const TensorView*> Checkpoint::Find(const std::string& name,
                                                   absl::Span<const int64_t> shape) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor ", name, " (expected shape [",
                                            absl::StrJoin(shape, ", "), "])"));
  }
  const TensorView* t = it->second;
  if (!std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor ", name, " has shape ",
                                                   t->ShapeString(), ", the config implies [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  return t;
}

uint64_t Checkpoint::float_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : index_) {
    const bool packed = t->dtype == DType::kI32 && (absl::EndsWith(name, ".qweight") ||
                                                    absl::EndsWith(name, ".weight_packed"));
    n += static_cast<uint64_t>(t->elements()) * 4 * (packed ? 8 : 1);
  }
  return n;
}

uint64_t Checkpoint::stored_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : index_) n += t->bytes;
  return n;
}

}  // namespace tandem::workers::model
