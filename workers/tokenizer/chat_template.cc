#include "workers/tokenizer/chat_template.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "workers/tokenizer/tool_prompt.h"

namespace tandem::workers {
namespace {

using google::protobuf::RepeatedPtrField;
using tandem::v1::ChatMessage;

constexpr absl::string_view kImStart = "<|im_start|>";
constexpr absl::string_view kImEnd = "<|im_end|>";
constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";

// Stands for an image inside a flattened message's text: a byte that valid UTF-8 never holds
// (Flatten refuses text that has it), so caller text cannot forge one.
constexpr char kImageMarker = '\xFF';
constexpr absl::string_view kVisionStart = "<|vision_start|>";
constexpr absl::string_view kImagePad = "<|image_pad|>";
constexpr absl::string_view kVisionEnd = "<|vision_end|>";

// Collects prompt pieces, joining neighbours of the same kind. Image markers in text become
// <|vision_start|>, the image's count of <|image_pad|> and <|vision_end|> (the released Qwen3.5
// template's placeholder, expanded as its processor does).
class PromptBuilder {
 public:
  explicit PromptBuilder(absl::Span<const int64_t> image_tokens = {})
      : image_tokens_(image_tokens) {}
  void Markup(absl::string_view s) { Add(s, true); }
  void Text(absl::string_view s) {
    for (size_t marker = s.find(kImageMarker); marker != absl::string_view::npos;
         marker = s.find(kImageMarker)) {
      Add(s.substr(0, marker), false);
      Image();
      s.remove_prefix(marker + 1);
    }
    Add(s, false);
  }
  RenderedPrompt Take() { return std::move(prompt_); }

 private:
  void Image() {
    // Flatten counted the images against image_tokens_.
    const int64_t count = next_image_ < image_tokens_.size() ? image_tokens_[next_image_] : 0;
    ++next_image_;
    std::string markup(kVisionStart);
    markup.reserve(kVisionStart.size() + count * kImagePad.size() + kVisionEnd.size());
    for (int64_t i = 0; i < count; ++i) markup.append(kImagePad.data(), kImagePad.size());
    markup.append(kVisionEnd.data(), kVisionEnd.size());
    Markup(markup);
  }
  absl::Span<const int64_t> image_tokens_;
  size_t next_image_ = 0;

  void Add(absl::string_view s, bool markup) {
    if (s.empty()) return;
    if (!prompt_.pieces.empty() && prompt_.pieces.back().markup == markup) {
      prompt_.pieces.back().text.append(s.data(), s.size());
    } else {
      prompt_.pieces.push_back({std::string(s), markup});
    }
  }
  RenderedPrompt prompt_;
};

// Python's str.strip() / Go's strings.TrimSpace, as the templates use, for ASCII whitespace.
constexpr absl::string_view kSpaces = " \t\n\r\v\f";

absl::string_view Trim(absl::string_view s) {
  const size_t b = s.find_first_not_of(kSpaces);
  if (b == absl::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpaces) - b + 1);
}

absl::string_view TrimLeft(absl::string_view s, absl::string_view chars) {
  const size_t b = s.find_first_not_of(chars);
  return b == absl::string_view::npos ? absl::string_view() : s.substr(b);
}

struct Message {
  std::string role;
  std::string content;
  const RepeatedPtrField<tandem::v1::ToolCall>* calls = nullptr;  // assistant turns
};

using Tools = RepeatedPtrField<tandem::v1::Tool>;

void AddPieces(PromptBuilder& b, const ToolPromptPieces& pieces) {
  for (const ToolPromptPiece& p : pieces) p.markup ? b.Markup(p.text) : b.Text(p.text);
}

// Flattens the proto messages: text parts joined, roles and images checked. Images become
// kImageMarker where `images` (their token counts) is given, one per image in order; without
// it an image is INVALID_ARGUMENT.
absl::StatusOr<std::vector<Message>> Flatten(const RepeatedPtrField<ChatMessage>& messages,
                                             bool continue_final,
                                             const absl::Span<const int64_t>* images) {
  size_t image_count = 0;
  if (messages.empty()) return absl::InvalidArgumentError("no messages");
  std::vector<Message> out;
  out.reserve(messages.size());
  for (int i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string& role = m.role();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: \"", role,
                                                     "\" is not system, user, assistant or tool"));
    }
    Message flat{role, "", &m.tool_calls()};
    for (int j = 0; j < m.content_size(); ++j) {
      const auto& part = m.content(j);
      if (part.has_image()) {
        if (images == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "messages[", i, "].content[", j, "].image: this model does not accept images"));
        }
        ++image_count;
        flat.content.push_back(kImageMarker);
        continue;
      }
      if (images != nullptr && part.text().find(kImageMarker) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "].content[", j, "].text: not valid UTF-8"));
      }
      flat.content.append(part.text());
    }
    out.push_back(std::move(flat));
  }
  if (images != nullptr && image_count != images->size()) {
    return absl::InternalError(absl::StrCat("messages hold ", image_count, " images but ",
                                            images->size(), " image token counts were given"));
  }
  if (continue_final && out.back().role != "assistant") {
    return absl::InvalidArgumentError(
        "continue_final needs the last message to be the assistant's");
  }
  return out;
}

