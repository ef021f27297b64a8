#include "gateway/signals/promql.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::gateway {
namespace {

// A sample is [unix_time, "value"]; Prometheus sends the value as a string.
absl::StatusOr<std::optional<double>> SampleValue(const nlohmann::json& v) {
  if (!v.is_array() || v.size() != 2 || !v[1].is_string()) {
    return absl::InvalidArgumentError("PromQL response: a sample must be [time, \"value\"]");
  }
  const std::string s = v[1].get<std::string>();
  double d = 0;
  if (s == "NaN") return std::optional<double>();
  if (s == "+Inf" || s == "Inf") return std::optional<double>(INFINITY);
  if (s == "-Inf") return std::optional<double>(-INFINITY);
  if (!absl::SimpleAtod(s, &d)) {
    return absl::InvalidArgumentError(absl::StrCat("PromQL response: bad sample value '", s, "'"));
  }
  return std::optional<double>(d);
}

}  // namespace

absl::StatusOr<std::optional<double>> ParsePromQLResponse(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("PromQL response is not a JSON object");
  }
  const auto status = j.find("status");
  if (status == j.end() || !status->is_string()) {
    return absl::InvalidArgumentError("PromQL response has no status");
  }
  if (*status != "success") {
    const auto type = j.value("errorType", std::string("error"));
    const auto error = j.value("error", std::string("(no message)"));
    return absl::InvalidArgumentError(absl::StrCat("PromQL ", type, ": ", error));
  }
  const auto data = j.find("data");
  if (data == j.end() || !data->is_object()) {
    return absl::InvalidArgumentError("PromQL response has no data");
  }
  const std::string type = data->value("resultType", std::string());
  const auto result = data->find("result");
  if (result == data->end()) return absl::InvalidArgumentError("PromQL response has no result");
  if (type == "scalar") return SampleValue(*result);
  if (type != "vector") {
    return absl::InvalidArgumentError(absl::StrCat(
        "PromQL result type '", type, "': a signal needs a scalar or an instant vector"));
  }
  if (!result->is_array()) return absl::InvalidArgumentError("PromQL vector is not a list");
  if (result->empty()) return std::optional<double>();
  if (result->size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PromQL query returned ", result->size(),
                     " series; a signal needs one: aggregate them (sum, max, avg by ())"));
  }
  const auto& series = (*result)[0];
  const auto value = series.find("value");
  if (!series.is_object() || value == series.end()) {
    return absl::InvalidArgumentError("PromQL series has no value");
  }
  return SampleValue(*value);
}

}  // namespace tandem::gateway
