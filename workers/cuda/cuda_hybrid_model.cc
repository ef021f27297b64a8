#include "workers/cuda/cuda_hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/cuda/kernels_model.h"
#include "workers/model/architecture.h"

namespace tandem::workers::cuda {

CudaHybridModel::CudaHybridModel(model::ModelShape shape, HybridLayout layout)
    : shape_(std::move(shape)),
      layout_(layout),
      conv_floats_(AlignFloats(layout.conv_channels * (layout.conv_kernel - 1))),
      layer_floats_(conv_floats_ + AlignFloats(layout.state_floats)),
      slot_floats_(layout.recurrent_layers * layer_floats_),
      kv_layer_block_floats_(2 * kKvBlockTokens * layout.kv_heads * layout.head_dim) {}

absl::Status CudaHybridModel::Init(const model::Checkpoint& checkpoint) {
  RETURN_IF_ERROR(LoadWeights(checkpoint));
  RETURN_IF_ERROR(weights_.Upload());
  RETURN_IF_ERROR(cublas_.Init());
  return AllocateScratch();
}

absl::Status CudaHybridModel::LoadEmbeddingAndHead(const model::Checkpoint& checkpoint,
                                                   const std::string& embedding,
                                                   const std::string& final_norm) {
  const int64_t vocab = shape_.vocab_size, hidden = shape_.hidden_size;
  ASSIGN_OR_RETURN(embed_, weights_.LoadBf16(checkpoint, embedding, {vocab, hidden}));
  if (layout_.tied_embeddings) {
    lm_head_ = embed_;
  } else {
    ASSIGN_OR_RETURN(lm_head_, weights_.LoadBf16(checkpoint, "lm_head.weight", {vocab, hidden}));
  }
  ASSIGN_OR_RETURN(final_norm_, weights_.LoadBf16(checkpoint, final_norm, {hidden}));
  return absl::OkStatus();
}

absl::Status CudaHybridModel::AllocateScratch() {
  const int64_t R = kMaxRows, H = shape_.hidden_size;
  const int64_t max_in = std::max(H, layout_.max_linear_input);
  const int64_t pointer_rows = std::max<int64_t>(layout_.recurrent_layers, 1) * kMaxDecodeBatch;
  scratch_.Allocate(&h_, R * H, "hidden states");
  scratch_.Allocate(&x_, R * H, "normed hidden states");
  scratch_.Allocate(&y_, R * H, "mixer output");
  scratch_.Allocate(&xb_, R * max_in, "bf16 linear inputs");
  scratch_.Allocate(&tokens_, R, "prefill tokens");
  scratch_.Allocate(&positions_, R, "prefill positions");
  scratch_.Allocate(&mrope_positions_, 3 * R, "prefill mRoPE positions");
  scratch_.Allocate(&embedding_rows_, R, "prefill embedding overrides");
  scratch_.Allocate(&conv_ptrs_, pointer_rows, "decode conv pointers");
  scratch_.Allocate(&ssm_ptrs_, pointer_rows, "decode state pointers");
  scratch_.Allocate(&context_lens_, kMaxDecodeBatch, "decode context lengths");
  if (layout_.attention_layers > 0) {
    const int64_t floats = AttentionDecodeWorkspaceFloats(kMaxDecodeBatch, layout_.attention_heads,
                                                          layout_.kv_heads, layout_.head_dim);
    if (floats > 0) scratch_.Allocate(&attention_workspace_, floats, "split decode attention");
  }
  AllocateLayerScratch(scratch_);
  return scratch_.status();
}

std::string CudaHybridModel::Name() const {
  return std::string(model::ArchitectureName(shape_.architecture));
}

absl::Status CudaHybridModel::BindMemory(void* state_slots, int64_t slots, void* kv_blocks,
                                         int64_t blocks) {
  if (slots < 0 || blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(Name(), " BindMemory: negative pool size"));
  }
  if ((slot_floats_ > 0 && slots > 0 && state_slots == nullptr) ||
      (kv_block_bytes() > 0 && blocks > 0 && kv_blocks == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(Name(), " BindMemory: null pool"));
  }
  state_base_ = static_cast<float*>(state_slots);
  slots_ = slots;
  kv_base_ = static_cast<float*>(kv_blocks);
  kv_blocks_ = blocks;
  bound_ = true;
  return absl::OkStatus();
}

absl::Status CudaHybridModel::ResetSlot(int32_t slot, cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError(absl::StrCat(Name(), ": BindMemory first"));
  if (slot < 0 || slot >= slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(), " ResetSlot: slot ", slot, " outside [0, ", slots_, ")"));
  }
  if (slot_floats_ == 0) return absl::OkStatus();
  TANDEM_CUDA_RETURN(cudaMemsetAsync(state_base_ + slot * slot_floats_, 0,
                                     static_cast<size_t>(slot_floats_ * 4), stream));
  return absl::OkStatus();
}

