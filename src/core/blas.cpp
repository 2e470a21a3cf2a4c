#include "core/blas.h"

#include <dnnl.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <new>

#include "core/error.h"

// GCC's OpenMP runtime (libgomp), which Debian's oneDNN runs on: the two
// calls dp makes, declared here rather than through omp.h, which only
// GCC's own include folder has (clang's builds link the same libgomp).
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int);

namespace dp {

// oneDNN 2.6's JIT kernels point the stack pointer into a heap buffer
// while they run (blas.h, SignalsHeld).
namespace {
thread_local bool t_signals_held = false;
}  // namespace

SignalsHeld::SignalsHeld() : hold_(!t_signals_held) {
  if (!hold_) return;
  sigset_t all;
  sigfillset(&all);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&all, fault);
  pthread_sigmask(SIG_BLOCK, &all, &old_);
  t_signals_held = true;
}

SignalsHeld::~SignalsHeld() {
  if (!hold_) return;
  t_signals_held = false;
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

// One product on the calling thread. Debian's oneDNN runs on OpenMP and
// would start a team of omp_get_max_threads() threads for each call (dp's
// device threads would then compete with it), so the calling thread's
// OpenMP limit is 1 for the call and restored after (the host's own OpenMP
// use is left as it was). oneDNN takes its packing buffers from malloc per
// call; glibc serves them from its free lists, no system call per step
// (README, "Libraries, and why").
static void gemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int threads = omp_get_max_threads();
  if (threads != 1) omp_set_num_threads(1);
  const SignalsHeld held;
  const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (threads != 1) omp_set_num_threads(threads);
  if (s == dnnl_out_of_memory) throw std::bad_alloc();
  if (s != dnnl_success)
    fail(DP_ERR_INTERNAL, "oneDNN's sgemm refused a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                              std::to_string(K) + " product (dnnl status " + std::to_string(int(s)) + ")");
}

void gemm(Workers* pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
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

std::string cpu_isa_name(unsigned isa) {
  switch (isa) {
    case dnnl_cpu_isa_all: return "no vector extensions";  // what oneDNN reports below SSE4.1
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "isa 0x%x", isa);
  return hex;
}

std::string cpu_description() {
  std::string model;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; model.empty() && std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
    }
  const dnnl_version_t* v = dnnl_version();
  return (model.empty() ? std::string("CPU") : model) + ", oneDNN " + std::to_string(v->major) + "." +
         std::to_string(v->minor) + "." + std::to_string(v->patch) + " sgemm, " +
         cpu_isa_name(unsigned(dnnl_get_effective_cpu_isa()));
}

}  // namespace dp
