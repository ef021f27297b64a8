#include "workers/request_images.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "workers/vision/image_decoder.h"

namespace tandem::workers {
namespace {

std::string FieldOf(int message, int content) {
  return absl::StrCat("messages[", message, "].content[", content, "].image: ");
}

absl::Status PartError(int message, int content, const absl::Status& s) {
  return absl::InvalidArgumentError(absl::StrCat(FieldOf(message, content), s.message()));
}

}  // namespace

absl::StatusOr<ImagePlan> PlanRequestImages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const vision::PreprocessorConfig* processor, const std::string& model_name,
    const RequestLimits& limits, int64_t max_tokens) {
  ImagePlan plan;
  for (int i = 0; i < messages.size(); ++i) {
    for (int j = 0; j < messages[i].content_size(); ++j) {
      const auto& part = messages[i].content(j);
      if (!part.has_image()) continue;
      if (processor == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(FieldOf(i, j), "model '", model_name, "' does not accept images"));
      }
      const std::string& data = part.image().data();
      // The label, signature and header first, as DecodeImage reports them.
      auto size = vision::ProbeImageSize(data, part.image().mime_type());
      if (!size.ok()) return PartError(i, j, size.status());
      if (static_cast<int64_t>(data.size()) > limits.max_image_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(FieldOf(i, j), "image is ", data.size(),
                                                       " bytes, over the limit of ",
                                                       limits.max_image_bytes, " bytes"));
      }
      const int64_t pixels = int64_t{size->width} * size->height;
      if (pixels > limits.max_image_pixels) {
        return absl::InvalidArgumentError(absl::StrCat(
            FieldOf(i, j), "image is ", size->width, "x", size->height, " (", pixels,
            " pixels), over the limit of ", limits.max_image_pixels, " pixels"));
      }
      auto grid = vision::GridOf(size->height, size->width, *processor);
      if (!grid.ok()) return PartError(i, j, grid.status());
      // Every image's tokens before any is decoded: a request whose images together overflow
      // the context costs its headers only.
      if (plan.total_tokens + grid->num_tokens > max_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            FieldOf(i, j), "a ", size->width, "x", size->height, " image takes ",
            grid->num_tokens,
            " tokens; with the request's other images that passes the model's context of ",
            max_tokens, " tokens"));
      }
      plan.total_tokens += grid->num_tokens;
      plan.parts.push_back({i, j, size->width, size->height, grid->num_tokens});
    }
  }
  return plan;
}

absl::StatusOr<RequestImages> PrepareRequestImages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const ImagePlan& plan, const vision::PreprocessorConfig& processor,
    const RequestLimits& limits) {
  RequestImages out;
  const vision::ImageDecodeLimits decode_limits{.max_bytes = limits.max_image_bytes,
                                                .max_pixels = limits.max_image_pixels};
  for (const ImagePlan::Part& p : plan.parts) {
    const auto& image = messages[p.message].content(p.content).image();
    auto rgb = vision::DecodeImage(image.data(), image.mime_type(), decode_limits);
    if (!rgb.ok()) return PartError(p.message, p.content, rgb.status());
    if (rgb->width != p.width || rgb->height != p.height) {
      return PartError(p.message, p.content,
                       absl::InvalidArgumentError(absl::StrCat(
                           "decoded to ", rgb->width, "x", rgb->height, ", not the ", p.width,
                           "x", p.height, " its header declares")));
    }
    auto prepared = vision::PrepareImage(std::move(*rgb), processor);
    if (!prepared.ok()) return PartError(p.message, p.content, prepared.status());
    const int64_t tokens = prepared->num_tokens(processor.merge_size);
    out.total_tokens += tokens;
    out.tokens.push_back(tokens);
    out.images.push_back(std::make_shared<const vision::PreparedImage>(std::move(*prepared)));
  }
  return out;
}

}  // namespace tandem::workers
