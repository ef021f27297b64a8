#include "workers/model/quantized_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/model/checkpoint_writer.h"
#include "workers/model/model_config.h"
#include "workers/model/quantization.h"

namespace tandem::workers::model {
namespace {

using Json = nlohmann::json;

// The 2-D weights the release stores in FP8 (the routed experts are handled apart).
bool QuantizedInRelease(const std::string& name, const TensorView& t) {
  static constexpr const char* kParts[] = {
      "self_attn.q_proj.",          "self_attn.k_proj.",
      "self_attn.v_proj.",          "self_attn.o_proj.",
      "linear_attn.in_proj_qkv.",   "linear_attn.in_proj_z.",
      "linear_attn.out_proj.",      "mlp.shared_expert.gate_proj.",
      "mlp.shared_expert.up_proj.", "mlp.shared_expert.down_proj."};
  if (t.shape.size() != 2 || !absl::EndsWith(name, ".weight") ||
      absl::StrContains(name, "visual.")) {
    return false;
  }
  return std::any_of(std::begin(kParts), std::end(kParts),
                     [&](const char* p) { return absl::StrContains(name, p); });
}

TensorData Tensor(std::string name, std::vector<int64_t> shape, DType dtype,
                  std::vector<float> values = {}) {
  TensorData t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.values = std::move(values);
  return t;
}

float RoundToBf16(float f) {
  const uint32_t bits = static_cast<uint32_t>(FloatToBf16(f)) << 16;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// One weight [rows, cols] quantized, and its dequantized values.
struct Quantized {
  std::vector<TensorData> stored;  // what the release stores for the weight
  std::vector<float> dequantized;
};
// Quantizes the weight `name` [rows, cols] (row-major `w`) in one format.
using Quantizer =
    std::function<Quantized(const std::string& name, const float* w, int64_t rows, int64_t cols)>;

Quantized QuantizeBlocks(const std::string& name, const float* w, int64_t rows, int64_t cols,
                         int64_t block) {
  const int64_t srows = (rows + block - 1) / block, scols = (cols + block - 1) / block;
  Quantized q;
  TensorData codes = Tensor(name, {rows, cols}, DType::kF8E4M3);
  codes.raw.resize(static_cast<size_t>(rows * cols));
  TensorData scales = Tensor(name + "_scale_inv", {srows, scols}, DType::kBF16);
  scales.values.resize(static_cast<size_t>(srows * scols));
  q.dequantized.resize(static_cast<size_t>(rows * cols));
  for (int64_t br = 0; br < srows; ++br) {
    for (int64_t bc = 0; bc < scols; ++bc) {
      const int64_t r_end = std::min(rows, (br + 1) * block);
      const int64_t c_end = std::min(cols, (bc + 1) * block);
      float amax = 0;
      for (int64_t r = br * block; r < r_end; ++r) {
        for (int64_t c = bc * block; c < c_end; ++c)
          amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      // Stored as BF16, so the codes are made against the rounded scale.
      const float scale = RoundToBf16(amax > 0 ? amax / 448.0f : 1.0f);
      scales.values[br * scols + bc] = scale;
      for (int64_t r = br * block; r < r_end; ++r) {
        for (int64_t c = bc * block; c < c_end; ++c) {
          const uint8_t code = FloatToF8E4M3(w[r * cols + c] / scale);
          codes.raw[r * cols + c] = code;
          q.dequantized[r * cols + c] = F8E4M3ToFloat(code) * scale;
        }
      }
    }
  }
  q.stored.push_back(std::move(codes));
  q.stored.push_back(std::move(scales));
  return q;
}

// The release's fused-expert tensors, split and quantized per expert: `experts.E.gate_proj` and
// `up_proj` from gate_up_proj [E, 2I, H] (gate rows first), `down_proj` from down_proj [E, H, I].
void SplitExperts(const std::string& name, const TensorView& t, const std::vector<float>& values,
                  const Quantizer& quantize, std::vector<TensorData>* stored,
                  std::vector<float>* dequantized) {
  const std::string prefix = name.substr(0, name.rfind('.') + 1);  // "...mlp.experts."
  const bool gate_up = absl::EndsWith(name, "gate_up_proj");
  const int64_t experts = t.shape[0], rows = t.shape[1], cols = t.shape[2];
  dequantized->resize(values.size());
  for (int64_t e = 0; e < experts; ++e) {
    const std::string p = absl::StrCat(prefix, e, ".");
    const std::vector<std::pair<std::string, int64_t>> parts =
        gate_up
            ? std::vector<std::pair<std::string, int64_t>>{{"gate_proj", 0}, {"up_proj", rows / 2}}
            : std::vector<std::pair<std::string, int64_t>>{{"down_proj", 0}};
    const int64_t part_rows = gate_up ? rows / 2 : rows;
    for (const auto& [part, first_row] : parts) {
      const int64_t at = (e * rows + first_row) * cols;
      Quantized q = quantize(p + part + ".weight", values.data() + at, part_rows, cols);
      std::copy(q.dequantized.begin(), q.dequantized.end(), dequantized->begin() + at);
      for (TensorData& d : q.stored) stored->push_back(std::move(d));
    }
  }
}

absl::StatusOr<Json> QwenConfig(const Checkpoint& source, const char* format) {
  const Json config = ParseConfigJson(source.config_json());
  if (!config.is_object()) return absl::InvalidArgumentError("config.json is not an object");
  const std::string type = config.value("model_type", "");
  if (type != "qwen3_5_moe" && type != "qwen3_5_moe_text") {
    return absl::UnimplementedError(absl::StrCat(
        format, " is written for Qwen3.5; model_type '", type,
        "' is not qwen3_5_moe (Nemotron's FP8 release is ModelOpt per-tensor FP8: modelopt-fp8)"));
  }
  if (config.contains("quantization_config")) {
    return absl::InvalidArgumentError("the source checkpoint is quantized already");
  }
  return config;
}

absl::Status WriteDir(const std::string& from, const std::string& dir, const Json& config,
                      std::vector<TensorData> tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  for (const auto& entry : std::filesystem::directory_iterator(from, ec)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || file == "config.json" || absl::EndsWith(file, ".safetensors") ||
        file == "model.safetensors.index.json") {
      continue;
    }
    std::filesystem::copy_file(entry.path(), dir + "/" + file,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", file, ": ", ec.message()));
  }
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
  return WriteSafetensors(dir, std::move(tensors), DType::kBF16);
}

}  // namespace

namespace {

// Writes the Qwen3.5 `source` with the weights `quantized` says quantized by `quantize` (the
// routed experts, when quantized, split per expert), the rest BF16, and `quantization_config`.
absl::Status WriteQwenQuantized(
    const Checkpoint& source, const std::string& dir, const std::string& dequantized_dir,
    const char* format, const std::function<bool(const std::string&, const TensorView&)>& quantized,
    const Quantizer& quantize, const Json& quantization_config) {
  ASSIGN_OR_RETURN(Json config, QwenConfig(source, format));
  std::vector<TensorData> stored, reference;
  for (const auto& [name, t] : source.tensors()) {
    if (t->dtype == DType::kF8E4M3 || t->dtype == DType::kI32) {
      return absl::InvalidArgumentError(name + " is quantized");
    }
    std::vector<float> values = t->ToFloat();
    const bool experts =
        t->shape.size() == 3 && (absl::EndsWith(name, "mlp.experts.gate_up_proj") ||
                                 absl::EndsWith(name, "mlp.experts.down_proj"));
    if (experts) {
      std::vector<float> dequantized;
      SplitExperts(name, *t, values, quantize, &stored, &dequantized);
      reference.push_back(Tensor(name, t->shape, DType::kF32, std::move(dequantized)));
    } else if (quantized(name, *t)) {
      Quantized q = quantize(name, values.data(), t->shape[0], t->shape[1]);
      for (TensorData& d : q.stored) stored.push_back(std::move(d));
      reference.push_back(Tensor(name, t->shape, DType::kF32, std::move(q.dequantized)));
    } else {
      stored.push_back(Tensor(name, t->shape, DType::kBF16, values));
      reference.push_back(Tensor(name, t->shape, DType::kBF16, std::move(values)));
    }
  }
  Json with = config;
  with["quantization_config"] = quantization_config;
  RETURN_IF_ERROR(WriteDir(source.dir(), dir, with, std::move(stored)));
  if (dequantized_dir.empty()) return absl::OkStatus();
  return WriteDir(source.dir(), dequantized_dir, config, std::move(reference));
}

std::vector<uint8_t> RawWords(const std::vector<uint32_t>& words) {
  std::vector<uint8_t> bytes(words.size() * 4);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

// GPTQ int4 of one weight [out, in], symmetric (zero point 8, stored as 7: checkpoint_format
// gptq), one F16 scale per group of `group` inputs and output: amax / 7, rounded to F16 first.
Quantized QuantizeGptq(const std::string& name, const float* w, int64_t out, int64_t in,
                       int64_t group) {
  const int64_t groups = (in + group - 1) / group;
  const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
  Quantized q;
  q.dequantized.resize(static_cast<size_t>(out * in));
  std::vector<uint32_t> qweight(static_cast<size_t>(in / 8 * out), 0);
  std::vector<uint32_t> qzeros(static_cast<size_t>(groups * out / 8), 0x77777777u);
  TensorData scales = Tensor(stem + ".scales", {groups, out}, DType::kF16);
  scales.values.resize(static_cast<size_t>(groups * out));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      float amax = 0;
      for (int64_t i = g * group; i < std::min(in, (g + 1) * group); ++i) {
        amax = std::max(amax, std::fabs(w[o * in + i]));
      }
      uint16_t bits = FloatToF16(amax > 0 ? amax / 7.0f : 1.0f);
      const float scale = F16ToFloat(bits);
      scales.values[g * out + o] = scale;
      for (int64_t i = g * group; i < std::min(in, (g + 1) * group); ++i) {
        const float level = std::nearbyint(w[o * in + i] / scale) + 8.0f;
        const uint32_t code = static_cast<uint32_t>(std::clamp(level, 0.0f, 15.0f));
        qweight[(i / 8) * out + o] |= code << (4 * (i % 8));
        q.dequantized[o * in + i] = scale * static_cast<float>(static_cast<int32_t>(code) - 8);
      }
    }
  }
  TensorData qw = Tensor(stem + ".qweight", {in / 8, out}, DType::kI32);
  qw.raw = RawWords(qweight);
  TensorData qz = Tensor(stem + ".qzeros", {groups, out / 8}, DType::kI32);
  qz.raw = RawWords(qzeros);
  q.stored = {std::move(qw), std::move(qz), std::move(scales)};
  return q;
}

// The symmetric int4 scale of w[o, lo..hi) (amax / 7, rounded to `dtype` first) and its codes
// (level + 8, 0..15), into `codes` at the same positions.
float SymmetricInt4(const float* w, int64_t lo, int64_t hi, DType dtype,
                    std::vector<uint8_t>* codes) {
  float amax = 0;
  for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(w[i]));
  float scale = amax > 0 ? amax / 7.0f : 1.0f;
  scale = dtype == DType::kF16 ? F16ToFloat(FloatToF16(scale)) : RoundToBf16(scale);
  for (int64_t i = lo; i < hi; ++i) {
    const float level = std::nearbyint(w[i] / scale) + 8.0f;
    (*codes)[static_cast<size_t>(i)] = static_cast<uint8_t>(std::clamp(level, 0.0f, 15.0f));
  }
  return scale;
}

// AWQ int4 (GEMM packing) of one weight [out, in]: qweight [in, out/8] and qzeros
// [groups, out/8] with AWQ's nibble order (column 8c + {0, 2, 4, 6, 1, 3, 5, 7}[j] in nibble j),
// zero points 8, F16 scales [groups, out].
Quantized QuantizeAwq(const std::string& name, const float* w, int64_t out, int64_t in,
                      int64_t group) {
  static constexpr int kNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // column o % 8 -> nibble
  const int64_t groups = (in + group - 1) / group;
  const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
  Quantized q;
  q.dequantized.resize(static_cast<size_t>(out * in));
  std::vector<uint8_t> codes(static_cast<size_t>(out * in));
  std::vector<uint32_t> qweight(static_cast<size_t>(in * out / 8), 0);
  std::vector<uint32_t> qzeros(static_cast<size_t>(groups * out / 8), 0x88888888u);
  TensorData scales = Tensor(stem + ".scales", {groups, out}, DType::kF16);
  scales.values.resize(static_cast<size_t>(groups * out));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t lo = o * in + g * group, hi = o * in + std::min(in, (g + 1) * group);
      const float scale = SymmetricInt4(w, lo, hi, DType::kF16, &codes);
      scales.values[g * out + o] = scale;
      for (int64_t at = lo; at < hi; ++at) {
        const int64_t i = at - o * in;
        qweight[i * (out / 8) + o / 8] |= uint32_t{codes[at]} << (4 * kNibble[o % 8]);
        q.dequantized[at] = scale * static_cast<float>(int32_t{codes[at]} - 8);
      }
    }
  }
  TensorData qw = Tensor(stem + ".qweight", {in, out / 8}, DType::kI32);
  qw.raw = RawWords(qweight);
  TensorData qz = Tensor(stem + ".qzeros", {groups, out / 8}, DType::kI32);
  qz.raw = RawWords(qzeros);
  q.stored = {std::move(qw), std::move(qz), std::move(scales)};
  return q;
}

