// tandem-train-classifier: trains the routing classifier's learned tier from labelled JSON lines
// and evaluates it on held-out data.
//
//   tandem-train-classifier --train=train.jsonl --heldout=heldout.jsonl --out=model.tcls
//       [--heldout_sources=heldout_sources.jsonl] --report=EVALUATION.md [--cross_validate]
//                                    train, save, evaluate; --cross_validate adds a
//                                    leave-one-source-out evaluation (one model per source)
//   tandem-train-classifier --model=model.tcls --heldout=heldout.jsonl
//       [--heldout_sources=heldout_sources.jsonl] [--min_accuracy=0.9]
//       [--min_class_accuracy=0.97] [--min_unseen_class_accuracy=0.8]
//                                    evaluate a saved model (exit 1 below either bound, on
//                                    either file)
//
// --heldout_sources holds the examples of whole sources that are never trained on (training
// refuses a training file that shares a source with it); it is evaluated on its own, first.
//
// Every evaluation reports per-class precision, recall and F1, accuracy per class and per
// source, a reliability table with the expected calibration error, and the min_confidence the
// rule in router/classifier/calibration.h recommends.
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "router/classifier/calibration.h"
#include "router/hashed_classifier.h"
#include "tandem/v1/classifier.pb.h"

ABSL_FLAG(std::string, train, "", "Training examples (JSON lines).");
ABSL_FLAG(std::string, heldout, "", "Held-out examples (JSON lines) for the evaluation.");
ABSL_FLAG(std::string, heldout_sources, "",
          "Examples (JSON lines) of whole sources never trained on: evaluated on their own, and "
          "held to --min_accuracy and --min_unseen_class_accuracy.");
ABSL_FLAG(std::string, out, "", "Where to write the trained model.");
ABSL_FLAG(std::string, model, "", "Evaluate this saved model instead of training.");
ABSL_FLAG(std::string, report, "", "Write the evaluation as Markdown here (else stdout).");
ABSL_FLAG(int32_t, buckets_log2, 17, "Hash buckets: 2^N.");
ABSL_FLAG(int32_t, epochs, 10, "Training epochs.");
ABSL_FLAG(double, learning_rate, 2.0, "Initial learning rate (decays linearly to 0).");
ABSL_FLAG(int32_t, format, 3,
          "Model format: 3 (n-grams of the frame, shape tokens, word classes), 2 (without the "
          "word classes) or 1 (every n-gram of the text and nothing else), to compare them.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and the order of the examples.");
ABSL_FLAG(double, dropout, 0,
          "Leave out each feature of a training example with this probability (drawn afresh at "
          "every step).");
ABSL_FLAG(std::string, cross_validate_sources, "",
          "With --cross_validate: only these sources (comma-separated), to measure quickly.");
ABSL_FLAG(double, source_balance, 0,
          "Weigh each training example by (examples of its source)^-N, normalised to a mean of "
          "1: 0 weighs every example alike, 1 gives every source the same say, whatever its "
          "size.");
ABSL_FLAG(bool, class_balance, false,
          "After --source_balance, scale each class's examples to the same total weight.");
ABSL_FLAG(double, min_accuracy, 0, "Exit 1 when held-out accuracy is below this.");
ABSL_FLAG(double, min_unseen_class_accuracy, 0,
          "Exit 1 when the accuracy (recall) of any class on --heldout_sources is below this.");
ABSL_FLAG(double, min_class_accuracy, 0,
          "Exit 1 when the held-out accuracy (recall) of any class is below this.");
ABSL_FLAG(bool, cross_validate, false,
          "When training: also evaluate leave-one-source-out (train without a source, test on "
          "all of it, for every source).");
ABSL_FLAG(double, target_precision, 0.97,
          "The min_confidence rule: the lowest threshold at which every predicted class is right "
          "at least this often.");
ABSL_FLAG(double, band_accuracy, 0.90,
          "The min_confidence rule: the answers just above the threshold (a 0.05 band) must be "
          "right at least this often.");
ABSL_FLAG(std::string, default_class, "accuracy_critical",
          "The policy's default_class: where answers below min_confidence go.");
ABSL_FLAG(int32_t, calibration_bins, 10, "Bins of the reliability table.");
ABSL_FLAG(bool, predict, false,
          "With --model: classify each line of stdin (\\n in a line stands for a newline) and "
          "print class, confidence and text.");
