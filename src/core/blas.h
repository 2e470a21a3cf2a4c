// Row-major single-precision matrix product through OpenBLAS, one thread per
// call: dp's own workers give the parallelism.
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// With a pool of more than one worker, the rows of C are split across it.
#pragma once
#include <cstdint>

#include "core/workers.h"

namespace dp {

void gemm(Workers* pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace dp
