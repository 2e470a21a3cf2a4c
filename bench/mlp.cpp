// Samples/s of an MLP (784-512-256-10, batch 256, SGD with momentum) on 1 and
// 2 CPU devices (one thread each) and on 1 device with 2 threads, measured
// side by side in interleaved rounds (the machine is shared and noisy: the
// ratios are the result, not the absolute numbers). Also counts every heap
// allocation made during the timed steps (after each configuration's first).
//
//   bench/mlp [rounds] [steps-per-round]
#include <dnnl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter.h"
#include "dp.h"

extern "C" void omp_set_num_threads(int);

// One row-major product on the calling thread, as libdp runs its own
// (oneDNN's sgemm, the OpenMP limit 1 for this thread), for the ceilings.
static void sgemm(char ta, char tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C,
                  int ldc) {
  omp_set_num_threads(1);
  dnnl_sgemm(ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C, ldc);
}


// The machine's own ceiling right now: the same sgemm work on one thread, then
// twice that work on two threads at once. On a shared VM two "cores" rarely
// give 2x; dp's 2-device ratio is to be read against this.
static double hardware_scaling() {
  const int M = 128, N = 512, K = 784, reps = 150;
  auto work = [&] {
    std::vector<float> A(M * K, 1.0f), B(K * N, 1.0f), C(M * N);
    for (int r = 0; r < reps; ++r)
      sgemm('N', 'N', M, N, K, A.data(), K, B.data(), N, C.data(), N);
  };
  auto t0 = std::chrono::steady_clock::now();
  work();
  double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t0 = std::chrono::steady_clock::now();
  std::thread a(work), b(work);
  a.join();
  b.join();
  double two = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2 * one / two;
}

// The same ceiling for this step's own products: the 8 sgemm calls of one
// training step of the MLP (3 forward; 5 backward, no input gradient) on 256
// rows and one thread, against the same calls on 128 rows on each of two
// threads at once (what 2 devices compute). Below the plain ceiling by
// what 128-row products lose against 256-row ones; dp's 2-device ratio
// read against it shows what dp itself adds. *one_step: the 256-row
// products' seconds per step on one thread, what dp's 1-device step is read
// against.
static double step_gemm_scaling(double* one_step) {
  struct Step {
    int M;
    std::vector<float> X, W1, W2, W3, H1, H2, Y, dY, dH2, dH1, dW1, dW2, dW3;
    explicit Step(int m)
        : M(m), X(m * 784, 0.5f), W1(512 * 784, 0.01f), W2(256 * 512, 0.01f), W3(10 * 256, 0.01f), H1(m * 512),
          H2(m * 256), Y(m * 10), dY(m * 10, 0.1f), dH2(m * 256), dH1(m * 512), dW1(512 * 784), dW2(256 * 512),
          dW3(10 * 256) {}
    void run() {
      const char N = 'N', T = 'T';
      sgemm(N, T, M, 512, 784, X.data(), 784, W1.data(), 784, H1.data(), 512);
      sgemm(N, T, M, 256, 512, H1.data(), 512, W2.data(), 512, H2.data(), 256);
      sgemm(N, T, M, 10, 256, H2.data(), 256, W3.data(), 256, Y.data(), 10);
      sgemm(T, N, 10, 256, M, dY.data(), 10, H2.data(), 256, dW3.data(), 256);
      sgemm(N, N, M, 256, 10, dY.data(), 10, W3.data(), 256, dH2.data(), 256);
      sgemm(T, N, 256, 512, M, dH2.data(), 256, H1.data(), 512, dW2.data(), 512);
      sgemm(N, N, M, 512, 256, dH2.data(), 256, W2.data(), 512, dH1.data(), 512);
      sgemm(T, N, 512, 784, M, dH1.data(), 512, X.data(), 784, dW1.data(), 784);
    }
  };
  const int reps = 60;
  Step whole(256), half_a(128), half_b(128);
  whole.run(), half_a.run(), half_b.run();
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) whole.run();
  double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t0 = std::chrono::steady_clock::now();
  std::thread a([&] {
    for (int r = 0; r < reps; ++r) half_a.run();
  });
  std::thread b([&] {
    for (int r = 0; r < reps; ++r) half_b.run();
  });
  a.join();
  b.join();
  double two = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *one_step = one / reps;
  return one / two;
}

static void ok(dp_status s, const char* what) {
  if (s != DP_OK) {
    std::fprintf(stderr, "bench: %s: %s\n", what, dp_last_error());
    std::exit(1);
  }
}

