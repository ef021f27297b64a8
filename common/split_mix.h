#pragma once

#include <cstdint>

namespace tandem {

// SplitMix64 (one step: add the golden-ratio increment, then the output function): a cheap,
// well-mixed 64-bit hash for deterministic streams and hash chains. Not for anything an
// adversary chooses the inputs of and could gain from colliding.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace tandem
