// Checkpoint::GetFloat and the dequantization of each quantized format it reads
// (quantization.h): a quantized weight is only ever read through its scales.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/model/quantization.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {

absl::StatusOr<std::vector<float>> Checkpoint::GetFloat(const std::string& name,
                                                        absl::Span<const int64_t> shape) const {
  if (const std::string stem = GptqStem(name); !stem.empty()) {
    return quant_.method == QuantScheme::Method::kAwq ? DequantizeAwq(stem, shape)
                                                      : DequantizeGptq(stem, shape);
  }
  auto t = Find(name, shape);
  if (!t.ok()) return t.status();
  if ((*t)->dtype == DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor ", name, " is I32"));
  }
  if ((*t)->dtype != DType::kF8E4M3) return (*t)->ToFloat();
  if (quant_.method == QuantScheme::Method::kModelOptFp8) return DequantizeModelOpt(**t);
  return DequantizeFp8Block(**t);
}

std::string Checkpoint::GptqStem(const std::string& name) const {
  const bool packed =
      quant_.method == QuantScheme::Method::kGptq || quant_.method == QuantScheme::Method::kAwq;
  if (!packed || Has(name) || !absl::EndsWith(name, ".weight")) {
    return "";
  }
  std::string stem = name.substr(0, name.size() - std::string(".weight").size());
  return Has(stem + ".qweight") ? stem : "";
}

absl::StatusOr<std::vector<float>> Checkpoint::DequantizeModelOpt(const TensorView& w) const {
  const std::string scale_name = absl::StrCat(w.name, "_scale");
  if (!absl::EndsWith(w.name, ".weight") || !Has(scale_name) || w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor ", w.name,
                                                   " is F8_E4M3 and has no ", scale_name,
                                                   ": refusing to read raw FP8 codes"));
  }
  const TensorView& s = *index_.at(scale_name);
  if (s.elements() != 1 || s.dtype == DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", scale_name, " is ", DTypeName(s.dtype), " ", s.ShapeString(),
                     "; ModelOpt FP8 has one F32 (or BF16/F16) scale per tensor, shape [] or [1]"));
  }
  const float scale = s.Element(0);
  std::vector<float> out(static_cast<size_t>(w.elements()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = F8E4M3ToFloat(w.data[i]) * scale;
  return out;
}

absl::StatusOr<std::vector<float>> Checkpoint::DequantizeFp8Block(const TensorView& w) const {
  if (quant_.method != QuantScheme::Method::kFp8Block) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir_, ": tensor ", w.name,
        " is F8_E4M3 but config.json has no block FP8 "
        "quantization_config to say how it is scaled: refusing to read raw FP8 codes"));
  }
  if (w.shape.size() != 2 || !absl::EndsWith(w.name, ".weight") || w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor ", w.name, " ", w.ShapeString(),
                                                   " is F8_E4M3 but not a 2-D .weight"));
  }
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const int64_t br = quant_.block_rows, bc = quant_.block_cols;
  const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
  const std::string scale_name = absl::StrCat(w.name, "_scale_inv");
  if (!Has(scale_name)) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor ", w.name,
                                                   " is F8_E4M3 and has no ", scale_name,
                                                   ": refusing to read raw FP8 codes"));
  }
  ASSIGN_OR_RETURN(const TensorView* s, Find(scale_name, {srows, scols}));
  if (s->dtype == DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", scale_name, " is F8_E4M3; scales are BF16, F16 or F32"));
  }
  const std::vector<float> scale = s->ToFloat();
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scale.data() + (r / br) * scols;
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = F8E4M3ToFloat(w.data[r * cols + c]) * scale_row[c / bc];
    }
  }
  return out;
}

namespace {

// Nibble `k` (0-7) of a little-endian int32 holding eight 4-bit codes.
inline int32_t Nibble(const uint8_t* word, int k) {
  uint32_t w;
  std::memcpy(&w, word, 4);
  return static_cast<int32_t>((w >> (4 * k)) & 0xF);
}

}  // namespace

