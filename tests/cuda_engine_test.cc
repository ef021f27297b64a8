// The CUDA engine end to end on the golden checkpoints (label gpu; skips without a device):
// greedy continuations against the golden ones, CUDA graphs against direct launches, and a
// batch against each sequence decoded alone.
#include "workers/cuda/cuda_engine.h"

#include <cuda_runtime.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gtest/gtest.h"
#include "workers/synthetic_tokenizer.h"

namespace tandem::workers::cuda {
namespace {

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

nlohmann::json Cases(const std::string& arch) {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR "/tests/golden/") + arch + "/cases.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

std::unique_ptr<CudaEngine> Engine(const std::string& arch, bool graphs) {
  auto ckpt = native::Checkpoint::Open(std::string(TANDEM_SOURCE_DIR "/tests/golden/") + arch);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  auto model = LoadCudaModel(**ckpt);
  EXPECT_TRUE(model.ok()) << model.status();
  CudaEngineOptions o;
  o.model_name = arch == "qwen3_5_moe" ? "qwen" : "nemotron";
  o.max_sequences = 8;
  o.memory_fraction = 0.2;
  o.cuda_graphs = graphs;
  auto e = CudaEngine::Create(std::move(*model), std::make_unique<SyntheticTokenizer>(0), {}, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Greedy tokens of every golden case, decoded together as one batch.
std::vector<std::vector<int32_t>> Generate(CudaEngine& engine, const nlohmann::json& cases,
                                           const std::vector<size_t>& which, int steps) {
  std::vector<uint64_t> ids;
  for (size_t i : which) {
    SequenceSpec spec;
    spec.id = i + 1;
    spec.prompt = cases["cases"][i]["prompt_ids"].get<std::vector<int32_t>>();
    spec.sampling.temperature = 0;
    spec.max_tokens = steps;
    EXPECT_TRUE(engine.AddSequence(spec).ok());
    ids.push_back(spec.id);
  }
  std::vector<std::vector<int32_t>> out(which.size());
  for (int s = 0; s < steps; ++s) {
    std::vector<StepOutput> step;
    EXPECT_TRUE(engine.Step(ids, &step).ok());
    for (size_t j = 0; j < step.size(); ++j) out[j].push_back(step[j].token);
  }
  for (uint64_t id : ids) engine.RemoveSequence(id);
  return out;
}

class CudaEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngineTest, GreedyMatchesGoldenAndBatchingAndGraphsChangeNothing) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const nlohmann::json cases = Cases(GetParam());
  ASSERT_FALSE(cases.is_discarded());
  const size_t n = cases["cases"].size();
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  auto graphs = Engine(GetParam(), true);
  auto direct = Engine(GetParam(), false);
  ASSERT_TRUE(graphs && direct);
  const auto batched = Generate(*graphs, cases, all, 8);
  const auto plain = Generate(*direct, cases, all, 8);
  int agree = 0, total = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(batched[i], plain[i]) << "graphs vs direct launches, case " << i;
    const auto alone = Generate(*graphs, cases, {i}, 8);
    EXPECT_EQ(alone[0], batched[i]) << "alone vs in a batch, case " << i;
    const auto golden = cases["cases"][i]["greedy"]["generated_ids"].get<std::vector<int32_t>>();
    const auto margins =
        cases["cases"][i]["greedy"]["generated_top2_margin"].get<std::vector<double>>();
    // BF16 weights: tokens decided by a margin below ~0.05 may legitimately differ; the first
    // divergence ends the comparison (later tokens follow a different prefix).
    for (size_t t = 0; t < golden.size(); ++t) {
      ++total;
      if (batched[i][t] != golden[t]) {
        EXPECT_LT(margins[t], 0.05) << "case " << i << " token " << t << " had a clear margin";
        break;
      }
      ++agree;
    }
  }
  std::printf("%s: %d of %d greedy tokens equal to the fp32 golden\n", GetParam().c_str(), agree,
              total);
}

INSTANTIATE_TEST_SUITE_P(BothArchitectures, CudaEngineTest,
                         ::testing::Values("qwen3_5_moe", "nemotron_h"));

}  // namespace
}  // namespace tandem::workers::cuda
