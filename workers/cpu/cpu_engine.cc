#include "workers/cpu/cpu_engine.h"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "workers/model/safetensors.h"
#include "workers/tokenizer/chat_template.h"

namespace tandem::workers {
namespace {

class CpuSnapshot final : public PrefixSnapshot {
 public:
  explicit CpuSnapshot(std::unique_ptr<cpu::SequenceState> state) : state_(std::move(state)) {}
  int64_t bytes() const override { return state_->bytes(); }
  const cpu::SequenceState& state() const { return *state_; }

 private:
  std::unique_ptr<cpu::SequenceState> state_;
};

}  // namespace

CpuEngine::CpuEngine(std::unique_ptr<cpu::CpuModel> model, std::unique_ptr<Tokenizer> tokenizer,
                     std::vector<int32_t> stop_ids, CpuEngineOptions options, CpuVision vision)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      stop_ids_(std::move(stop_ids)),
      options_(std::move(options)),
      thinking_markers_(ThinkingMarkers::Of(*tokenizer_)),
      vision_(std::move(vision)),
      cache_(PrefixCacheOptions{options_.prefix_cache_bytes, options_.prefix_block_tokens}) {
  info_ = NativeEngineInfo(model_->shape(), options_.model_name, options_.model_id,
                           options_.max_context_tokens, options_.max_output_tokens,
                           vision_.encoder != nullptr);
  info_.quantization = options_.quantization;
}

int64_t CpuEngine::SequenceBytes(int64_t prompt_tokens, int32_t max_tokens) const {
  const model::ModelShape& s = model_->shape();
  return s.state_bytes + s.kv_bytes_per_token * (prompt_tokens + std::max(0, max_tokens));
}

absl::Status CpuEngine::AddSequence(const SequenceSpec& spec) {
  if (spec.prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (!spec.images.empty() && vision_.encoder == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", info_.model_name, "' does not accept images"));
  }
  const int64_t need = SequenceBytes(static_cast<int64_t>(spec.prompt.size()), spec.max_tokens);
  if (reserved_.load() + need > options_.memory_budget_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("sequence memory: %d bytes needed, %d of %d reserved", need,
                        reserved_.load(), options_.memory_budget_bytes));
  }
  Sequence seq;
  seq.cacheable = cache_.enabled();
  seq.partition = spec.cache_partition;
  seq.text_prefix = static_cast<int64_t>(spec.prompt.size());
  seq.has_images = !spec.images.empty();
  if (seq.has_images) {
    // Snapshots hold text only: two prompts whose image tokens agree may hold other images.
    const int32_t image = vision_.encoder->config().image_token_id;
    seq.text_prefix =
        std::find(spec.prompt.begin(), spec.prompt.end(), image) - spec.prompt.begin();
  }
  if (seq.cacheable) {
    // At most all but the last prompt token: its logits are what the prefill is for.
    const auto text = absl::MakeConstSpan(spec.prompt).first(static_cast<size_t>(seq.text_prefix));
    const PrefixCache::Match m = cache_.Lookup(
        seq.partition, text,
        std::min<int64_t>(seq.text_prefix, static_cast<int64_t>(spec.prompt.size()) - 1));
    if (m.snapshot != nullptr) {
      seq.state = static_cast<const CpuSnapshot*>(m.snapshot)->state().Clone();
      seq.cached = m.tokens;
    }
    seq.branch = m.shared_tokens;
  }
  if (seq.state == nullptr) seq.state = model_->NewState();
  seq.prompt = spec.prompt;
  seq.sampling = spec.sampling;
  seq.rng.seed(spec.sampling.seed);
  seq.reserved = need;
  seq.thinking = ThinkingBudget(thinking_markers_, spec.thinking_budget, spec.prompt);
  seq.images = spec.images;
  reserved_.fetch_add(need);
  // Snapshots give way to sequences: the cache keeps only what the budget leaves.
  cache_.EvictTo(options_.memory_budget_bytes - reserved_.load());
  sequences_[spec.id] = std::move(seq);
  return absl::OkStatus();
}

int64_t CpuEngine::CachedPromptTokens(uint64_t id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? 0 : it->second.cached;
}

void CpuEngine::RemoveSequence(uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  reserved_.fetch_sub(it->second.reserved);
  sequences_.erase(it);
}

void CpuEngine::OfferSnapshot(const Sequence& seq, const cpu::SequenceState& state) {
  const auto prefix = absl::MakeConstSpan(seq.tokens).first(static_cast<size_t>(state.position()));
  const int64_t room = options_.memory_budget_bytes - reserved_.load() - cache_.bytes();
  if (!cache_.Fits(state.bytes(), state.position(), room) ||
      cache_.Contains(seq.partition, prefix)) {
    return;  // too large for what the budget leaves, or held already: no copy made
  }
  cache_.Insert(seq.partition, prefix, std::make_unique<CpuSnapshot>(state.Clone()), room);
}

absl::Status CpuEngine::Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) {
  const int32_t vocab = model_->shape().vocab_size;
  for (const uint64_t id : ids) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) {
      return absl::InternalError(absl::StrCat("step for unknown sequence ", id));
    }
    Sequence& seq = it->second;
    absl::Status s;
    if (seq.last_token < 0) {
      s = !seq.images.empty() ? PrefillWithImages(seq) : PrefillText(seq);
      seq.prompt.clear();
      seq.prompt.shrink_to_fit();
      seq.images.clear();
    } else {
      s = Decode(seq);
    }
    if (!s.ok()) return s;
    // Thinking budget: once spent, the end of thinking is forced, and the answer follows.
    const int32_t next =
        seq.thinking.Next(sampler_.Sample(logits_.data(), vocab, seq.sampling, seq.rng));
    seq.last_token = next;
    StepOutput o;
    o.id = id;
    o.token = next;
    o.end_of_sequence = std::find(stop_ids_.begin(), stop_ids_.end(), next) != stop_ids_.end();
    out->push_back(o);
  }
  return absl::OkStatus();
}

