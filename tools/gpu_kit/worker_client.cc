// tandem-worker-client: a small client of one worker (proto/tandem/v1/worker.proto) for the GPU
// kit. Waits until the worker is SERVING, prints its WorkerInfo, streams a greedy answer to every
// prompt (one at a time, then all at once so the engine batches them) and, with --expect,
// compares each answer with a reference (tandem-kit-reference). Prints JSON lines:
// {"type":"info",...}, {"type":"answer",...}, {"type":"summary",...}.
//
//   tandem-worker-client --address=127.0.0.1:50051 --prompts=prompts.jsonl --max_tokens=16
//       --expect=reference.jsonl
//
// Exit status: 0 when every call succeeded and enough answers agree; 1 otherwise; 2 bad usage.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tools/gpu_kit/answers.h"

ABSL_FLAG(std::string, address, "", "Worker gRPC address (plaintext), e.g. 127.0.0.1:50051.");
ABSL_FLAG(std::string, prompts, "", "Prompts, JSON lines {\"id\", \"messages\"}.");
ABSL_FLAG(int32_t, max_tokens, 16, "Tokens to generate per answer (greedy).");
ABSL_FLAG(bool, batch, true, "After one prompt at a time, send all prompts at once.");
ABSL_FLAG(absl::Duration, ready_timeout, absl::Seconds(120),
          "How long to wait for the worker to load its model and turn READY.");
ABSL_FLAG(absl::Duration, request_timeout, absl::Seconds(120), "Deadline of each call.");
ABSL_FLAG(std::string, expect, "", "Reference answers (tandem-kit-reference) to compare with.");
ABSL_FLAG(double, margin, 0.5,
          "A difference from the reference is tolerated from a token whose reference top-2 "
          "logit margin is below this on: BF16 on a GPU against fp32 on the CPU, where 0.5 is "
          "tests/gpu/cuda_model_test.cc's clear margin. 0 requires equal answers.");
ABSL_FLAG(double, min_agree, 1.0,
          "Share of answers that must agree with the reference (equal, or differing only from "
          "a token below --margin on).");
ABSL_FLAG(std::string, expect_device, "", "Fail unless WorkerInfo's device id starts with this.");

namespace tandem::tools {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written
using Clock = std::chrono::steady_clock;

struct Answer {
  std::string id;
  std::string mode;
  grpc::Status status;
  std::string text;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t chunks = 0;
  std::string finish;
  double first_chunk_seconds = 0;
  double seconds = 0;
};

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d));
}

