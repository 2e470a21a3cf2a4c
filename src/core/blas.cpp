#include "core/blas.h"

#include <cblas.h>

namespace dp {

// OpenBLAS's own threads would compete with dp's device threads, and its
// serial build is not safe to call from several threads at once; so dp uses
// the threaded build limited to one thread per call. This is process-wide.
static void limit_blas_threads() {
  static const bool done = (openblas_set_num_threads(1), true);
  (void)done;
}

static void gemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
              alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void gemm(Workers* pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  limit_blas_threads();
  // Split whichever of M and N is larger, in blocks big enough to keep the
  // kernel efficient; rows of op(A) start at A + m*lda (or A + m when
  // transposed), columns of op(B) at B + n (or B + n*ldb when transposed).
  const int64_t min_block = 32;
  if (!pool || pool->size() == 1 || (M < 2 * min_block && N < 2 * min_block)) {
    gemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M >= N) {
    parallel_for(pool, M, min_block, [&](int64_t b, int64_t e) {
      gemm1(ta, tb, e - b, N, K, alpha, ta ? A + b : A + b * lda, lda, B, ldb, beta, C + b * ldc, ldc);
    });
  } else {
    parallel_for(pool, N, min_block, [&](int64_t b, int64_t e) {
      gemm1(ta, tb, M, e - b, K, alpha, A, lda, tb ? B + b * ldb : B + b, ldb, beta, C + b, ldc);
    });
  }
}

}  // namespace dp
