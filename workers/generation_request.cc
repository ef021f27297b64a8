#include "workers/generation_request.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::workers {
namespace {

// A tenant name (or the operator's shared value) fits many times over.
constexpr size_t kMaxCachePartitionBytes = 256;

// The prompt's tokens, each image taking the tokens `plan` gives it; INVALID_ARGUMENT when it
// does not fit the context.
absl::StatusOr<std::vector<int32_t>> Tokenize(const tandem::v1::WorkerGenerateRequest& request,
                                              const Engine& engine, const ImagePlan& plan) {
  const EngineInfo& info = engine.Info();
  std::vector<int64_t> image_tokens;
  for (const ImagePlan::Part& p : plan.parts) image_tokens.push_back(p.tokens);
  absl::StatusOr<std::vector<int32_t>> prompt = engine.GetTokenizer().EncodeChatWithImages(
      request.messages(), request.tools(), request.reasoning(), request.continue_final_message(),
      image_tokens);
  if (prompt.ok() && static_cast<int64_t>(prompt->size()) >= info.max_context_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "messages: prompt of %d tokens does not fit the model's context of %d tokens",
        prompt->size(), info.max_context_tokens));
  }
  return prompt;
}

// The request's sampling and budgets, with the engine's defaults where it sets none.
GenerationRequest FromSampling(const tandem::v1::WorkerGenerateRequest& request,
                               const EngineInfo& info) {
  GenerationRequest g;
  // Validated: empty or a plain token, so logged as it is.
  g.request_id = request.request_id();
  g.cache_partition = request.cache_partition();
  const auto& s = request.sampling();
  g.sampling.temperature = s.has_temperature() ? s.temperature() : 1.0f;
  g.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  g.sampling.top_k = s.top_k();
  g.sampling.seed = s.has_seed() ? s.seed() : std::random_device{}();
  g.max_tokens = s.has_max_tokens() ? s.max_tokens() : info.max_output_tokens;
  g.stop.assign(s.stop().begin(), s.stop().end());
  if (request.reasoning().mode() != tandem::v1::REASONING_MODE_OFF) {
    g.thinking_budget = std::max(0, request.reasoning().thinking_budget_tokens());
  }
  return g;
}

}  // namespace

absl::Status ValidateGenerateRequest(const tandem::v1::WorkerGenerateRequest& request,
                                     int32_t max_output_tokens, const RequestLimits& limits) {
  absl::Status status =
      request.request_id().empty() ? absl::OkStatus() : ValidateRequestId(request.request_id());
  if (status.ok()) status = ValidateReasoning(request.reasoning(), "reasoning");
  if (status.ok()) status = ValidateMessages(request.messages(), limits);
  if (status.ok()) status = ValidateSampling(request.sampling(), max_output_tokens, limits);
  if (status.ok()) status = ValidateTools(request.tools(), limits);
  if (status.ok() && request.cache_partition().size() > kMaxCachePartitionBytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat("cache_partition is ", request.cache_partition().size(),
                     " bytes; at most ", kMaxCachePartitionBytes));
  }
  return status;
}

absl::StatusOr<PlannedGeneration> ToGenerationRequest(
    const tandem::v1::WorkerGenerateRequest& request, const Engine& engine,
    const RequestLimits& limits) {
  const EngineInfo& info = engine.Info();
  if (absl::Status s = ValidateGenerateRequest(request, info.max_output_tokens, limits); !s.ok()) {
    return s;
  }
  PlannedGeneration planned;
  // The load simulator takes images without a processor (its tokenizer counts them);
  // otherwise images go through the engine's processor, or are refused without one. Their
  // headers are checked here, all of them (sizes, limits, the context), before any decode.
  if (engine.ImageProcessor() != nullptr || !info.vision) {
    absl::StatusOr<ImagePlan> plan =
        PlanRequestImages(request.messages(), engine.ImageProcessor(), info.model_name, limits,
                          info.max_context_tokens);
    if (!plan.ok()) return plan.status();
    planned.images = std::move(*plan);
  }
  // The whole prompt, with each image's token count from its header, against the context:
  // a request that cannot fit is refused before any of its images is decoded.
  absl::StatusOr<std::vector<int32_t>> prompt = Tokenize(request, engine, planned.images);
  if (!prompt.ok()) return prompt.status();
  planned.request = FromSampling(request, info);
  planned.request.prompt = std::move(*prompt);
  return planned;
}

}  // namespace tandem::workers