// compressed-tensors pack-quantized int4 of one weight [out, in], symmetric by group:
// weight_packed [out, ceil(in/8)] (codes + 8, input i in nibble i % 8), BF16 weight_scale
// [out, groups], weight_shape [2] (I64). Dequantized in the scale's dtype, as the format does.
Quantized QuantizeCompressed(const std::string& name, const float* w, int64_t out, int64_t in,
                             int64_t group) {
  const int64_t groups = (in + group - 1) / group, words = (in + 7) / 8;
  const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
  Quantized q;
  q.dequantized.resize(static_cast<size_t>(out * in));
  std::vector<uint8_t> codes(static_cast<size_t>(out * in));
  std::vector<uint32_t> packed(static_cast<size_t>(out * words), 0);
  TensorData scales = Tensor(stem + ".weight_scale", {out, groups}, DType::kBF16);
  scales.values.resize(static_cast<size_t>(out * groups));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t lo = o * in + g * group, hi = o * in + std::min(in, (g + 1) * group);
      const float scale = SymmetricInt4(w, lo, hi, DType::kBF16, &codes);
      scales.values[o * groups + g] = scale;
      for (int64_t at = lo; at < hi; ++at) {
        const int64_t i = at - o * in;
        packed[o * words + i / 8] |= uint32_t{codes[at]} << (4 * (i % 8));
        q.dequantized[at] = RoundToBf16(static_cast<float>(int32_t{codes[at]} - 8) * scale);
      }
    }
  }
  TensorData wp = Tensor(stem + ".weight_packed", {out, words}, DType::kI32);
  wp.raw = RawWords(packed);
  TensorData shape = Tensor(stem + ".weight_shape", {2}, DType::kI64);
  shape.raw.resize(16);
  const int64_t dims[2] = {out, in};
  std::memcpy(shape.raw.data(), dims, 16);
  q.stored = {std::move(wp), std::move(scales), std::move(shape)};
  return q;
}

