// tandem-make-checkpoint: writes a random-weight checkpoint of either architecture, at any size,
// in the released checkpoints' layout (config.json + safetensors, optionally sharded), for tests,
// demos and benchmarks. Its answers are meaningless. The weights are those the worker's
// --random_weights generates in memory for the same config.json and seed (random_weights.h).
//
// A qwen3_5_moe checkpoint is multimodal by default, as the released model is: config.json has a
// vision_config (a small tower, --vision_* flags) with the image token ids, the weights include
// model.visual.*, and a preprocessor_config.json is written next to config.json. --vision=false
// makes a text-only one. With --tokenizer the image token ids are the tokenizer's
// <|vision_start|>, <|vision_end|> and <|image_pad|>, so the worker's tokenizer and the config
// agree; a tokenizer without them is an error unless --vision=false.
//
//   tandem-make-checkpoint --arch=qwen3_5_moe --out=/tmp/qwen-small --hidden=256 --layers=4
//   tandem-make-checkpoint --arch=qwen3_5_moe --out=/tmp/qwen-text --vision=false
//   tandem-make-checkpoint --arch=nemotron_h --out=/tmp/nemo --tokenizer=tokenizer.json
//   tandem-make-checkpoint --model_config=/tmp/qwen-small/config.json --seed=2 --out=/tmp/q2
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "workers/model/model_config.h"
#include "workers/model/quantized_checkpoint.h"
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
ABSL_FLAG(std::string, quant, "",
          "Write it quantized, in a release's layout: fp8-block (qwen3_5_moe, the layout of "
          "Qwen's FP8 release), modelopt-fp8 (nemotron_h, NVIDIA's FP8 release) or gptq "
          "(qwen3_5_moe, GPTQ int4), awq (qwen3_5_moe, AWQ int4, GEMM packing) or ct-int4 "
          "(qwen3_5_moe, compressed-tensors pack-quantized int4). Empty: unquantized (--dtype).");
ABSL_FLAG(int32_t, fp8_block, 128, "--quant=fp8-block: rows and columns per scale.");
ABSL_FLAG(int32_t, gptq_group, 128,
          "--quant=gptq, awq, ct-int4: inputs per scale (for gptq a multiple of 8).");
ABSL_FLAG(bool, vision, true,
          "qwen3_5_moe: include the vision encoder (vision_config, model.visual.* weights, "
          "preprocessor_config.json), as the released model has; false: a text-only checkpoint. "
          "Unused for nemotron_h and with --model_config (its vision_config decides).");
ABSL_FLAG(int32_t, vision_depth, 2, "Vision encoder blocks.");
ABSL_FLAG(int32_t, vision_hidden, 64, "Vision encoder width.");
ABSL_FLAG(int32_t, vision_heads, 2,
          "Vision attention heads (vision_hidden / vision_heads a multiple of 4).");
ABSL_FLAG(int32_t, vision_intermediate, 128, "Vision MLP width.");
ABSL_FLAG(int32_t, vision_patch, 16, "Vision patch side in pixels.");
ABSL_FLAG(int32_t, vision_temporal_patch, 2, "Frames per vision patch (an image is repeated).");
ABSL_FLAG(int32_t, vision_merge, 2, "Patches merged per side into one text token.");
ABSL_FLAG(int32_t, vision_positions, 64,
          "Rows of the learned position table (a square: 64 is 8 x 8).");
ABSL_FLAG(int32_t, vision_start_token_id, -1,
          "<|vision_start|> id; -1: the tokenizer's (--tokenizer), else vocab - 3.");
ABSL_FLAG(int32_t, vision_end_token_id, -1,
          "<|vision_end|> id; -1: the tokenizer's (--tokenizer), else vocab - 2.");
ABSL_FLAG(int32_t, image_token_id, -1,
          "<|image_pad|> id; -1: the tokenizer's (--tokenizer), else vocab - 1.");

