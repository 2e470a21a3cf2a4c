// The CPU's matrix products (oneDNN's sgemm, src/core/blas.cpp) and their
// description (dp_device_name("cpu", i)): the processor, oneDNN's version
// and the instruction set its kernels run.
#include <doctest/doctest.h>

#include <dirent.h>
#include <dnnl.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/blas.h"
#include "core/workers.h"
#include "engine/local_comm.h"
#include "optim/optimizer.h"
#include "optim/rules.h"
#include "dp.h"

extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int);

namespace {

int threads_of_process() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// C = alpha * op(A) op(B) + beta * C in double, row-major.
std::vector<double> reference(bool ta, bool tb, int M, int N, int K, float alpha, const std::vector<float>& A,
                              int lda, const std::vector<float>& B, int ldb, float beta, const std::vector<float>& C,
                              int ldc) {
  std::vector<double> r(C.begin(), C.end());
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
      r[m * ldc + n] = alpha * s + beta * double(C[m * ldc + n]);
    }
  return r;
}

}  // namespace

TEST_CASE("products against a double reference: every transpose, leading dimensions, alpha and beta, split over a pool") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  dp::Workers pool(3);
  for (int M : {1, 5, 70, 131})
    for (int N : {1, 9, 100})
      for (int K : {1, 33, 257})
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
          std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc);
          for (auto* v : {&A, &B, &C})
            for (float& x : *v) x = u(rng);
          const float alpha = 0.75f, beta = t == 3 ? 0.0f : 0.5f;
          const std::vector<double> want = reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
          for (dp::Workers* p : {static_cast<dp::Workers*>(nullptr), &pool}) {
            std::vector<float> got = C;
            dp::gemm(p, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
            double worst = 0;
            for (int m = 0; m < M; ++m)
              for (int n = 0; n < ldc; ++n) {
                const double d = std::fabs(got[m * ldc + n] - want[m * ldc + n]);
                worst = std::fmax(worst, n < N ? d / std::sqrt(double(K)) : d);  // past N: untouched
              }
            CAPTURE(M);
            CAPTURE(N);
            CAPTURE(K);
            CAPTURE(t);
            CHECK(worst < 1e-6);
          }
        }
}

TEST_CASE("a product runs on the calling thread only, and leaves its OpenMP limit as it was") {
  // Debian's oneDNN runs on OpenMP: without dp's limit each call would start
  // a team of threads (one per core) to compete with dp's device threads.
  const int before = threads_of_process(), limit = omp_get_max_threads();
  omp_set_num_threads(4);
  std::vector<float> a(512 * 512, 1.0f), b(512 * 512, 1.0f), c(512 * 512);
  dp::gemm(nullptr, false, false, 512, 512, 512, 1.0f, a.data(), 512, b.data(), 512, 0.0f, c.data(), 512);
  CHECK(c[0] == 512);
  CHECK(threads_of_process() == before);
  CHECK(omp_get_max_threads() == 4);
  omp_set_num_threads(limit);
}

// oneDNN 2.6's JIT sgemm kernels point the stack pointer into a heap
// buffer (uxlfoundation/oneDNN#4845): a signal handled during one writes its
// frame into the heap. Here a handler is installed and the thread running
// products is signalled every few microseconds (as Ctrl-C, a profiler or a
// launcher's SIGTERM may be, in the host's thread or dp's); every product
// must still be right, the heap intact, and no signal lost: the handler runs
// once the product is done.
std::atomic<int> g_handled{0};
extern "C" void count_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