ABSL_FLAG(int32_t, show_errors, 0,
          "Print up to this many misclassified held-out examples to stderr (when adding data).");

namespace {

using tandem::router::HashedClassifier;
using tandem::router::classifier::Scored;
using tandem::v1::LabelledExample;

absl::Status ReadExamples(const std::string& path, std::vector<LabelledExample>* out) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    LabelledExample e;
    if (!google::protobuf::util::JsonStringToMessage(line, &e).ok() || e.label().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": not a labelled example"));
    }
    out->push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<HashedClassifier> LoadModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return HashedClassifier::FromBytes(ss.str());
}

struct Evaluated {
  Scored scored;
  std::string source;
};

// What the exit status and the ctest entry look at.
struct Summary {
  double accuracy = 0;
  std::vector<double> class_accuracy;
};

HashedClassifier TrainOn(const std::vector<std::string>& classes,
                         const std::vector<LabelledExample>& train,
                         const std::string& skip_source) {
  std::map<std::string, int> index;
  for (size_t k = 0; k < classes.size(); ++k) index[classes[k]] = static_cast<int>(k);
  std::vector<std::pair<std::string, int>> examples;
  std::map<std::string, int> per_source;
  for (const auto& e : train) {
    if (e.source() == skip_source) continue;
    examples.emplace_back(e.text(), index[e.label()]);
    ++per_source[e.source()];
  }
  // An example of a source of n counts n^-balance, scaled so that the mean weight is 1; with
  // --class_balance, each class's examples then share the same total weight.
  const double balance = absl::GetFlag(FLAGS_source_balance);
  std::vector<double> weights;
  if (balance > 0 || absl::GetFlag(FLAGS_class_balance)) {
    std::vector<double> per_class(classes.size(), 0);
    for (size_t i = 0, j = 0; i < train.size(); ++i) {
      if (train[i].source() == skip_source) continue;
      weights.push_back(std::pow(per_source[train[i].source()], -balance));
      per_class[examples[j++].second] += weights.back();
    }
    double sum = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (absl::GetFlag(FLAGS_class_balance)) weights[i] /= per_class[examples[i].second];
      sum += weights[i];
    }
    for (double& w : weights) w *= static_cast<double>(weights.size()) / sum;
  }
  HashedClassifier::TrainOptions o;
  o.format = absl::GetFlag(FLAGS_format);
  o.buckets = 1u << absl::GetFlag(FLAGS_buckets_log2);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  o.dropout = absl::GetFlag(FLAGS_dropout);
  o.seed = absl::GetFlag(FLAGS_seed);
  return HashedClassifier::Train(classes, examples, weights, o);
}

// Predictions for the examples whose label the model knows (and, if `only_source` is set, whose
// source is that one).
std::vector<Evaluated> Score(const HashedClassifier& m, const std::vector<LabelledExample>& data,
                             const std::string& only_source = "") {
  std::map<std::string, int> index;
  for (size_t k = 0; k < m.classes().size(); ++k) index[m.classes()[k]] = static_cast<int>(k);
  std::vector<Evaluated> out;
  int shown = 0;
  for (const auto& e : data) {
    auto it = index.find(e.label());
    if (it == index.end() || (!only_source.empty() && e.source() != only_source)) continue;
    const HashedClassifier::Prediction p = m.Predict(e.text());
    if (p.label != it->second && shown < absl::GetFlag(FLAGS_show_errors)) {
      ++shown;
      std::cerr << absl::StrFormat("[%s -> %s %.3f] %s\n", e.source(), m.classes()[p.label],
                                   p.confidence, e.text().substr(0, 160));
    }
    out.push_back({{it->second, p.label, p.confidence}, e.source()});
  }
  return out;
}

