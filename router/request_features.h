#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "router/content_cues.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::router {

enum class Objective { kAuto, kAccuracy, kLatency };
enum class ReasoningMode { kDefault, kOn, kOff };

// What the router knows about one request: computed once at intake, immutable afterwards.
struct RequestFeatures {
  // Prompt size in tokens: the text's estimate (EstimateTokens) and the chat template's, or the
  // tokenizer's count (prompt_tokens_exact), plus image_tokens.
  int64_t prompt_tokens = 0;
  bool prompt_tokens_exact = false;
  int64_t prompt_bytes = 0;
  int image_count = 0;
  // The images' share of prompt_tokens: each image's grid at the vision model's processor
  // settings plus its vision_start/vision_end markers, as the caller of ExtractFeatures measured
  // it (kUnknownImageTokens for an image it could not).
  int64_t image_tokens = 0;
  int num_messages = 0;
  // Number of user messages: a chat's turn count.
  int num_turns = 0;
  // The request's shape besides its text. tool_count: tools declared. last_role: the last
  // message's role ("user", "tool", ...; empty without messages). agent_steps: assistant
  // messages with tool calls since the last user message, so 0 at the start of a task and
  // more inside an agent loop, where a tool result has just come back. system_prompt_bytes:
  // the text of the system messages.
  int tool_count = 0;
  std::string last_role;
  int agent_steps = 0;
  int64_t system_prompt_bytes = 0;
  Objective objective = Objective::kAuto;
  // Empty when not pinned.
  std::string pinned_model;
  ReasoningMode reasoning = ReasoningMode::kDefault;
  // The caller's thinking budget in tokens; 0 when it sets none.
  int32_t thinking_budget = 0;
  // 0 when the request leaves it to the default.
  int32_t max_tokens = 0;
  // The tenant its credentials authenticate (the gateway's --tenants; "anonymous" for a caller
  // without a key where the gateway serves them); empty where no tenant applies (a policy test
  // case that names none). Never taken from the request's content: a label is only a label.
  std::string tenant;
  std::string app;
  // Every label, for policy conditions on label.KEY.
  std::map<std::string, std::string> labels;
  // The session this turn belongs to (empty: none), the model of its previous turn (empty: a new
  // session) and this turn's number in it (1 for the first). The gateway fills the last two from
  // the session's route token or its session table.
  std::string session_id;
  std::string session_model;
  int64_t session_turn = 0;
  // Stable per request (a hash of its id): picks the side of a weighted split.
  uint64_t split_key = 0;
  // Lexical cues over all text parts (see content_cues.h).
  ContentCues cues;
  // Milliseconds left before the caller's deadline when the request arrived; -1 for none.
  int64_t deadline_ms = -1;
  // The user and system text the learned classifier reads (at most
  // HashedClassifier::kMaxTextBytes of it).
  std::string classifier_text;
  // A learned-tier result decided earlier (replay of a log without prompt text); used only when
  // classifier_text is empty.
  std::string recorded_learned_class;
  double recorded_learned_confidence = 0;
  // The policy's second-opinion model was asked (the gateway routes the request again with its
  // answer): the class it answered, empty when it gave none in time.
  bool second_opinion_asked = false;
  std::string second_opinion_class;
  // Per model: the estimated prompt tokens of this request that the model's best usable worker
  // holds in its prefix cache, by the gateway's record of which prompts it sent where
  // (gateway/pool/prefix_index.h); 0 for none. Filled only when the policy reads
  // prefix_hit_tokens.MODEL (Router::ReadsPrefixHits), for every model the gateway serves.
  std::map<std::string, int64_t> prefix_hit_tokens;
};

// Tokens an image takes in the prompt besides its grid: <|vision_start|> and <|vision_end|>.
inline constexpr int64_t kImageMarkerTokens = 2;
// The prompt tokens of an image whose size is unknown (the router reads no images; the gateway
// measures them, see gateway/intake/prompt_token_counter.h): the grid of a 1024 x 1024 image at the
// released Qwen3.5 processor settings (1024 x 1024 / 32^2 = 1024 tokens) plus the markers. A
// 1024 x 768 photo takes 770, a 3840 x 2160 screenshot 8,162, the largest (16M pixels) 16,386.
inline constexpr int64_t kUnknownImageTokens = 1024 + kImageMarkerTokens;

// Pure function of the request; no allocation beyond the result's strings. `image_tokens`: the
// prompt tokens of the request's images in message order (the caller reads their sizes); an
// image past its end counts kUnknownImageTokens.
RequestFeatures ExtractFeatures(const tandem::v1::GenerateRequest& request,
                                std::span<const int64_t> image_tokens = {});

// Fast token estimate for text with no tokenizer at hand: ASCII at ~4 bytes per token (BPE
// vocabularies of ~130-250K entries average 3.5-4.5 bytes per English token) and one token per
// non-ASCII code point (CJK and emoji mostly take one or more tokens each).
int64_t EstimateTokens(std::string_view text);

// Per-message template overhead in tokens: ChatML's "<|im_start|>role\n" and "<|im_end|>\n".
inline constexpr int64_t kPerMessageTemplateTokens = 5;

// Every feature as (name, value) strings, for explanations and the Route RPC.
std::vector<std::pair<std::string, std::string>> DescribeFeatures(const RequestFeatures& f);

const char* ObjectiveName(Objective o);
const char* ReasoningModeName(ReasoningMode r);

}  // namespace tandem::router
