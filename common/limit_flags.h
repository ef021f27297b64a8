#pragma once

#include "absl/status/statusor.h"
#include "common/request_validation.h"

namespace tandem {

// RequestLimits from the flags both servers share (--max_messages, --max_parts_per_message,
// --max_images, --max_image_bytes, --max_stop_sequences, --max_stop_sequence_bytes,
// --max_labels, --max_label_bytes); an error names a flag set below 1.
absl::StatusOr<RequestLimits> RequestLimitsFromFlags();

}  // namespace tandem
