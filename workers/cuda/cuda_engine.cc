#include "workers/cuda/cuda_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/cuda_status.h"
#include "workers/native_checkpoint.h"

namespace tandem::workers::cuda {
namespace {

constexpr int64_t kBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
constexpr int64_t kMaxBatch = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Create(std::unique_ptr<CudaModel> model,
                                                               std::unique_ptr<Tokenizer> tokenizer,
                                                               std::vector<int32_t> stop_ids,
                                                               CudaEngineOptions options,
                                                               CudaEngineVision vision) {
  std::unique_ptr<CudaEngine> e(new CudaEngine(std::move(model), std::move(tokenizer),
                                               std::move(stop_ids), std::move(options),
                                               std::move(vision)));
  if (absl::Status s = e->Init(); !s.ok()) return s;
  return e;
}

CudaEngine::CudaEngine(std::unique_ptr<CudaModel> model, std::unique_ptr<Tokenizer> tokenizer,
                       std::vector<int32_t> stop_ids, CudaEngineOptions options,
                       CudaEngineVision vision)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      stop_ids_(std::move(stop_ids)),
      options_(std::move(options)),
      thinking_markers_(ThinkingMarkers::Of(*tokenizer_)),
      vision_(std::move(vision)) {
  // Images only with the encoder's weights on the device (LoadCudaEngine loads it when the
  // config has a vision_config and the checkpoint its tensors).
  info_ = NativeEngineInfo(model_->shape(), options_.model_name, options_.model_id,
                           options_.max_context_tokens, options_.max_output_tokens,
                           /*vision=*/vision_.encoder != nullptr);
}

CudaEngine::~CudaEngine() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (auto& [size, b] : buckets_) {
    if (b.graph != nullptr) cudaGraphExecDestroy(b.graph);
    for (void* p : {static_cast<void*>(b.tokens), static_cast<void*>(b.positions),
                    static_cast<void*>(b.rope_positions), static_cast<void*>(b.slots),
                    static_cast<void*>(b.block_tables), static_cast<void*>(b.logits),
                    static_cast<void*>(b.temperature), static_cast<void*>(b.top_k),
                    static_cast<void*>(b.top_p), static_cast<void*>(b.seeds),
                    static_cast<void*>(b.steps), static_cast<void*>(b.sampled)}) {
      cudaFree(p);
    }
  }
  cudaFree(block_tables_);
  cudaFree(image_embeddings_);
  cudaFree(state_pool_);
  cudaFree(kv_pool_);
  cudaFreeHost(host_ints_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

int64_t CudaEngine::BlocksFor(int64_t tokens) const {
  return (tokens + kKvBlockTokens - 1) / kKvBlockTokens;
}

int64_t CudaEngine::SequenceBytes(int64_t prompt_tokens, int32_t max_tokens) const {
  return model_->state_slot_bytes() +
         BlocksFor(prompt_tokens + std::max(0, max_tokens)) * model_->kv_block_bytes();
}

absl::Status CudaEngine::Init() {
  TANDEM_CUDA_RETURN(cudaSetDevice(options_.device),
                     absl::StrCat("cudaSetDevice(", options_.device, ")"));
  TANDEM_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                     "cudaStreamCreate");
  RETURN_IF_ERROR(InitVision());
  size_t free_bytes = 0, total_bytes = 0;
  TANDEM_CUDA_RETURN(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (options_.memory_fraction <= 0 || options_.memory_fraction > 1) {
    return absl::InvalidArgumentError("--gpu_memory_fraction must be in (0, 1]");
  }
  max_blocks_per_sequence_ = BlocksFor(info_.max_context_tokens);
  const int64_t slot_bytes = model_->state_slot_bytes();
  const int64_t block_bytes = model_->kv_block_bytes();
  // Slot 0 and block 0 are scratch for the padding rows of a decode bucket.
  slots_ = static_cast<int64_t>(options_.max_sequences) + 1;
  // Bucket buffers and block tables come out of the same fraction.
  const int64_t vocab = model_->shape().vocab_size;
  const int64_t fixed = slots_ * max_blocks_per_sequence_ * 4 +
                        (kMaxBatch * 2) * (vocab * 4 + max_blocks_per_sequence_ * 4 + 64);
  const int64_t budget =
      static_cast<int64_t>(static_cast<double>(free_bytes) * options_.memory_fraction) - fixed;
  const int64_t for_blocks = budget - slots_ * slot_bytes;
  if (for_blocks <= 0 || (block_bytes > 0 && for_blocks / block_bytes < 2)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "device %d: %d bytes free after the weights; %d sequences need %d bytes of state "
        "slots, leaving no room for KV blocks (lower --max_batch_size or raise "
        "--gpu_memory_fraction)",
        options_.device, free_bytes, slots_ - 1, slots_ * slot_bytes));
  }
  blocks_ = block_bytes > 0 ? for_blocks / block_bytes : 1;
  budget_bytes_ = (slots_ - 1) * slot_bytes + (blocks_ - 1) * block_bytes;
  if (slot_bytes > 0) {
    if (absl::Status s = DeviceAlloc(&state_pool_, static_cast<size_t>(slots_ * slot_bytes),
                                     "recurrent-state slots");
        !s.ok()) {
      return s;
    }
  }
  if (block_bytes > 0) {
    if (absl::Status s =
            DeviceAlloc(&kv_pool_, static_cast<size_t>(blocks_ * block_bytes), "KV blocks");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = model_->BindMemory(state_pool_, slots_, kv_pool_, blocks_); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          DeviceAlloc(reinterpret_cast<void**>(&block_tables_),
                      static_cast<size_t>(slots_ * max_blocks_per_sequence_ * 4), "block tables");
      !s.ok()) {
    return s;
  }
  TANDEM_CUDA_RETURN(
      cudaMemsetAsync(block_tables_, 0, static_cast<size_t>(slots_ * max_blocks_per_sequence_ * 4),
                      stream_),
      "cudaMemset(block tables)");
  // Pinned staging: tokens, positions, slots, top_k, sampled ids, rope positions (6 x kMaxBatch
  // ints), then temperature, top_p (floats), seeds, steps (64-bit) for kMaxBatch rows.
  if (absl::Status s = PinnedHostAlloc(reinterpret_cast<void**>(&host_ints_),
                                       static_cast<size_t>(kMaxBatch * 6 * 4 + kMaxBatch * 24),
                                       "step inputs and sampled tokens");
      !s.ok()) {
    return s;
  }
  host_sampled_ = host_ints_ + 4 * kMaxBatch;
  for (int32_t s = static_cast<int32_t>(slots_) - 1; s >= 1; --s) free_slots_.push_back(s);
  for (int32_t b = static_cast<int32_t>(blocks_) - 1; b >= 1; --b) free_blocks_.push_back(b);
  return CudaStatus(cudaStreamSynchronize(stream_), "engine set-up");
}

absl::StatusOr<CudaEngine::Bucket*> CudaEngine::BucketFor(int64_t batch) {
  int64_t size = kMaxBatch;
  for (int64_t b : kBuckets) {
    if (b >= batch) {
      size = b;
      break;
    }
  }
  if (auto it = buckets_.find(size); it != buckets_.end()) return &it->second;
  Bucket b;
  b.size = size;
  const int64_t vocab = model_->shape().vocab_size;
  const size_t n = static_cast<size_t>(size);
  const struct {
    void** ptr;
    size_t bytes;
    const char* what;
  } arrays[] = {
      {reinterpret_cast<void**>(&b.tokens), n * 4, "decode tokens"},
      {reinterpret_cast<void**>(&b.positions), n * 4, "decode positions"},
      {reinterpret_cast<void**>(&b.rope_positions), n * 4, "decode rotary positions"},
      {reinterpret_cast<void**>(&b.slots), n * 4, "decode state slots"},
      {reinterpret_cast<void**>(&b.block_tables),
       n * static_cast<size_t>(max_blocks_per_sequence_) * 4, "decode block tables"},
      {reinterpret_cast<void**>(&b.logits), n * static_cast<size_t>(vocab) * 4, "decode logits"},
      {reinterpret_cast<void**>(&b.temperature), n * 4, "sampling temperatures"},
      {reinterpret_cast<void**>(&b.top_k), n * 4, "sampling top_k"},
      {reinterpret_cast<void**>(&b.top_p), n * 4, "sampling top_p"},
      {reinterpret_cast<void**>(&b.seeds), n * 8, "sampling seeds"},
      {reinterpret_cast<void**>(&b.steps), n * 8, "sampling steps"},
      {reinterpret_cast<void**>(&b.sampled), n * 4, "sampled tokens"},
  };
  for (const auto& a : arrays) {
    if (absl::Status s = DeviceAlloc(a.ptr, a.bytes, a.what); !s.ok()) {
      // Nothing half-made stays behind: the next step of this size tries again from scratch.
      for (const auto& done : arrays) cudaFree(*done.ptr);
      (void)cudaGetLastError();
      return absl::Status(s.code(), absl::StrCat("batch bucket of ", size, ": ", s.message()));
    }
  }
  return &buckets_.emplace(size, b).first->second;
}

absl::Status CudaEngine::AddSequence(const SequenceSpec& spec) {
  if (spec.prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  Sequence seq;
  RETURN_IF_ERROR(AdmitImages(spec, &seq));
  const int64_t tokens = static_cast<int64_t>(spec.prompt.size()) + std::max(0, spec.max_tokens);
  const int64_t blocks = BlocksFor(tokens);
  if (blocks > max_blocks_per_sequence_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prompt + max_tokens = %d tokens exceeds the context of %d", tokens,
                        info_.max_context_tokens));
  }
  if (free_slots_.empty() || static_cast<int64_t>(free_blocks_.size()) < blocks) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("device sequence memory: %d free slots, %d free KV blocks, %d needed",
                        free_slots_.size(), free_blocks_.size(), blocks));
  }
  seq.slot.state_slot = free_slots_.back();
  free_slots_.pop_back();
  seq.slot.blocks.assign(free_blocks_.end() - blocks, free_blocks_.end());
  free_blocks_.resize(free_blocks_.size() - static_cast<size_t>(blocks));
  seq.slot.block_table = block_tables_ + seq.slot.state_slot * max_blocks_per_sequence_;
  // Admission is rare next to steps; a synchronous copy keeps the host vector's lifetime simple.
  TANDEM_CUDA_RETURN(cudaMemcpy(seq.slot.block_table, seq.slot.blocks.data(),
                                seq.slot.blocks.size() * 4, cudaMemcpyHostToDevice),
                     "block table upload");
  if (absl::Status s = model_->ResetSlot(seq.slot.state_slot, stream_); !s.ok()) return s;
  seq.prompt = spec.prompt;
  seq.sampling = spec.sampling;
  seq.thinking = ThinkingBudget(thinking_markers_, spec.thinking_budget, spec.prompt);
  seq.reserved = SequenceBytes(static_cast<int64_t>(spec.prompt.size()), spec.max_tokens);
  reserved_bytes_.fetch_add(seq.reserved);
  sequences_[spec.id] = std::move(seq);
  return absl::OkStatus();
}