TEST_CASE("a signal during a product corrupts neither the product nor the heap, and is handled after it") {
  struct sigaction sa = {}, old = {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &sa, &old) == 0);
  const int M = 128, N = 512, K = 784;  // a layer's products, as a step runs them (the AVX-512 and AVX2 JIT kernels)
  std::vector<float> A(M * K), B(K * N);
  for (int i = 0; i < M * K; ++i) A[i] = float(i % 7) - 3;
  for (int i = 0; i < K * N; ++i) B[i] = float(i % 5) - 2;
  std::vector<float> want(M * N);
  dp::gemm(nullptr, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(), N);  // integers: exact
  dp::Workers pool(2);
  for (dp::Workers* p : {static_cast<dp::Workers*>(nullptr), &pool}) {
    // Signal every thread that runs products: the caller, and the pool's worker (task 1 runs on worker 1).
    std::vector<pthread_t> targets{pthread_self()};
    if (p) {
      pthread_t worker{};
      p->run(2, [](void* c, int t) {
        if (t == 1) *static_cast<pthread_t*>(c) = pthread_self();
      }, &worker);
      targets.push_back(worker);
    }
    std::atomic<bool> done{false};
    const int before = g_handled.load();
    std::thread sender([&] {
      while (!done) {
        for (pthread_t t : targets) pthread_kill(t, SIGUSR1);
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
    int wrong = 0;
    std::vector<float> C(M * N);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
    int products = 0;
    while (std::chrono::steady_clock::now() < until) {
      std::fill(C.begin(), C.end(), -1.0f);
      dp::gemm(p, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
      wrong += C != want;
      std::vector<char> churn(1 << 16, 1);  // the heap in use between products, as a step's is
      wrong += churn[12345] != 1;
      ++products;
    }
    done = true;
    sender.join();
    CAPTURE(products);
    CHECK(wrong == 0);
    CHECK(g_handled.load() > before);  // delivered, not lost
  }
  sigaction(SIGUSR1, &old, nullptr);
}

// core/simd.h: the loops over every parameter run as the clone the CPU picks
// (AVX2 where it has it); each must give the bits of the scalar rule, element
// by element, as this file (compiled for the baseline, no FMA) computes them.
// A clone with FMA (GCC contracts a*b + c in C++ by default) fails here:
// target_clones("fma", ...) did, for four of the five optimizers.
TEST_CASE("the optimizers' update loops and the replicas' sum give the scalar formulas' bits") {
  const int64_t n = 1003;  // not a multiple of any vector width
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> p0(n), g(n), g1(n), g2(n);
  for (int64_t i = 0; i < n; ++i) p0[i] = u(rng), g[i] = u(rng), g1[i] = u(rng), g2[i] = u(rng);
  for (const char* json : {R"({"type": "sgd", "lr": 0.1})", R"({"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01})",
                           R"({"type": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true})",
                           R"({"type": "adam", "lr": 0.01, "weight_decay": 0.01})", R"({"type": "adamw", "lr": 0.01})"}) {
    const std::string text = json;
    CAPTURE(text);
    auto opt = dp::Optimizer::from_json(text, n);
    std::vector<float> p = p0, want = p0, s1(n, 0.f), s2(n, 0.f);
    for (int step = 0; step < 3; ++step) {  // the first step, and those after it
      opt->start_step();
      const dp::OptimRule r = opt->rule();
      opt->update(p.data(), g.data(), 1, n);  // unaligned start
      for (int64_t i = 1; i < n; ++i) {
        switch (r.kind) {
          case dp::OptimRule::kSgd: dp::sgd_plain(want[i], g[i], r); break;
          case dp::OptimRule::kSgdMomentumFirst: dp::sgd_first(want[i], g[i], s1[i], r); break;
          case dp::OptimRule::kSgdNesterov: dp::sgd_nesterov(want[i], g[i], s1[i], r); break;
          case dp::OptimRule::kSgdMomentum: dp::sgd_momentum(want[i], g[i], s1[i], r); break;
          case dp::OptimRule::kAdam: dp::adam(want[i], g[i], s1[i], s2[i], r); break;
        }
      }
    }
    int differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&p[i], &want[i], sizeof(float)) != 0;
    CHECK(differ == 0);
  }
  std::vector<float> out(n);
  const float* in[3] = {g.data(), g1.data(), g2.data()};
  dp::LocalComm::host_sum(out.data(), in, 3, 1, n);
  int differ = 0;
  for (int64_t i = 1; i < n; ++i) {
    const float want = (g[i] + g1[i]) + g2[i];
    differ += std::memcmp(&out[i], &want, sizeof(float)) != 0;
  }
  CHECK(differ == 0);
}

TEST_CASE("dp_device_name(\"cpu\") names the processor, oneDNN and the instruction set its kernels run") {
  const char* name = nullptr;
  REQUIRE(dp_device_name("cpu", 1, &name) == DP_OK);
  const std::string s = name;
  CAPTURE(s);
  CHECK(s.rfind("CPU core 1 of ", 0) == 0);
  const dnnl_version_t* v = dnnl_version();
  const std::string isa = dp::cpu_isa_name(unsigned(dnnl_get_effective_cpu_isa()));
  const std::string tail = ", oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                           std::to_string(v->patch) + " sgemm, " + isa;
  CHECK(s.size() > tail.size());
  CHECK(s.compare(s.size() - tail.size(), tail.size(), tail) == 0);
  CHECK(isa.rfind("isa 0x", 0) != 0);  // a set this build names
  CHECK(dp_device_name("cpu", 1 << 20, &name) == DP_ERR_DEVICE);
}

// tests/meson.build runs this case a second time with ONEDNN_MAX_CPU_ISA=AVX2:
// the cap holds, and the description says what runs.
TEST_CASE("ONEDNN_MAX_CPU_ISA caps the kernels, and the description says so") {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  const char* name = nullptr;
  REQUIRE(dp_device_name("cpu", 0, &name) == DP_OK);
  const std::string s = name;
  CAPTURE(s);
  CHECK(s.find(dp::cpu_isa_name(isa)) != std::string::npos);
  if (cap && std::string(cap) == "AVX2") {
    CHECK((isa & ~unsigned(dnnl_cpu_isa_avx2)) == 0);  // oneDNN's sets nest: avx2's bits and no more
    CHECK(s.find("avx512") == std::string::npos);
  }
  // The products are right on the kernels chosen.
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  float c[4] = {};
  dp::gemm(nullptr, false, false, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 58);
  CHECK(c[1] == 64);
  CHECK(c[2] == 139);
  CHECK(c[3] == 154);
}
