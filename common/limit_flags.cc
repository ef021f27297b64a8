#include "common/limit_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

// Defaults come from RequestLimits so that the flags and the library cannot disagree.
ABSL_FLAG(int32_t, max_messages, tandem::RequestLimits{}.max_messages,
          "Most messages in one request.");
ABSL_FLAG(int32_t, max_parts_per_message, tandem::RequestLimits{}.max_parts_per_message,
          "Most content parts (text or image) in one message.");
ABSL_FLAG(int32_t, max_images, tandem::RequestLimits{}.max_images, "Most images in one request.");
ABSL_FLAG(int64_t, max_image_bytes, tandem::RequestLimits{}.max_image_bytes,
          "Largest image, in bytes.");
ABSL_FLAG(int64_t, max_image_pixels, tandem::RequestLimits{}.max_image_pixels,
          "Largest decoded image, in pixels (width x height), checked from the image's header "
          "before it is decoded.");
ABSL_FLAG(int32_t, max_stop_sequences, tandem::RequestLimits{}.max_stop_sequences,
          "Most stop sequences in one request.");
ABSL_FLAG(int32_t, max_stop_sequence_bytes, tandem::RequestLimits{}.max_stop_sequence_bytes,
          "Longest stop sequence, in bytes.");
ABSL_FLAG(int32_t, max_tools, tandem::RequestLimits{}.max_tools,
          "Most tools (functions the model may call) in one request; 0 refuses tools.");
ABSL_FLAG(int32_t, max_json_depth, tandem::RequestLimits{}.max_json_depth,
          "Deepest nesting of the JSON a request carries (tool schemas, tool-call arguments; on "
          "the HTTP front the whole body, counted from its top), checked before it is parsed.");
ABSL_FLAG(double, rejected_log_per_second, tandem::RequestLimits{}.rejected_log_per_second,
          "Log lines a second for refused requests (bursts of twice that; the next line logged "
          "says how many were dropped); 0 logs every one.");

namespace tandem {

absl::StatusOr<RequestLimits> RequestLimitsFromFlags() {
  RequestLimits l;
  l.max_messages = absl::GetFlag(FLAGS_max_messages);
  l.max_parts_per_message = absl::GetFlag(FLAGS_max_parts_per_message);
  l.max_images = absl::GetFlag(FLAGS_max_images);
  l.max_image_bytes = absl::GetFlag(FLAGS_max_image_bytes);
  l.max_image_pixels = absl::GetFlag(FLAGS_max_image_pixels);
  l.max_stop_sequences = absl::GetFlag(FLAGS_max_stop_sequences);
  l.max_stop_sequence_bytes = absl::GetFlag(FLAGS_max_stop_sequence_bytes);
  l.max_tools = absl::GetFlag(FLAGS_max_tools);
  l.max_json_depth = absl::GetFlag(FLAGS_max_json_depth);
  l.rejected_log_per_second = absl::GetFlag(FLAGS_rejected_log_per_second);
  if (l.max_json_depth < 1 || l.max_json_depth > kMaxJsonDepthCeiling) {
    return absl::InvalidArgumentError(absl::StrCat("--max_json_depth must be in [1, ",
                                                   kMaxJsonDepthCeiling, "]"));
  }
  if (!(l.rejected_log_per_second >= 0)) {
    return absl::InvalidArgumentError("--rejected_log_per_second must be >= 0");
  }
  const std::pair<const char*, int64_t> checks[] = {
      {"--max_messages", l.max_messages},
      {"--max_parts_per_message", l.max_parts_per_message},
      {"--max_image_bytes", l.max_image_bytes},
      {"--max_image_pixels", l.max_image_pixels},
      {"--max_stop_sequence_bytes", l.max_stop_sequence_bytes}};
  for (const auto& [flag, value] : checks) {
    if (value < 1) return absl::InvalidArgumentError(absl::StrCat(flag, " must be >= 1"));
  }
  // Zero is a meaningful limit for these: no images, no stop sequences.
  if (l.max_images < 0 || l.max_stop_sequences < 0 || l.max_tools < 0) {
    return absl::InvalidArgumentError(
        "--max_images, --max_stop_sequences and --max_tools must be >= 0");
  }
  return l;
}

}  // namespace tandem
