#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::router {

// The question a policy's second-opinion model is asked when the learned tier is unsure
// (classifier.second_opinion): a system message listing the classes by letter, and the request's
// text; the answer is one token.
struct SecondOpinionQuestion {
  std::string system;
  std::string user;
};

// Only this many bytes of the request's text are sent: enough to see what is asked, and a
// prefill of a few hundred tokens at most.
inline constexpr size_t kSecondOpinionTextBytes = 2048;

SecondOpinionQuestion SecondOpinionPrompt(const std::vector<std::string>& classes,
                                          std::string_view text);

// The class an answer names: its first letter (A for the first class, ...) or a class's name;
// empty when it names none.
std::string SecondOpinionClass(const std::vector<std::string>& classes, std::string_view answer);

}  // namespace tandem::router
