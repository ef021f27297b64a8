#pragma once

#include "absl/status/statusor.h"
#include "common/request_validation.h"

namespace tandem {

// RequestLimits from the flags both servers share (--max_messages, --max_parts_per_message,
// --max_images, --max_image_bytes, --max_stop_sequences, --max_stop_sequence_bytes, --max_tools,
// --max_json_depth, --rejected_log_per_second); an error
// names a flag out of range. Label limits are the gateway's own flags: labels never reach a
// worker.
absl::StatusOr<RequestLimits> RequestLimitsFromFlags();

}  // namespace tandem
