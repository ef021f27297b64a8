#pragma once

#include <cstdint>
#include <map>
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
  // Prompt size in tokens. An estimate (see EstimateTokens) until a model tokenizer is wired in.
  int64_t prompt_tokens = 0;
  bool prompt_tokens_exact = false;
  int64_t prompt_bytes = 0;
  int image_count = 0;
  int num_messages = 0;
  // Number of user messages: a chat's turn count.
  int num_turns = 0;
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
};

// Pure function of the request; no allocation beyond the result's strings.
RequestFeatures ExtractFeatures(const tandem::v1::GenerateRequest& request);

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