bool ThinkingByMode(const tandem::v1::ReasoningOptions& reasoning) {
  // Both families think by default.
  return reasoning.mode() != tandem::v1::REASONING_MODE_OFF;
}

// Qwen3.5 (src: ollama model/renderers/qwen35.go, which follows the HF template).
// Qwen3.5's system turn: the tools first (when any), then the system message's text.
void QwenSystem(PromptBuilder& b, const std::vector<Message>& msgs, const Tools& tools) {
  const bool system = msgs[0].role == "system";
  if (tools.empty()) {
    if (!system) return;
    b.Markup(absl::StrCat(kImStart, "system\n"));
    b.Text(Trim(msgs[0].content));
    b.Markup(absl::StrCat(kImEnd, "\n"));
    return;
  }
  b.Markup(absl::StrCat(kImStart, "system\n"));
  AddPieces(b, QwenToolsBlock(tools));
  b.Markup(kToolCallInstructions);
  if (system && !Trim(msgs[0].content).empty()) {
    b.Markup("\n\n");
    b.Text(Trim(msgs[0].content));
  }
  b.Markup(absl::StrCat(kImEnd, "\n"));
}

// The calls of an assistant turn, after its content (Qwen3.5: a blank line after content, calls
// joined by a newline, none after the last).
void QwenCalls(PromptBuilder& b, const Message& m, absl::string_view content) {
  if (m.calls == nullptr) return;
  for (int c = 0; c < m.calls->size(); ++c) {
    if (c == 0 && !Trim(content).empty()) b.Markup("\n\n");
    if (c > 0) b.Markup("\n");
    AddPieces(b, ToolCallXml((*m.calls)[c]));
  }
}

