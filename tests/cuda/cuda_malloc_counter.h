// cudaMalloc / cudaFree calls of the whole program so far (dp's included):
// link cuda_malloc_counter.cpp to use these.
#pragma once

namespace dp_test {
long cuda_mallocs();
long cuda_frees();
}  // namespace dp_test