absl::Status CpuEngine::PrefillToSnapshots(Sequence& seq) {
  seq.tokens = seq.prompt;
  const int64_t limit = seq.text_prefix;
  const int64_t n = cache_.block_tokens();
  int64_t pos = seq.state->position();
  const auto tokens = absl::MakeConstSpan(seq.tokens);
  for (const int64_t point : {std::min(seq.branch, limit), limit / n * n}) {
    if (point <= pos) continue;
    const auto part = tokens.subspan(static_cast<size_t>(pos), static_cast<size_t>(point - pos));
    if (absl::Status s = model_->Forward(seq.state.get(), part, false, &logits_); !s.ok()) {
      return s;
    }
    pos = point;
    OfferSnapshot(seq, *seq.state);
  }
  return absl::OkStatus();
}

absl::Status CpuEngine::PrefillText(Sequence& seq) {
  if (!seq.cacheable) {
    return model_->Forward(seq.state.get(), seq.prompt, /*all_logits=*/false, &logits_);
  }
  if (absl::Status s = PrefillToSnapshots(seq); !s.ok()) return s;
  const int64_t pos = seq.state->position();
  if (pos == static_cast<int64_t>(seq.prompt.size())) {
    return absl::OkStatus();  // the last piece's logits are the prompt's
  }
  return model_->Forward(seq.state.get(), absl::MakeConstSpan(seq.prompt).subspan(pos), false,
                         &logits_);
}

absl::Status CpuEngine::Decode(Sequence& seq) {
  const int32_t token = seq.last_token;
  absl::Status s =
      model_->Forward(seq.state.get(), absl::MakeConstSpan(&token, 1), false, &logits_);
  // A sequence with images takes no snapshots past its text (its image tokens are the same
  // whatever the image).
  if (!s.ok() || !seq.cacheable || seq.has_images) return s;
  seq.tokens.push_back(token);
  const int64_t pos = seq.state->position();
  if (pos % cache_.block_tokens() != 0) return absl::OkStatus();
  // The answer so far, for a next turn that resends it (a chat, an agent loop); the one taken
  // a block earlier in this answer is worth nothing more.
  OfferSnapshot(seq, *seq.state);
  if (seq.decode_snapshot > 0) {
    cache_.Erase(seq.partition,
                 absl::MakeConstSpan(seq.tokens).first(static_cast<size_t>(seq.decode_snapshot)));
  }
  seq.decode_snapshot = pos;
  return absl::OkStatus();
}

