#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/json_depth.h"
#include "google/protobuf/map.h"
#include "google/protobuf/repeated_field.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

// Limits applied to every request before any work is done. Each is a flag of both servers;
// defaults are documented in docs/configuration.md.
struct RequestLimits {
  int32_t max_messages = 1024;
  int32_t max_parts_per_message = 64;
  int32_t max_images = 16;
  int64_t max_image_bytes = 20ll << 20;
  // Decoded width x height of one image, checked from its header before any pixel buffer
  // exists (64 MP: a 50 MP photo fits; its RGB buffer is at most 192 MiB).
  int64_t max_image_pixels = 64ll << 20;
  int32_t max_stop_sequences = 16;
  int32_t max_stop_sequence_bytes = 256;
  int32_t max_tools = 128;
  // Nesting of the JSON a request carries (tool schemas, tool-call arguments; on the HTTP front
  // the whole body), checked by a scan before anything parses it (common/json_depth.h).
  int32_t max_json_depth = kDefaultMaxJsonDepth;
  int32_t max_labels = 32;
  int32_t max_label_bytes = 256;
  // Log lines a second for refused requests (burst: twice that); 0 logs every one. Invalid
  // requests are refused before any quota, so without this one caller could flood the log.
  double rejected_log_per_second = 10;
};

// INVALID_ARGUMENT naming the offending field ("messages[2].content[0].text: ...") for: no
// messages, unknown role, a message without content, empty or non-UTF-8 text, an image without
// data or with an unsupported MIME type (IsSupportedImageMimeType), and counts over the limits;
// tool calls on a message that is not the assistant's, or with a bad name or arguments that are
// not a JSON object or nest deeper than max_json_depth (an assistant message with tool calls may
// have no content).
// Caller text in a message is quoted, escaped and cut (QuoteForLog).
absl::Status ValidateMessages(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const RequestLimits& limits);

// INVALID_ARGUMENT naming the field for more than max_tools tools, a name that is not 1-64
// bytes of [A-Za-z0-9_.-] or is given twice, a description that is not UTF-8, or parameters that
// are not a JSON object or nest deeper than max_json_depth.
absl::Status ValidateTools(const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
                           const RequestLimits& limits);

// Request ids become gRPC metadata to the worker and a field of every log line: INVALID_ARGUMENT
// unless 1 to kMaxRequestIdBytes bytes of visible ASCII (no space, control or non-ASCII byte).
inline constexpr size_t kMaxRequestIdBytes = 128;
absl::Status ValidateRequestId(absl::string_view request_id);

// INVALID_ARGUMENT for a reasoning mode outside the enum or a negative thinking budget.
absl::Status ValidateReasoning(const tandem::v1::ReasoningOptions& reasoning,
                               absl::string_view field);

// The image MIME types accepted (compared without regard to case): those every vision client
// sends and the image decoders take.
bool IsSupportedImageMimeType(absl::string_view mime_type);

// INVALID_ARGUMENT for max_tokens <= 0 or above `max_output_tokens` (skipped when 0), temperature
// outside [0, 2], top_p outside (0, 1], negative top_k, and bad stop sequences.
absl::Status ValidateSampling(const tandem::v1::SamplingParams& sampling, int32_t max_output_tokens,
                              const RequestLimits& limits);

// INVALID_ARGUMENT for more than max_labels labels, an empty key, a key or value over
// max_label_bytes, or one that is not valid UTF-8.
absl::Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels,
                            const RequestLimits& limits);

}  // namespace tandem
