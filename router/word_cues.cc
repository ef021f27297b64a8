#include "router/word_cues.h"

#include <initializer_list>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace tandem::router {
namespace {

using Lexicon = absl::flat_hash_map<std::string_view, WordCue>;

// Each list is the common vocabulary of one kind of request, written from what the kind is (the
// agent-loop list after the agent-step templates failed without it), not read off a dataset's
// words. A word of two kinds ("loop", "next") is in one list only.
constexpr std::string_view kLabelWords[] = {
    "classify", "classification", "categorize", "categorise",    "category",    "categories",
    "label",    "labels",         "labeled",    "labelled",      "tag",         "sentiment",
    "positive", "negative",       "neutral",    "paraphrase",    "paraphrases", "topic",
    "options",  "option",         "polarity",   "spam",          "toxic",       "sarcastic",
    "sarcasm",  "emotion",        "entailment", "contradiction", "belong",      "belongs",
    "genre",    "intent",         "classes",    "class",         "rate",        "rating"};

constexpr std::string_view kTechWords[] = {
    "sql",        "mysql",     "postgres",   "postgresql", "sqlite",
    "oracle",     "query",     "queries",    "table",      "tables",
    "column",     "columns",   "rows",       "join",       "database",
    "databases",  "db",        "index",      "schema",     "select",
    "insert",     "trigger",   "procedure",  "function",   "functions",
    "python",     "java",      "javascript", "typescript", "rust",
    "golang",     "cpp",       "code",       "program",    "script",
    "regex",      "api",       "array",      "string",     "integer",
    "loop",       "method",    "variable",   "compile",    "compiler",
    "exception",  "bug",       "debug",      "xml",        "html",
    "css",        "bash",      "shell",      "linux",      "docker",
    "kubernetes", "algorithm", "recursion",  "recursive",  "pointer",
    "struct",     "null",      "syntax",     "implement",  "implementation",
    "refactor",   "django",    "flask",      "react",      "node",
    "npm",        "pandas",    "numpy",      "dataframe",  "git",
    "tsql",       "plsql",     "stored",     "datetime",   "varchar",
    "foreign",    "primary",   "aggregate",  "groupby"};

constexpr std::string_view kMediaWords[] = {
    "play",      "playing",    "pause",   "resume",      "skip",    "song",     "songs",
    "music",     "album",      "albums",  "playlist",    "podcast", "podcasts", "radio",
    "audiobook", "audiobooks", "episode", "episodes",    "track",   "tracks",   "station",
    "volume",    "listen",     "shuffle", "spotify",     "youtube", "netflix",  "movie",
    "movies",    "film",       "trailer", "documentary", "news"};

constexpr std::string_view kSequenceWords[] = {
    "then",         "also", "afterwards", "afterward", "finally",     "lastly",   "subsequently",
    "additionally", "next", "after",      "meanwhile", "furthermore", "moreover", "and"};

constexpr std::string_view kWhWords[] = {"who",   "whom", "whose", "when", "where",
                                         "which", "what", "how",   "why"};

constexpr std::string_view kReasonWords[] = {
    "prove",     "proof",        "derive",    "derivation", "explain", "compare",
    "contrast",  "analyze",      "analyse",   "evaluate",   "justify", "reason",
    "reasoning", "implications", "tradeoffs", "therefore",  "infer",   "conclusion",
    "premises",  "deduce",       "logically", "difference"};

constexpr std::string_view kChatWords[] = {
    "hi",      "hello", "hey",   "thanks",   "thank",     "lol",  "haha",   "bye",
    "goodbye", "ok",    "okay",  "yeah",     "cool",      "nice", "sorry",  "yes",
    "no",      "sure",  "great", "awesome",  "hmm",       "um",   "uh",     "wow",
    "love",    "like",  "feel",  "favorite", "favourite", "fun",  "weekend"};

constexpr std::string_view kAssistantWords[] = {
    "remind",   "reminder",    "reminders", "alarm",    "alarms",     "timer",       "timers",
    "weather",  "forecast",    "lights",    "light",    "thermostat", "temperature", "calendar",
    "schedule", "appointment", "book",      "booking",  "reserve",    "reservation", "order",
    "cancel",   "call",        "text",      "message",  "turn",       "dim",         "lock",
    "unlock",   "balance",     "account",   "transfer", "card",       "ticket",      "tickets",
    "flight",   "hotel",       "room",      "tomorrow", "tonight",    "today"};

constexpr std::string_view kExtractWords[] = {"extract", "mentioned", "names", "name",  "phone",
                                              "email",   "address",   "date",  "dates", "entities",
                                              "entity",  "fields",    "parse", "find"};

constexpr std::string_view kSummarizeWords[] = {"summarize", "summarise", "summary", "tldr",
                                                "condense",  "shorten",   "gist",    "recap",
                                                "briefly",   "headline"};

constexpr std::string_view kKnowledgeWords[] = {
    "history",   "historical", "invented", "discovered", "founded", "capital",   "century",
    "president", "born",       "died",     "population", "war",     "country",   "king",
    "queen",     "empire",     "author",   "wrote",      "written", "published", "located",
    "river",     "mountain",   "city",     "scientist",  "theory",  "origin",    "language",
    "largest",   "first",      "famous"};

constexpr std::string_view kMathWords[] = {
    "total",    "percent", "percentage", "sum",     "each",     "times",      "remaining", "left",
    "cost",     "costs",   "spend",      "spent",   "per",      "average",    "many",      "much",
    "equation", "solve",   "calculate",  "compute", "integral", "probability"};

constexpr std::string_view kTruthWords[] = {
    "true",    "false",     "claim",    "fact",      "facts",    "verify",
    "correct", "incorrect", "accurate", "statement", "evidence", "supported",
    "refuted", "valid",     "myth",     "really",    "actually"};

constexpr std::string_view kLoopStepWords[] = {
    "observation", "thought",   "action", "returned", "result",  "output",   "retry",
    "abort",       "succeeded", "failed", "failure",  "timeout", "continue", "stop",
    "finish",      "proceed",   "status", "error",    "agent",   "tool"};

const Lexicon& Words() {
  struct List {
    WordCue cue;
    absl::Span<const std::string_view> words;
  };
  static const Lexicon* words = [] {
    auto* m = new Lexicon;
    for (const List& list : std::initializer_list<List>{
             {WordCue::kLabel, kLabelWords},
             {WordCue::kTech, kTechWords},
             {WordCue::kMedia, kMediaWords},
             {WordCue::kSequence, kSequenceWords},
             {WordCue::kWh, kWhWords},
             {WordCue::kReason, kReasonWords},
             {WordCue::kChat, kChatWords},
             {WordCue::kAssistant, kAssistantWords},
             {WordCue::kExtract, kExtractWords},
             {WordCue::kSummarize, kSummarizeWords},
             {WordCue::kKnowledge, kKnowledgeWords},
             {WordCue::kMath, kMathWords},
             {WordCue::kTruth, kTruthWords},
             {WordCue::kLoopStep, kLoopStepWords},
         }) {
      for (std::string_view w : list.words) m->emplace(w, list.cue);
    }
    return m;
  }();
  return *words;
}

}  // namespace

WordCue WordCueOf(std::string_view lower_word) {
  const Lexicon& words = Words();
  auto it = words.find(lower_word);
  return it == words.end() ? WordCue::kNone : it->second;
}

}  // namespace tandem::router
