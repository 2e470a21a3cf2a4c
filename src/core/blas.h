// Row-major single-precision matrix product through oneDNN's sgemm, one
// thread per call: dp's own workers give the parallelism.
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// With a pool of more than one worker, the rows of C are split across it.
// Why oneDNN and not OpenBLAS: README, "Libraries, and why" (measured by
// bench/gemm_engines).
#pragma once
#include <signal.h>

#include <cstdint>
#include <string>

#include "core/workers.h"

namespace dp {

// Every product holds signals off its thread while oneDNN's sgemm runs.
// Its JIT kernels (2.6, Debian's; fixed upstream in March 2026,
// oneDNN#4855) point the stack pointer into a heap buffer while they run
// (oneDNN#4845), so a signal handled in the middle of one writes its frame
// into the heap: the host's Ctrl-C handler, Python's, a profiler's or dp's
// own SIGTERM corrupted the heap (malloc then aborted: "corrupted size vs.
// prev_size"; test_cpu signals products). A signal that arrives meanwhile
// waits, and is handled as soon as the hold ends (or by a thread that does
// not hold it). Faults the processor raises stay open: they cannot wait.
// Holding costs two system calls (about 0.3 us here), so a layer that runs
// many small products in a row (conv2d, one per sample) holds once around
// them; nested holds are free.
class SignalsHeld {
 public:
  SignalsHeld();
  ~SignalsHeld();
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  bool hold_;  // false when this thread already holds them
  sigset_t old_;
};

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