namespace {

using tandem::workers::model::RandomModelOptions;

// A tokenizer.json's text, parsed form and vocabulary size (the vocabulary and the added tokens,
// specials, share one id space).
struct Tokenizer {
  std::string text;
  nlohmann::json json;
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
  t.json = std::move(j);
  return t;
}

// Writes the checkpoint in `from` into `to` quantized as `quant` says, and removes `from`;
// prints why not.
bool Quantize(const std::string& quant, const std::string& from, const std::string& to) {
  namespace model = tandem::workers::model;
  auto source = model::Checkpoint::Open(from);
  absl::Status s = source.status();
  if (!source.ok()) {
  } else if (quant == "modelopt-fp8") {
    s = model::WriteModelOptFp8Checkpoint(**source, to);
  } else if (quant == "gptq") {
    s = model::WriteGptqCheckpoint(**source, to, absl::GetFlag(FLAGS_gptq_group));
  } else if (quant == "awq") {
    s = model::WriteAwqCheckpoint(**source, to, absl::GetFlag(FLAGS_gptq_group));
  } else if (quant == "ct-int4") {
    s = model::WriteCompressedTensorsCheckpoint(**source, to, absl::GetFlag(FLAGS_gptq_group));
  } else {
    s = model::WriteFp8BlockCheckpoint(**source, to, absl::GetFlag(FLAGS_fp8_block));
  }
  std::error_code ec;
  std::filesystem::remove_all(from, ec);
  if (!s.ok()) {
    std::fprintf(stderr, "quantizing: %s\n", std::string(s.message()).c_str());
    return false;
  }
  return true;
}

// The vision flags (sizes and token ids).
void VisionFromFlags(RandomModelOptions* o) {
  o->vision = absl::GetFlag(FLAGS_vision);
  o->vision_depth = absl::GetFlag(FLAGS_vision_depth);
  o->vision_hidden_size = absl::GetFlag(FLAGS_vision_hidden);
  o->vision_heads = absl::GetFlag(FLAGS_vision_heads);
  o->vision_intermediate_size = absl::GetFlag(FLAGS_vision_intermediate);
  o->vision_patch_size = absl::GetFlag(FLAGS_vision_patch);
  o->vision_temporal_patch_size = absl::GetFlag(FLAGS_vision_temporal_patch);
  o->vision_merge_size = absl::GetFlag(FLAGS_vision_merge);
  o->vision_position_embeddings = absl::GetFlag(FLAGS_vision_positions);
  o->vision_start_token_id = absl::GetFlag(FLAGS_vision_start_token_id);
  o->vision_end_token_id = absl::GetFlag(FLAGS_vision_end_token_id);
  o->image_token_id = absl::GetFlag(FLAGS_image_token_id);
}

// With --tokenizer, the image token ids of a multimodal qwen3_5_moe checkpoint are the
// tokenizer's: the worker tokenizes <|image_pad|> with the tokenizer and scatters image
// embeddings where the config's image_token_id is, so the two must agree. An id flag given
// too must say the same. Prints why and returns false on failure.
bool VisionIdsFromTokenizer(const Tokenizer& t, const std::string& path, RandomModelOptions* o) {
  if (!o->vision || o->architecture != "qwen3_5_moe") return true;
  RandomModelOptions from = *o;
  if (absl::Status s = tandem::workers::model::VisionTokenIdsFromTokenizer(t.json, &from);
      !s.ok()) {
    std::fprintf(stderr,
                 "%s: %s; a multimodal qwen3_5_moe checkpoint needs them (--vision=false "
                 "makes a text-only one)\n",
                 path.c_str(), std::string(s.message()).c_str());
    return false;
  }
  const std::pair<int32_t, int32_t> flag_and_tokenizer[] = {
      {o->vision_start_token_id, from.vision_start_token_id},
      {o->vision_end_token_id, from.vision_end_token_id},
      {o->image_token_id, from.image_token_id}};
  for (const auto& [flag, tokenizer] : flag_and_tokenizer) {
    if (flag >= 0 && flag != tokenizer) {
      std::fprintf(stderr,
                   "%s: a vision token id flag says %d where the tokenizer's id is %d; "
                   "leave the id flags unset with --tokenizer\n",
                   path.c_str(), flag, tokenizer);
      return false;
    }
  }
  *o = from;
  return true;
}

// --model_config with --tokenizer: a vision_config's token ids must be the tokenizer's (see
// VisionIdsFromTokenizer). Prints why and returns false when they are not.
bool ConfigIdsMatchTokenizer(const nlohmann::json& config, const Tokenizer& t,
                             const std::string& path) {
  auto parsed = tandem::workers::model::ParseModelConfig(config, path);
  if (!parsed.ok() || !parsed->vision.has_value()) return true;  // WriteRandomWeights says why
  RandomModelOptions from;
  if (absl::Status s = tandem::workers::model::VisionTokenIdsFromTokenizer(t.json, &from);
      !s.ok()) {
    std::fprintf(stderr, "%s has a vision_config, but --tokenizer: %s\n", path.c_str(),
                 std::string(s.message()).c_str());
    return false;
  }
  const auto& v = *parsed->vision;
  if (v.vision_start_token_id != from.vision_start_token_id ||
      v.vision_end_token_id != from.vision_end_token_id ||
      v.image_token_id != from.image_token_id) {
    std::fprintf(stderr,
                 "%s: vision token ids %d, %d, %d (start, end, image) are not the tokenizer's "
                 "%d, %d, %d (use the model's own tokenizer, or a config without vision_config)\n",
                 path.c_str(), v.vision_start_token_id, v.vision_end_token_id, v.image_token_id,
                 from.vision_start_token_id, from.vision_end_token_id, from.image_token_id);
    return false;
  }
  return true;
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

// --model_config: random weights for the model of that config.json (whose ids must be those of
// `tokenizer`, when given). Prints why and returns nothing on failure; else what was written,
// for the final line.
std::optional<std::string> WriteForConfig(const std::string& path, const RandomModelOptions& o,
                                          const std::optional<Tokenizer>& tokenizer,
                                          const std::string& out) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const auto config = tandem::workers::model::ParseConfigJson(text.str());
  if (!in || config.is_discarded()) {
    std::fprintf(stderr, "%s: not a readable config.json\n", path.c_str());
    return std::nullopt;
  }
  if (tokenizer.has_value() && !ConfigIdsMatchTokenizer(config, *tokenizer, path)) {
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
  const bool vision = o.vision && o.architecture == "qwen3_5_moe";
  return o.architecture + " (vocab " + std::to_string(o.vocab_size) + ", hidden " +
         std::to_string(o.hidden_size) + ", " + std::to_string(o.num_layers) + " layers" +
         (vision ? ", a " + std::to_string(o.vision_depth) + "-block vision encoder" : "") + ")";
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
  SizesFromFlags(&o);
  VisionFromFlags(&o);
  const std::string config_path = absl::GetFlag(FLAGS_model_config);
  std::optional<Tokenizer> tokenizer;
  if (const std::string path = absl::GetFlag(FLAGS_tokenizer); !path.empty()) {
    tokenizer = ReadTokenizer(path);
    if (!tokenizer) return 1;
    o.vocab_size = tokenizer->vocab_size;
    // With --model_config its own ids are checked against the tokenizer instead.
    if (config_path.empty() && !VisionIdsFromTokenizer(*tokenizer, path, &o)) return 1;
  }
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "f32") {
    o.dtype = tandem::workers::model::DType::kF32;
  } else if (dtype != "bf16") {
    std::fprintf(stderr, "--dtype must be bf16 or f32\n");
    return 2;
  }
  const std::string quant = absl::GetFlag(FLAGS_quant);
  if (!quant.empty() && quant != "fp8-block" && quant != "modelopt-fp8" && quant != "gptq" &&
      quant != "awq" && quant != "ct-int4") {
    std::fprintf(stderr, "--quant=%s: fp8-block, modelopt-fp8, gptq, awq or ct-int4\n",
                 quant.c_str());
    return 2;
  }
  // Quantized: the unquantized model is written first, then converted from it.
  const std::string dir = quant.empty() ? out : out + ".unquantized.tmp";
  const std::optional<std::string> what =
      config_path.empty() ? WriteForSizes(o, dir) : WriteForConfig(config_path, o, tokenizer, dir);
  if (!what) return 1;
  if (tokenizer.has_value()) {
    std::ofstream(dir + "/tokenizer.json", std::ios::binary) << tokenizer->text;
  }
  if (!quant.empty() && !Quantize(quant, dir, out)) return 1;
  std::printf(
      "wrote random weights (seed %llu) of %s to %s; router weights random: expert load is "
      "about uniform\n",
      static_cast<unsigned long long>(o.seed), what->c_str(), out.c_str());
  return 0;
}
