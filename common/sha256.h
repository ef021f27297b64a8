#pragma once

#include <string>
#include <string_view>

namespace tandem {

// SHA-256 of `data` as 64 lowercase hex digits (FIPS 180-4). Used to identify policy files.
std::string Sha256Hex(std::string_view data);

}  // namespace tandem
