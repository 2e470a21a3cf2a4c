// Row-major single-precision matrix product through OpenBLAS, one thread per
// call: dp's own workers give the parallelism.
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// With a pool of more than one worker, the rows of C are split across it.
#pragma once
#include <cstdint>
#include <string>

#include "core/workers.h"

namespace dp {

void gemm(Workers* pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The processor and the OpenBLAS kernel the products run on, as a phrase:
// "Intel(R) Xeon(R) Processor, OpenBLAS kernel SkylakeX". When that kernel
// uses less of the processor than it has (OpenBLAS did not recognise the
// CPU, as on some virtual machines, and OPENBLAS_CORETYPE is unset), a
// sentence follows that says so and names the OPENBLAS_CORETYPE that would
// use it (it must be set before the process starts: OpenBLAS reads it when
// it loads).
std::string cpu_description();
// Its sentence, alone: "" unless OPENBLAS_CORETYPE (`coretype`) is unset and
// OpenBLAS's `kernel` uses less than a CPU of vector level `cpu_level` has
// (0: nothing that matters, 1: AVX, 2: AVX2 and FMA, 3: AVX-512 F/BW/VL/DQ);
// then it names `cpu_kernel`, OpenBLAS's kernel for that level.
std::string blas_kernel_advice(const std::string& kernel, int cpu_level, const std::string& cpu_kernel,
                               const char* coretype);

}  // namespace dp
