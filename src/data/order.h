// The order of an epoch: a Fisher–Yates shuffle whose swaps come from a
// counter-based generator keyed by (seed, epoch), so the order is a pure
// function of those two numbers, whichever thread computes it and whatever
// happened before (a seek, a restart from a checkpoint).
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace dp {

// Keys of the loader's random streams, kept apart so that the shuffle of
// epoch e and the transforms of sample i never share a stream.
inline uint64_t shuffle_key(uint64_t seed, int64_t epoch) {
  return hash_keys(seed ^ 0x73687566666c6521ull /* "shuffle!" */, static_cast<uint64_t>(epoch));
}
inline uint64_t transform_key(uint64_t seed, int64_t epoch, int64_t index) {
  return hash_keys(seed ^ 0x7472616e73666f72ull /* "transfor" */, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
}

// order.size() must be n already (so this never allocates once sized).
inline void epoch_order(uint64_t seed, int64_t epoch, std::vector<int64_t>& order) {
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  const uint64_t key = shuffle_key(seed, epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    // j uniform in [0, i]: the high word of a 64x64-bit product (Lemire),
    // bias below 2^-32 for any dataset that fits in memory.
    uint64_t r = mix64(key ^ mix64(static_cast<uint64_t>(i)));
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
}

}  // namespace dp