absl::Status CudaEngine::InitVision() {
  if (vision_.encoder == nullptr) return absl::OkStatus();
  CudaVisionEncoder& encoder = *vision_.encoder;
  const model::qwen35::VisionConfig& c = encoder.config();
  const int64_t merge = c.spatial_merge_size;
  max_image_patches_ = options_.max_image_patches;
  if (max_image_patches_ <= 0) {
    // The largest still image smart_resize makes: max_pixels, in patches (one frame).
    max_image_patches_ =
        vision_.preprocessor.max_pixels /
        (int64_t{vision_.preprocessor.patch_size} * vision_.preprocessor.patch_size);
  }
  max_image_patches_ = std::max(max_image_patches_ / (merge * merge), int64_t{1}) * merge * merge;
  RETURN_IF_ERROR(encoder.Reserve(max_image_patches_));
  const int64_t rows = max_image_patches_ / (merge * merge);
  return DeviceAlloc(reinterpret_cast<void**>(&image_embeddings_),
                     static_cast<size_t>(rows * c.out_hidden_size * 4), "image embeddings");
}

absl::Status CudaEngine::AdmitImages(const SequenceSpec& spec, Sequence* seq) const {
  if (spec.images.empty()) return absl::OkStatus();
  if (vision_.encoder == nullptr) {
    return absl::InvalidArgumentError(
        "this model takes no images (its checkpoint has no vision encoder)");
  }
  const model::qwen35::VisionConfig& c = vision_.encoder->config();
  const int64_t merge = c.spatial_merge_size;
  std::vector<model::MergedGrid> grids;
  for (size_t i = 0; i < spec.images.size(); ++i) {
    const vision::PreparedImage* im = spec.images[i].get();
    // Still images only (one frame): the prompt's positions have no time axis for video.
    if (im == nullptr || im->grid_t != 1 || im->grid_h <= 0 || im->grid_w <= 0 ||
        im->grid_h % merge != 0 || im->grid_w % merge != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("image ", i, ": not a prepared image of this model's patch grid"));
    }
    if (im->num_patches() > max_image_patches_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("image %d has %d patches; this engine takes at most %d (%d x %d-pixel "
                          "patches)",
                          i, im->num_patches(), max_image_patches_, c.patch_size, c.patch_size));
    }
    grids.push_back({im->grid_h / merge, im->grid_w / merge});
  }
  ASSIGN_OR_RETURN(seq->mrope, model::ComputeMropePositions(spec.prompt, c.image_token_id, grids));
  seq->rope_delta = seq->mrope.rope_delta;
  seq->images = spec.images;
  return absl::OkStatus();
}