// The MLPs: what Qwen's GPTQ release quantizes (its `dynamic` rule keeps every attention module,
// ".*attn.*", the Gated DeltaNet's linear_attn included, unquantized); the int4 writers all
// quantize these.
bool QwenMlp(const std::string& name, const TensorView& t) {
  return t.shape.size() == 2 && absl::EndsWith(name, ".weight") &&
         absl::StrContains(name, "mlp.shared_expert.") && !absl::StrContains(name, "visual.");
}

}  // namespace

absl::Status WriteFp8BlockCheckpoint(const Checkpoint& source, const std::string& dir,
                                     int64_t block, const std::string& dequantized_dir) {
  if (block < 1) return absl::InvalidArgumentError("the FP8 block size must be >= 1");
  const Json config = {{"quant_method", "fp8"},
                       {"fmt", "e4m3"},
                       {"activation_scheme", "dynamic"},
                       {"weight_block_size", {block, block}},
                       {"modules_to_not_convert",
                        {"lm_head", "model.visual", "mlp.gate", "mlp.shared_expert_gate",
                         "linear_attn.in_proj_a", "linear_attn.in_proj_b", "linear_attn.conv1d"}}};
  return WriteQwenQuantized(
      source, dir, dequantized_dir, "block FP8", QuantizedInRelease,
      [block](const std::string& name, const float* w, int64_t rows, int64_t cols) {
        return QuantizeBlocks(name, w, rows, cols, block);
      },
      config);
}

