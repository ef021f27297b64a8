// tandem-make-checkpoint: writes a random-weight checkpoint of either architecture, at any size,
// in the released checkpoints' layout (config.json + safetensors, optionally sharded), for tests,
// demos and benchmarks. Its answers are meaningless. The weights are those the worker's
// --random_weights generates in memory for the same config.json and seed (random_weights.h).
//
//   tandem-make-checkpoint --arch=qwen3_5_moe --out=/tmp/qwen-small --hidden=256 --layers=4
//   tandem-make-checkpoint --arch=nemotron_h --out=/tmp/nemo --tokenizer=tokenizer.json
//   tandem-make-checkpoint --model_config=/tmp/qwen-small/config.json --seed=2 --out=/tmp/q2
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "workers/model/random_checkpoint.h"

ABSL_FLAG(std::string, arch, "qwen3_5_moe", "qwen3_5_moe or nemotron_h.");
ABSL_FLAG(std::string, model_config, "",
          "A config.json to write random weights for (its architecture and sizes; the size flags "
          "below are then unused). Written tensor by tensor: disk, not memory, bounds the size.");
ABSL_FLAG(std::string, out, "", "Directory to write (created if missing).");
ABSL_FLAG(std::string, tokenizer, "",
          "A tokenizer.json to copy into the checkpoint; its vocabulary sets --vocab.");
ABSL_FLAG(int32_t, vocab, 512, "Vocabulary size (without --tokenizer).");
ABSL_FLAG(int32_t, hidden, 256, "Hidden size.");
ABSL_FLAG(int32_t, layers, 4, "Layers.");
ABSL_FLAG(int32_t, experts, 16, "Routed experts per MoE layer.");
ABSL_FLAG(int32_t, experts_per_token, 2, "Experts each token is routed to.");
ABSL_FLAG(int32_t, moe_intermediate, 128, "Routed expert width.");
ABSL_FLAG(int32_t, shared_intermediate, 128, "Shared expert width.");
ABSL_FLAG(int32_t, heads, 4, "Attention heads.");
ABSL_FLAG(int32_t, kv_heads, 2, "Attention KV heads.");
ABSL_FLAG(int32_t, head_dim, 64, "Attention head size (a multiple of 32).");
ABSL_FLAG(std::string, pattern, "", "Nemotron-H layer pattern (M, E, *); default MEM*E repeated.");
ABSL_FLAG(int32_t, eos, -1, "End-of-sequence token id for config.json; -1 for none.");
ABSL_FLAG(uint64_t, seed, 1, "Random seed.");
ABSL_FLAG(std::string, dtype, "bf16", "bf16 or f32.");
ABSL_FLAG(uint64_t, shard_bytes, 0, "Shard the weights into files of about this size (0: one).");

namespace {

using tandem::workers::model::RandomModelOptions;

// A tokenizer.json's text and its vocabulary size (the vocabulary and the added tokens, specials,
// share one id space).
struct Tokenizer {
  std::string text;
  int32_t vocab_size = 0;
};

// Prints why and returns nothing when `path` is not a tokenizer.json with model.vocab.
std::optional<Tokenizer> ReadTokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  Tokenizer t;
  t.text = ss.str();
  const auto j = nlohmann::json::parse(t.text, nullptr, false);
  if (!in || j.is_discarded() || !j.contains("model") || !j["model"].contains("vocab")) {
    std::fprintf(stderr, "%s: not a tokenizer.json with model.vocab\n", path.c_str());
    return std::nullopt;
  }
  int64_t max_id = -1;
  for (const auto& [piece, id] : j["model"]["vocab"].items()) {
    if (id.is_number_integer()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (a.contains("id") && a["id"].is_number_integer()) {
        max_id = std::max<int64_t>(max_id, a["id"].get<int64_t>());
      }
    }
  }
  t.vocab_size = static_cast<int32_t>(max_id + 1);
  return t;
}

// The size flags (all but --arch, --vocab and --dtype).
void SizesFromFlags(RandomModelOptions* o) {
  o->hidden_size = absl::GetFlag(FLAGS_hidden);
  o->num_layers = absl::GetFlag(FLAGS_layers);
  o->num_experts = absl::GetFlag(FLAGS_experts);
  o->experts_per_token = absl::GetFlag(FLAGS_experts_per_token);
  o->moe_intermediate_size = absl::GetFlag(FLAGS_moe_intermediate);
  o->shared_intermediate_size = absl::GetFlag(FLAGS_shared_intermediate);
  o->num_attention_heads = absl::GetFlag(FLAGS_heads);
  o->num_kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o->head_dim = absl::GetFlag(FLAGS_head_dim);
  o->pattern = absl::GetFlag(FLAGS_pattern);
  o->eos_token_id = absl::GetFlag(FLAGS_eos);
  o->seed = absl::GetFlag(FLAGS_seed);
  o->shard_bytes = absl::GetFlag(FLAGS_shard_bytes);
}

// --model_config: random weights for the model of that config.json. Prints why and returns
// nothing on failure; else what was written, for the final line.
std::optional<std::string> WriteForConfig(const std::string& path, const RandomModelOptions& o,
                                          const std::string& out) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const auto config = nlohmann::json::parse(text.str(), nullptr, false);
  if (!in || config.is_discarded()) {
    std::fprintf(stderr, "%s: not a readable config.json\n", path.c_str());
    return std::nullopt;
  }
  if (absl::Status s =
          tandem::workers::model::WriteRandomWeights(config, o.seed, o.dtype, o.shard_bytes, out);
      !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(s.message()).c_str());
    return std::nullopt;
  }
  return "the model of " + path;
}

// A checkpoint of the sizes in `o`; as WriteForConfig.
std::optional<std::string> WriteForSizes(const RandomModelOptions& o, const std::string& out) {
  if (absl::Status s = tandem::workers::model::WriteRandomCheckpoint(o, out); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return std::nullopt;
  }
  return o.architecture + " (vocab " + std::to_string(o.vocab_size) + ", hidden " +
         std::to_string(o.hidden_size) + ", " + std::to_string(o.num_layers) + " layers)";
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tandem-make-checkpoint --arch=qwen3_5_moe|nemotron_h --out=DIR");
  absl::ParseCommandLine(argc, argv);
  RandomModelOptions o;
  o.architecture = absl::GetFlag(FLAGS_arch);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "--out is required\n");
    return 2;
  }
  o.vocab_size = absl::GetFlag(FLAGS_vocab);
  std::string tokenizer_text;
  if (const std::string path = absl::GetFlag(FLAGS_tokenizer); !path.empty()) {
    std::optional<Tokenizer> t = ReadTokenizer(path);
    if (!t) return 1;
    tokenizer_text = std::move(t->text);
    o.vocab_size = t->vocab_size;
  }
  SizesFromFlags(&o);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "f32") {
    o.dtype = tandem::workers::model::DType::kF32;
  } else if (dtype != "bf16") {
    std::fprintf(stderr, "--dtype must be bf16 or f32\n");
    return 2;
  }
  const std::string config_path = absl::GetFlag(FLAGS_model_config);
  const std::optional<std::string> what =
      config_path.empty() ? WriteForSizes(o, out) : WriteForConfig(config_path, o, out);
  if (!what) return 1;
  if (!tokenizer_text.empty()) {
    std::ofstream(out + "/tokenizer.json", std::ios::binary) << tokenizer_text;
  }
  std::printf(
      "wrote random weights (seed %llu) of %s to %s; router weights random: expert load is "
      "about uniform\n",
      static_cast<unsigned long long>(o.seed), what->c_str(), out.c_str());
  return 0;
}