absl::Status CudaEngine::PrefillImages(Sequence& seq, float* logits) {
  CudaVisionEncoder& encoder = *vision_.encoder;
  const int32_t image_token = encoder.config().image_token_id;
  const std::vector<int32_t>& prompt = seq.prompt;
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> rows(static_cast<size_t>(n), -1);
  std::vector<int32_t> positions;  // one piece's [3][count]
  size_t image = 0;
  for (int64_t begin = 0; begin < n;) {
    // The piece ends after the next image's tokens, or at the end of the prompt.
    int64_t run = begin;
    while (run < n && prompt[run] != image_token) ++run;
    int64_t end = n, embedding_count = 0;
    if (run < n) {
      if (image >= seq.images.size()) return absl::InternalError("image tokens without an image");
      const vision::PreparedImage& im = *seq.images[image++];
      const std::vector<float> pixels = vision::PixelValues(im, vision_.preprocessor);
      if (pixels.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("image ", image - 1, ": its pixels do not fit its grid"));
      }
      const VisionGrid grid{im.grid_t, im.grid_h, im.grid_w};
      RETURN_IF_ERROR(encoder.Encode(pixels, {grid}, image_embeddings_, stream_));
      embedding_count = encoder.OutputRows({grid});
      for (int64_t k = 0; k < embedding_count; ++k) rows[run + k] = static_cast<int32_t>(k);
      end = run + embedding_count;
    }
    const int64_t count = end - begin;
    positions.resize(static_cast<size_t>(3 * count));
    for (int64_t i = 0; i < count; ++i) {
      positions[i] = static_cast<int32_t>(seq.mrope.t[begin + i]);
      positions[count + i] = static_cast<int32_t>(seq.mrope.h[begin + i]);
      positions[2 * count + i] = static_cast<int32_t>(seq.mrope.w[begin + i]);
    }
    PrefillInputs in;
    in.tokens = prompt.data() + begin;
    in.count = count;
    in.start = begin;
    in.mrope_positions = positions.data();
    if (embedding_count > 0) {
      in.embedding_rows = rows.data() + begin;
      in.embeddings = image_embeddings_;
      in.embedding_count = embedding_count;
    }
    // The last piece's logits are the prompt's last token's.
    RETURN_IF_ERROR(model_->Prefill(in, seq.slot, logits, stream_));
    begin = end;
  }
  seq.images.clear();
  seq.mrope = model::MropePositions();
  return absl::OkStatus();
}