absl::Status CpuEngine::PrefillWithImages(Sequence& seq) {
  const model::qwen35::VisionConfig& c = vision_.encoder->config();
  std::vector<float> pixels;
  std::vector<cpu::VisionGrid> grids;
  std::vector<model::MergedGrid> merged;
  for (const auto& image : seq.images) {
    const std::vector<float> p = vision::PixelValues(*image, vision_.processor);
    pixels.insert(pixels.end(), p.begin(), p.end());
    grids.push_back(cpu::VisionGrid{image->grid_t, image->grid_h, image->grid_w});
    merged.push_back(model::MergedGrid{image->grid_h / c.spatial_merge_size,
                                       image->grid_w / c.spatial_merge_size});
  }
  absl::StatusOr<std::vector<float>> embeds = vision_.encoder->Encode(pixels, grids);
  if (!embeds.ok()) return embeds.status();
  absl::StatusOr<model::MropePositions> positions =
      model::ComputeMropePositions(seq.prompt, c.image_token_id, merged);
  if (!positions.ok()) return positions.status();
  // The text before the first image may come from, and go to, the prefix cache: its 3-D
  // positions are (p, p, p), which is what a text prefill gives; the rest is fed with its own
  // slice of the whole prompt's positions.
  if (seq.cacheable) {
    if (absl::Status s = PrefillToSnapshots(seq); !s.ok()) return s;
  }
  const size_t from = static_cast<size_t>(seq.state->position());
  for (std::vector<int64_t>* axis : {&positions->t, &positions->h, &positions->w}) {
    axis->erase(axis->begin(), axis->begin() + static_cast<std::ptrdiff_t>(from));
  }
  const cpu::MultimodalInput input{*embeds, c.image_token_id, &*positions};
  return model_->ForwardMultimodal(seq.state.get(), absl::MakeConstSpan(seq.prompt).subspan(from),
                                   input, /*all_logits=*/false, &logits_);
}

absl::StatusOr<CpuVision> LoadCpuVision(const model::Checkpoint& checkpoint,
                                        const model::ModelConfig& config,
                                        const vision::PreprocessorConfig& processor,
                                        const Tokenizer& tokenizer) {
  CpuVision out;
  auto usable = VisionEncoderUsable(
      checkpoint, config, cpu::Qwen35VisionModel::CheckpointHasEncoder(checkpoint), tokenizer);
  if (!usable.ok()) return usable.status();
  if (!*usable) return out;
  auto encoder = cpu::Qwen35VisionModel::Load(checkpoint, *config.vision);
  if (!encoder.ok()) return encoder.status();
  out.encoder = std::move(*encoder);
  out.processor = processor;
  return out;
}

absl::StatusOr<std::unique_ptr<CpuEngine>> LoadCpuEngine(const WeightsSource& source,
                                                         CpuEngineOptions options,
                                                         bool* random_weights) {
  auto weights = OpenWeights(source);
  if (!weights.ok()) return weights.status();
  const model::Checkpoint& checkpoint = *weights->checkpoint;
  const model::ModelConfig& config = weights->config;
  // The CPU reference widens every weight to fp32: refuse at once what this machine's memory
  // cannot hold (a full-size model needs ~140 GB) rather than be killed part way.
  const uint64_t fp32_bytes = checkpoint.float_bytes();
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_bytes > 0 &&
      fp32_bytes > static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(checkpoint.dir(), ": the CPU engine needs ", fp32_bytes,
                     " bytes for the weights in fp32, more than this machine's ",
                     static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes),
                     " bytes of memory (use a GPU, --device=N, or a smaller model)"));
  }
  auto model = cpu::LoadCpuModel(checkpoint, config);
  if (!model.ok()) return model.status();
  options.quantization = checkpoint.quantization().Name();
  if (checkpoint.quantization().kv_cache_fp8) {
    spdlog::warn(
        "{}: the release quantizes the KV cache to FP8 (k_scale/v_scale); this engine "
        "keeps it unquantized, and runs FP8 weights with unquantized activations",
        checkpoint.dir());
  }
  auto tokenizer =
      CheckNameAndLoadTokenizer(*weights, options.model_name, &options.model_id, random_weights);
  if (!tokenizer.ok()) return tokenizer.status();
  auto vision = LoadCpuVision(checkpoint, config, weights->preprocessor, *tokenizer->tokenizer);
  if (!vision.ok()) return vision.status();
  return std::make_unique<CpuEngine>(std::move(*model), std::move(tokenizer->tokenizer),
                                     std::move(tokenizer->stop_ids), std::move(options),
                                     std::move(*vision));
}

}  // namespace tandem::workers
