#include "core/blas.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

namespace dp {

// OpenBLAS's own threads would compete with dp's device threads, and its
// serial build is not safe to call from several threads at once; so dp uses
// the threaded build limited to one thread per call. This is process-wide.
static void limit_blas_threads() {
  static const bool done = (blas_kernel(), openblas_set_num_threads(1), true);
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

static const char* const kUnits[] = {"no AVX", "AVX", "AVX2", "AVX-512"};

// Vector extensions, as levels: 0 none that matters, 1 AVX, 2 AVX2 + FMA,
// 3 AVX-512 (F, BW, VL, DQ: what OpenBLAS's SkylakeX kernel needs).
static int kernel_level(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* k : {"skylakex", "cooperlake", "sapphirerapids"})
    if (name == k) return 3;
  for (const char* k : {"haswell", "zen", "excavator"})
    if (name == k) return 2;
  for (const char* k : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (name == k) return 1;
  return 0;
}

// The best level this CPU and OS give, and the OpenBLAS kernel for it.
static int cpu_level(const char** kernel) {
  *kernel = "";
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    *kernel = "SkylakeX";
    return 3;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *kernel = __builtin_cpu_is("amd") ? "Zen" : "Haswell";
    return 2;
  }
  if (__builtin_cpu_supports("avx")) {
    *kernel = "Sandybridge";
    return 1;
  }
#endif
  return 0;
}

std::string blas_kernel_switch(const std::string& kernel, int cpu_level, const std::string& cpu_kernel,
                               const char* coretype) {
  if ((coretype && *coretype) || cpu_level <= kernel_level(kernel) || cpu_kernel.empty()) return "";
  return cpu_kernel;
}

// OpenBLAS's selection, run again with OPENBLAS_CORETYPE set to `name`
// for the moment it reads it. gotoblas_dynamic_quit and _init are exported
// by every OpenBLAS built with DYNAMIC_ARCH (Debian's); a build for one CPU
// lacks them and keeps its kernel. They are looked up in the library that
// holds dp's cblas_sgemm, which a host may have loaded with RTLD_LOCAL
// (Python's ctypes).
static bool rerun_openblas_selection(const char* name) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) || !info.dli_fname) return false;
  void* lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return false;
  using Fn = void (*)();
  auto quit = reinterpret_cast<Fn>(dlsym(lib, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<Fn>(dlsym(lib, "gotoblas_dynamic_init"));
  const char* was = std::getenv("OPENBLAS_CORETYPE");  // unset or empty: blas_kernel_switch's rule
  const bool ok = quit && init;
  if (ok) {
    setenv("OPENBLAS_CORETYPE", name, 1);
    quit();
    init();
    if (was) setenv("OPENBLAS_CORETYPE", "", 1);
    else unsetenv("OPENBLAS_CORETYPE");
  }
  dlclose(lib);
  return ok;
}

const BlasKernel& blas_kernel() {
  static const BlasKernel k = [] {
    BlasKernel r;
    const char* better = "";
    const int level = cpu_level(&better);
    const std::string own = openblas_get_corename();
    const std::string to = blas_kernel_switch(own, level, better, std::getenv("OPENBLAS_CORETYPE"));
    if (!to.empty() && rerun_openblas_selection(to.c_str()) && own != openblas_get_corename())
      r.openblas_choice = own;
    return r;
  }();
  return k;
}

// When libdp loads: before the program's own threads, in the usual case,
// call into OpenBLAS (the switch must not meet a product in flight).
static const bool kKernelChosen = (blas_kernel(), true);

std::string cpu_description() {
  std::string model;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; model.empty() && std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
    }
  const std::string kernel = openblas_get_corename();
  const char* better = "";
  const int level = cpu_level(&better);
  const std::string head = (model.empty() ? std::string("CPU") : model) + ", OpenBLAS kernel " + kernel;
  const std::string& own = blas_kernel().openblas_choice;
  if (!own.empty())
    return head + " (dp's choice for a CPU with " + kUnits[level] + ": OpenBLAS did not recognise the CPU and chose " +
           own + "; OPENBLAS_CORETYPE overrides)";
  return head + blas_kernel_advice(kernel, level, better, std::getenv("OPENBLAS_CORETYPE"));
}

std::string blas_kernel_advice(const std::string& kernel, int cpu_level, const std::string& cpu_kernel,
                               const char* coretype) {
  // A kernel set by hand for vector units this CPU lacks: its first product
  // stops the program with an illegal instruction (SIGILL).
  if (coretype && *coretype && kernel_level(kernel) > cpu_level)
    return std::string(". OPENBLAS_CORETYPE=") + coretype + " selects a kernel for " + kUnits[kernel_level(kernel)] +
           ", which this CPU lacks (it has " + kUnits[cpu_level] + "): its products would stop the program (SIGILL); " +
           (cpu_kernel.empty() ? std::string("unset it") : "unset it or use OPENBLAS_CORETYPE=" + cpu_kernel);
  if ((coretype && *coretype) || cpu_level <= kernel_level(kernel) || cpu_kernel.empty()) return "";
  return std::string(". This CPU has ") + (cpu_level == 3 ? "AVX-512" : cpu_level == 2 ? "AVX2" : "AVX") +
         ", which OpenBLAS's kernel does not use (it did not recognise the CPU): run with OPENBLAS_CORETYPE=" + cpu_kernel +
         " to use it";
}

}  // namespace dp