std::string ClassSection(const std::vector<Evaluated>& ev, const std::vector<std::string>& classes,
                         Summary* summary) {
  const size_t c = classes.size();
  std::vector<std::vector<int64_t>> confusion(c, std::vector<int64_t>(c, 0));
  int64_t correct = 0;
  for (const auto& e : ev) {
    ++confusion[e.scored.want][e.scored.got];
    if (e.scored.want == e.scored.got) ++correct;
  }
  summary->accuracy = ev.empty() ? 0 : static_cast<double>(correct) / ev.size();
  std::string r = absl::StrFormat("Examples: %d. Accuracy: **%.2f%%**.\n\n", ev.size(),
                                  100 * summary->accuracy);
  r += "| class | precision | recall (class accuracy) | F1 | support |\n|---|---|---|---|---|\n";
  summary->class_accuracy.assign(c, 0);
  for (size_t k = 0; k < c; ++k) {
    int64_t tp = confusion[k][k], predicted = 0, actual = 0;
    for (size_t j = 0; j < c; ++j) {
      predicted += confusion[j][k];
      actual += confusion[k][j];
    }
    const double p = predicted ? static_cast<double>(tp) / predicted : 0;
    const double rc = actual ? static_cast<double>(tp) / actual : 0;
    summary->class_accuracy[k] = rc;
    r += absl::StrFormat("| %s | %.3f | %.3f | %.3f | %d |\n", classes[k], p, rc,
                         p + rc > 0 ? 2 * p * rc / (p + rc) : 0.0, actual);
  }
  r += "\nConfusion matrix (rows: true class, columns: predicted):\n\n| |";
  for (const auto& name : classes) r += " " + name + " |";
  r += "\n|---|";
  for (size_t k = 0; k < c; ++k) r += "---|";
  r += "\n";
  for (size_t k = 0; k < c; ++k) {
    r += "| " + classes[k] + " |";
    for (size_t j = 0; j < c; ++j) r += absl::StrFormat(" %d |", confusion[k][j]);
    r += "\n";
  }
  return r;
}

std::string SourceSection(const std::vector<Evaluated>& ev,
                          const std::vector<std::string>& classes) {
  struct Tally {
    int64_t right = 0, total = 0;
    double confidence = 0;
    int label = 0;
  };
  std::map<std::string, Tally> by_source;
  for (const auto& e : ev) {
    Tally& t = by_source[e.source];
    ++t.total;
    t.confidence += e.scored.confidence;
    t.label = e.scored.want;
    if (e.scored.want == e.scored.got) ++t.right;
  }
  std::string r =
      "\nAccuracy by source:\n\n| source | class | accuracy | mean confidence | examples |\n"
      "|---|---|---|---|---|\n";
  for (const auto& [source, t] : by_source) {
    r += absl::StrFormat("| %s | %s | %.2f%% | %.3f | %d |\n", source, classes[t.label],
                         100.0 * t.right / t.total, t.confidence / t.total, t.total);
  }
  return r;
}

