#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/request_validation.h"
#include "tandem/v1/worker.pb.h"
#include "workers/engine.h"
#include "workers/request_images.h"
#include "workers/scheduler.h"

namespace tandem::workers {

// A WorkerGenerateRequest checked and tokenized for the scheduler. The prompt already holds
// each image's tokens, from its header; `images` lists the images still to be decoded and
// resized (PrepareRequestImages, on the image pool), and `request.images` stays empty until
// then. No image is listed when the engine counts images in its tokenizer (the load simulator)
// or the request has none.
struct PlannedGeneration {
  GenerationRequest request;
  ImagePlan images;
};

// The checks of a request that need no tokenizer: request id, reasoning, messages, sampling
// (max_tokens against `max_output_tokens`) and tools. INVALID_ARGUMENT naming the field.
absl::Status ValidateGenerateRequest(const tandem::v1::WorkerGenerateRequest& request,
                                     int32_t max_output_tokens, const RequestLimits& limits);

// `request` for `engine`: validated as ValidateGenerateRequest does, its images' headers checked
// against `limits` and the context (no pixel is decoded), then the prompt tokenized. Every
// refusal is INVALID_ARGUMENT naming the field, save the tokenizer's own (e.g. UNIMPLEMENTED
// for tools a tokenizer cannot render). Cheap enough for a gRPC thread. Sets neither `arrival`
// nor `deadline`: those are the call's.
absl::StatusOr<PlannedGeneration> ToGenerationRequest(
    const tandem::v1::WorkerGenerateRequest& request, const Engine& engine,
    const RequestLimits& limits);

}  // namespace tandem::workers
