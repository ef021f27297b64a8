#pragma once

// A request's images turned into what an engine consumes: each image part decoded (PNG, JPEG,
// WebP, GIF), resized and laid out by the engine's image processor, with the prompt tokens it
// takes. Done on the worker before tokenization, since the prompt holds one placeholder token
// per merged patch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/request_validation.h"
#include "google/protobuf/repeated_field.h"
#include "tandem/v1/common.pb.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers {

struct RequestImages {
  // In order of appearance in the messages.
  std::vector<std::shared_ptr<const vision::PreparedImage>> images;
  // Prompt tokens of each image (its image-pad count).
  std::vector<int64_t> tokens;
  int64_t total_tokens = 0;
};

// The images of `messages` for an engine whose processor is `processor` (null: the engine takes
// no images). INVALID_ARGUMENT naming the part ("messages[1].content[0].image: ...") for an
// image this model cannot take, one that does not decode, is over --max_image_bytes or
// --max_image_pixels, or whose tokens together pass `max_tokens` (the model's context); the
// decoded pixels are checked from the header before any buffer is allocated, and the token
// count from the size before any resize.
absl::StatusOr<RequestImages> PrepareRequestImages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const vision::PreprocessorConfig* processor, const std::string& model_name,
    const RequestLimits& limits, int64_t max_tokens);

}  // namespace tandem::workers
