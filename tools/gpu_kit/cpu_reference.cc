// tandem-kit-reference: the CPU engine's greedy answers to a prompt file, with the top-2 logit
// margin of every token, as the reference the GPU kit compares the CUDA worker's answers with
// (tools/gpu_kit/answers.h). Runs the same pieces as tandem-worker --engine=native --device=cpu:
// the checkpoint's tokenizer and chat template, the fp32 model, greedy decoding to a stop token
// or --max_tokens; the kit build checks that the CPU worker streams exactly these answers.
//
//   tandem-kit-reference --checkpoint=DIR --prompts=prompts.jsonl --max_tokens=16 > ref.jsonl
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "common/status_macros.h"
#include "tools/gpu_kit/answers.h"
#include "workers/cpu/cpu_engine.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/safetensors.h"

ABSL_FLAG(std::string, checkpoint, "", "Model directory with tokenizer.json.");
ABSL_FLAG(std::string, prompts, "", "Prompts, JSON lines {\"id\", \"messages\"}.");
ABSL_FLAG(int32_t, max_tokens, 16, "Most tokens per answer.");

namespace tandem::tools {
namespace {

absl::Status Run() {
  const std::string dir = absl::GetFlag(FLAGS_checkpoint);
  ASSIGN_OR_RETURN(std::vector<Prompt> prompts, ReadPrompts(absl::GetFlag(FLAGS_prompts)));
  ASSIGN_OR_RETURN(auto checkpoint, workers::model::Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(auto model, workers::cpu::LoadCpuModel(*checkpoint));
  ASSIGN_OR_RETURN(workers::CheckpointTokenizer tokenizer,
                   workers::LoadCheckpointTokenizer(dir + "/tokenizer.json", model->shape()));
  for (const Prompt& p : prompts) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                     tokenizer.tokenizer->EncodeChat(p.messages, tandem::v1::ReasoningOptions()));
    auto state = model->NewState();
    auto decoder = tokenizer.tokenizer->NewStreamDecoder();
    ReferenceAnswer a;
    a.id = p.id;
    std::vector<float> logits;
    RETURN_IF_ERROR(model->Forward(state.get(), ids, /*all_logits=*/false, &logits));
    for (int32_t step = 0; step < absl::GetFlag(FLAGS_max_tokens); ++step) {
      // Greedy as the engine's sampler: the first of equal maxima.
      const auto best = std::max_element(logits.begin(), logits.end());
      const int32_t token = static_cast<int32_t>(best - logits.begin());
      float second = -std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < logits.size(); ++i) {
        if (static_cast<int32_t>(i) != token) second = std::max(second, logits[i]);
      }
      a.tokens.push_back(token);
      a.margins.push_back(*best - second);
      const std::vector<int32_t>& stops = tokenizer.stop_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        a.stopped = true;
        a.text_ends.push_back(static_cast<int64_t>(a.text.size()));
        break;
      }
      a.text += decoder->Next(token);
      a.text_ends.push_back(static_cast<int64_t>(a.text.size()));
      if (step + 1 < absl::GetFlag(FLAGS_max_tokens)) {
        RETURN_IF_ERROR(model->Forward(state.get(), {token}, /*all_logits=*/false, &logits));
      }
    }
    a.text += decoder->Flush();
    if (!a.text_ends.empty()) a.text_ends.back() = static_cast<int64_t>(a.text.size());
    std::printf("%s\n", ReferenceToJson(a).c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tandem::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tandem-kit-reference --checkpoint=DIR --prompts=FILE [--max_tokens=N]");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = tandem::tools::Run(); !s.ok()) {
    std::fprintf(stderr, "tandem-kit-reference: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