absl::Status CudaHybridModel::CheckPrefill(const PrefillInputs& in, const SequenceSlot& seq,
                                           const float* logits) const {
  const int32_t* tokens = in.tokens;
  const int64_t count = in.count, start = in.start;
  if (!bound_) return absl::FailedPreconditionError(absl::StrCat(Name(), ": BindMemory first"));
  if (tokens == nullptr || count <= 0 || logits == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(), " Prefill: no tokens or no logits buffer"));
  }
  if (start < 0 || start + count > shape_.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(), " Prefill: positions ", start, "..", start + count - 1,
                     " outside max_position_embeddings ", shape_.max_positions));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= shape_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(Name(), " Prefill: token ", i, " has id ",
                                                     tokens[i], ", outside [0, ", shape_.vocab_size,
                                                     ")"));
    }
  }
  if ((in.mrope_positions != nullptr || in.embedding_rows != nullptr) && !layout_.image_inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(), " Prefill: this model takes no image inputs"));
  }
  if (in.embedding_rows != nullptr) {
    if (in.embeddings == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(Name(), " Prefill: embedding overrides without embeddings"));
    }
    for (int64_t i = 0; i < count; ++i) {
      if (in.embedding_rows[i] < -1 || in.embedding_rows[i] >= in.embedding_count) {
        return absl::InvalidArgumentError(
            absl::StrCat(Name(), " Prefill: token ", i, " takes embedding row ",
                         in.embedding_rows[i], " of ", in.embedding_count));
      }
    }
  }
  if (layout_.recurrent_layers > 0 && (seq.state_slot < 0 || seq.state_slot >= slots_)) {
    return absl::InvalidArgumentError(absl::StrCat(Name(), " Prefill: state slot ", seq.state_slot,
                                                   " outside [0, ", slots_, ")"));
  }
  if (layout_.attention_layers > 0 &&
      (seq.block_table == nullptr ||
       static_cast<int64_t>(seq.blocks.size()) * kKvBlockTokens < start + count)) {
    return absl::InvalidArgumentError(absl::StrCat(Name(), " Prefill: ", seq.blocks.size(),
                                                   " KV blocks do not cover ", start + count,
                                                   " tokens"));
  }
  return absl::OkStatus();
}

absl::Status CudaHybridModel::Prefill(const PrefillInputs& in, const SequenceSlot& seq,
                                      float* logits, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckPrefill(in, seq, logits));
  const int32_t* tokens = in.tokens;
  const int64_t count = in.count, start = in.start;
  RETURN_IF_ERROR(cublas_.Bind(stream));
  float* slot =
      layout_.recurrent_layers > 0 ? state_base_ + seq.state_slot * slot_floats_ : nullptr;
  int64_t last_rows = 0;
  for (int64_t c0 = 0; c0 < count; c0 += kMaxPrefillChunk) {
    const int64_t n = std::min(kMaxPrefillChunk, count - c0);
    // Stream-ordered after the previous chunk's reads of tokens_.
    TANDEM_CUDA_RETURN(cudaMemcpyAsync(tokens_, tokens + c0, static_cast<size_t>(n * 4),
                                       cudaMemcpyHostToDevice, stream));
    TANDEM_CUDA_RETURN(FillPositions(positions_, n, start + c0, stream));
    Pass p;
    p.n = n;
    p.positions = positions_;
    p.rope_positions = positions_;
    if (in.mrope_positions != nullptr) {
      for (int64_t axis = 0; axis < 3; ++axis) {
        TANDEM_CUDA_RETURN(cudaMemcpyAsync(
            mrope_positions_ + axis * kMaxRows, in.mrope_positions + axis * count + c0,
            static_cast<size_t>(n * 4), cudaMemcpyHostToDevice, stream));
      }
      p.mrope_positions = mrope_positions_;
      p.mrope_stride = kMaxRows;
    }
    if (in.embedding_rows != nullptr) {
      TANDEM_CUDA_RETURN(cudaMemcpyAsync(embedding_rows_, in.embedding_rows + c0,
                                         static_cast<size_t>(n * 4), cudaMemcpyHostToDevice,
                                         stream));
      p.embedding_rows = embedding_rows_;
      p.embeddings = in.embeddings;
    }
    p.start = start + c0;
    p.block_table = seq.block_table;
    p.slot = slot;
    RETURN_IF_ERROR(Forward(tokens_, p, stream));
    last_rows = n;
  }
  RETURN_IF_ERROR(Logits(last_rows - 1, 1, logits, stream));
  // The host arrays must outlive the copies; also surfaces asynchronous errors here.
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status CudaHybridModel::CheckDecode(const DecodeBatch& batch) const {
  if (!bound_) return absl::FailedPreconditionError(absl::StrCat(Name(), ": BindMemory first"));
  if (batch.batch <= 0 || batch.batch > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(absl::StrCat(Name(), " Decode: batch ", batch.batch,
                                                   " outside [1, ", kMaxDecodeBatch, "]"));
  }
  if (batch.tokens == nullptr || batch.positions == nullptr || batch.logits == nullptr ||
      (layout_.recurrent_layers > 0 && batch.state_slots == nullptr) ||
      (layout_.attention_layers > 0 && (batch.block_tables == nullptr || batch.max_blocks <= 0))) {
    return absl::InvalidArgumentError(absl::StrCat(Name(), " Decode: missing batch arrays"));
  }
  return absl::OkStatus();
}

