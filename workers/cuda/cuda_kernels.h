#pragma once

// Launchers of the CUDA engine's kernels. Plain C++ declarations (no CUDA syntax), so the model
// code that sequences them compiles with the host compiler; the kernels live in kernels_*.cu.
// Conventions: row-major; activations fp32; weights BF16 (stored as uint16_t bit patterns:
// bfloat16 is the top half of an fp32); fp32 accumulation; recurrent state fp32. Every launcher
// enqueues on `stream`, never synchronizes or allocates, and returns the launch error; a failed
// launch is also recorded with its kernel name and shape (launch_check.h), which CudaStatus puts
// in the Status. They are safe inside CUDA graph capture.

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::workers::cuda {

using bf16 = uint16_t;

// ---- Basic (kernels_basic.cu) ----

// out[i][:] = table[ids[i]][:] (BF16 -> fp32), n rows of `dim`.
cudaError_t EmbeddingGather(const bf16* table, const int32_t* ids, int64_t n, int64_t dim,
                            float* out, cudaStream_t stream);
// fp32 -> BF16 (round to nearest even), `count` elements.
cudaError_t CastToBf16(const float* in, int64_t count, bf16* out, cudaStream_t stream);
// RMSNorm over rows: out = x * rsqrt(mean(x^2) + eps) * (one_plus_weight ? 1 + w : w).
// `weight` may be null (no scale). In place when out == x.
cudaError_t RmsNorm(const float* x, int64_t rows, int64_t dim, const bf16* weight, float eps,
                    bool one_plus_weight, float* out, cudaStream_t stream);
// Gated RMSNorm (Qwen3.5 GDN): out = rmsnorm(x) * w * silu(z) per row of `dim`.
cudaError_t GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                         const bf16* weight, float eps, float* out, cudaStream_t stream);
// Grouped gated RMSNorm (Nemotron-H Mamba): y = x * silu(z), then RMSNorm over each group of
// `dim / groups` within a row, times w.
cudaError_t GroupedGatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                                int64_t groups, const bf16* weight, float eps, float* out,
                                cudaStream_t stream);
// NeoX-style (rotate_half) RoPE on the first `rotary_dim` dims of every head, in place.
// x: [tokens][heads][head_dim]; positions[tokens]; inv_freq computed from theta.
cudaError_t RotaryEmbedding(float* x, const int32_t* positions, int64_t tokens, int64_t heads,
                            int64_t head_dim, int64_t rotary_dim, float theta, cudaStream_t stream);
// The same with Qwen3.5's multimodal (interleaved mRoPE) positions: `positions` holds three rows
// of axis_stride ints, t, h and w (token i at index i of each); frequency slot i (< rotary_dim /
// 2) reads the h row when i % 3 == 1 and i < 3 * section_h, the w row when i % 3 == 2 and
// i < 3 * section_w, else the t row. Where the three rows are equal it gives RotaryEmbedding's
// bits exactly.
cudaError_t MropeRotaryEmbedding(float* x, const int32_t* positions, int64_t axis_stride,
                                 int64_t tokens, int64_t heads, int64_t head_dim,
                                 int64_t rotary_dim, float theta, int32_t section_h,
                                 int32_t section_w, cudaStream_t stream);
// out[i] = a[i] + b[i] (residual), `count` elements; in place allowed.
cudaError_t Add(const float* a, const float* b, int64_t count, float* out, cudaStream_t stream);
// out[r][c] = silu(in[r][c]) * in[r][c + cols] (SwiGLU on a fused [gate | up] row of 2*cols).
cudaError_t SiluGate(const float* in, int64_t rows, int64_t cols, float* out, cudaStream_t stream);
// out = relu(x)^2, in place allowed.
cudaError_t Relu2(const float* in, int64_t count, float* out, cudaStream_t stream);

// Causal depthwise conv1d over time with a carried window (kernel K, `channels` channels):
// x [tokens][channels] for ONE sequence; state [channels][K-1] holds the previous K-1 inputs
// (zeros at sequence start) and is updated to the last K-1 inputs; optional bias; applies silu
// when `silu`. weight [channels][K].
cudaError_t CausalConv1d(const float* x, int64_t tokens, int64_t channels, int64_t kernel,
                         const bf16* weight, const bf16* bias, float* state, bool silu, float* out,
                         cudaStream_t stream);
