// Counts every heap allocation of the test program (replaces global new),
// and fails one on request.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long> g_allocs{0};
std::atomic<long> g_fail_at{0};  // the allocation (by count) that fails; 0: none

void* alloc(std::size_t n, std::size_t align) {
  const long k = g_allocs.fetch_add(1, std::memory_order_relaxed) + 1;
  if (k == g_fail_at.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else {
    std::size_t rounded = (n + align - 1) / align * align;
    p = std::aligned_alloc(align, rounded);
  }
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

namespace dp {
namespace test {
long allocations() { return g_allocs.load(); }
void fail_allocation(long nth) { g_fail_at.store(nth > 0 ? g_allocs.load() + nth : 0); }
}  // namespace test
}  // namespace dp

void* operator new(std::size_t n) { return alloc(n, 0); }
void* operator new[](std::size_t n) { return alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return alloc(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
