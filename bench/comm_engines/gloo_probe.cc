// Gloo probe: bench / kill / det / nojoin over loopback TCP with a FileStore.
// usage: gloo_probe MODE RANK SIZE STOREDIR [timeout_ms]
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

using clk = std::chrono::steady_clock;
static double now_s() {
  return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

static void allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, float* p,
                          size_t n, int timeout_ms) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(p, n);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(
          &gloo::sum<float>));
  opts.setTimeout(std::chrono::milliseconds(timeout_ms));
  gloo::allreduce(opts);
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s bench|kill|det|nojoin RANK SIZE STOREDIR [timeout_ms]\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  int rank = atoi(argv[2]), size = atoi(argv[3]);
  std::string dir = argv[4];
  int timeout_ms = argc > 5 ? atoi(argv[5]) : 10000;

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fstore(dir);
  gloo::rendezvous::PrefixStore store("job1", fstore);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
  double t0 = now_s();
  try {
    ctx->connectFullMesh(store, dev);
  } catch (const std::exception& e) {
    fprintf(stderr, "rank %d: connectFullMesh failed after %.2fs: %s\n", rank,
            now_s() - t0, e.what());
    return 3;
  }
  fprintf(stderr, "rank %d: connected in %.3fs\n", rank, now_s() - t0);

  if (mode == "bench") {
    const size_t sizes[] = {64 << 10, 1 << 20, 32 << 20};
    for (size_t bytes : sizes) {
      size_t n = bytes / sizeof(float);
      std::vector<float> buf(n, 1.0f), src(n, 2.0f), dst(n);
      int iters = bytes <= (1 << 20) ? 200 : 10;
      std::vector<double> ar, mc;
      allreduce_sum(ctx, buf.data(), n, timeout_ms);  // warm-up
      for (int rep = 0; rep < 7; rep++) {
        gloo::BarrierOptions bo(ctx);
        gloo::barrier(bo);
        double a = now_s();
        for (int i = 0; i < iters; i++) allreduce_sum(ctx, buf.data(), n, timeout_ms);
        ar.push_back((now_s() - a) / iters);
        a = now_s();
        for (int i = 0; i < iters; i++) {
          memcpy(dst.data(), src.data(), bytes);
          asm volatile("" ::"r"(dst.data()) : "memory");
        }
        mc.push_back((now_s() - a) / iters);
      }
      double t = median(ar), m = median(mc);
      double busbw = 2.0 * (size - 1) / size * bytes / t / 1e9;
      if (rank == 0)
        printf("gloo np=%d bytes=%zu allreduce_us=%.1f busbw_GBps=%.3f memcpy_us=%.1f memcpy_GBps=%.3f\n",
               size, bytes, t * 1e6, busbw, m * 1e6, bytes / m / 1e9);
    }
  } else if (mode == "det") {
    // Values of mixed magnitude so that summation order matters.
    size_t n = (8 << 20) / sizeof(float) + 13;
    std::vector<float> buf(n);
    std::mt19937 g(1234 + rank);
    std::uniform_real_distribution<float> u(-1, 1);
    std::uniform_int_distribution<int> e(-20, 20);
    for (auto& x : buf) x = std::ldexp(u(g), e(g));
    allreduce_sum(ctx, buf.data(), n, timeout_ms);
    uint64_t h = 1469598103934665603ull;
    const unsigned char* b = (const unsigned char*)buf.data();
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    // Compare with the naive rank-ordered sum ((x0+x1)+x2)+...
    std::vector<float> ref(n, 0.0f);
    for (int r = 0; r < size; r++) {
      std::mt19937 g2(1234 + r);
      for (size_t i = 0; i < n; i++) { float x = std::ldexp(u(g2), e(g2)); ref[i] = r == 0 ? x : ref[i] + x; }
    }
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&ref[i], &buf[i], 4) != 0;
    printf("rank %d det_hash=%016" PRIx64 " elements_differing_from_rank_order_sum=%zu/%zu\n", rank, h, diff, n);
  } else if (mode == "kill") {
    // Loop 32 MB all-reduces until the peer dies; report how the survivor finds out.
    size_t n = (32 << 20) / sizeof(float);
    std::vector<float> buf(n, 1.0f);
    for (long it = 0;; it++) {
      double a = now_s();
      try {
        allreduce_sum(ctx, buf.data(), n, timeout_ms);
      } catch (const gloo::IoException& ex) {
        printf("rank %d: iter %ld IoException after %.3fs in call: %s\n", rank, it, now_s() - a, ex.what());
        fflush(stdout);
        if (getenv("CLOSE")) { ctx->closeConnections(); printf("rank %d: closed connections\n", rank); fflush(stdout); }
        if (getenv("LINGER")) { sleep(atoi(getenv("LINGER"))); }  // keep sockets open: no cascade via process exit
        return 4;
      } catch (const std::exception& ex) {
        printf("rank %d: iter %ld other exception after %.3fs: %s\n", rank, it, now_s() - a, ex.what());
        return 5;
      }
      if (it == 0) { printf("rank %d: first iter ok\n", rank); fflush(stdout); }
    }
  }
  return 0;
}