absl::Status WriteGptqCheckpoint(const Checkpoint& source, const std::string& dir, int64_t group,
                                 const std::string& dequantized_dir) {
  if (group < 8 || group % 8 != 0) {
    return absl::InvalidArgumentError("the GPTQ group size must be a multiple of 8");
  }
  const Json config = {{"quant_method", "gptq"},
                       {"bits", 4},
                       {"group_size", group},
                       {"desc_act", false},
                       {"sym", true},
                       {"checkpoint_format", "gptq"},
                       {"dynamic", {{"-:.*attn.*", Json::object()}}}};
  return WriteQwenQuantized(
      source, dir, dequantized_dir, "GPTQ", QwenMlp,
      [group](const std::string& name, const float* w, int64_t rows, int64_t cols) {
        return QuantizeGptq(name, w, rows, cols, group);
      },
      config);
}

absl::Status WriteAwqCheckpoint(const Checkpoint& source, const std::string& dir, int64_t group,
                                const std::string& dequantized_dir) {
  if (group < 1) return absl::InvalidArgumentError("the AWQ group size must be >= 1");
  const Json config = {{"quant_method", "awq"},
                       {"bits", 4},
                       {"group_size", group},
                       {"zero_point", true},
                       {"version", "gemm"},
                       {"modules_to_not_convert", {"attn", "visual", "mlp.gate", "lm_head"}}};
  return WriteQwenQuantized(
      source, dir, dequantized_dir, "AWQ", QwenMlp,
      [group](const std::string& name, const float* w, int64_t rows, int64_t cols) {
        return QuantizeAwq(name, w, rows, cols, group);
      },
      config);
}

