// Sizes checked before memory is taken (docs/reliability in README.md): an
// element count that overflows, or a model, optimizer or batch that would not
// fit, is refused with DP_ERR_SHAPE / DP_ERR_OUT_OF_MEMORY naming what and
// how many bytes, instead of allocating (and being killed, or thrashing).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace dp {

// a * b, or DP_ERR_SHAPE naming `what` if it overflows int64 or is negative.
int64_t checked_mul(int64_t a, int64_t b, const std::string& what);
int64_t checked_add(int64_t a, int64_t b, const std::string& what);

// Memory the machine can give without swapping (MemAvailable), in bytes; and
// its physical memory. Linux; elsewhere, a large number (no check).
uint64_t available_memory();
uint64_t physical_memory();

// "8.0 PB", "512.0 MB": decimal units, one decimal.
std::string format_bytes(double bytes);

// Refuses (DP_ERR_OUT_OF_MEMORY) `bytes` more for `what` when `held` bytes
// are already taken: above `limit`, or, with limit 0, above the machine's
// available memory plus `held` (what is held was taken from it already).
void check_fits(uint64_t held, uint64_t bytes, uint64_t limit, const std::string& what);

// One owner's share of a running count of held bytes (a model's: what its
// groups and optimizers hold, Model::attached_bytes): set() puts the share's
// bytes in the count, replacing what it had put there; the destructor takes
// them out. The share keeps the count alive.
class HeldShare {
 public:
  HeldShare() = default;
  HeldShare(const HeldShare&) = delete;
  HeldShare& operator=(const HeldShare&) = delete;
  ~HeldShare() {
    if (total_) *total_ -= bytes_;
  }
  void set(const std::shared_ptr<std::atomic<uint64_t>>& total, uint64_t bytes) {
    if (total_) *total_ -= bytes_;
    total_ = total;
    bytes_ = bytes;
    *total_ += bytes;
  }

 private:
  std::shared_ptr<std::atomic<uint64_t>> total_;
  uint64_t bytes_ = 0;
};

}  // namespace dp