struct Config {
  const char* label;
  const char* devices;
  int threads;
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  std::vector<double> rates;
  long allocs = 0;
};

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int64_t batch = 256;
  const char* json = R"({"seed": 0, "input": {"shape": [784]}, "layers": [
      {"type": "linear", "out_features": 512}, {"type": "relu"},
      {"type": "linear", "out_features": 256}, {"type": "relu"},
      {"type": "linear", "out_features": 10}], "loss": {"type": "cross_entropy"}})";

  dp_context* ctx = nullptr;
  ok(dp_context_create(&ctx), "context");
  std::vector<float> x(batch * 784);
  std::vector<int64_t> y(batch);
  uint64_t s = 1;
  for (float& v : x) s = s * 6364136223846793005ull + 1, v = float(s >> 40) / float(1 << 24);
  for (int64_t i = 0; i < batch; ++i) y[i] = i % 10;
  int64_t xs[2] = {batch, 784}, ys[1] = {batch};
  dp_tensor *input = nullptr, *target = nullptr;
  ok(dp_tensor_from_host(ctx, DP_F32, x.data(), 2, xs, &input), "input");
  ok(dp_tensor_from_host(ctx, DP_I64, y.data(), 1, ys, &target), "target");

  std::vector<Config> configs = {{"1 device, 1 thread", "cpu:0", 1, nullptr, nullptr, nullptr, {}, 0},
                                 {"2 devices, 1 thread each", "cpu:0,cpu:1", 1, nullptr, nullptr, nullptr, {}, 0},
                                 {"1 device, 2 threads", "cpu:0", 2, nullptr, nullptr, nullptr, {}, 0}};
  for (Config& c : configs) {
    ok(dp_model_from_json(ctx, json, &c.model), "model");
    ok(dp_group_create(c.model, c.devices, &c.group), "group");
    ok(dp_group_set_option(c.group, DP_GROUP_THREADS_PER_DEVICE, c.threads), "threads");
    ok(dp_optimizer_create(c.group, R"({"type": "sgd", "lr": 0.01, "momentum": 0.9})", &c.opt), "optimizer");
    float loss;
    for (int w = 0; w < 3; ++w) ok(dp_group_train_step(c.group, c.opt, input, target, &loss), "warm-up");
  }
  double products_before = 0, products_after = 0;
  double ceiling_before = hardware_scaling(), step_before = step_gemm_scaling(&products_before);
  for (int r = 0; r < rounds; ++r) {
    for (Config& c : configs) {
      float loss;
      long before = dp::test::allocations();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) ok(dp_group_train_step(c.group, c.opt, input, target, &loss), "step");
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      c.allocs += dp::test::allocations() - before;
      c.rates.push_back(batch * steps / sec);
    }
  }
  double ceiling = (ceiling_before + hardware_scaling()) / 2;
  double step_ceiling = (step_before + step_gemm_scaling(&products_after)) / 2;
  const double products_rate = 2 * batch / (products_before + products_after);  // samples/s of the products alone
  const double macs = 784.0 * 512 * 2 + 512.0 * 256 * 3 + 256.0 * 10 * 3;      // a sample's multiply-adds, as run()
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("MLP 784-512-256-10, batch %lld, SGD momentum; %d interleaved rounds of %d steps\n", (long long)batch,
              rounds, steps);
  const char* cpu = "";
  ok(dp_device_name("cpu", 0, &cpu), "dp_device_name");
  std::printf("%s\n", cpu);
  std::printf("hardware ceiling: 2 threads of independent sgemm run %.2fx one (before and after the rounds)\n", ceiling);
  std::printf("the step's own products: 2 x 128 rows on two threads run %.2fx 256 rows on one\n", step_ceiling);
  double base = median(configs[0].rates);
  std::printf("the step's own products alone on one thread: %.0f samples/s (%.1f GFLOP/s); dp's 1-device step runs at "
              "%.0f%% of that\n\n",
              products_rate, products_rate * macs * 2 / 1e9, 100 * base / products_rate);
  std::printf("%-28s %14s %10s %22s\n", "configuration", "samples/s", "vs first", "allocations in steps");
  for (Config& c : configs)
    std::printf("%-28s %14.0f %9.2fx %22ld\n", c.label, median(c.rates), median(c.rates) / base, c.allocs);
  std::printf("{\"one_device\": %.1f, \"two_devices\": %.1f, \"one_device_two_threads\": %.1f, \"hardware_ceiling\": %.2f, "
              "\"step_gemm_ceiling\": %.2f, \"products_alone\": %.1f, \"allocations\": %ld}\n",
              median(configs[0].rates), median(configs[1].rates), median(configs[2].rates), ceiling, step_ceiling,
              products_rate, configs[0].allocs + configs[1].allocs + configs[2].allocs);
  for (Config& c : configs) {
    dp_optimizer_destroy(c.opt);
    dp_group_destroy(c.group);
    dp_model_destroy(c.model);
  }
  dp_tensor_destroy(input);
  dp_tensor_destroy(target);
  dp_context_destroy(ctx);
  return 0;
}
