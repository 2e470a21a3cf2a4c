// The matrix products of one training step of the 784-512-256-10 MLP (what
// dp's CPU device runs: 3 forward, 3 weight gradients, 2 input gradients),
// through one GEMM library chosen at compile time, on one thread with 256
// rows and on two threads at once with 128 rows each (what 2 devices
// compute). Also counts the library's heap allocations per step (malloc and
// its aligned forms, interposed here). bench/gemm_engines/run.sh builds it
// against each library installed and alternates them.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#if defined(USE_DNNL)
#include <dnnl.h>
extern "C" void omp_set_num_threads(int);
static const char* kName = "oneDNN dnnl_sgemm";
static void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
                 float* C, int ldc) {
  omp_set_num_threads(1);  // as libdp: one thread per call
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(USE_BLIS)
#include <blis.h>
static const char* kName = "BLIS bli_sgemm";
static void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
                 float* C, int ldc) {
  float one = 1.f;
  bli_sgemm(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, M, N, K, &one,
            const_cast<float*>(A), lda, 1, const_cast<float*>(B), ldb, 1, &beta, C, ldc, 1);
}
#else
#include <cblas.h>
static const char* kName = "OpenBLAS cblas_sgemm";
static void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
                 float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.f, A, lda, B,
              ldb, beta, C, ldc);
}
#endif

static std::atomic<long> g_mallocs{0};
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_memalign(size_t, size_t);
extern "C" void* malloc(size_t n) {
  g_mallocs++;
  return __libc_malloc(n);
}
extern "C" int posix_memalign(void** p, size_t align, size_t n) {
  g_mallocs++;
  *p = __libc_memalign(align, n);
  return *p ? 0 : 12;
}
extern "C" void* aligned_alloc(size_t align, size_t n) {
  g_mallocs++;
  return __libc_memalign(align, n);
}

struct Step {
  int B;
  const int d[4] = {784, 512, 256, 10};
  std::vector<float> W[3], dW[3], Y[4], dY[4];
  explicit Step(int rows) : B(rows) {
    for (int l = 0; l < 4; ++l) Y[l].assign(size_t(B) * d[l], 0.5f), dY[l].assign(size_t(B) * d[l], 0.25f);
    for (int l = 0; l < 3; ++l) W[l].assign(size_t(d[l + 1]) * d[l], 0.01f), dW[l].assign(size_t(d[l + 1]) * d[l], 0);
  }
  void run() {
    for (int l = 0; l < 3; ++l)  // Y[l+1] = Y[l] W[l]^T
      gemm(false, true, B, d[l + 1], d[l], Y[l].data(), d[l], W[l].data(), d[l], 0.f, Y[l + 1].data(), d[l + 1]);
    for (int l = 2; l >= 0; --l) {  // dW[l] += dY[l+1]^T Y[l]; dY[l] = dY[l+1] W[l] (not for the input)
      gemm(true, false, d[l + 1], d[l], B, dY[l + 1].data(), d[l + 1], Y[l].data(), d[l], 1.f, dW[l].data(), d[l]);
      if (l > 0) gemm(false, false, B, d[l], d[l + 1], dY[l + 1].data(), d[l + 1], W[l].data(), d[l], 0.f, dY[l].data(), d[l]);
    }
  }
};

static double seconds(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  Step whole(256), half_a(128), half_b(128);
  for (int i = 0; i < 20; ++i) whole.run(), half_a.run(), half_b.run();
  const long m0 = g_mallocs.load();
  whole.run();
  const long per_step = g_mallocs.load() - m0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) whole.run();
  const double one = seconds(t0) / steps;
  t0 = std::chrono::steady_clock::now();
  std::thread a([&] { for (int i = 0; i < steps; ++i) half_a.run(); });
  std::thread b([&] { for (int i = 0; i < steps; ++i) half_b.run(); });
  a.join(), b.join();
  const double two = seconds(t0) / steps;
  const double flop = 2.0 * 256 * (784.0 * 512 * 2 + 512.0 * 256 * 3 + 256.0 * 10 * 3);
  std::printf("{\"library\": \"%s\", \"one_thread\": %.0f, \"two_threads\": %.0f, \"gflops_one\": %.1f, "
              "\"mallocs_per_step\": %ld}\n",
              kName, 256 / one, 256 / two, flop / one / 1e9, per_step);
}
