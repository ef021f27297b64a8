#include "common/call_metadata.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace tandem {

bool IsNoDeadline(std::chrono::system_clock::time_point deadline) {
  return deadline == std::chrono::system_clock::time_point::max() ||
         deadline - std::chrono::system_clock::now() > std::chrono::hours(24 * 365);
}

void AddWorkerTimeout(std::chrono::system_clock::time_point worker_deadline,
                      grpc::ClientContext* context) {
  if (IsNoDeadline(worker_deadline)) return;
  const auto left = worker_deadline - std::chrono::system_clock::now();
  const int64_t ms =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
  context->AddMetadata(kWorkerTimeoutHeader, std::to_string(ms));
}

std::chrono::system_clock::time_point WorkerDeadline(
    const grpc::ServerContextBase& context, std::chrono::system_clock::time_point received) {
  const auto deadline = context.deadline();
  const auto& md = context.client_metadata();
  auto it = md.find(kWorkerTimeoutHeader);
  int64_t ms = 0;
  if (it == md.end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms) || ms < 0 ||
      ms > int64_t{24} * 365 * 24 * 3600 * 1000) {
    return deadline;
  }
  return std::min(deadline, received + std::chrono::milliseconds(ms));
}

}  // namespace tandem
