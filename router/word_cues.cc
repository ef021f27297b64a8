#include "router/word_cues.h"

#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace tandem::router {
namespace {

using Lexicon = absl::flat_hash_map<std::string_view, WordCue>;

// Each list is the common vocabulary of one kind of request, written from what the kind is (the
// agent-loop list after the agent-step templates failed without it), not read off a dataset's
// words. A word of two kinds ("loop", "next") is in one list only.
const Lexicon& Words() {
  static const Lexicon* words = [] {
    auto* m = new Lexicon;
    auto add = [m](WordCue cue, std::initializer_list<std::string_view> list) {
      for (std::string_view w : list) m->emplace(w, cue);
    };
    add(WordCue::kLabel,
        {"classify", "classification", "categorize", "categorise",    "category",    "categories",
         "label",    "labels",         "labeled",    "labelled",      "tag",         "sentiment",
         "positive", "negative",       "neutral",    "paraphrase",    "paraphrases", "topic",
         "options",  "option",         "polarity",   "spam",          "toxic",       "sarcastic",
         "sarcasm",  "emotion",        "entailment", "contradiction", "belong",      "belongs",
         "genre",    "intent",         "classes",    "class",         "rate",        "rating"});
    add(WordCue::kTech, {"sql",        "mysql",     "postgres",   "postgresql", "sqlite",
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
                         "foreign",    "primary",   "aggregate",  "groupby"});
    add(WordCue::kMedia,
        {"play",      "playing",    "pause",   "resume",      "skip",    "song",     "songs",
         "music",     "album",      "albums",  "playlist",    "podcast", "podcasts", "radio",
         "audiobook", "audiobooks", "episode", "episodes",    "track",   "tracks",   "station",
         "volume",    "listen",     "shuffle", "spotify",     "youtube", "netflix",  "movie",
         "movies",    "film",       "trailer", "documentary", "news"});
    add(WordCue::kSequence,
        {"then", "also", "afterwards", "afterward", "finally", "lastly", "subsequently",
         "additionally", "next", "after", "meanwhile", "furthermore", "moreover", "and"});
    add(WordCue::kWh, {"who", "whom", "whose", "when", "where", "which", "what", "how", "why"});
    add(WordCue::kReason,
        {"prove",     "proof",        "derive",    "derivation", "explain", "compare",
         "contrast",  "analyze",      "analyse",   "evaluate",   "justify", "reason",
         "reasoning", "implications", "tradeoffs", "therefore",  "infer",   "conclusion",
         "premises",  "deduce",       "logically", "difference"});
    add(WordCue::kChat,
        {"hi",      "hello", "hey",   "thanks",   "thank",     "lol",  "haha",   "bye",
         "goodbye", "ok",    "okay",  "yeah",     "cool",      "nice", "sorry",  "yes",
         "no",      "sure",  "great", "awesome",  "hmm",       "um",   "uh",     "wow",
         "love",    "like",  "feel",  "favorite", "favourite", "fun",  "weekend"});
    add(WordCue::kAssistant,
        {"remind",      "reminder",    "reminders", "alarm",       "alarms",  "timer",
         "timers",      "weather",     "forecast",  "lights",      "light",   "thermostat",
         "temperature", "calendar",    "schedule",  "appointment", "book",    "booking",
         "reserve",     "reservation", "order",     "cancel",      "call",    "text",
         "message",     "turn",        "dim",       "lock",        "unlock",  "balance",
         "account",     "transfer",    "card",      "ticket",      "tickets", "flight",
         "hotel",       "room",        "tomorrow",  "tonight",     "today"});
    add(WordCue::kExtract, {"extract", "mentioned", "names", "name", "phone", "email", "address",
                            "date", "dates", "entities", "entity", "fields", "parse", "find"});
    add(WordCue::kSummarize, {"summarize", "summarise", "summary", "tldr", "condense", "shorten",
                              "gist", "recap", "briefly", "headline"});
    add(WordCue::kKnowledge,
        {"history",   "historical", "invented", "discovered", "founded", "capital",   "century",
         "president", "born",       "died",     "population", "war",     "country",   "king",
         "queen",     "empire",     "author",   "wrote",      "written", "published", "located",
         "river",     "mountain",   "city",     "scientist",  "theory",  "origin",    "language",
         "largest",   "first",      "famous"});
    add(WordCue::kMath, {"total",     "percent", "percentage", "sum",        "each",     "times",
                         "remaining", "left",    "cost",       "costs",      "spend",    "spent",
                         "per",       "average", "many",       "much",       "equation", "solve",
                         "calculate", "compute", "integral",   "probability"});
    add(WordCue::kTruth,
        {"true", "false", "claim", "fact", "facts", "verify", "correct", "incorrect", "accurate",
         "statement", "evidence", "supported", "refuted", "valid", "myth", "really", "actually"});
    add(WordCue::kLoopStep,
        {"observation", "thought",   "action", "returned", "result",  "output",   "retry",
         "abort",       "succeeded", "failed", "failure",  "timeout", "continue", "stop",
         "finish",      "proceed",   "status", "error",    "agent",   "tool"});
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