void CudaEngine::RemoveSequence(uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& seq = it->second;
  free_slots_.push_back(seq.slot.state_slot);
  free_blocks_.insert(free_blocks_.end(), seq.slot.blocks.begin(), seq.slot.blocks.end());
  reserved_bytes_.fetch_sub(seq.reserved);
  sequences_.erase(it);
}

absl::Status CudaEngine::SampleOne(Sequence& seq, const float* logits, int32_t* token) {
  absl::StatusOr<Bucket*> bucket = BucketFor(1);
  if (!bucket.ok()) return bucket.status();
  Bucket* b = *bucket;
  const float temperature = seq.sampling.temperature;
  const int32_t top_k = seq.sampling.top_k;
  const float top_p = seq.sampling.top_p;
  const uint64_t seed = seq.sampling.seed;
  const int64_t step = seq.steps;
  TANDEM_CUDA_RETURN(
      cudaMemcpyAsync(b->temperature, &temperature, 4, cudaMemcpyHostToDevice, stream_),
      "sampling params");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->top_k, &top_k, 4, cudaMemcpyHostToDevice, stream_),
                     "sampling params");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->top_p, &top_p, 4, cudaMemcpyHostToDevice, stream_),
                     "sampling params");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->seeds, &seed, 8, cudaMemcpyHostToDevice, stream_),
                     "sampling params");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->steps, &step, 8, cudaMemcpyHostToDevice, stream_),
                     "sampling params");
  TANDEM_CUDA_RETURN(Sample(logits, 1, model_->shape().vocab_size, b->temperature, b->top_k,
                            b->top_p, b->seeds, b->steps, b->sampled, stream_),
                     "Sample");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(host_sampled_, b->sampled, 4, cudaMemcpyDeviceToHost, stream_),
                     "sampled token");
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream_), "prefill step");
  *token = host_sampled_[0];
  return absl::OkStatus();
}

