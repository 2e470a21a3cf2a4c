// Heap allocations of the whole program so far, all threads, libdp's
// included: tests/alloc_counter.cpp replaces the global operator new. Link
// that file into a test (or benchmark) to use this.
#pragma once

namespace dp {
namespace test {
long allocations();
}  // namespace test
}  // namespace dp