// The same for a decode batch: one token per sequence, x [batch][channels], states[b] points
// at each sequence's [channels][K-1] window (device array of device pointers).
cudaError_t CausalConv1dStep(const float* x, int64_t batch, int64_t channels, int64_t kernel,
                             const bf16* weight, const bf16* bias, float* const* states, bool silu,
                             float* out, cudaStream_t stream);

// Paged KV cache: a block holds kKvBlockTokens tokens x kv_heads x head_dim floats for K and
// the same for V: layout [block][2][kKvBlockTokens][kv_heads][head_dim]. A sequence's
// block_table lists its blocks in order.
inline constexpr int64_t kKvBlockTokens = 16;
// Writes k/v of `tokens` new tokens (positions start..start+tokens-1) of one sequence into its
// blocks. k, v: [tokens][kv_heads][head_dim].
cudaError_t KvCacheWrite(const float* k, const float* v, int64_t tokens, int64_t start,
                         int64_t kv_heads, int64_t head_dim, const int32_t* block_table,
                         float* kv_blocks, cudaStream_t stream);
// Causal GQA attention for the prefill of ONE sequence whose first `start` tokens are already in
// the cache: q [tokens][heads][head_dim] at positions start.., keys/values from the cache
// (including the new tokens, written first with KvCacheWrite). out [tokens][heads][head_dim].
// scale is usually 1/sqrt(head_dim).
cudaError_t AttentionPrefill(const float* q, int64_t tokens, int64_t start, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, float scale,
                             const int32_t* block_table, const float* kv_blocks, float* out,
                             cudaStream_t stream);
// Decode attention for a batch, one query token per sequence: q [batch][heads][head_dim];
// context_lens[b] tokens (the new one included, already written); block_tables
// [batch][max_blocks]. out [batch][heads][head_dim]. With a `workspace` of at least
// AttentionDecodeWorkspaceFloats(batch, ...) floats, each sequence's keys are split over
// AttentionDecodeSplits(batch, ...) blocks and merged by a second kernel (flash-decoding), so a
// small batch with a long context fills the device; null reads each sequence in one block per
// KV head. The split count depends only on the batch and the shapes, so a captured graph stays
// valid for any context lengths.
cudaError_t AttentionDecode(const float* q, int64_t batch, int64_t heads, int64_t kv_heads,
                            int64_t head_dim, float scale, const int32_t* context_lens,
                            const int32_t* block_tables, int64_t max_blocks, const float* kv_blocks,
                            float* out, float* workspace, cudaStream_t stream);
// How many blocks share one sequence's keys in a decode of `batch` sequences: enough for about
// two blocks per multiprocessor of the current device, 1 to 64.
int64_t AttentionDecodeSplits(int64_t batch, int64_t heads, int64_t kv_heads);
// The workspace, in floats, that AttentionDecode needs for any batch up to `max_batch` (0 when no
// batch is split).
int64_t AttentionDecodeWorkspaceFloats(int64_t max_batch, int64_t heads, int64_t kv_heads,
                                       int64_t head_dim);

// Sampling on the device, one row of `vocab` logits per sequence: greedy when temperature[b]
// is 0, else temperature, top_k[b] (0 = all) and top_p[b]; seeds[b] and steps[b] make the draw
// reproducible (counter-based RNG: the same seed and step give the same draw). out[b] = token.
cudaError_t Sample(const float* logits, int64_t batch, int64_t vocab, const float* temperature,
                   const int32_t* top_k, const float* top_p, const uint64_t* seeds,
                   const int64_t* steps, int32_t* out, cudaStream_t stream);

// ---- Recurrent layers (kernels_recurrent.cu) ----

