// Row-major single-precision matrix product through oneDNN's sgemm, one
// thread per call: dp's own workers give the parallelism.
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// With a pool of more than one worker, the rows of C are split across it.
// Why oneDNN and not OpenBLAS: README, "Libraries, and why" (measured by
// bench/gemm_engines).
#pragma once
#include <cstdint>
#include <string>

#include "core/workers.h"

namespace dp {

void gemm(Workers* pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The processor and what dp's products run on, as a phrase: "AMD EPYC,
// oneDNN 2.6.3 sgemm, avx512_core". oneDNN picks its kernels from the
// CPU's vector units (cpuid), not from a list of CPU models; ONEDNN_MAX_CPU_ISA
// (or DNNL_MAX_CPU_ISA) in the environment caps them, and the name then says
// the capped set.
std::string cpu_description();

// oneDNN's name of an instruction set it reports (dnnl_cpu_isa_t), e.g.
// "avx512_core"; "isa 0x..." for a value this build does not know.
std::string cpu_isa_name(unsigned isa);

}  // namespace dp