// Waits on the worker's health Watch stream for SERVING (the worker listens, and answers
// NOT_SERVING, while its model loads), then reads its WorkerInfo.
absl::StatusOr<tandem::v1::WorkerInfo> WaitReady(const std::shared_ptr<grpc::Channel>& channel,
                                                 tandem::v1::Worker::Stub& stub,
                                                 absl::Duration timeout) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext watch;
  SetDeadline(&watch, timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("tandem.v1.Worker");
  auto reader = health->Watch(&watch, request);
  grpc::health::v1::HealthCheckResponse response;
  bool serving = false;
  while (!serving && reader->Read(&response)) {
    serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  if (serving) watch.TryCancel();
  const grpc::Status end = reader->Finish();
  if (!serving) {
    return absl::UnavailableError("worker not SERVING within " + absl::FormatDuration(timeout) +
                                  ": " + end.error_message());
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  tandem::v1::WorkerInfo info;
  if (grpc::Status s = stub.GetInfo(&ctx, {}, &info); !s.ok()) {
    return absl::UnavailableError("GetInfo: " + s.error_message());
  }
  return info;
}

Answer Stream(tandem::v1::Worker::Stub& stub, const Prompt& prompt, const std::string& mode) {
  Answer a;
  a.id = prompt.id;
  a.mode = mode;
  tandem::v1::WorkerGenerateRequest req;
  req.set_request_id("kit-" + mode + "-" + prompt.id);
  *req.mutable_messages() = prompt.messages;
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::GetFlag(FLAGS_request_timeout));
  const auto start = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  tandem::v1::WorkerGenerateChunk c;
  while (reader->Read(&c)) {
    if (a.chunks++ == 0) {
      a.first_chunk_seconds = Since(start);
      a.prompt_tokens = c.prompt_tokens();
    }
    a.text += c.text();
    if (c.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      a.finish = tandem::v1::FinishReason_Name(c.finish_reason());
      a.completion_tokens = c.completion_tokens();
    }
  }
  a.status = reader->Finish();
  a.seconds = Since(start);
  return a;
}

// The prompts and, with --expect, the reference answers by id; an error message when either
// cannot be read.
struct Inputs {
  std::vector<Prompt> prompts;
  std::map<std::string, ReferenceAnswer> reference;
};

absl::StatusOr<Inputs> ReadInputs() {
  Inputs in;
  auto prompts = ReadPrompts(absl::GetFlag(FLAGS_prompts));
  if (!prompts.ok()) return prompts.status();
  in.prompts = *std::move(prompts);
  if (const std::string path = absl::GetFlag(FLAGS_expect); !path.empty()) {
    auto r = ReadReference(path);
    if (!r.ok()) return r.status();
    for (ReferenceAnswer& a : *r) in.reference[a.id] = std::move(a);
  }
  return in;
}

void PrintInfo(const tandem::v1::WorkerInfo& info, double ready_seconds) {
  std::printf("%s\n", Json{{"type", "info"},
                           {"model_name", info.model_name()},
                           {"model_id", info.model_id()},
                           {"engine", info.engine()},
                           {"device", info.device().id()},
                           {"device_name", info.device().name()},
                           {"memory_total_bytes", info.device().memory_total_bytes()},
                           {"ready_seconds", ready_seconds}}
                          .dump()
                          .c_str());
}

// All prompts at once, each on a thread of its own, so that the engine batches them.
struct BatchResult {
  double seconds = 0;
  int32_t tokens = 0;
  // Prompts answered the same alone and in the batch: reported, not required (an engine may
  // round differently at another batch size, which can flip a low-margin token).
  int equals_alone = 0;
};

// `answers` holds the answers alone, one per prompt in order; the batch's are appended.
BatchResult RunBatch(tandem::v1::Worker::Stub& stub, const std::vector<Prompt>& prompts,
                     std::vector<Answer>* answers) {
  BatchResult result;
  std::vector<Answer> batch(prompts.size());
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { batch[i] = Stream(stub, prompts[i], "batch"); });
  }
  for (std::thread& t : threads) t.join();
  result.seconds = Since(start);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Answer& alone = (*answers)[i];
    result.tokens += batch[i].completion_tokens;
    result.equals_alone += batch[i].status.ok() && alone.status.ok() &&
                           batch[i].text == alone.text &&
                           batch[i].completion_tokens == alone.completion_tokens;
    answers->push_back(std::move(batch[i]));
  }
  return result;
}

// Counts over the answers and their comparison with the reference.
struct Tally {
  int rpc_errors = 0, agree = 0, compared = 0, tokens_agree = 0, tokens_expected = 0;
  int clear_tokens = 0;
  int32_t completion_tokens = 0;
};

