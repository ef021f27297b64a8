#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tandem/v1/worker.pb.h"
#include "workers/upstream/engine_profile.h"

namespace tandem::workers::upstream {

struct ChatRequestOptions {
  // The model id the engine serves (its /v1/models), sent as "model".
  std::string served_model;
  // The engine takes image parts (--upstream_vision).
  bool vision = false;
  bool stream = true;
};

// The OpenAI chat-completions body for one WorkerGenerate request, with the profile's own
// controls for thinking, its budget and continuation. A field the engine cannot honour is
// refused: INVALID_ARGUMENT (images to an engine without vision), FAILED_PRECONDITION (a
// thinking switch, budget or continuation the profile has no control for), naming the profile.
absl::StatusOr<std::string> BuildChatRequest(const tandem::v1::WorkerGenerateRequest& request,
                                             const EngineProfile& profile,
                                             const ChatRequestOptions& options);

}  // namespace tandem::workers::upstream