// Gated delta rule (Qwen3.5 GDN) for ONE sequence, tokens in order, state carried:
// q, k [tokens][key_heads][dk] (already l2-normalised, q already scaled), v [tokens][value_heads]
// [dv], g [tokens][value_heads] (log decay, <= 0), beta [tokens][value_heads];
// value head h uses key head h / (value_heads / key_heads). state [value_heads][dk][dv] fp32.
// out [tokens][value_heads][dv]. `chunked` selects the chunked (prefill) form with chunk 64;
// both must agree to fp32 rounding.
cudaError_t GatedDeltaRule(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int64_t tokens, int64_t key_heads,
                           int64_t value_heads, int64_t dk, int64_t dv, float* state, float* out,
                           bool chunked, cudaStream_t stream);
// Decode form for a batch (one token per sequence): states[b] -> [value_heads][dk][dv].
cudaError_t GatedDeltaRuleStep(const float* q, const float* k, const float* v, const float* g,
                               const float* beta, int64_t batch, int64_t key_heads,
                               int64_t value_heads, int64_t dk, int64_t dv, float* const* states,
                               float* out, cudaStream_t stream);
// L2-normalises each row of `dim` in place (eps inside the rsqrt), then multiplies by `scale`.
cudaError_t L2NormScale(float* x, int64_t rows, int64_t dim, float eps, float scale,
                        cudaStream_t stream);

// Mamba-2 SSD (Nemotron-H) for ONE sequence: x [tokens][heads][head_dim], dt [tokens][heads]
// (after softplus(dt + dt_bias), no clamp), A [heads] (= -exp(A_log)), B, C [tokens][groups]
// [state_size] (head h uses group h / (heads / groups)), D [heads]; state [heads][head_dim]
// [state_size] fp32 carried. y [tokens][heads][head_dim] = SSD output + D * x. `chunk` > 0
// selects the chunked form.
cudaError_t MambaSsd(const float* x, const float* dt, const float* A, const float* B,
                     const float* C, const float* D, int64_t tokens, int64_t heads,
                     int64_t head_dim, int64_t groups, int64_t state_size, int64_t chunk,
                     float* state, float* y, cudaStream_t stream);
// Single-step decode for a batch: states[b] -> [heads][head_dim][state_size].
cudaError_t MambaSsdStep(const float* x, const float* dt, const float* A, const float* B,
                         const float* C, const float* D, int64_t batch, int64_t heads,
                         int64_t head_dim, int64_t groups, int64_t state_size, float* const* states,
                         float* y, cudaStream_t stream);

// ---- MoE (kernels_moe.cu) ----

// Router, per token: softmax over experts, top k, renormalised (Qwen3.5), or sigmoid scores,
// top k by score + bias (bias may be null), weights = unbiased scores normalised (+1e-20) times
// `scaling` (Nemotron-H). logits [tokens][experts]; out: expert ids and weights [tokens][k].
cudaError_t RouteSoftmaxTopK(const float* logits, int64_t tokens, int64_t experts, int64_t k,
                             int32_t* expert_ids, float* weights, cudaStream_t stream);
cudaError_t RouteSigmoidTopK(const float* logits, const float* bias, int64_t tokens,
                             int64_t experts, int64_t k, float scaling, int32_t* expert_ids,
                             float* weights, cudaStream_t stream);

// Routed experts straight from BF16 weights, for every token and each of its k experts:
// out[t] += weight[t][j] * down_e(act(up_e(x[t]))), e = expert_ids[t][j]. swiglu: `up` is the
// fused [experts][2*inter][hidden] gate|up tensor and act(g, u) = silu(g) * u; otherwise `up` is
// [experts][inter][hidden] and act = relu(u)^2. down [experts][hidden][inter]. scratch holds
// tokens*k*inter floats. No host synchronization: used for decode and inside graphs; memory-bound
// by design (each selected expert's weights are read once per token).
cudaError_t MoeExperts(const float* x, int64_t tokens, int64_t hidden, const int32_t* expert_ids,
                       const float* weights, int64_t k, const bf16* up, const bf16* down,
                       int64_t inter, bool swiglu, float* scratch, float* out, cudaStream_t stream);

}  // namespace tandem::workers::cuda
