#pragma once

// The skeleton both CUDA models share (cuda_qwen35_model.cc, cuda_nemotron_h_model.cc): the
// weight arena and cuBLAS, the recurrent-state slots and KV blocks the engine binds, the
// residual stream and its scratch, the embedding, the final norm and lm_head, and Prefill (in
// chunks) and Decode (graph-capturable) around a model's own layers. Host code.
//
// Memory layouts (all fp32):
//  - State slot (one sequence, bytes = state_slot_bytes()): for each recurrent layer i (Gated
//    DeltaNet or Mamba-2), in layer order, at i * layer_floats: the conv window
//    [conv_channels][K-1] (padded to 64 floats), then the layer's recurrent state (padded to 64
//    floats).
//  - KV pool (bytes = blocks * kv_block_bytes()): layer-major. Attention layer j owns the
//    contiguous region j * blocks * B .. (j + 1) * blocks * B floats, B = 2 * kKvBlockTokens *
//    kv_heads * head_dim, laid out [block][2][kKvBlockTokens][kv_heads][head_dim] as kernels.h
//    describes. So block b of a sequence is b's sub-block in every layer's region (a block's
//    bytes are not contiguous in the pool; the engine treats blocks as ids only).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/gemm.h"
#include "workers/cuda/model_common.h"
#include "workers/cuda/scratch_buffers.h"
#include "workers/model/model_shape.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cuda {

// What the skeleton needs to know about a model's layers.
struct HybridLayout {
  // Recurrent layers: a causal conv window over conv_channels (conv_kernel taps) and a
  // recurrent state of state_floats, per layer per sequence.
  int64_t recurrent_layers = 0;
  int64_t conv_channels = 0;
  int64_t conv_kernel = 0;
  int64_t state_floats = 0;
  // Attention layers: paged K and V of kv_heads x head_dim per token.
  int64_t attention_layers = 0;
  int64_t attention_heads = 0;  // query heads
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // The final RMSNorm: its eps, and whether it scales by (1 + w) (Qwen) or by w.
  float norm_eps = 0;
  bool norm_one_plus_weight = false;
  // lm_head is the embedding.
  bool tied_embeddings = false;
  // Takes PrefillInputs' image inputs (mRoPE positions and embedding overrides): Qwen3.5.
  bool image_inputs = false;
  // The widest input of any linear layer: the BF16 cast scratch holds kMaxRows rows of it.
  int64_t max_linear_input = 0;
};

// Whole checkpoint tensors loaded into DeviceWeights (the models' LoadLayer shorthand): each
// checked against `shape`, added as one piece; the piece's id.
struct PieceLoader {
  const model::Checkpoint& checkpoint;
  DeviceWeights& weights;

  absl::StatusOr<int> Bf16(const std::string& name, std::vector<int64_t> shape) const {
    return weights.LoadBf16(checkpoint, name, std::move(shape));
  }
  absl::StatusOr<int> F32(const std::string& name, std::vector<int64_t> shape) const {
    return weights.LoadF32(checkpoint, name, std::move(shape));
  }
};

class CudaHybridModel : public CudaModel {
 public:
  // Loads the weights, uploads them and allocates the scratch. Call once, after construction.
  absl::Status Init(const model::Checkpoint& checkpoint);

  const model::ModelShape& shape() const final { return shape_; }
  int64_t state_slot_bytes() const final { return slot_floats_ * 4; }
  int64_t kv_block_bytes() const final {
    return layout_.attention_layers * kv_layer_block_floats_ * 4;
  }
  int64_t weight_bytes() const final { return weights_.bytes(); }
  absl::Status BindMemory(void* state_slots, int64_t slots, void* kv_blocks, int64_t blocks) final;
  absl::Status ResetSlot(int32_t slot, cudaStream_t stream) final;
  using CudaModel::Prefill;
  absl::Status Prefill(const PrefillInputs& in, const SequenceSlot& seq, float* logits,
                       cudaStream_t stream) final;
  absl::Status Decode(const DecodeBatch& batch, cudaStream_t stream) final;

 protected:
  // One forward pass: n tokens, either consecutive tokens of one sequence (prefill) or one token
  // of each of n sequences (decode).
  struct Pass {
    int64_t n = 0;
    const int32_t* positions = nullptr;  // device [n]: sequence indices (KV cache, decode)
    // Device [n]: the 1-D rotary positions (positions, plus rope_delta in decode).
    const int32_t* rope_positions = nullptr;
    // Prefill of an image prompt: device [3][mrope_stride] t, h, w rotary positions (replacing
    // rope_positions), and device [n] embedding overrides into `embeddings` (-1: none).
    const int32_t* mrope_positions = nullptr;
    int64_t mrope_stride = 0;
    const int32_t* embedding_rows = nullptr;
    const float* embeddings = nullptr;
    bool decode = false;
    // Prefill: the first token's position, the sequence's block table and state slot.
    int64_t start = 0;
    const int32_t* block_table = nullptr;
    float* slot = nullptr;
    // Decode: [n][max_blocks] block tables.
    const int32_t* block_tables = nullptr;
    int64_t max_blocks = 0;
  };

  CudaHybridModel(model::ModelShape shape, HybridLayout layout);

