#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/model/quantization.h"
#include "workers/model/random_weights.h"

namespace tandem::workers::model {

// Element types a checkpoint may hold. kF8E4M3 is a quantized weight's codes, kI32 packed int4
// codes (or a permutation), kI64 a shape: read only through their scales
// (Checkpoint::GetFloat).
enum class DType { kF32, kF16, kBF16, kF8E4M3, kI32, kI64 };
const char* DTypeName(DType d);
// IEEE half -> fp32, exactly.
float F16ToFloat(uint16_t h);
size_t DTypeBytes(DType d);

// A tensor inside a memory-mapped safetensors file: no copy until asked for. Or a generated
// one (--random_weights): `random` is set, `data` is null, and every element is computed where
// it is read (RandomWeight; on the device by the CUDA upload), never stored.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // little-endian elements, row-major
  size_t bytes = 0;               // as stored (a generated tensor: as it would be stored)
  std::optional<RandomFill> random = std::nullopt;
  int64_t elements() const;
  // Converts to fp32 (BF16, F16 and F8 codes widened exactly; an F8 code without its scale).
  std::vector<float> ToFloat() const;
  // One element, widened to fp32 the same way.
  float Element(int64_t index) const;
  std::string ShapeString() const;
};

// One .safetensors file, memory-mapped read-only. The header is validated completely: offsets
// in range, contiguous and non-overlapping, sizes matching dtype x shape.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// A checkpoint directory: config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json. Tensors are looked up by their checkpoint names.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  // A checkpoint of tensors described in memory, not read from files: the generated weights of
  // --random_weights (random_checkpoint.h). `label` stands in for the directory in messages.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> FromTensors(std::string label,
                                                                 std::string config_json,
                                                                 std::vector<TensorView> tensors);

  const std::string& dir() const { return dir_; }
  // The text of config.json.
  const std::string& config_json() const { return config_json_; }
  // The tensor `name` with exactly `shape`; NOT_FOUND or INVALID_ARGUMENT naming the tensor,
  // its shape and the expected one. A quantized tensor is FAILED_PRECONDITION: its codes mean
  // nothing without their scales, which only GetFloat applies.
  absl::StatusOr<const TensorView*> Get(const std::string& name,
                                        absl::Span<const int64_t> shape) const;
  // Loads `name` (checked against `shape`) as fp32; a quantized weight dequantized (block FP8
  // with its `weight_scale_inv`, one scale per block of quantization().block_rows x block_cols;
  // ModelOpt FP8 with its `weight_scale`, one per tensor; GPTQ int4 from X.qweight, X.qzeros,
  // X.scales and X.g_idx for X.weight). Defined in dequantize.cc.
  absl::StatusOr<std::vector<float>> GetFloat(const std::string& name,
                                              absl::Span<const int64_t> shape) const;
  // config.json's quantization_config, checked when the checkpoint was opened.
  const QuantScheme& quantization() const { return quant_; }
  bool Has(const std::string& name) const { return index_.contains(name); }
  // Whether GetFloat can read the weight `name`: stored as itself, or packed (X.qweight, ...).
  bool HasWeight(const std::string& name) const { return Has(name) || !PackedStem(name).empty(); }
  // Every tensor, by name.
  const std::map<std::string, const TensorView*>& tensors() const { return index_; }
  size_t tensor_count() const { return index_.size(); }
  // Total bytes of all tensors, as stored.
  uint64_t stored_bytes() const;
  // Total bytes of all tensors widened to fp32, as an engine that widens them holds them: a
  // packed int4 tensor (X.qweight, X.weight_packed) counts the 8 codes of each I32.
  uint64_t float_bytes() const;

 private:
  // Get without the refusal of quantized tensors.
  absl::StatusOr<const TensorView*> Find(const std::string& name,
                                         absl::Span<const int64_t> shape) const;
  absl::StatusOr<std::vector<float>> DequantizeFp8Block(const TensorView& weight) const;
  absl::StatusOr<std::vector<float>> DequantizeModelOpt(const TensorView& weight) const;
  absl::StatusOr<std::vector<float>> DequantizeGptq(const std::string& stem,
                                                    absl::Span<const int64_t> shape) const;
  absl::StatusOr<std::vector<float>> DequantizeAwq(const std::string& stem,
                                                   absl::Span<const int64_t> shape) const;
  absl::StatusOr<std::vector<float>> DequantizeCompressedTensors(
      const std::string& stem, absl::Span<const int64_t> shape) const;
  // Each input's group: `g_idx` (a tensor [in] of groups below `groups`), or with "" in order,
  // `group` inputs each.
  absl::StatusOr<std::vector<int64_t>> GroupsOf(const std::string& g_idx, int64_t in, int64_t group,
                                                int64_t groups) const;
  // For a GPTQ or AWQ checkpoint, `name` (X.weight) stored as X.qweight and the rest, or for a
  // compressed-tensors one as X.weight_packed and the rest: "X"; else "".
  std::string PackedStem(const std::string& name) const;
  // Parses config_json_'s quantization_config (or, `from_dir`, ModelOpt's hf_quant_config.json
  // beside it) into quant_; an error names dir_.
  absl::Status ReadQuantization(bool from_dir);

  std::string dir_;
  std::string config_json_;
  QuantScheme quant_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<TensorView> owned_;  // FromTensors' tensors (never resized after it)
  std::map<std::string, const TensorView*> index_;
};

}  // namespace tandem::workers::model
