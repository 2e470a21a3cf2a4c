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

// The OpenBLAS kernel dp's products run on. OpenBLAS built with DYNAMIC_ARCH
// (Debian's) picks it when it loads, from the CPU's model number; on a CPU
// newer than that OpenBLAS (Debian 12's 0.3.21 on an Emerald Rapids Xeon,
// model 207) it falls back to its generic SSE3 kernel, Prescott, which
// trained the Fashion-MNIST MLP 4-7x slower than SkylakeX there. So when
// libdp loads, unless OPENBLAS_CORETYPE is set (the user's choice stands),
// dp runs OpenBLAS's selection again with the kernel the CPU's vector units
// call for (blas_kernel_switch). Process-wide: the host's own calls into the
// same OpenBLAS get it too. `openblas_choice` is OpenBLAS's own kernel when
// dp changed it, "" otherwise.
struct BlasKernel {
  std::string openblas_choice;
};
const BlasKernel& blas_kernel();
// The decision, alone: the kernel to run OpenBLAS's selection with, or "" to
// keep OpenBLAS's `kernel`. Only when OPENBLAS_CORETYPE (`coretype`) is unset
// or empty and `kernel` uses less than a CPU of `cpu_level` has (levels as
// for blas_kernel_advice); then it is `cpu_kernel`.
std::string blas_kernel_switch(const std::string& kernel, int cpu_level, const std::string& cpu_kernel,
                               const char* coretype);

// The processor and the OpenBLAS kernel the products run on, as a phrase:
// "Intel(R) Xeon(R) Processor, OpenBLAS kernel SkylakeX", followed by
// "(dp's choice ...)" naming OpenBLAS's own when dp changed it. When the
// kernel still uses less of the processor than it has (an OpenBLAS built
// for one CPU, which dp cannot switch), a sentence follows that says so.
std::string cpu_description();
// Its sentence, alone: "" unless OPENBLAS_CORETYPE (`coretype`) is unset and
// OpenBLAS's `kernel` uses less than a CPU of vector level `cpu_level` has
// (0: nothing that matters, 1: AVX, 2: AVX2 and FMA, 3: AVX-512 F/BW/VL/DQ);
// then it names `cpu_kernel`, OpenBLAS's kernel for that level.
std::string blas_kernel_advice(const std::string& kernel, int cpu_level, const std::string& cpu_kernel,
                               const char* coretype);

}  // namespace dp