absl::Status CudaEngine::StageDecodeInputs(const std::vector<Sequence*>& seqs, Bucket* b) {
  const int64_t n = static_cast<int64_t>(seqs.size());
  const int64_t size = b->size;
  // Inputs for every row of the bucket, staged in pinned memory allocated once (no per-step
  // host allocation); padding rows use scratch slot 0 and block 0.
  int32_t* host_tokens = host_ints_;
  int32_t* host_positions = host_ints_ + kMaxBatch;
  int32_t* host_slots = host_ints_ + 2 * kMaxBatch;
  int32_t* host_top_k = host_ints_ + 3 * kMaxBatch;
  int32_t* host_rope_positions = host_ints_ + 5 * kMaxBatch;
  char* extra = reinterpret_cast<char*>(host_ints_ + 6 * kMaxBatch);
  float* temperature = reinterpret_cast<float*>(extra);
  float* top_p = temperature + kMaxBatch;
  uint64_t* seeds = reinterpret_cast<uint64_t*>(top_p + kMaxBatch);
  int64_t* steps = reinterpret_cast<int64_t*>(seeds + kMaxBatch);
  for (int64_t i = 0; i < size; ++i) {
    const bool real = i < n;
    host_tokens[i] = real ? seqs[i]->last_token : 0;
    host_positions[i] = real ? static_cast<int32_t>(seqs[i]->position) : 0;
    host_rope_positions[i] =
        real ? static_cast<int32_t>(seqs[i]->position + seqs[i]->rope_delta) : 0;
    host_slots[i] = real ? seqs[i]->slot.state_slot : 0;
    host_top_k[i] = real ? seqs[i]->sampling.top_k : 1;
    temperature[i] = real ? seqs[i]->sampling.temperature : 0.0f;
    top_p[i] = real ? seqs[i]->sampling.top_p : 1.0f;
    seeds[i] = real ? seqs[i]->sampling.seed : 0;
    steps[i] = real ? seqs[i]->steps : 0;
    // The bucket's block-table row: the sequence's table (slot 0's is all zeros).
    TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->block_tables + i * max_blocks_per_sequence_,
                                       block_tables_ + host_slots[i] * max_blocks_per_sequence_,
                                       static_cast<size_t>(max_blocks_per_sequence_) * 4,
                                       cudaMemcpyDeviceToDevice, stream_),
                       "block tables");
  }
  const size_t ints = static_cast<size_t>(size) * 4;
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->tokens, host_tokens, ints, cudaMemcpyHostToDevice, stream_),
                     "tokens");
  TANDEM_CUDA_RETURN(
      cudaMemcpyAsync(b->positions, host_positions, ints, cudaMemcpyHostToDevice, stream_),
      "positions");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->rope_positions, host_rope_positions, ints,
                                     cudaMemcpyHostToDevice, stream_),
                     "rotary positions");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->slots, host_slots, ints, cudaMemcpyHostToDevice, stream_),
                     "slots");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->top_k, host_top_k, ints, cudaMemcpyHostToDevice, stream_),
                     "top_k");
  TANDEM_CUDA_RETURN(
      cudaMemcpyAsync(b->temperature, temperature, ints, cudaMemcpyHostToDevice, stream_),
      "temperature");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->top_p, top_p, ints, cudaMemcpyHostToDevice, stream_),
                     "top_p");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->seeds, seeds, ints * 2, cudaMemcpyHostToDevice, stream_),
                     "seeds");
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(b->steps, steps, ints * 2, cudaMemcpyHostToDevice, stream_),
                     "steps");
  return absl::OkStatus();
}

