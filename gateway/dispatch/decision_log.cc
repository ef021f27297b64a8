#include "gateway/dispatch/decision_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace tandem::gateway {

absl::StatusOr<std::unique_ptr<DecisionLog>> DecisionLog::Open(const std::string& path,
                                                               size_t max_pending,
                                                               prometheus::Counter* written,
                                                               prometheus::Counter* dropped) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--decision_log=", path, ": cannot open for appending: ", std::strerror(errno)));
  }
  return std::unique_ptr<DecisionLog>(new DecisionLog(f, max_pending, written, dropped));
}

DecisionLog::DecisionLog(std::FILE* file, size_t max_pending, prometheus::Counter* written,
                         prometheus::Counter* dropped)
    : file_(file), max_pending_(max_pending), written_(written), dropped_(dropped) {
  writer_ = std::thread([this] { Loop(); });
}

DecisionLog::~DecisionLog() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  writer_.join();
  std::fclose(file_);
}

void DecisionLog::Record(tandem::v1::DecisionRecord record) {
  {
    absl::MutexLock l(&mu_);
    if (pending_.size() >= max_pending_) {
      dropped_->Increment();
      return;
    }
    pending_.push_back(std::move(record));
  }
  cv_.Signal();
}

void DecisionLog::Loop() {
  std::deque<tandem::v1::DecisionRecord> batch;
  std::string line;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      while (!stop_ && pending_.empty()) cv_.Wait(&mu_);
      if (pending_.empty() && stop_) return;
      batch.swap(pending_);
    }
    for (const auto& r : batch) {
      line.clear();
      (void)google::protobuf::util::MessageToJsonString(r, &line, options);
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), file_);
    }
    std::fflush(file_);  // each batch is readable as soon as it is written
    written_->Increment(static_cast<double>(batch.size()));
    batch.clear();
  }
}

}  // namespace tandem::gateway
