#pragma once

// The element-wise generator of random weights (--random_weights, tandem-make-checkpoint): a
// pure function of (seed, tensor name, element index), so the same weights come out wherever
// they are made. The CPU reference (safetensors.h TensorView::Element), the checkpoint writer
// (random_checkpoint.cc) and the CUDA fill kernel (workers/cuda/random_fill.cu) all call
// RandomWeight below; a checkpoint written with seed S therefore holds exactly the weights an
// engine generates in memory with seed S, and a device fill equals the host one bit for bit.
//
// Plain C++17 that nvcc also compiles for the device: no exceptions, no library calls on the
// device path.

#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem::workers::model {

// How one tensor is filled: element i is uniform in [center - half_width, center + half_width],
// rounded to BF16, from the counter-based stream `key` (RandomTensorKey).
struct RandomFill {
  uint64_t key = 0;
  float center = 0.0f;
  float half_width = 0.0f;
};

// A float's bits and back, on the host and in a kernel alike.
TANDEM_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

TANDEM_HOST_DEVICE inline float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// SplitMix64's output function: a bijection on 64 bits with good avalanche.
TANDEM_HOST_DEVICE inline uint64_t RandomMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The stream of one tensor: FNV-1a of its checkpoint name mixed with the seed. Host only (the
// key is computed once per tensor and handed to the device).
inline uint64_t RandomTensorKey(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return RandomMix64(h ^ RandomMix64(seed + 0x9E3779B97F4A7C15ull));
}

// Element `index` of the tensor `fill` describes, exactly representable in BF16 (so writing it
// as BF16 or F32 and reading it back gives the same float).
//
// Bit-exact on host and device by construction: the 24 random bits give an odd multiple s of
// 2^-24 in (-1, 1); half_width * s is exact in double (24 x 24 significant bits), so
// center + half_width * s rounds once in double whether or not the compiler fuses it into an
// FMA; the double -> float conversion and the BF16 rounding (to nearest even, on the bits) are
// the same everywhere.
TANDEM_HOST_DEVICE inline float RandomWeight(const RandomFill& fill, int64_t index) {
  const uint64_t bits =
      RandomMix64(fill.key + (static_cast<uint64_t>(index) + 1) * 0x9E3779B97F4A7C15ull);
  const int64_t odd = static_cast<int64_t>(((bits >> 40) << 1) | 1) - (int64_t{1} << 24);
  const double s = static_cast<double>(odd) * (1.0 / 16777216.0);
  const double v = static_cast<double>(fill.center) + static_cast<double>(fill.half_width) * s;
  uint32_t u = FloatBits(static_cast<float>(v));
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;  // finite by construction: no NaN case
  return BitsFloat(u);
}

// The BF16 bit pattern of RandomWeight (its top 16 bits; the low 16 are zero).
TANDEM_HOST_DEVICE inline uint16_t RandomWeightBf16(const RandomFill& fill, int64_t index) {
  return static_cast<uint16_t>(FloatBits(RandomWeight(fill, index)) >> 16);
}

}  // namespace tandem::workers::model
