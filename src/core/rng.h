// Counter-based random numbers: a value is a pure function of its keys, so a
// dropout mask or an initial weight never depends on which device or thread
// draws it, nor on how a batch was split.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace dp {

// splitmix64 finaliser: a well-mixed 64-bit hash of one word.
DP_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

DP_HD inline uint64_t hash_keys(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }
DP_HD inline uint64_t hash_keys(uint64_t a, uint64_t b, uint64_t c) {
  return hash_keys(hash_keys(a, b), c);
}

// Uniform float in [0, 1) from a stream key and a counter within the stream.
DP_HD inline float uniform01(uint64_t key, uint64_t counter) {
  return static_cast<float>(mix64(key ^ mix64(counter)) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace dp
