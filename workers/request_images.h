#pragma once

// A request's images turned into what an engine consumes: each image part decoded (PNG, JPEG,
// WebP, GIF), resized and laid out by the engine's image processor, with the prompt tokens it
// takes. Done on the worker before tokenization, since the prompt holds one placeholder token
// per merged patch.
//
// Two steps, so that what is cheap runs first and what is costly runs on the image pool:
// PlanRequestImages reads every image's header (no pixel is decoded) and checks the limits and
// the context for all of them together; only then PrepareRequestImages decodes and resizes.

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

// What the headers of a request's images say, in order of appearance.
struct ImagePlan {
  struct Part {
    int message = 0;  // messages[message].content[content]
    int content = 0;
    int32_t width = 0;  // as the header declares
    int32_t height = 0;
    int64_t tokens = 0;
  };
  std::vector<Part> parts;
  int64_t total_tokens = 0;
};

// The images of `messages` from their headers alone, for an engine whose processor is
// `processor` (null: the engine takes no images). INVALID_ARGUMENT naming the part
// ("messages[1].content[0].image: ...") for an image this model cannot take, a bad label,
// signature or header, one over --max_image_bytes or --max_image_pixels, or when the tokens of
// all the request's images together pass `max_tokens` (the model's context). Cheap: reads
// headers (and a GIF's colour table) only.
absl::StatusOr<ImagePlan> PlanRequestImages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const vision::PreprocessorConfig* processor, const std::string& model_name,
    const RequestLimits& limits, int64_t max_tokens);

// Decodes and resizes the images `plan` (PlanRequestImages's for the same messages) lists.
// INVALID_ARGUMENT naming the part for one that does not decode, or decodes to another size
// than its header said. The costly step: run it on the image pool.
absl::StatusOr<RequestImages> PrepareRequestImages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const ImagePlan& plan, const vision::PreprocessorConfig& processor,
    const RequestLimits& limits);

}  // namespace tandem::workers