absl::StatusOr<std::vector<float>> Checkpoint::DequantizeGptq(
    const std::string& stem, absl::Span<const int64_t> shape) const {
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": ", stem, " is GPTQ but not 2-D"));
  }
  const int64_t out = shape[0], in = shape[1];
  if (in % 8 != 0 || out % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir_, ": ", stem, " [", out, ", ", in,
        "]: GPTQ packs 8 codes per int32 in both dimensions, which this shape does not tile"));
  }
  const bool has_g_idx = Has(stem + ".g_idx");
  if (quant_.desc_act && !has_g_idx) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", stem, ".g_idx missing, and the config says desc_act"));
  }
  const int64_t group = quant_.group_size > 0 ? quant_.group_size : in;
  const std::string scales_name = stem + ".scales";
  if (!Has(scales_name)) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": ", scales_name, " missing"));
  }
  const int64_t groups =
      index_.at(scales_name)->shape.empty() ? 0 : index_.at(scales_name)->shape[0];
  if (!has_g_idx && groups != (in + group - 1) / group) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": ", scales_name, " has ", groups,
                                                   " groups; ", in, " inputs in groups of ", group,
                                                   " make ", (in + group - 1) / group));
  }
  ASSIGN_OR_RETURN(const TensorView* q, Find(stem + ".qweight", {in / 8, out}));
  ASSIGN_OR_RETURN(const TensorView* z, Find(stem + ".qzeros", {groups, out / 8}));
  ASSIGN_OR_RETURN(const TensorView* s, Find(scales_name, {groups, out}));
  if (q->dtype != DType::kI32 || z->dtype != DType::kI32 || s->dtype == DType::kI32 ||
      s->dtype == DType::kF8E4M3 || q->data == nullptr || z->data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", stem, ": qweight and qzeros are I32, scales F16, BF16 or F32"));
  }
  std::vector<int64_t> group_of(static_cast<size_t>(in));
  if (has_g_idx) {
    ASSIGN_OR_RETURN(const TensorView* g, Find(stem + ".g_idx", {in}));
    for (int64_t i = 0; i < in; ++i) {
      const float v = g->Element(i);
      if (g->dtype != DType::kI32 || v < 0 || v >= static_cast<float>(groups)) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir_, ": ", stem, ".g_idx[", i, "] is not an I32 group in [0, ", groups, ")"));
      }
      group_of[i] = static_cast<int64_t>(v);
    }
  } else {
    for (int64_t i = 0; i < in; ++i) group_of[i] = i / group;
  }
  const std::vector<float> scales = s->ToFloat();
  const int32_t zero_offset = quant_.gptq_v2 ? 0 : 1;  // v1 stores each zero point minus one
  std::vector<float> w(static_cast<size_t>(out * in));
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = group_of[i];
    const uint8_t* q_row = q->data + (i / 8) * out * 4;
    const uint8_t* z_row = z->data + g * (out / 8) * 4;
    for (int64_t o = 0; o < out; ++o) {
      const int32_t code = Nibble(q_row + o * 4, static_cast<int>(i % 8));
      const int32_t zero = Nibble(z_row + (o / 8) * 4, static_cast<int>(o % 8)) + zero_offset;
      w[o * in + i] = scales[g * out + o] * static_cast<float>(code - zero);
    }
  }
  return w;
}

absl::StatusOr<std::vector<float>> Checkpoint::DequantizeAwq(
    const std::string& stem, absl::Span<const int64_t> shape) const {
  if (shape.size() != 2 || shape[0] % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", stem,
                     ": AWQ packs 8 output columns per int32; a 2-D weight whose output "
                     "size is a multiple of 8 is read"));
  }
  const int64_t out = shape[0], in = shape[1];
  const int64_t group = quant_.group_size > 0 ? quant_.group_size : in;
  const int64_t groups = (in + group - 1) / group;
  ASSIGN_OR_RETURN(const TensorView* q, Find(stem + ".qweight", {in, out / 8}));
  ASSIGN_OR_RETURN(const TensorView* z, Find(stem + ".qzeros", {groups, out / 8}));
  ASSIGN_OR_RETURN(const TensorView* s, Find(stem + ".scales", {groups, out}));
  if (q->dtype != DType::kI32 || z->dtype != DType::kI32 || s->dtype == DType::kI32 ||
      s->dtype == DType::kF8E4M3 || q->data == nullptr || z->data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", stem, ": qweight and qzeros are I32, scales F16, BF16 or F32"));
  }
  // Nibble j of a word holds column 8c + {0, 2, 4, 6, 1, 3, 5, 7}[j]: column k is nibble
  // kNibble[k].
  static constexpr int kNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  const std::vector<float> scales = s->ToFloat();
  std::vector<float> w(static_cast<size_t>(out * in));
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / group;
    for (int64_t o = 0; o < out; ++o) {
      const int k = kNibble[o % 8];
      const int32_t code = Nibble(q->data + (i * (out / 8) + o / 8) * 4, k);
      const int32_t zero = Nibble(z->data + (g * (out / 8) + o / 8) * 4, k);
      w[o * in + i] = scales[g * out + o] * static_cast<float>(code - zero);
    }
  }
  return w;
}

}  // namespace tandem::workers::model