absl::Status WriteCompressedTensorsCheckpoint(const Checkpoint& source, const std::string& dir,
                                              int64_t group, const std::string& dequantized_dir) {
  if (group < 1)
    return absl::InvalidArgumentError("the compressed-tensors group size must be >= 1");
  const Json weights = {{"num_bits", 4},       {"type", "int"},       {"symmetric", true},
                        {"strategy", "group"}, {"group_size", group}, {"actorder", nullptr}};
  const Json config = {
      {"quant_method", "compressed-tensors"},
      {"format", "pack-quantized"},
      {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
      {"ignore", {"lm_head", "re:.*attn.*", "re:.*visual.*", "re:.*mlp.gate$"}}};
  return WriteQwenQuantized(
      source, dir, dequantized_dir, "compressed-tensors", QwenMlp,
      [group](const std::string& name, const float* w, int64_t rows, int64_t cols) {
        return QuantizeCompressed(name, w, rows, cols, group);
      },
      config);
}

namespace {

// A ModelOpt FP8 weight: codes of W / s with s = amax / 448 in F32, its scalar scales.
void QuantizePerTensor(const std::string& name, const TensorView& t, std::vector<float>* values,
                       std::vector<TensorData>* out) {
  float amax = 0;
  for (float v : *values) amax = std::max(amax, std::fabs(v));
  const float scale = amax > 0 ? amax / 448.0f : 1.0f;
  TensorData codes = Tensor(name, t.shape, DType::kF8E4M3);
  codes.raw.resize(values->size());
  for (size_t i = 0; i < values->size(); ++i) {
    codes.raw[i] = FloatToF8E4M3((*values)[i] / scale);
    (*values)[i] = F8E4M3ToFloat(codes.raw[i]) * scale;  // what a load must reproduce
  }
  const std::string stem = name.substr(0, name.size() - std::string("weight").size());
  out->push_back(std::move(codes));
  out->push_back(Tensor(stem + "weight_scale", {}, DType::kF32, {scale}));
  out->push_back(Tensor(stem + "input_scale", {}, DType::kF32, {1.0f}));
}

// The release's ignore list for a layer pattern (M Mamba, E MoE, * attention): the attention
// layers, the Mamba layers that feed them, every conv1d.
std::vector<std::string> ModelOptIgnored(const std::string& pattern) {
  std::vector<std::string> ignored = {"lm_head"};
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string p = absl::StrCat("backbone.layers.", i, ".mixer.");
    if (pattern[i] == '*') {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) ignored.push_back(p + proj);
    } else if (pattern[i] == 'M') {
      ignored.push_back(p + "conv1d");
      if (i + 1 < pattern.size() && pattern[i + 1] == '*') {
        ignored.push_back(p + "in_proj");
        ignored.push_back(p + "out_proj");
      }
    }
  }
  return ignored;
}