std::string CalibrationSection(const std::vector<Evaluated>& ev,
                               const std::vector<std::string>& classes) {
  namespace cal = tandem::router::classifier;
  std::vector<Scored> scored;
  for (const auto& e : ev) scored.push_back(e.scored);
  const int c = static_cast<int>(classes.size());
  const auto bins = cal::Reliability(scored, c, absl::GetFlag(FLAGS_calibration_bins));
  std::string r =
      "\nReliability (confidence = the model's probability of the class it picked):\n\n"
      "| confidence | examples | mean confidence | accuracy |\n|---|---|---|---|\n";
  for (const auto& b : bins) {
    if (b.count == 0) {
      r += absl::StrFormat("| %.2f-%.2f | 0 | - | - |\n", b.lo, b.hi);
      continue;
    }
    r += absl::StrFormat("| %.2f-%.2f | %d | %.3f | %.2f%% |\n", b.lo, b.hi, b.count,
                         b.mean_confidence, 100 * b.accuracy);
  }
  r += absl::StrFormat("\nExpected calibration error (ECE, %d bins): **%.4f**\n",
                       absl::GetFlag(FLAGS_calibration_bins), cal::ExpectedCalibrationError(bins));
  const double target = absl::GetFlag(FLAGS_target_precision);
  const double band = absl::GetFlag(FLAGS_band_accuracy);
  const auto choice = cal::RecommendMinConfidence(scored, c, target, band);
  int default_class = 0;
  for (int k = 0; k < c; ++k) {
    if (classes[k] == absl::GetFlag(FLAGS_default_class)) default_class = k;
  }
  r += absl::StrCat("\nRouting by threshold (answers below it go to ", classes[default_class],
                    "):\n\n| min_confidence | at or above |");
  for (int k = 0; k < c; ++k) r += " " + classes[k] + " routed right |";
  r += "\n|---|---|";
  for (int k = 0; k < c; ++k) r += "---|";
  r += "\n";
  for (double t : {0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95}) {
    int64_t kept = 0;
    for (const Scored& s : scored) kept += s.confidence >= t ? 1 : 0;
    r += absl::StrFormat("| %.2f | %.2f%% |", t,
                         scored.empty() ? 0.0 : 100.0 * kept / scored.size());
    const auto routed = cal::RoutedAccuracy(scored, c, t, default_class);
    for (int k = 0; k < c; ++k) r += absl::StrFormat(" %.2f%% |", 100 * routed[k]);
    r += "\n";
  }
  if (!choice.found) {
    return r + absl::StrFormat(
                   "\nmin_confidence: no threshold up to 0.99 makes every predicted class "
                   "%.0f%% right with the band above it %.0f%% right.\n",
                   100 * target, 100 * band);
  }
  const auto routed = cal::RoutedAccuracy(scored, c, choice.threshold, default_class);
  r += absl::StrFormat(
      "\nRecommended min_confidence: **%.2f** (the lowest threshold, in steps of 0.01, at which "
      "every class the model predicts with at least that confidence is right >= %.0f%% of the "
      "time, and the least confident of those, within 0.05 of the lowest, are right >= %.0f%% of "
      "the time). Coverage: "
      "%.2f%% of these examples are at or above it; the other %.2f%% go to the default class "
      "(%s). Accuracy per class after that routing:",
      choice.threshold, 100 * target, 100 * band, 100 * choice.coverage,
      100 * (1 - choice.coverage), classes[default_class]);
  for (int k = 0; k < c; ++k) {
    r += absl::StrFormat(" %s %.2f%%%s", classes[k], 100 * routed[k], k + 1 < c ? "," : ".\n");
  }
  return r;
}

std::string Describe(const std::vector<Evaluated>& ev, const std::vector<std::string>& classes,
                     Summary* summary) {
  return ClassSection(ev, classes, summary) + SourceSection(ev, classes) +
         CalibrationSection(ev, classes);
}

// Leave-one-source-out: for every source, a model trained without it, tested on all of its
// examples (train and held-out files); the pooled predictions are reported as one evaluation.
std::string CrossValidate(const std::vector<std::string>& classes,
                          const std::vector<LabelledExample>& train,
                          const std::vector<LabelledExample>& heldout) {
  std::vector<LabelledExample> all = train;
  all.insert(all.end(), heldout.begin(), heldout.end());
  std::set<std::string> sources;
  for (const auto& e : all) sources.insert(e.source());
  if (!absl::GetFlag(FLAGS_cross_validate_sources).empty()) {
    const std::vector<std::string> only =
        absl::StrSplit(absl::GetFlag(FLAGS_cross_validate_sources), ',');
    sources = std::set<std::string>(only.begin(), only.end());
  }
  std::vector<Evaluated> pooled;
  for (const std::string& source : sources) {
    const HashedClassifier m = TrainOn(classes, train, source);
    auto ev = Score(m, all, source);
    pooled.insert(pooled.end(), ev.begin(), ev.end());
  }
  Summary ignored;
  return absl::StrFormat(
             "\n## Leave-one-source-out\n\n%d models, one per source: each trained on the "
             "training file without that source and tested on every example of it. This is the "
             "estimate for traffic unlike anything trained on.\n\n",
             sources.size()) +
         Describe(pooled, classes, &ignored);
}

// --predict: classifies each stdin line ("\\n" for a newline) with the model at `path`.
int Predict(const std::string& path) {
  auto m = LoadModel(path);
  if (!m.ok()) {
    std::cerr << path << ": " << m.status().message() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::string text = absl::StrReplaceAll(line, {{"\\n", "\n"}});
    const auto p = m->Predict(text);
    std::cout << absl::StrFormat("%s %.3f %s\n", m->classes()[p.label], p.confidence, line);
  }
  return 0;
}

