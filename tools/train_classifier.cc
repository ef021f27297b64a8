// tandem-train-classifier: trains the routing classifier's learned tier from labelled JSON lines
// and evaluates it on held-out data.
//
//   tandem-train-classifier --train=train.jsonl --heldout=heldout.jsonl --out=model.tcls
//       --report=EVALUATION.md       train, save, evaluate
//   tandem-train-classifier --model=model.tcls --heldout=heldout.jsonl [--min_accuracy=0.9]
//                                    evaluate a saved model (exit 1 below --min_accuracy)
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "router/hashed_classifier.h"
#include "tandem/v1/classifier.pb.h"

ABSL_FLAG(std::string, train, "", "Training examples (JSON lines).");
ABSL_FLAG(std::string, heldout, "", "Held-out examples (JSON lines) for the evaluation.");
ABSL_FLAG(std::string, out, "", "Where to write the trained model.");
ABSL_FLAG(std::string, model, "", "Evaluate this saved model instead of training.");
ABSL_FLAG(std::string, report, "", "Write the evaluation as Markdown here (else stdout).");
ABSL_FLAG(int32_t, buckets_log2, 17, "Hash buckets: 2^N.");
ABSL_FLAG(int32_t, epochs, 10, "Training epochs.");
ABSL_FLAG(double, learning_rate, 2.0, "Initial learning rate (decays linearly to 0).");
ABSL_FLAG(double, min_accuracy, 0, "Exit 1 when held-out accuracy is below this.");

namespace {

using tandem::router::HashedClassifier;

bool ReadExamples(const std::string& path, std::vector<tandem::v1::LabelledExample>* out) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "cannot read " << path << "\n";
    return false;
  }
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    tandem::v1::LabelledExample e;
    if (!google::protobuf::util::JsonStringToMessage(line, &e).ok() || e.label().empty()) {
      std::cerr << path << ":" << n << ": not a labelled example\n";
      return false;
    }
    out->push_back(std::move(e));
  }
  return true;
}

std::string Evaluate(const HashedClassifier& m,
                     const std::vector<tandem::v1::LabelledExample>& heldout, double* accuracy) {
  const auto& classes = m.classes();
  const size_t c = classes.size();
  std::vector<std::vector<int64_t>> confusion(c, std::vector<int64_t>(c, 0));
  std::map<std::string, std::pair<int64_t, int64_t>> by_source;  // correct, total
  int64_t correct = 0;
  int64_t skipped = 0;
  int64_t majority = 0;
  std::map<std::string, int> index;
  for (size_t k = 0; k < c; ++k) index[classes[k]] = static_cast<int>(k);
  for (const auto& e : heldout) {
    auto it = index.find(e.label());
    if (it == index.end()) {
      ++skipped;
      continue;
    }
    const int want = it->second;
    const int got = m.Predict(e.text()).label;
    ++confusion[want][got];
    auto& s = by_source[e.source()];
    ++s.second;
    if (want == got) {
      ++correct;
      ++s.first;
    }
    if (e.label() == "accuracy_critical") ++majority;
  }
  const int64_t total = static_cast<int64_t>(heldout.size()) - skipped;
  *accuracy = total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0;
  std::string r = absl::StrFormat(
      "Held-out examples: %d. Accuracy: **%.2f%%**. Baseline \"send everything to Qwen\" "
      "(always accuracy_critical): %.2f%%.\n\n",
      total, 100 * *accuracy, total > 0 ? 100.0 * majority / total : 0.0);
  r += "| class | precision | recall | F1 | support |\n|---|---|---|---|---|\n";
  for (size_t k = 0; k < c; ++k) {
    int64_t tp = confusion[k][k], predicted = 0, actual = 0;
    for (size_t j = 0; j < c; ++j) {
      predicted += confusion[j][k];
      actual += confusion[k][j];
    }
    const double p = predicted ? static_cast<double>(tp) / predicted : 0;
    const double rc = actual ? static_cast<double>(tp) / actual : 0;
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
  r += "\nAccuracy by source:\n\n| source | accuracy | examples |\n|---|---|---|\n";
  for (const auto& [source, s] : by_source) {
    r += absl::StrFormat("| %s | %.2f%% | %d |\n", source, 100.0 * s.first / s.second, s.second);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<tandem::v1::LabelledExample> heldout;
  if (absl::GetFlag(FLAGS_heldout).empty() ||
      !ReadExamples(absl::GetFlag(FLAGS_heldout), &heldout)) {
    std::cerr << "--heldout=FILE is required\n";
    return 2;
  }
  std::optional<HashedClassifier> model;
  std::string header;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_model), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto m = HashedClassifier::FromBytes(ss.str());
    if (!m.ok()) {
      std::cerr << absl::GetFlag(FLAGS_model) << ": " << m.status().message() << "\n";
      return 1;
    }
    model = std::move(*m);
  } else {
    std::vector<tandem::v1::LabelledExample> train;
    if (absl::GetFlag(FLAGS_train).empty() || !ReadExamples(absl::GetFlag(FLAGS_train), &train) ||
        absl::GetFlag(FLAGS_out).empty()) {
      std::cerr << "--train=FILE and --out=FILE are required to train\n";
      return 2;
    }
    std::set<std::string> labels;
    for (const auto& e : train) labels.insert(e.label());
    std::vector<std::string> classes(labels.begin(), labels.end());
    std::map<std::string, int> index;
    for (size_t k = 0; k < classes.size(); ++k) index[classes[k]] = static_cast<int>(k);
    std::vector<std::pair<std::string, int>> examples;
    for (const auto& e : train) examples.emplace_back(e.text(), index[e.label()]);
    HashedClassifier::TrainOptions o;
    o.buckets = 1u << absl::GetFlag(FLAGS_buckets_log2);
    o.epochs = absl::GetFlag(FLAGS_epochs);
    o.learning_rate = absl::GetFlag(FLAGS_learning_rate);
    const auto start = std::chrono::steady_clock::now();
    model = HashedClassifier::Train(classes, examples, o);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::ofstream(absl::GetFlag(FLAGS_out), std::ios::binary) << model->ToBytes();
    header = absl::StrFormat(
        "Trained on %d examples in %.1f s: 2^%d hash buckets, %d epochs, learning rate %.2f.\n\n",
        examples.size(), seconds, absl::GetFlag(FLAGS_buckets_log2), o.epochs, o.learning_rate);
  }
  double accuracy = 0;
  const std::string report = header + Evaluate(*model, heldout, &accuracy);
  if (!absl::GetFlag(FLAGS_report).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_report)) << "# Routing classifier evaluation\n\n" << report;
  }
  std::cout << report;
  return accuracy >= absl::GetFlag(FLAGS_min_accuracy) ? 0 : 1;
}
