#pragma once

#include <cstddef>
#include <string_view>

namespace tandem {

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a multi-byte sequence. Used by
// streaming code so that no chunk ends with a broken character.
size_t CompleteUtf8PrefixLength(std::string_view s);

}  // namespace tandem