RenderedPrompt RenderQwen35(const std::vector<Message>& msgs, const Tools& tools, bool thinking,
                            bool continue_final, absl::Span<const int64_t> image_tokens) {
  PromptBuilder b(image_tokens);
  const int n = static_cast<int>(msgs.size());
  QwenSystem(b, msgs, tools);
  // The last real user query; tool results wrapped in a user turn do not count. Only assistant
  // turns after it keep their reasoning.
  int last_query = n - 1;
  for (int i = n - 1; i >= 0; --i) {
    if (msgs[i].role != "user") continue;
    const absl::string_view c = Trim(msgs[i].content);
    if (!(absl::StartsWith(c, "<tool_response>") && absl::EndsWith(c, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (int i = 0; i < n; ++i) {
    const Message& m = msgs[i];
    const bool last = i == n - 1;
    const bool prefill = last && continue_final;
    absl::string_view content = Trim(m.content);
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      b.Markup(absl::StrCat(kImStart, m.role, "\n"));
      b.Text(content);
      b.Markup(absl::StrCat(kImEnd, "\n"));
    } else if (m.role == "assistant" && prefill && thinking && i > last_query &&
               absl::StartsWith(content, kThinkOpen) && !absl::StrContains(content, kThinkClose)) {
      // A prefill that stops inside its reasoning continues the open think block (the HF
      // template would close an empty one and put this text after it).
      b.Markup(absl::StrCat(kImStart, "assistant\n", kThinkOpen, "\n"));
      b.Text(TrimLeft(content.substr(kThinkOpen.size()), "\n"));
    } else if (m.role == "assistant") {
      // Reasoning is whatever precedes </think> (after the last <think>); the answer follows.
      absl::string_view reasoning;
      if (const size_t close = content.find(kThinkClose); close != absl::string_view::npos) {
        const absl::string_view before = content.substr(0, close);
        const size_t open = before.rfind(kThinkOpen);
        reasoning =
            open == absl::string_view::npos ? before : before.substr(open + kThinkOpen.size());
        content = TrimLeft(content.substr(close + kThinkClose.size()), "\n");
      }
      reasoning = Trim(reasoning);
      if (thinking && i > last_query) {
        b.Markup(absl::StrCat(kImStart, "assistant\n", kThinkOpen, "\n"));
        b.Text(reasoning);
        b.Markup(absl::StrCat("\n", kThinkClose, "\n\n"));
      } else {
        b.Markup(absl::StrCat(kImStart, "assistant\n"));
      }
      b.Text(content);
      QwenCalls(b, m, content);
      if (!prefill) b.Markup(absl::StrCat(kImEnd, "\n"));
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") b.Markup(absl::StrCat(kImStart, "user"));
      b.Markup("\n<tool_response>\n");
      b.Text(m.content);
      b.Markup("\n</tool_response>");
      if (last || msgs[i + 1].role != "tool") b.Markup(absl::StrCat(kImEnd, "\n"));
    }
  }
  if (!continue_final) {
    b.Markup(absl::StrCat(kImStart, "assistant\n"));
    b.Markup(thinking ? absl::StrCat(kThinkOpen, "\n")
                      : absl::StrCat(kThinkOpen, "\n\n", kThinkClose, "\n\n"));
  }
  return b.Take();
}

// Removes the /think and /no_think switches but keeps a real </think>.
std::string StripThinkToggles(absl::string_view s) {
  std::string out = absl::StrReplaceAll(s, {{kThinkClose, "<_end_think>"}});
  out = absl::StrReplaceAll(out, {{"/think", ""}});
  out = absl::StrReplaceAll(out, {{"/no_think", ""}});
  return absl::StrReplaceAll(out, {{"<_end_think>", kThinkClose}});
}

// Assistant text in Nemotron's template carries its think tags through; they are structure the
// template keeps (or adds), so they are markup while the words around them are not.
void AssistantText(PromptBuilder& b, absl::string_view s) {
  while (!s.empty()) {
    const size_t open = s.find(kThinkOpen), close = s.find(kThinkClose);
    const size_t at = std::min(open, close);
    if (at == absl::string_view::npos) {
      b.Text(s);
      return;
    }
    const size_t len = at == open ? kThinkOpen.size() : kThinkClose.size();
    b.Text(s.substr(0, at));
    b.Markup(s.substr(at, len));
    s.remove_prefix(at + len);
  }
}

// Nemotron-3-Nano (src: the HF jinja template and ollama's nemotron3nano.go, which strips the
// switches from user turns as the newer template does).
// Nemotron's assistant turn with tool calls: its content (before the last user message, only
// what follows </think>), a newline, then each call and a newline.
void NemotronCallTurn(PromptBuilder& b, const Message& m, bool include_content) {
  std::string content = m.content;
  if (!absl::StrContains(content, kThinkOpen) && !absl::StrContains(content, kThinkClose)) {
    content = absl::StrCat(kThinkOpen, kThinkClose, content);
  }
  b.Markup(absl::StrCat(kImStart, "assistant\n"));
  if (include_content) {
    AssistantText(b, Trim(content));
  } else {
    absl::string_view c = content;
    if (const size_t close = c.rfind(kThinkClose); close != absl::string_view::npos) {
      c = c.substr(close + kThinkClose.size());
    } else if (const size_t open = c.find(kThinkOpen); open != absl::string_view::npos) {
      c = c.substr(0, open);
    }
    b.Markup(absl::StrCat(kThinkOpen, kThinkClose));
    b.Text(Trim(c));
  }
  b.Markup("\n");
  for (const tandem::v1::ToolCall& call : *m.calls) {
    AddPieces(b, ToolCallXml(call));
    b.Markup("\n");
  }
  b.Markup(absl::StrCat(kImEnd, "\n"));
}

RenderedPrompt RenderNemotron(const std::vector<Message>& msgs, const Tools& tools, bool thinking,
                              bool continue_final) {
  for (const Message& m : msgs) {
    if (m.role != "user" && m.role != "system") continue;
    if (absl::StrContains(absl::StrReplaceAll(m.content, {{kThinkClose, ""}}), "/think")) {
      thinking = true;
    } else if (absl::StrContains(m.content, "/no_think")) {
      thinking = false;
    }
  }
  PromptBuilder b;
  size_t start = 0;
  std::string system;
  if (msgs[0].role == "system") {
    system = StripThinkToggles(msgs[0].content);
    start = 1;
  }
  // A system block is always emitted, empty if there is no system message; tools follow the
  // system text.
  b.Markup(absl::StrCat(kImStart, "system\n"));
  b.Text(system);
  if (!tools.empty()) {
    if (!system.empty()) b.Markup("\n\n");
    AddPieces(b, NemotronToolsBlock(tools));
    b.Markup(kToolCallInstructions);
  }
  b.Markup(absl::StrCat(kImEnd, "\n"));

  const size_t n = msgs.size();
  size_t last_user = 0;
  bool have_user = false;
  for (size_t i = start; i < n; ++i) {
    if (msgs[i].role == "user") {
      last_user = i;
      have_user = true;
    }
  }
  for (size_t i = start; i < n; ++i) {
    const Message& m = msgs[i];
    const bool last = i == n - 1;
    if (m.role == "assistant" && m.calls != nullptr && !m.calls->empty() &&
        !(last && continue_final)) {
      NemotronCallTurn(b, m, !(have_user && i < last_user));
    } else if (m.role == "assistant") {
      std::string content = m.content;
      if (!absl::StrContains(content, kThinkOpen) && !absl::StrContains(content, kThinkClose)) {
        content = absl::StrCat(kThinkOpen, kThinkClose, content);
      }
      // Turns before the last user message keep only the answer after </think>.
      if (have_user && i < last_user && absl::StrContains(content, kThinkOpen) &&
          absl::StrContains(content, kThinkClose)) {
        const size_t close = absl::string_view(content).rfind(kThinkClose);
        content = absl::StrCat(kThinkOpen, kThinkClose, content.substr(close + kThinkClose.size()));
      }
      b.Markup(absl::StrCat(kImStart, "assistant\n"));
      AssistantText(b, Trim(content));
      if (!(last && continue_final)) b.Markup(absl::StrCat(kImEnd, "\n"));
    } else if (m.role == "user" || m.role == "system") {
      b.Markup(absl::StrCat(kImStart, m.role, "\n"));
      b.Text(Trim(StripThinkToggles(m.content)));
      b.Markup(absl::StrCat(kImEnd, "\n"));
    } else if (m.role == "tool") {
      const bool prev_tool = i > start && msgs[i - 1].role == "tool";
      const bool next_tool = !last && msgs[i + 1].role == "tool";
      // As in the template, a tool message with nothing before it opens no user block.
      if (i > start && !prev_tool) b.Markup(absl::StrCat(kImStart, "user\n"));
      b.Markup("<tool_response>\n");
      b.Text(m.content);
      b.Markup("\n</tool_response>\n");
      if (!next_tool) b.Markup(absl::StrCat(kImEnd, "\n"));
    }
  }
  if (!continue_final) {
    b.Markup(absl::StrCat(kImStart, "assistant\n"));
    b.Markup(thinking ? absl::StrCat(kThinkOpen, "\n") : absl::StrCat(kThinkOpen, kThinkClose));
  }
  return b.Take();
}

}  // namespace

absl::StatusOr<ChatFamily> ParseChatFamily(absl::string_view name) {
  if (name == "qwen3_5") return ChatFamily::kQwen35;
  if (name == "nemotron_h") return ChatFamily::kNemotronH;
  return absl::InvalidArgumentError(absl::StrCat("unknown chat family \"", name, "\""));
}

std::string RenderedPrompt::Text() const {
  std::string out;
  for (const PromptPiece& p : pieces) out.append(p.text);
  return out;
}

absl::StatusOr<RenderedPrompt> RenderChat(ChatFamily family,
                                          const RepeatedPtrField<ChatMessage>& messages,
                                          const tandem::v1::ReasoningOptions& reasoning,
                                          bool continue_final) {
  return RenderChat(family, messages, Tools(), reasoning, continue_final);
}

absl::StatusOr<RenderedPrompt> RenderChat(ChatFamily family,
                                          const RepeatedPtrField<ChatMessage>& messages,
                                          const Tools& tools,
                                          const tandem::v1::ReasoningOptions& reasoning,
                                          bool continue_final) {
  return RenderChat(family, messages, tools, reasoning, continue_final, nullptr);
}

absl::StatusOr<RenderedPrompt> RenderChat(ChatFamily family,
                                          const RepeatedPtrField<ChatMessage>& messages,
                                          const Tools& tools,
                                          const tandem::v1::ReasoningOptions& reasoning,
                                          bool continue_final,
                                          const absl::Span<const int64_t>* image_tokens) {
  if (image_tokens != nullptr && family != ChatFamily::kQwen35) image_tokens = nullptr;
  absl::StatusOr<std::vector<Message>> msgs = Flatten(messages, continue_final, image_tokens);
  if (!msgs.ok()) return msgs.status();
  const bool thinking = ThinkingByMode(reasoning);
  switch (family) {
    case ChatFamily::kQwen35:
      return RenderQwen35(*msgs, tools, thinking, continue_final,
                          image_tokens != nullptr ? *image_tokens : absl::Span<const int64_t>());
    case ChatFamily::kNemotronH:
      return RenderNemotron(*msgs, tools, thinking, continue_final);
  }
  return absl::InvalidArgumentError("unknown chat family");
}

std::vector<std::string> StopTokenTexts(ChatFamily family) {
  switch (family) {
    case ChatFamily::kQwen35:
      return {std::string(kImEnd), "<|endoftext|>"};
    case ChatFamily::kNemotronH:
      return {std::string(kImEnd), "</s>"};
  }
  return {std::string(kImEnd)};
}

absl::StatusOr<std::unique_ptr<ModelTokenizer>> ModelTokenizer::Create(
    std::shared_ptr<const BpeTokenizer> bpe, ChatFamily family) {
  if (bpe == nullptr) return absl::InvalidArgumentError("no tokenizer");
  for (absl::string_view t : {kImStart, kImEnd}) {
    const std::optional<int32_t> id = bpe->TokenId(std::string_view(t.data(), t.size()));
    if (!id.has_value() || !bpe->IsAddedToken(*id)) {
      return absl::FailedPreconditionError(absl::StrCat("tokenizer has no added token ", t));
    }
  }
  std::vector<int32_t> stop;
  for (const std::string& t : StopTokenTexts(family)) {
    if (std::optional<int32_t> id = bpe->TokenId(std::string_view(t.data(), t.size()));
        id.has_value())
      stop.push_back(*id);
  }
  return std::unique_ptr<ModelTokenizer>(new ModelTokenizer(std::move(bpe), family, stop));
}

absl::StatusOr<std::vector<int32_t>> ModelTokenizer::EncodeChat(
    const RepeatedPtrField<ChatMessage>& messages, const tandem::v1::ReasoningOptions& reasoning,
    bool continue_final) const {
  return EncodeChatWithTools(messages, Tools(), reasoning, continue_final);
}

absl::StatusOr<std::vector<int32_t>> ModelTokenizer::EncodeChatWithTools(
    const RepeatedPtrField<ChatMessage>& messages, const Tools& tools,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final) const {
  return Encode(messages, tools, reasoning, continue_final, nullptr);
}

absl::StatusOr<std::vector<int32_t>> ModelTokenizer::EncodeChatWithImages(
    const RepeatedPtrField<ChatMessage>& messages, const Tools& tools,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final,
    absl::Span<const int64_t> image_tokens) const {
  if (family_ != ChatFamily::kQwen35 || !bpe_->TokenId(std::string(kImagePad)).has_value()) {
    return Encode(messages, tools, reasoning, continue_final, nullptr);
  }
  return Encode(messages, tools, reasoning, continue_final, &image_tokens);
}

absl::StatusOr<std::vector<int32_t>> ModelTokenizer::Encode(
    const RepeatedPtrField<ChatMessage>& messages, const Tools& tools,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final,
    const absl::Span<const int64_t>* image_tokens) const {
  absl::StatusOr<RenderedPrompt> prompt =
      RenderChat(family_, messages, tools, reasoning, continue_final, image_tokens);
  if (!prompt.ok()) return prompt.status();
  std::vector<TextPiece> pieces;
  pieces.reserve(prompt->pieces.size());
  for (const PromptPiece& p : prompt->pieces) pieces.push_back({p.text, p.markup});
  std::vector<int32_t> ids;
  bpe_->EncodePieces(pieces, &ids);
  return ids;
}

std::unique_ptr<StreamDecoder> ModelTokenizer::NewStreamDecoder() const {
  return bpe_->NewStreamDecoder();
}

}  // namespace tandem::workers
