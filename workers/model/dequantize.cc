// Checkpoint::GetFloat and the dequantization of each quantized format it reads
// (quantization.h): a quantized weight is only ever read through its scales.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/model/checkpoint_writer.h"
#include "workers/model/quantization.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {

absl::StatusOr<std::vector<float>> Checkpoint::GetFloat(const std::string& name,
                                                        absl::Span<const int64_t> shape) const {
  if (const std::string stem = PackedStem(name); !stem.empty()) {
    switch (quant_.method) {
      case QuantScheme::Method::kAwq:
        return DequantizeAwq(stem, shape);
      case QuantScheme::Method::kCompressedTensors:
        return DequantizeCompressedTensors(stem, shape);
      default:
        return DequantizeGptq(stem, shape);
    }
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

std::string Checkpoint::PackedStem(const std::string& name) const {
  const char* packed = nullptr;  // the tensor that stands for X.weight
  switch (quant_.method) {
    case QuantScheme::Method::kGptq:
    case QuantScheme::Method::kAwq:
      packed = ".qweight";
      break;
    case QuantScheme::Method::kCompressedTensors:
      packed = ".weight_packed";
      break;
    default:
      return "";
  }
  if (Has(name) || !absl::EndsWith(name, ".weight")) return "";
  std::string stem = name.substr(0, name.size() - std::string(".weight").size());
  return Has(stem + packed) ? stem : "";
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

absl::StatusOr<std::vector<int64_t>> Checkpoint::GroupsOf(const std::string& g_idx, int64_t in,
                                                          int64_t group, int64_t groups) const {
  std::vector<int64_t> group_of(static_cast<size_t>(in));
  if (g_idx.empty()) {
    for (int64_t i = 0; i < in; ++i) group_of[i] = i / group;
    return group_of;
  }
  ASSIGN_OR_RETURN(const TensorView* g, Find(g_idx, {in}));
  for (int64_t i = 0; i < in; ++i) {
    const float v = g->Element(i);
    if (g->dtype != DType::kI32 || v < 0 || v >= static_cast<float>(groups)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir_, ": ", g_idx, "[", i, "] is not an I32 group in [0, ", groups, ")"));
    }
    group_of[i] = static_cast<int64_t>(v);
  }
  return group_of;
}

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
  ASSIGN_OR_RETURN(const std::vector<int64_t> group_of,
                   GroupsOf(has_g_idx ? stem + ".g_idx" : "", in, group, groups));
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

namespace {

// `f` rounded to `dtype` (BF16 and F16 to nearest even; F32 as it is): compressed-tensors
// dequantizes in its scale's dtype.
float RoundTo(DType dtype, float f) {
  if (dtype == DType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(FloatToBf16(f)) << 16;
    float r;
    std::memcpy(&r, &bits, 4);
    return r;
  }
  if (dtype == DType::kF16) return F16ToFloat(FloatToF16(f));
  return f;
}

}  // namespace

absl::StatusOr<std::vector<float>> Checkpoint::DequantizeCompressedTensors(
    const std::string& stem, absl::Span<const int64_t> shape) const {
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": ", stem, " is packed but not 2-D"));
  }
  const int64_t out = shape[0], in = shape[1];
  const int64_t groups =
      quant_.group_size > 0 ? (in + quant_.group_size - 1) / quant_.group_size : 1;
  if (Has(stem + ".weight_shape")) {
    ASSIGN_OR_RETURN(const TensorView* ws, Find(stem + ".weight_shape", {2}));
    if (ws->Element(0) != static_cast<float>(out) || ws->Element(1) != static_cast<float>(in)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir_, ": ", stem, ".weight_shape says [", ws->Element(0), ", ",
                       ws->Element(1), "], the config implies [", out, ", ", in, "]"));
    }
  }
  ASSIGN_OR_RETURN(const TensorView* q, Find(stem + ".weight_packed", {out, (in + 7) / 8}));
  ASSIGN_OR_RETURN(const TensorView* s, Find(stem + ".weight_scale", {out, groups}));
  const TensorView* z = nullptr;
  if (!quant_.sym) {
    ASSIGN_OR_RETURN(z, Find(stem + ".weight_zero_point", {(out + 7) / 8, groups}));
  }
  if (q->dtype != DType::kI32 || q->data == nullptr ||
      (s->dtype != DType::kBF16 && s->dtype != DType::kF16 && s->dtype != DType::kF32) ||
      (z != nullptr && (z->dtype != DType::kI32 || z->data == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", stem,
                     ": weight_packed and weight_zero_point are I32, weight_scale BF16, F16 "
                     "or F32"));
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> group_of,
                   GroupsOf(quant_.desc_act ? stem + ".weight_g_idx" : "", in,
                            quant_.group_size > 0 ? quant_.group_size : in, groups));
  const std::vector<float> scales = s->ToFloat();
  const int64_t words = (in + 7) / 8;
  std::vector<float> w(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = group_of[i];
      const int32_t code = Nibble(q->data + (o * words + i / 8) * 4, static_cast<int>(i % 8));
      const int32_t zero =
          z == nullptr ? 8 : Nibble(z->data + ((o / 8) * groups + g) * 4, static_cast<int>(o % 8));
      w[o * in + i] = RoundTo(s->dtype, static_cast<float>(code - zero) * scales[o * groups + g]);
    }
  }
  return w;
}

}  // namespace tandem::workers::model