  // The model's own parts. LoadWeights adds every tensor to weights() (the embedding and head
  // through LoadEmbeddingAndHead); AllocateLayerScratch adds the layers' buffers to `scratch`;
  // ForwardLayers runs every layer over the pass's rows of h() (the embedded tokens), in place.
  virtual absl::Status LoadWeights(const model::Checkpoint& checkpoint) = 0;
  virtual void AllocateLayerScratch(ScratchBuffers& scratch) = 0;
  virtual absl::Status ForwardLayers(const Pass& p, cudaStream_t s) = 0;

  absl::Status LoadEmbeddingAndHead(const model::Checkpoint& checkpoint,
                                    const std::string& embedding, const std::string& final_norm);
  DeviceWeights& weights() { return weights_; }
  const bf16* B(int id) const { return weights_.bf16_ptr(id); }
  const float* F(int id) const { return weights_.f32_ptr(id); }
  cublasHandle_t cublas() const { return cublas_.handle(); }

  // The residual stream h, the normed input x of the current mixer, its output y (kMaxRows x
  // hidden each), and the BF16 cast of a linear layer's input (kMaxRows x max_linear_input).
  float* h() const { return h_; }
  float* x() const { return x_; }
  float* y() const { return y_; }
  bf16* xb() const { return xb_; }

  // Causal depthwise conv + silu of in [n][conv_channels] into out, through recurrent layer
  // `index`'s conv window (the prefill's slot, or each decode sequence's).
  absl::Status CausalConv(const Pass& p, int64_t index, const float* in, const bf16* weight,
                          const bf16* bias, float* out, cudaStream_t s) const;
  // Recurrent layer `index`'s state after its conv window: in the prefill's slot, or (decode)
  // kMaxDecodeBatch pointers into each sequence's.
  float* PrefillState(const Pass& p, int64_t index) const;
  float* const* DecodeStates(int64_t index) const;
  // Writes k and v [n][kv_heads][head_dim] into attention layer `index`'s KV cache, then
  // attends q [n][heads][head_dim] over the cached tokens into o (scale 1/sqrt(head_dim)).
  absl::Status CachedAttention(const Pass& p, int64_t index, const float* q, const float* k,
                               const float* v, int64_t heads, float* o, cudaStream_t s) const;

 private:
  absl::Status AllocateScratch();
  absl::Status CheckPrefill(const PrefillInputs& in, const SequenceSlot& seq,
                            const float* logits) const;
  absl::Status CheckDecode(const DecodeBatch& batch) const;
  // Embedding (and the pass's overrides), then every layer; leaves the residual stream in h_.
  absl::Status Forward(const int32_t* tokens, const Pass& p, cudaStream_t s);
  // Final norm and lm_head of h_ rows [first, first + rows) into logits [rows][vocab].
  absl::Status Logits(int64_t first, int64_t rows, float* logits, cudaStream_t s);
  // Error messages start with the architecture's name.
  std::string Name() const;

  const model::ModelShape shape_;
  const HybridLayout layout_;
  int embed_ = -1, lm_head_ = -1, final_norm_ = -1;
  DeviceWeights weights_;
  CublasContext cublas_;

  // Pool geometry (floats).
  const int64_t conv_floats_;   // one recurrent layer's conv window, padded
  const int64_t layer_floats_;  // one recurrent layer's conv window + state, padded
  const int64_t slot_floats_;
  const int64_t kv_layer_block_floats_;
  // Bound pools.
  bool bound_ = false;
  float* state_base_ = nullptr;
  int64_t slots_ = 0;
  float* kv_base_ = nullptr;
  int64_t kv_blocks_ = 0;

  // Scratch, kMaxRows rows each (see AllocateScratch).
  ScratchBuffers scratch_;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr;
  bf16* xb_ = nullptr;
  int32_t *tokens_ = nullptr, *positions_ = nullptr;
  // A prefill chunk's [3][kMaxRows] mRoPE positions and [kMaxRows] embedding overrides.
  int32_t *mrope_positions_ = nullptr, *embedding_rows_ = nullptr;
  // Decode indexing: [recurrent_layers][kMaxDecodeBatch] state pointers and [kMaxDecodeBatch]
  // context lengths.
  float** conv_ptrs_ = nullptr;
  float** ssm_ptrs_ = nullptr;
  int32_t* context_lens_ = nullptr;
  float* attention_workspace_ = nullptr;  // split decode attention (AttentionDecode)
};

// The skeleton with a model's configuration (Config: the model's parsed config.json), kept as c_:
// a model derives from it and inherits its constructor.
template <typename Config>
class ConfiguredHybridModel : public CudaHybridModel {
 public:
  ConfiguredHybridModel(Config config, model::ModelShape shape)
      : CudaHybridModel(std::move(shape), LayoutOf(config)), c_(std::move(config)) {}

 protected:
  // What the skeleton needs to know about the layers `c` describes. Each model's .cc defines it
  // for its Config (an explicit specialization, before the model's class).
  static HybridLayout LayoutOf(const Config& c);

  const Config c_;
};

// A Model (a ConfiguredHybridModel) of `config` and `shape`, its weights loaded from `checkpoint`.
template <typename Model, typename Config>
absl::StatusOr<std::unique_ptr<CudaModel>> LoadHybridModel(const model::Checkpoint& checkpoint,
                                                           const Config& config,
                                                           const model::ModelShape& shape) {
  auto model = std::make_unique<Model>(config, shape);
  if (absl::Status status = model->Init(checkpoint); !status.ok()) return status;
  return std::unique_ptr<CudaModel>(std::move(model));
}

}  // namespace tandem::workers::cuda
