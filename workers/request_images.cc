#include "workers/request_images.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "workers/vision/image_decoder.h"

namespace tandem::workers {

absl::StatusOr<RequestImages> PrepareRequestImages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const vision::PreprocessorConfig* processor, const std::string& model_name,
    const RequestLimits& limits, int64_t max_tokens) {
  RequestImages out;
  const vision::ImageDecodeLimits decode_limits{.max_bytes = limits.max_image_bytes,
                                                .max_pixels = limits.max_image_pixels};
  for (int i = 0; i < messages.size(); ++i) {
    for (int j = 0; j < messages[i].content_size(); ++j) {
      const auto& part = messages[i].content(j);
      if (!part.has_image()) continue;
      const std::string field = absl::StrCat("messages[", i, "].content[", j, "].image: ");
      auto fail = [&](const absl::Status& s) {
        return absl::InvalidArgumentError(absl::StrCat(field, s.message()));
      };
      if (processor == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, "model '", model_name, "' does not accept images"));
      }
      // The size first: the token budget is checked before any pixel is decoded.
      auto size = vision::ProbeImageSize(part.image().data(), part.image().mime_type());
      if (!size.ok()) return fail(size.status());
      auto grid = vision::GridOf(size->height, size->width, *processor);
      if (!grid.ok()) return fail(grid.status());
      if (out.total_tokens + grid->num_tokens > max_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "a ", size->width, "x", size->height, " image takes ", grid->num_tokens,
            " tokens; with the request's other images that passes the model's context of ",
            max_tokens, " tokens"));
      }
      auto rgb = vision::DecodeImage(part.image().data(), part.image().mime_type(), decode_limits);
      if (!rgb.ok()) return fail(rgb.status());
      auto prepared = vision::PrepareImage(std::move(*rgb), *processor);
      if (!prepared.ok()) return fail(prepared.status());
      const int64_t tokens = prepared->num_tokens(processor->merge_size);
      out.total_tokens += tokens;
      out.tokens.push_back(tokens);
      out.images.push_back(std::make_shared<const vision::PreparedImage>(std::move(*prepared)));
    }
  }
  return out;
}

}  // namespace tandem::workers