// Prints the answer's line, compared with its reference when there is one, and counts it.
void ReportAnswer(const Answer& a, const std::map<std::string, ReferenceAnswer>& reference,
                  Tally* tally) {
  Json line = {{"type", "answer"},
               {"id", a.id},
               {"mode", a.mode},
               {"ok", a.status.ok()},
               {"text", a.text},
               {"prompt_tokens", a.prompt_tokens},
               {"completion_tokens", a.completion_tokens},
               {"finish_reason", a.finish},
               {"chunks", a.chunks},
               {"first_chunk_seconds", a.first_chunk_seconds},
               {"seconds", a.seconds}};
  tally->completion_tokens += a.completion_tokens;
  if (!a.status.ok()) {
    ++tally->rpc_errors;
    line["error"] = a.status.error_message();
  }
  if (auto it = reference.find(a.id); it != reference.end() && a.status.ok()) {
    const Comparison c =
        Compare(it->second, a.text, a.completion_tokens, absl::GetFlag(FLAGS_margin));
    ++tally->compared;
    if (c.result != Comparison::kMismatch) ++tally->agree;
    tally->tokens_agree += c.tokens_agree;
    tally->clear_tokens += c.clear_tokens;
    tally->tokens_expected += it->second.CompletionTokens();
    line["result"] = ResultName(c.result);
    line["tokens_agree"] = c.tokens_agree;
    line["tokens_expected"] = it->second.CompletionTokens();
    line["clear_tokens"] = c.clear_tokens;
    if (c.result != Comparison::kExact) {
      line["expected_text"] = it->second.text;
      line["margin_at_divergence"] = c.margin_at_divergence;
    }
  } else if (!reference.empty() && a.status.ok()) {
    line["result"] = "no reference";
    ++tally->compared;
  }
  std::printf("%s\n", line.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

// The last line: the outcome and the totals (keys in this order).
Json Summary(bool ok, size_t answers, size_t prompts, const Tally& tally, const BatchResult& batch,
             bool with_reference, const std::string& device) {
  Json summary = {{"type", "summary"},
                  {"ok", ok},
                  {"answers", answers},
                  {"rpc_errors", tally.rpc_errors},
                  {"completion_tokens", tally.completion_tokens},
                  {"device", device}};
  if (batch.seconds > 0) {
    summary["batch_tokens_per_second"] = batch.tokens / batch.seconds;
    summary["batch_equals_alone"] = batch.equals_alone;
    summary["prompts"] = prompts;
  }
  if (with_reference) {
    summary["agree"] = tally.agree;
    summary["compared"] = tally.compared;
    summary["tokens_agree"] = tally.tokens_agree;
    summary["tokens_expected"] = tally.tokens_expected;
    summary["clear_tokens"] = tally.clear_tokens;
  }
  return summary;
}

int Run() {
  const std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty() || absl::GetFlag(FLAGS_prompts).empty()) {
    std::fprintf(stderr, "--address and --prompts are required\n");
    return 2;
  }
  auto inputs = ReadInputs();
  if (!inputs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(inputs.status().message()).c_str());
    return 2;
  }
  const std::vector<Prompt>& prompts = inputs->prompts;
  const std::map<std::string, ReferenceAnswer>& reference = inputs->reference;

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = tandem::v1::Worker::NewStub(channel);
  const auto load_start = Clock::now();
  auto info = WaitReady(channel, *stub, absl::GetFlag(FLAGS_ready_timeout));
  if (!info.ok()) {
    std::printf("%s\n", Json{{"type", "error"}, {"error", info.status().message()}}.dump().c_str());
    return 1;
  }
  PrintInfo(*info, Since(load_start));
  bool ok = absl::StartsWith(info->device().id(), absl::GetFlag(FLAGS_expect_device));

  std::vector<Answer> answers;
  for (const Prompt& p : prompts) answers.push_back(Stream(*stub, p, "alone"));
  BatchResult batch;
  if (absl::GetFlag(FLAGS_batch)) batch = RunBatch(*stub, prompts, &answers);

  Tally tally;
  for (const Answer& a : answers) ReportAnswer(a, reference, &tally);
  ok = ok && tally.rpc_errors == 0;
  if (!reference.empty()) {
    ok = ok && tally.compared > 0 && tally.agree >= absl::GetFlag(FLAGS_min_agree) * tally.compared;
  }
  const Json summary = Summary(ok, answers.size(), prompts.size(), tally, batch, !reference.empty(),
                               info->device().id());
  std::printf("%s\n", summary.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tandem::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tandem-worker-client --address=HOST:PORT --prompts=FILE [--expect=REFERENCE]");
  absl::ParseCommandLine(argc, argv);
  return tandem::tools::Run();
}