bool QuantizedInModelOpt(const std::string& name, const TensorView& t,
                         const std::vector<std::string>& ignored) {
  if (t.shape.size() != 2 || !absl::EndsWith(name, "_proj.weight")) return false;
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  if (std::find(ignored.begin(), ignored.end(), module) != ignored.end()) return false;
  return absl::EndsWith(module, "mixer.in_proj") || absl::EndsWith(module, "mixer.out_proj") ||
         absl::StrContains(module, "mixer.experts.") ||
         absl::StrContains(module, "mixer.shared_experts.");
}

}  // namespace

absl::Status WriteModelOptFp8Checkpoint(const Checkpoint& source, const std::string& dir,
                                        const std::string& dequantized_dir) {
  Json config = ParseConfigJson(source.config_json());
  if (!config.is_object() || config.value("model_type", "") != "nemotron_h") {
    return absl::UnimplementedError(
        "ModelOpt FP8 is Nemotron-3-Nano's release format: the source is not nemotron_h");
  }
  if (config.contains("quantization_config")) {
    return absl::InvalidArgumentError("the source checkpoint is quantized already");
  }
  const std::vector<std::string> ignored =
      ModelOptIgnored(config.value("hybrid_override_pattern", ""));
  std::vector<TensorData> fp8, reference;
  for (const auto& [name, t] : source.tensors()) {
    if (t->dtype == DType::kF8E4M3) return absl::InvalidArgumentError(name + " is quantized");
    std::vector<float> values = t->ToFloat();
    if (QuantizedInModelOpt(name, *t, ignored)) {
      QuantizePerTensor(name, *t, &values, &fp8);
      reference.push_back(Tensor(name, t->shape, DType::kF32, std::move(values)));
      continue;
    }
    if (absl::EndsWith(name, "mixer.k_proj.weight") ||
        absl::EndsWith(name, "mixer.v_proj.weight")) {
      const std::string kv = absl::EndsWith(name, "k_proj.weight") ? "k" : "v";
      const std::string stem = name.substr(0, name.size() - std::string("weight").size());
      fp8.push_back(Tensor(stem + kv + "_scale", {}, DType::kF32, {1.0f}));
    }
    fp8.push_back(
        Tensor(name, t->shape, t->dtype == DType::kF32 ? DType::kF32 : DType::kBF16, values));
    reference.push_back(Tensor(name, t->shape, t->dtype == DType::kF32 ? DType::kF32 : DType::kBF16,
                               std::move(values)));
  }
  Json quantized = config;
  quantized["quantization_config"] = {
      {"quant_method", "modelopt"},
      {"quant_algo", "FP8"},
      {"kv_cache_scheme", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
      {"ignore", ignored},
      {"producer", {{"name", "modelopt"}}}};
  RETURN_IF_ERROR(WriteDir(source.dir(), dir, quantized, std::move(fp8)));
  if (dequantized_dir.empty()) return absl::OkStatus();
  return WriteDir(source.dir(), dequantized_dir, config, std::move(reference));
}

}  // namespace tandem::workers::model