// Reads --heldout (required) and --heldout_sources. 0, or the exit status (2) after saying why.
int ReadHeldOut(std::vector<LabelledExample>* heldout,
                std::vector<LabelledExample>* heldout_sources) {
  if (absl::GetFlag(FLAGS_heldout).empty()) {
    std::cerr << "--heldout=FILE is required\n";
    return 2;
  }
  if (absl::Status s = ReadExamples(absl::GetFlag(FLAGS_heldout), heldout); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (!absl::GetFlag(FLAGS_heldout_sources).empty()) {
    if (absl::Status s = ReadExamples(absl::GetFlag(FLAGS_heldout_sources), heldout_sources);
        !s.ok()) {
      std::cerr << s.message() << "\n";
      return 2;
    }
  }
  return 0;
}

// Whether the model's shape, the schedule, --dropout and --cross_validate_sources make sense for
// `train`; says why not. A model of more than 2^24 buckets would train and then not load
// (HashedClassifier::FromBytes' bound).
bool TrainingFlagsValid(const std::vector<LabelledExample>& train) {
  const int format = absl::GetFlag(FLAGS_format);
  const int buckets_log2 = absl::GetFlag(FLAGS_buckets_log2);
  const double learning_rate = absl::GetFlag(FLAGS_learning_rate);
  if (format < 1 || format > 3) {
    std::cerr << "--format must be 1, 2 or 3, got " << format << "\n";
    return false;
  }
  if (buckets_log2 < 1 || buckets_log2 > 24) {
    std::cerr << "--buckets_log2 must be in [1, 24], got " << buckets_log2 << "\n";
    return false;
  }
  if (absl::GetFlag(FLAGS_epochs) < 1 || !(learning_rate > 0)) {
    std::cerr << "--epochs must be at least 1 and --learning_rate above 0, got "
              << absl::GetFlag(FLAGS_epochs) << " and " << learning_rate << "\n";
    return false;
  }
  const double dropout = absl::GetFlag(FLAGS_dropout);
  if (!(dropout >= 0 && dropout < 1)) {
    std::cerr << "--dropout must be in [0, 1), got " << dropout << "\n";
    return false;
  }
  const std::string only = absl::GetFlag(FLAGS_cross_validate_sources);
  if (only.empty()) return true;
  std::set<std::string> sources;
  for (const auto& e : train) sources.insert(e.source());
  const std::vector<std::string> names = absl::StrSplit(only, ',');
  for (const std::string& name : names) {
    if (!sources.count(name)) {
      std::cerr << "--cross_validate_sources: no training source named '" << name << "'\n";
      return false;
    }
  }
  return true;
}

// Trains on --train and saves the model to --out; `train` gets the examples and `header` the
// report's line on how the model was trained. None of `unseen_sources` (--heldout_sources') may
// be in the training file. 0, or the exit status (2) after saying why.
int TrainModel(const std::set<std::string>& unseen_sources, std::vector<LabelledExample>* train,
               std::optional<HashedClassifier>* model, std::string* header) {
  if (absl::GetFlag(FLAGS_train).empty() || absl::GetFlag(FLAGS_out).empty()) {
    std::cerr << "--train=FILE and --out=FILE are required to train\n";
    return 2;
  }
  if (absl::Status s = ReadExamples(absl::GetFlag(FLAGS_train), train); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  std::set<std::string> labels;
  for (const auto& e : *train) {
    labels.insert(e.label());
    if (unseen_sources.count(e.source())) {
      std::cerr << "source " << e.source() << " is in --heldout_sources and in --train\n";
      return 2;
    }
  }
  if (!TrainingFlagsValid(*train)) return 2;
  const auto start = std::chrono::steady_clock::now();
  *model = TrainOn(std::vector<std::string>(labels.begin(), labels.end()), *train, "");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ofstream(absl::GetFlag(FLAGS_out), std::ios::binary) << (*model)->ToBytes();
  // The time goes to stderr, not the report, so the report is the same on every run.
  std::cerr << absl::StrFormat("trained in %.1f s\n", seconds);
  *header = absl::StrFormat(
      "Trained on %d examples: model format %d, 2^%d hash buckets, %d epochs, learning rate "
      "%.2f, source balance %.2f, feature dropout %.2f%s. Reproduce: "
      "`bash scripts/train_classifier.sh`.\n\n",
      train->size(), absl::GetFlag(FLAGS_format), absl::GetFlag(FLAGS_buckets_log2),
      absl::GetFlag(FLAGS_epochs), absl::GetFlag(FLAGS_learning_rate),
      absl::GetFlag(FLAGS_source_balance), absl::GetFlag(FLAGS_dropout),
      absl::GetFlag(FLAGS_class_balance) ? ", classes balanced" : "");
  return 0;
}

// The report's evaluations: the held-out sources (when there are any) first, then everything
// held out, then (with --cross_validate, after training) leave-one-source-out. `summaries` gets
// the held-out one first, then the held-out sources'.
std::string Evaluate(const HashedClassifier& model, const std::vector<LabelledExample>& heldout,
                     const std::vector<LabelledExample>& heldout_sources,
                     const std::set<std::string>& unseen_sources,
                     const std::vector<LabelledExample>& train, std::vector<Summary>* summaries) {
  summaries->assign(1, Summary());
  std::string report;
  if (!heldout_sources.empty()) {
    summaries->emplace_back();
    report += absl::StrCat(
        "## Held-out sources\n\nWhole sources never trained on, in any form: ",
        absl::StrJoin(unseen_sources, ", "),
        ". Each kind of traffic they stand for is trained from other sources (see "
        "router/classifier/data/sources/README.md). This is the estimate for traffic from "
        "sources the model has not seen.\n\n",
        Describe(Score(model, heldout_sources), model.classes(), &summaries->back()), "\n");
  }
  report +=
      "## Held-out phrasings of the trained sources\n\n"
      "Held out, never trained on, from sources that are trained on: whole templates of every "
      "templated family and whole MBPP tasks. This is the estimate for traffic like the "
      "training data.\n\n" +
      Describe(Score(model, heldout), model.classes(), &summaries->front());
  if (absl::GetFlag(FLAGS_cross_validate) && !train.empty()) {
    report += CrossValidate(model.classes(), train, heldout);
  }
  return report;
}

// Whether every evaluation meets --min_accuracy and the class bounds (--min_class_accuracy on
// --heldout, --min_unseen_class_accuracy on --heldout_sources); says which do not.
bool WithinBounds(const std::vector<Summary>& summaries, const std::vector<std::string>& classes) {
  bool ok = true;
  for (size_t i = 0; i < summaries.size(); ++i) {
    const Summary& summary = summaries[i];
    const char* what = i == 0 ? "held-out" : "held-out sources";
    if (summary.accuracy < absl::GetFlag(FLAGS_min_accuracy)) {
      std::cerr << absl::StrFormat("%s accuracy %.2f%% is below %.2f%%\n", what,
                                   100 * summary.accuracy, 100 * absl::GetFlag(FLAGS_min_accuracy));
      ok = false;
    }
    const double min_class = i == 0 ? absl::GetFlag(FLAGS_min_class_accuracy)
                                    : absl::GetFlag(FLAGS_min_unseen_class_accuracy);
    for (size_t k = 0; k < summary.class_accuracy.size(); ++k) {
      if (summary.class_accuracy[k] < min_class) {
        std::cerr << absl::StrFormat("class %s: %s accuracy %.2f%% is below %.2f%%\n", classes[k],
                                     what, 100 * summary.class_accuracy[k], 100 * min_class);
        ok = false;
      }
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_predict) && !absl::GetFlag(FLAGS_model).empty()) {
    return Predict(absl::GetFlag(FLAGS_model));
  }
  std::vector<LabelledExample> heldout, heldout_sources, train;
  if (const int status = ReadHeldOut(&heldout, &heldout_sources); status != 0) return status;
  std::set<std::string> unseen_sources;
  for (const auto& e : heldout_sources) unseen_sources.insert(e.source());
  std::optional<HashedClassifier> model;
  std::string header;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    auto m = LoadModel(absl::GetFlag(FLAGS_model));
    if (!m.ok()) {
      std::cerr << absl::GetFlag(FLAGS_model) << ": " << m.status().message() << "\n";
      return 1;
    }
    model = std::move(*m);
  } else if (const int status = TrainModel(unseen_sources, &train, &model, &header); status != 0) {
    return status;
  }
  std::vector<Summary> summaries;
  const std::string report =
      header + Evaluate(*model, heldout, heldout_sources, unseen_sources, train, &summaries);
  if (!absl::GetFlag(FLAGS_report).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_report)) << "# Routing classifier evaluation\n\n" << report;
  }
  std::cout << report;
  return WithinBounds(summaries, model->classes()) ? 0 : 1;
}
