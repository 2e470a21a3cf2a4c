// Counts cudaMalloc and cudaFree calls made by dp (the static dp_internal
// linked into a test, or libdp.so loaded by it): this program defines both
// symbols, so dp's calls bind here, and each forwards to the CUDA runtime's
// own (dlsym RTLD_NEXT). No CUDA header is included, so the file compiles
// in every build; in a build without the CUDA backend nothing calls them.
// cudaError_t is an enum returned as int: 0 is cudaSuccess.
#include "cuda_malloc_counter.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {
std::atomic<long> g_mallocs{0}, g_frees{0};

void* real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    std::fprintf(stderr, "cuda_malloc_counter: dlsym(RTLD_NEXT, \"%s\") failed: %s\n", name, dlerror());
    std::abort();
  }
  return f;
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int cudaMalloc(void** ptr, size_t size) {
  using Fn = int (*)(void**, size_t);
  static Fn fn = reinterpret_cast<Fn>(real("cudaMalloc"));
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return fn(ptr, size);
}

__attribute__((visibility("default"))) int cudaFree(void* ptr) {
  using Fn = int (*)(void*);
  static Fn fn = reinterpret_cast<Fn>(real("cudaFree"));
  g_frees.fetch_add(1, std::memory_order_relaxed);
  return fn(ptr);
}
}

namespace dp_test {
long cuda_mallocs() { return g_mallocs.load(); }
long cuda_frees() { return g_frees.load(); }
}  // namespace dp_test
