// Heap allocations of the whole program so far, all threads, libdp's
// included: tests/alloc_counter.cpp replaces the global operator new. Link
// that file into a test (or benchmark) to use this.
#pragma once

namespace dp {
namespace test {
long allocations();
// The nth allocation from now (1: the next one), on any thread, throws
// std::bad_alloc (nothrow new returns NULL); 0 cancels.
void fail_allocation(long nth);
}  // namespace test
}  // namespace dp
