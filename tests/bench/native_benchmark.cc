// Native engine speed on the CPU: prefill and decode tokens/s for a small configuration of each
// architecture (hidden 512, 8 layers, 16 experts, 32K vocabulary), random weights written in the
// released layout. Run by hand for numbers (docs/performance.md); CI runs it once as a smoke test.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "workers/cpu/cpu_model.h"
#include "workers/model/random_checkpoint.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {
namespace {

const CpuModel& Model(const std::string& arch) {
  static std::map<std::string, std::unique_ptr<CpuModel>> models;
  auto& m = models[arch];
  if (m) return *m;
  model::RandomModelOptions o;
  o.architecture = arch;
  o.vocab_size = 32768;
  o.hidden_size = 512;
  o.num_layers = 8;
  o.num_experts = 16;
  o.experts_per_token = 2;
  o.moe_intermediate_size = 256;
  o.shared_intermediate_size = 256;
  o.num_attention_heads = 8;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.linear_key_heads = 4;
  o.linear_value_heads = 8;
  o.linear_head_dim = 64;
  o.mamba_heads = 16;
  o.mamba_head_dim = 64;
  o.mamba_groups = 4;
  o.ssm_state_size = 64;
  const std::string dir = "/tmp/tandem-bench-" + arch + "-" + std::to_string(getpid());
  if (!model::WriteRandomCheckpoint(o, dir).ok()) std::abort();
  auto c = model::Checkpoint::Open(dir);
  if (!c.ok()) std::abort();
  auto loaded = LoadCpuModel(**c);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    std::abort();
  }
  std::system(("rm -rf " + dir).c_str());
  m = std::move(*loaded);
  return *m;
}

std::vector<int32_t> Tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919) % 32768);
  return t;
}

void BM_Prefill(benchmark::State& state, const std::string& arch) {
  const CpuModel& m = Model(arch);
  const auto tokens = Tokens(state.range(0));
  std::vector<float> logits;
  for (auto _ : state) {
    auto s = m.NewState();
    if (!m.Forward(s.get(), tokens, false, &logits).ok()) state.SkipWithError("forward failed");
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * state.range(0)), benchmark::Counter::kIsRate);
}

void BM_Decode(benchmark::State& state, const std::string& arch) {
  const CpuModel& m = Model(arch);
  auto s = m.NewState();
  std::vector<float> logits;
  if (!m.Forward(s.get(), Tokens(state.range(0)), false, &logits).ok()) std::abort();
  int32_t next = 1;
  for (auto _ : state) {
    if (!m.Forward(s.get(), absl::MakeConstSpan(&next, 1), false, &logits).ok()) {
      state.SkipWithError("forward failed");
    }
    next = (next * 31 + 7) % 32768;
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Prefill, qwen3_5_moe, std::string("qwen3_5_moe"))
    ->Arg(128)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, nemotron_h, std::string("nemotron_h"))
    ->Arg(128)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// Decode after a 128-token prompt (the context grows as it runs).
BENCHMARK_CAPTURE(BM_Decode, qwen3_5_moe, std::string("qwen3_5_moe"))
    ->Arg(128)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, nemotron_h, std::string("nemotron_h"))
    ->Arg(128)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tandem::workers::cpu

BENCHMARK_MAIN();
