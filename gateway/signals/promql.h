#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::gateway {

// Reads the value of a Prometheus /api/v1/query response. A scalar, or a vector of exactly one
// series, gives its value; an empty vector or NaN gives nullopt (no data). Several series are an
// error: the query must aggregate them (sum, max, ...). Errors the server reports come back with
// their errorType and message.
absl::StatusOr<std::optional<double>> ParsePromQLResponse(const std::string& body);

}  // namespace tandem::gateway