absl::Status CudaEngine::LaunchDecode(Bucket* b) {
  const int64_t size = b->size;
  DecodeBatch batch;
  batch.batch = size;
  batch.tokens = b->tokens;
  batch.positions = b->positions;
  batch.rope_positions = b->rope_positions;
  batch.state_slots = b->slots;
  batch.block_tables = b->block_tables;
  batch.max_blocks = max_blocks_per_sequence_;
  batch.logits = b->logits;
  auto launch = [&]() -> absl::Status {
    if (absl::Status s = model_->Decode(batch, stream_); !s.ok()) return s;
    return CudaStatus(Sample(b->logits, size, model_->shape().vocab_size, b->temperature, b->top_k,
                             b->top_p, b->seeds, b->steps, b->sampled, stream_),
                      "Sample");
  };
  if (options_.cuda_graphs) {
    if (b->graph == nullptr) {
      // Captured once per bucket: every replay reads the same device arrays.
      cudaGraph_t graph = nullptr;
      TANDEM_CUDA_RETURN(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                         "graph capture");
      absl::Status s = launch();
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      if (!s.ok()) return s;
      TANDEM_CUDA_RETURN(end, "graph capture");
      TANDEM_CUDA_RETURN(cudaGraphInstantiate(&b->graph, graph, 0), "graph instantiate");
      cudaGraphDestroy(graph);
    }
    TANDEM_CUDA_RETURN(cudaGraphLaunch(b->graph, stream_), "graph launch");
  } else if (absl::Status s = launch(); !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::RunDecode(const std::vector<Sequence*>& seqs,
                                   std::vector<int32_t>* tokens) {
  const int64_t n = static_cast<int64_t>(seqs.size());
  absl::StatusOr<Bucket*> bucket = BucketFor(n);
  if (!bucket.ok()) return bucket.status();
  Bucket* b = *bucket;
  RETURN_IF_ERROR(StageDecodeInputs(seqs, b));
  RETURN_IF_ERROR(LaunchDecode(b));
  TANDEM_CUDA_RETURN(cudaMemcpyAsync(host_sampled_, b->sampled, static_cast<size_t>(n) * 4,
                                     cudaMemcpyDeviceToHost, stream_),
                     "sampled tokens");
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream_), "decode step");
  tokens->assign(host_sampled_, host_sampled_ + n);
  return absl::OkStatus();
}