absl::Status CudaHybridModel::Decode(const DecodeBatch& batch, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckDecode(batch));
  RETURN_IF_ERROR(cublas_.Bind(stream));
  TANDEM_CUDA_RETURN(BuildDecodeIndex(batch.state_slots, batch.positions, batch.batch, state_base_,
                                      slot_floats_, layer_floats_, conv_floats_,
                                      layout_.recurrent_layers, kMaxDecodeBatch, conv_ptrs_,
                                      ssm_ptrs_, context_lens_, stream));
  Pass p;
  p.n = batch.batch;
  p.positions = batch.positions;
  p.rope_positions = batch.rope_positions != nullptr ? batch.rope_positions : batch.positions;
  p.decode = true;
  p.block_tables = batch.block_tables;
  p.max_blocks = batch.max_blocks;
  RETURN_IF_ERROR(Forward(batch.tokens, p, stream));
  return Logits(0, batch.batch, batch.logits, stream);
}

absl::Status CudaHybridModel::Forward(const int32_t* tokens, const Pass& p, cudaStream_t s) {
  TANDEM_CUDA_RETURN(EmbeddingGather(B(embed_), tokens, p.n, shape_.hidden_size, h_, s));
  if (p.embedding_rows != nullptr) {
    TANDEM_CUDA_RETURN(
        OverrideRows(h_, p.n, shape_.hidden_size, p.embedding_rows, p.embeddings, s));
  }
  return ForwardLayers(p, s);
}

absl::Status CudaHybridModel::Logits(int64_t first, int64_t rows, float* logits, cudaStream_t s) {
  const int64_t H = shape_.hidden_size;
  TANDEM_CUDA_RETURN(RmsNorm(h_ + first * H, rows, H, B(final_norm_), layout_.norm_eps,
                             layout_.norm_one_plus_weight, x_, s));
  return Linear(cublas(), x_, rows, H, B(lm_head_), shape_.vocab_size, logits, xb_, s);
}

absl::Status CudaHybridModel::CausalConv(const Pass& p, int64_t index, const float* in,
                                         const bf16* weight, const bf16* bias, float* out,
                                         cudaStream_t s) const {
  const int64_t C = layout_.conv_channels, K = layout_.conv_kernel;
  if (p.decode) {
    TANDEM_CUDA_RETURN(CausalConv1dStep(
        in, p.n, C, K, weight, bias, conv_ptrs_ + index * kMaxDecodeBatch, /*silu=*/true, out, s));
  } else {
    TANDEM_CUDA_RETURN(CausalConv1d(in, p.n, C, K, weight, bias, p.slot + index * layer_floats_,
                                    /*silu=*/true, out, s));
  }
  return absl::OkStatus();
}

float* CudaHybridModel::PrefillState(const Pass& p, int64_t index) const {
  return p.slot + index * layer_floats_ + conv_floats_;
}

float* const* CudaHybridModel::DecodeStates(int64_t index) const {
  return ssm_ptrs_ + index * kMaxDecodeBatch;
}

absl::Status CudaHybridModel::CachedAttention(const Pass& p, int64_t index, const float* q,
                                              const float* k, const float* v, int64_t heads,
                                              float* o, cudaStream_t s) const {
  const int64_t n = p.n, nkv = layout_.kv_heads, D = layout_.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* kv = kv_base_ + index * kv_blocks_ * kv_layer_block_floats_;
  if (p.decode) {
    TANDEM_CUDA_RETURN(
        KvCacheWriteBatch(k, v, n, p.positions, nkv, D, p.block_tables, p.max_blocks, kv, s));
    TANDEM_CUDA_RETURN(AttentionDecode(q, n, heads, nkv, D, scale, context_lens_, p.block_tables,
                                       p.max_blocks, kv, o, attention_workspace_, s));
  } else {
    TANDEM_CUDA_RETURN(KvCacheWrite(k, v, n, p.start, nkv, D, p.block_table, kv, s));
    TANDEM_CUDA_RETURN(
        AttentionPrefill(q, n, p.start, heads, nkv, D, scale, p.block_table, kv, o, s));
  }
  return absl::OkStatus();
}

}  // namespace tandem::workers::cuda