absl::Status CudaEngine::Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) {
  std::vector<Sequence*> decode;
  std::vector<size_t> decode_index;
  std::vector<StepOutput> results(ids.size());
  absl::StatusOr<Bucket*> prefill_bucket = BucketFor(1);
  if (!prefill_bucket.ok()) return prefill_bucket.status();
  Bucket* prefill_logits = *prefill_bucket;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = sequences_.find(ids[i]);
    if (it == sequences_.end()) {
      return absl::InternalError(absl::StrCat("step for unknown sequence ", ids[i]));
    }
    Sequence& seq = it->second;
    results[i].id = ids[i];
    if (seq.last_token >= 0) {
      decode.push_back(&seq);
      decode_index.push_back(i);
      continue;
    }
    // New sequence: its whole prompt, then its first token.
    if (!seq.images.empty()) {
      RETURN_IF_ERROR(PrefillImages(seq, prefill_logits->logits));
    } else if (absl::Status s =
                   model_->Prefill(seq.prompt.data(), static_cast<int64_t>(seq.prompt.size()), 0,
                                   seq.slot, prefill_logits->logits, stream_);
               !s.ok()) {
      return s;
    }
    seq.position = static_cast<int64_t>(seq.prompt.size());
    seq.prompt.clear();
    int32_t token = 0;
    if (absl::Status s = SampleOne(seq, prefill_logits->logits, &token); !s.ok()) return s;
    token = seq.thinking.Next(token);
    seq.last_token = token;
    ++seq.steps;
    results[i].token = token;
  }
  for (size_t start = 0; start < decode.size(); start += kMaxBatch) {
    const size_t end = std::min(decode.size(), start + static_cast<size_t>(kMaxBatch));
    std::vector<Sequence*> chunk(decode.begin() + static_cast<ptrdiff_t>(start),
                                 decode.begin() + static_cast<ptrdiff_t>(end));
    std::vector<int32_t> tokens;
    if (absl::Status s = RunDecode(chunk, &tokens); !s.ok()) return s;
    for (size_t j = 0; j < chunk.size(); ++j) {
      tokens[j] = chunk[j]->thinking.Next(tokens[j]);
      chunk[j]->position += 1;
      chunk[j]->last_token = tokens[j];
      ++chunk[j]->steps;
      results[decode_index[start + j]].token = tokens[j];
    }
  }
  // A launch whose error was dropped on the way still fails the step, naming its kernel.
  if (absl::Status s = TakeLaunchFailureStatus(); !s.ok()) return s;
  for (StepOutput& r : results) {
    r.end_of_sequence = std::find(stop_ids_.begin(), stop_ids_.end(), r.token) != stop_ids_.end();
    out->push_back(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaEngine>> LoadCudaEngine(const WeightsSource& source,
                                                           CudaEngineOptions options,
                                                           bool* random_weights) {
  TANDEM_CUDA_RETURN(cudaSetDevice(options.device),
                     absl::StrCat("cudaSetDevice(", options.device, ")"));
  auto weights = OpenWeights(source);
  if (!weights.ok()) return weights.status();
  const model::Checkpoint& checkpoint = *weights->checkpoint;
  const model::ModelConfig& config = weights->config;
  // Generated weights are filled on the device here, never staged in host memory.
  auto model = LoadCudaModel(checkpoint, config);
  if (!model.ok()) return model.status();
  auto tokenizer =
      CheckNameAndLoadTokenizer(*weights, options.model_name, &options.model_id, random_weights);
  if (!tokenizer.ok()) return tokenizer.status();
  // The vision encoder when the config has one and the checkpoint its weights (model.visual.*).
  CudaEngineVision vision;
  ASSIGN_OR_RETURN(
      const bool with_vision,
      VisionEncoderUsable(checkpoint, config, HasVisionEncoder(checkpoint), *tokenizer->tokenizer));
  if (with_vision) {
    ASSIGN_OR_RETURN(vision.encoder, CudaVisionEncoder::Load(checkpoint, *config.vision));
    vision.preprocessor = weights->preprocessor;
  }
  return CudaEngine::Create(std::move(*model), std::move(tokenizer->tokenizer),
                            std::move(tokenizer->stop_ids), std::move(options), std::move(vision));
}

}  // namespace tandem::workers::cuda
