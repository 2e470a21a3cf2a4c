// Gloo all-reduce study: new-style gloo::allreduce vs old-style algorithm
// classes, async vs sync (+busy poll) pairs, over loopback TCP, 2+ processes
// forked from one launcher, rendezvous via FileStore in a temp dir.
//
// build: g++ -std=c++17 -O2 -o probe probe.cc -lgloo -pthread
// modes:
//   probe bench ROUNDS [sizes_kb,...]   interleaved timing; rank 0 prints raw rows
//   probe det NP                         determinism / cross-rank consistency
//   probe kill VARIANT KB TIMEOUT_MS SIG [DELAY_MS]   SIGKILL/SIGSTOP rank 1 mid-run
//   probe close VARIANT KB TIMEOUT_MS    closeConnections() from another thread mid-run
//   probe newsync                        new-style allreduce on sync pairs (expected: fails)
//   probe sockinfo                       TCP_NODELAY / SO_SNDBUF of gloo's sockets
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/address.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using clk = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
static double now_s() { return std::chrono::duration<double>(clk::now().time_since_epoch()).count(); }

using Ctx = std::shared_ptr<gloo::rendezvous::Context>;
using SumFn = void (*)(void*, const void*, const void*, size_t);

// ---------------------------------------------------------------- setup
struct World {
  int rank, size;
  std::shared_ptr<gloo::transport::Device> dev;
  std::unique_ptr<gloo::rendezvous::FileStore> fstore;
};

static Ctx connect_ctx(World& w, const std::string& prefix, ms timeout) {
  gloo::rendezvous::PrefixStore store(prefix, *w.fstore);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(w.rank, w.size);
  ctx->setTimeout(timeout);  // becomes each pair's (fixed) timeout
  ctx->connectFullMesh(store, w.dev);
  return ctx;
}

static void set_sync(const Ctx& ctx, bool busy) {
  for (int i = 0; i < ctx->size; i++)
    if (i != ctx->rank) ctx->getPair(i)->setSync(true, busy);
}

static void barrier(const Ctx& ctx) {
  gloo::BarrierOptions o(ctx);
  o.setTag(0x7fff);
  gloo::barrier(o);
}

// ---------------------------------------------------------------- variants
// One "instance" = one all-reduce bound to one buffer, created once, run often.
struct Instance {
  virtual ~Instance() = default;
  virtual void run() = 0;
};

struct NewStyle : Instance {  // exactly what dp does per call
  Ctx ctx; float* p; size_t n; ms timeout; uint32_t tag = 0;
  int algo; size_t seg;
  NewStyle(Ctx c, float* p, size_t n, ms t, int algo, size_t seg) : ctx(c), p(p), n(n), timeout(t), algo(algo), seg(seg) {}
  void run() override {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(p, n);
    opts.setReduceFunction(static_cast<SumFn>(&gloo::sum<float>));
    opts.setTag(tag++);
    opts.setTimeout(timeout);
    if (algo) opts.setAlgorithm(static_cast<gloo::AllreduceOptions::Algorithm>(algo));
    if (seg) opts.setMaxSegmentSize(seg);
    gloo::allreduce(opts);
  }
};

struct NewReused : Instance {  // options built once per buffer, reused
  gloo::AllreduceOptions opts;
  NewReused(Ctx c, float* p, size_t n, ms t) : opts(c) {
    opts.setOutput(p, n);
    opts.setReduceFunction(static_cast<SumFn>(&gloo::sum<float>));
    opts.setTag(1000);
    opts.setTimeout(t);
  }
  void run() override { gloo::allreduce(opts); }
};

template <class A>
struct Old : Instance {
  std::unique_ptr<A> a;
  Old(Ctx c, float* p, size_t n) : a(new A(c, std::vector<float*>{p}, static_cast<int>(n))) {}
  void run() override { a->run(); }
};

// A bucket split into pieces of at most `piece` bytes, one algorithm
// instance per piece, run one after the other (keeps each blocking write
// in sync mode below the socket send buffer).
template <class A>
struct Split : Instance {
  std::vector<std::unique_ptr<A>> parts;
  Split(Ctx c, float* p, size_t n, size_t piece) {
    size_t per = std::max<size_t>(1, piece / sizeof(float));
    for (size_t off = 0; off < n; off += per)
      parts.emplace_back(new A(c, std::vector<float*>{p + off}, static_cast<int>(std::min(per, n - off))));
  }
  void run() override {
    for (auto& a : parts) a->run();
  }
};

struct VariantDef {
  std::string name;
  char ctx;  // 'A' async, 'S' sync, 'B' sync+busy poll
  std::function<Instance*(Ctx, float*, size_t, ms)> make;
};

static std::vector<VariantDef> variants() {
  std::vector<VariantDef> v;
  v.push_back({"new_default(dp)", 'A', [](Ctx c, float* p, size_t n, ms t) { return new NewStyle(c, p, n, t, 0, 0); }});
  v.push_back({"new_RING", 'A', [](Ctx c, float* p, size_t n, ms t) { return new NewStyle(c, p, n, t, 1, 0); }});
  v.push_back({"new_BCUBE", 'A', [](Ctx c, float* p, size_t n, ms t) { return new NewStyle(c, p, n, t, 2, 0); }});
  v.push_back({"new_seg64K", 'A', [](Ctx c, float* p, size_t n, ms t) { return new NewStyle(c, p, n, t, 0, 64 << 10); }});
  v.push_back({"new_reused_opts", 'A', [](Ctx c, float* p, size_t n, ms t) { return new NewReused(c, p, n, t); }});
  for (char k : {'A', 'S', 'B'}) {
    std::string s = k == 'A' ? "async" : k == 'S' ? "sync" : "sync_busy";
    v.push_back({"old_Ring/" + s, k, [](Ctx c, float* p, size_t n, ms) { return new Old<gloo::AllreduceRing<float>>(c, p, n); }});
    v.push_back({"old_RingChunked/" + s, k, [](Ctx c, float* p, size_t n, ms) { return new Old<gloo::AllreduceRingChunked<float>>(c, p, n); }});
    v.push_back({"old_HalvingDoubling/" + s, k, [](Ctx c, float* p, size_t n, ms) { return new Old<gloo::AllreduceHalvingDoubling<float>>(c, p, n); }});
    v.push_back({"old_Bcube/" + s, k, [](Ctx c, float* p, size_t n, ms) { return new Old<gloo::AllreduceBcube<float>>(c, p, n); }});
  }
  for (char k : {'A', 'S'}) {
    std::string s = k == 'A' ? "async" : "sync";
    v.push_back({"split256K_Ring/" + s, k, [](Ctx c, float* p, size_t n, ms) { return new Split<gloo::AllreduceRing<float>>(c, p, n, 256 << 10); }});
    v.push_back({"split512K_HD/" + s, k, [](Ctx c, float* p, size_t n, ms) { return new Split<gloo::AllreduceHalvingDoubling<float>>(c, p, n, 512 << 10); }});
  }
  return v;
}

static const VariantDef& find_variant(const std::string& name) {
  static auto v = variants();
  for (auto& d : v)
    if (d.name == name) return d;
  fprintf(stderr, "unknown variant %s; known:", name.c_str());
  for (auto& d : v) fprintf(stderr, " %s", d.name.c_str());
  fprintf(stderr, "\n");
  exit(2);
}

// ---------------------------------------------------------------- socket info
static void sockinfo(int rank, const char* when) {
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  while ((e = readdir(d))) {
    int fd = atoi(e->d_name);
    if (fd <= 2) continue;
    struct stat st;
    if (fstat(fd, &st) || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t pl = sizeof peer;
    if (getpeername(fd, (sockaddr*)&peer, &pl)) continue;  // listening / unconnected
    int nd = -1, sb = -1, rb = -1;
    socklen_t l = sizeof(int);
    getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nd, &l);
    l = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, &l);
    l = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rb, &l);
    timeval rt{}; l = sizeof rt;
    getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, &l);
    char host[64] = "?";
    if (peer.ss_family == AF_INET) inet_ntop(AF_INET, &((sockaddr_in*)&peer)->sin_addr, host, sizeof host);
    printf("rank %d [%s] fd %d peer %s:%d TCP_NODELAY=%d SO_SNDBUF=%d SO_RCVBUF=%d SO_RCVTIMEO=%lds\n", rank, when, fd, host,
           peer.ss_family == AF_INET ? ntohs(((sockaddr_in*)&peer)->sin_port) : 0, nd, sb, rb, (long)rt.tv_sec);
  }
  closedir(d);
  fflush(stdout);
}

// The connected socket of pair i: after connecting, tcp::Pair::address() is
// the socket's own address (getsockname), unique among connected sockets.
static int pair_fd(const Ctx& ctx, int i) {
  auto* a = dynamic_cast<const gloo::transport::tcp::Address*>(&ctx->getPair(i)->address());
  if (!a) return -1;
  const sockaddr_storage& want = a->getSockaddr();
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  int found = -1;
  while ((e = readdir(d)) && found < 0) {
    int fd = atoi(e->d_name);
    struct stat st;
    if (fd <= 2 || fstat(fd, &st) || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage me{}, peer{};
    socklen_t l = sizeof me, pl = sizeof peer;
    if (getsockname(fd, (sockaddr*)&me, &l) || getpeername(fd, (sockaddr*)&peer, &pl)) continue;
    if (me.ss_family == AF_INET && want.ss_family == AF_INET &&
        ((sockaddr_in*)&me)->sin_port == ((const sockaddr_in*)&want)->sin_port &&
        ((sockaddr_in*)&me)->sin_addr.s_addr == ((const sockaddr_in*)&want)->sin_addr.s_addr)
      found = fd;
  }
  closedir(d);
  return found;
}

// ---------------------------------------------------------------- bench
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

static int iters_for(size_t bytes) {
  if (bytes <= (64u << 10)) return 100;
  if (bytes <= (256u << 10)) return 60;
  if (bytes <= (1u << 20)) return 30;
  return 10;
}

static void bench(World& w, int rounds, std::vector<size_t> sizes) {
  ms to(30000);
  std::map<char, Ctx> ctx;
  ctx['A'] = connect_ctx(w, "A", to);
  ctx['S'] = connect_ctx(w, "S", to);
  ctx['B'] = connect_ctx(w, "B", to);
  set_sync(ctx['S'], false);
  set_sync(ctx['B'], true);
  auto defs = variants();
  if (const char* only = getenv("VARIANTS")) {
    std::vector<VariantDef> keep;
    std::string list = std::string(",") + only + ",";
    for (auto& d : defs)
      if (list.find("," + d.name + ",") != std::string::npos) keep.push_back(d);
    defs = keep;
  }
  struct Cell { std::vector<float> buf; std::unique_ptr<Instance> inst; };
  // cells[size_idx][variant_idx]; created in the same order on all ranks
  std::vector<std::vector<Cell>> cells(sizes.size());
  for (size_t s = 0; s < sizes.size(); s++) {
    size_t n = sizes[s] / sizeof(float);
    cells[s].resize(defs.size());
    for (size_t v = 0; v < defs.size(); v++) {
      auto& c = cells[s][v];
      c.buf.assign(n, 0.0f);
      c.inst.reset(defs[v].make(ctx[defs[v].ctx], c.buf.data(), n, to));
    }
  }
  // correctness check of each cell once
  for (size_t s = 0; s < sizes.size(); s++)
    for (size_t v = 0; v < defs.size(); v++) {
      auto& c = cells[s][v];
      for (size_t i = 0; i < c.buf.size(); i++) c.buf[i] = float((i % 1000) + 1000 * w.rank);
      c.inst->run();
      size_t bad = 0;
      for (size_t i = 0; i < c.buf.size(); i++) {
        float want = 0;
        for (int r = 0; r < w.size; r++) want += float((i % 1000) + 1000 * r);
        bad += c.buf[i] != want;
      }
      if (bad) printf("rank %d WRONG %s size %zu: %zu bad\n", w.rank, defs[v].name.c_str(), sizes[s], bad);
      std::fill(c.buf.begin(), c.buf.end(), 0.0f);
    }
  if (w.rank == 0) { printf("# correctness checked; load %s", ""); fflush(stdout); system("cat /proc/loadavg"); }
  if (w.rank == 0) sockinfo(w.rank, "after warmup");
  // timing, interleaved: each round visits every (size, variant) in a shuffled order
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t s = 0; s < sizes.size(); s++)
    for (size_t v = 0; v < defs.size(); v++) order.push_back({s, v});
  for (int r = 0; r < rounds; r++) {
    std::mt19937 g(1000 + r);  // same shuffle on all ranks
    std::shuffle(order.begin(), order.end(), g);
    double t_round = now_s();
    for (auto [s, v] : order) {
      auto& c = cells[s][v];
      int it = iters_for(sizes[s]);
      c.inst->run();  // warm this cell (caches, socket buffer sizing)
      barrier(ctx['A']);
      static long* cy = (long*)dlsym(RTLD_DEFAULT, "shim_yield");
      static long* ce = (long*)dlsym(RTLD_DEFAULT, "shim_epoll");
      static long* ct = (long*)dlsym(RTLD_DEFAULT, "shim_trylock_fail");
      long y0 = cy ? *cy : 0, e0 = ce ? *ce : 0, t0 = ct ? *ct : 0;
      double a = now_s();
      for (int i = 0; i < it; i++) c.inst->run();
      double t = (now_s() - a) / it;
      if (w.rank == 0) {
        printf("row round=%d bytes=%zu variant=%s us=%.1f", r, sizes[s], defs[v].name.c_str(), t * 1e6);
        if (cy) printf(" yield/op=%.1f epoll_wait/op=%.1f trylock_fail/op=%.1f", double(*cy - y0) / it, double(*ce - e0) / it, double(*ct - t0) / it);
        printf("\n");
      }
    }
    if (w.rank == 0) {
      printf("# round %d took %.1fs, loadavg: ", r, now_s() - t_round);
      fflush(stdout);
      system("cat /proc/loadavg");
    }
    fflush(stdout);
  }
  barrier(ctx['A']);
}

// ---------------------------------------------------------------- determinism
static uint64_t fnv(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* b = (const unsigned char*)v.data();
  for (size_t i = 0; i < v.size() * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static std::vector<float> det_input(int rank, size_t n) {
  std::vector<float> x(n);
  std::mt19937 g(1234 + rank);
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> e(-20, 20);
  for (auto& v : x) v = std::ldexp(u(g), e(g));
  return x;
}

static void det(World& w) {
  ms to(30000);
  auto A = connect_ctx(w, "A", to);
  auto B = connect_ctx(w, "B", to);
  set_sync(B, true);
  size_t n = (4 << 20) / 4 + 13;  // 4 MB + odd tail
  std::vector<float> ref(n, 0.0f);
  for (int r = 0; r < w.size; r++) {
    auto x = det_input(r, n);
    for (size_t i = 0; i < n; i++) ref[i] = r == 0 ? x[i] : ref[i] + x[i];
  }
  for (const char* name : {"new_default(dp)", "new_BCUBE", "old_Ring/async", "old_RingChunked/async", "old_HalvingDoubling/async",
                           "old_Bcube/async", "old_Ring/sync_busy", "old_RingChunked/sync_busy", "old_HalvingDoubling/sync_busy"}) {
    auto& d = find_variant(name);
    auto in = det_input(w.rank, n);
    std::vector<float> buf(n);
    std::unique_ptr<Instance> inst;
    std::string hs;
    size_t diff = 0;
    try {
      inst.reset(d.make(d.ctx == 'A' ? A : B, buf.data(), n, to));
      for (int rep = 0; rep < 3; rep++) {
        buf = in;  // same address (vector assign keeps capacity)
        inst->run();
        char h[32];
        snprintf(h, sizeof h, "%016" PRIx64 " ", fnv(buf));
        hs += h;
      }
      for (size_t i = 0; i < n; i++) diff += memcmp(&ref[i], &buf[i], 4) != 0;
    } catch (const std::exception& e) {
      hs = std::string("EXCEPTION ") + e.what();
    }
    printf("det np=%d rank=%d %-28s hashes(3 runs)=%s differ_from_rank_order_sum=%zu/%zu\n", w.size, w.rank, name, hs.c_str(), diff, n);
    fflush(stdout);
    barrier(A);
  }
}

// ---------------------------------------------------------------- kill / stop
struct Shared { std::atomic<double> signal_time; std::atomic<long> iters[2]; };

static void kill_test(World& w, const std::string& vname, size_t bytes, int timeout_ms, Shared* sh) {
  auto& d = find_variant(vname);
  auto ctx = connect_ctx(w, "K", ms(timeout_ms));
  if (d.ctx != 'A') set_sync(ctx, d.ctx == 'B');
  size_t n = bytes / 4;
  std::vector<float> buf(n, 0.0f);
  std::unique_ptr<Instance> inst(d.make(ctx, buf.data(), n, ms(timeout_ms)));
  for (long it = 0;; it++) {
    double a = now_s();
    try {
      inst->run();
    } catch (const std::exception& e) {
      double t = now_s();
      double sig = sh->signal_time.load();
      printf("rank %d: iter %ld: exception %s after %.3fs in call, %.3fs after the signal: %s\n", w.rank, it,
             dynamic_cast<const gloo::IoException*>(&e) ? "gloo::IoException" :
             dynamic_cast<const gloo::EnforceNotMet*>(&e) ? "gloo::EnforceNotMet" : "std::exception",
             t - a, sig > 0 ? t - sig : -1.0, e.what());
      fflush(stdout);
      // clean-up path: a second run must fail too (not hang), then tear down
      double b = now_s();
      try { inst->run(); printf("rank %d: second run returned?!\n", w.rank); }
      catch (const std::exception& e2) { printf("rank %d: second run throws at once (%.3fs): %.120s\n", w.rank, now_s() - b, e2.what()); }
      b = now_s();
      ctx->closeConnections();
      inst.reset();
      ctx.reset();
      printf("rank %d: closeConnections + destroy algorithm + context took %.3fs; exiting normally\n", w.rank, now_s() - b);
      fflush(stdout);
      return;
    }
    sh->iters[w.rank] = it + 1;
  }
}

// closeConnections() from a second thread while the first is inside run():
// does the running collective fail at once (dp's abort path)?
static void close_test(World& w, const std::string& vname, size_t bytes, int timeout_ms, bool use_shutdown) {
  auto& d = find_variant(vname);
  auto ctx = connect_ctx(w, "C", ms(timeout_ms));
  if (d.ctx != 'A') set_sync(ctx, d.ctx == 'B');
  size_t n = bytes / 4;
  std::vector<float> buf(n, 0.0f);
  std::unique_ptr<Instance> inst(d.make(ctx, buf.data(), n, ms(timeout_ms)));
  inst->run();
  if (w.rank == 1) {  // rank 1 stops taking part; rank 0 blocks in its next run
    sleep(5);
    return;
  }
  std::atomic<double> closed_at{0};
  std::thread closer([&] {
    usleep(500000);
    double a = now_s();
    closed_at = a;
    if (use_shutdown) {
      for (int i = 0; i < ctx->size; i++)
        if (i != ctx->rank) {
          int fd = pair_fd(ctx, i);
          printf("rank 0: pair %d socket fd %d: shutdown(SHUT_RDWR) -> %d\n", i, fd, fd >= 0 ? ::shutdown(fd, SHUT_RDWR) : -1);
        }
      printf("rank 0: shutdown() of the pairs' sockets returned after %.3fs\n", now_s() - a);
    } else {
      ctx->closeConnections();
      printf("rank 0: closeConnections() returned after %.3fs\n", now_s() - a);
    }
    fflush(stdout);
  });
  double a = now_s();
  try {
    inst->run();
    printf("rank 0: run returned normally?!\n");
  } catch (const std::exception& e) {
    double t = now_s();
    printf("rank 0: run threw after %.3fs (%.3fs after closeConnections began): %.160s\n", t - a, t - closed_at.load(), e.what());
  }
  fflush(stdout);
  closer.join();
}

// ---------------------------------------------------------------- launcher
static void run_rank(const std::string& mode, int rank, int size, const std::string& dir, char** argv, int argc, Shared* sh) {
  World w;
  w.rank = rank;
  w.size = size;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  w.dev = gloo::transport::tcp::CreateDevice(attr);
  w.fstore.reset(new gloo::rendezvous::FileStore(dir));
  if (getenv("IGNORE_SIGPIPE")) signal(SIGPIPE, SIG_IGN);
  if (mode == "bench") {
    std::vector<size_t> sizes{64 << 10, 256 << 10, 1 << 20, 4 << 20};
    if (argc > 3) {
      sizes.clear();
      for (char* s = strtok(argv[3], ","); s; s = strtok(nullptr, ",")) sizes.push_back(size_t(atol(s)) << 10);
    }
    bench(w, atoi(argv[2]), sizes);
  } else if (mode == "det") {
    det(w);
  } else if (mode == "kill") {
    kill_test(w, argv[2], size_t(atol(argv[3])) << 10, atoi(argv[4]), sh);
  } else if (mode == "close") {
    close_test(w, argv[2], size_t(atol(argv[3])) << 10, atoi(argv[4]), argc > 5 && std::string(argv[5]) == "shutdown");
  } else if (mode == "count") {  // count VARIANT KB N: per-op wall, CPU, context switches
    auto& d = find_variant(argv[2]);
    int nrun = atoi(argv[4]);
    auto A = connect_ctx(w, "A", ms(30000));
    auto ctx = A;
    if (d.ctx != 'A') { ctx = connect_ctx(w, "O", ms(30000)); set_sync(ctx, d.ctx == 'B'); }
    size_t n = (size_t(atol(argv[3])) << 10) / 4;
    std::vector<float> b(n, 0.0f);
    std::unique_ptr<Instance> inst(d.make(ctx, b.data(), n, ms(30000)));
    for (int i = 0; i < 20; i++) inst->run();
    barrier(A);
    rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double a = now_s();
    for (int i = 0; i < nrun; i++) inst->run();
    double t = now_s() - a;
    getrusage(RUSAGE_SELF, &r1);
    auto tv = [](timeval x) { return x.tv_sec + x.tv_usec * 1e-6; };
    double cpu = tv(r1.ru_utime) - tv(r0.ru_utime) + tv(r1.ru_stime) - tv(r0.ru_stime);
    printf("count rank=%d %s %sKB: wall %.1f us/op, cpu %.1f us/op (sys %.1f), voluntary csw %.2f/op, involuntary %.2f/op\n", rank, argv[2], argv[3],
           t / nrun * 1e6, cpu / nrun * 1e6, (tv(r1.ru_stime) - tv(r0.ru_stime)) / nrun * 1e6,
           double(r1.ru_nvcsw - r0.ru_nvcsw) / nrun, double(r1.ru_nivcsw - r0.ru_nivcsw) / nrun);
    barrier(A);
  } else if (mode == "once") {  // once VARIANT KB TIMEOUT_MS N: time or exception of N runs
    auto& d = find_variant(argv[2]);
    int to = atoi(argv[4]), nrun = atoi(argv[5]);
    auto ctx = connect_ctx(w, "O", ms(to));
    if (d.ctx != 'A') set_sync(ctx, d.ctx == 'B');
    size_t n = (size_t(atol(argv[3])) << 10) / 4;
    std::vector<float> b(n, 1.0f);
    std::unique_ptr<Instance> inst(d.make(ctx, b.data(), n, ms(to)));
    double a = now_s();
    try {
      for (int i = 0; i < nrun; i++) inst->run();
      printf("rank %d: %s %s KB x%d ok, %.1f ms each, b[0]=%g\n", rank, argv[2], argv[3], nrun, (now_s() - a) * 1e3 / nrun, b[0]);
    } catch (const std::exception& e) {
      printf("rank %d: %s %s KB threw after %.3fs: %.160s\n", rank, argv[2], argv[3], now_s() - a, e.what());
    }
  } else if (mode == "sockinfo") {
    auto ctx = connect_ctx(w, "A", ms(30000));
    if (rank == 0) sockinfo(rank, "after connect");
    std::vector<float> b(1 << 20);
    NewStyle(ctx, b.data(), b.size(), ms(30000), 0, 0).run();
    Old<gloo::AllreduceRing<float>>(ctx, b.data(), b.size()).run();
    if (rank == 0) sockinfo(rank, "after a 4 MB all-reduce");
    barrier(ctx);
  } else if (mode == "newsync") {
    auto ctx = connect_ctx(w, "N", ms(2000));
    set_sync(ctx, true);
    std::vector<float> b(1 << 14, 1.0f);
    double a = now_s();
    try {
      NewStyle(ctx, b.data(), b.size(), ms(2000), 0, 0).run();
      printf("rank %d: new-style on sync pairs ok in %.3fs, b[0]=%g\n", rank, now_s() - a, b[0]);
    } catch (const std::exception& e) {
      printf("rank %d: new-style on sync pairs threw after %.3fs: %.160s\n", rank, now_s() - a, e.what());
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: see header of probe.cc\n");
    return 2;
  }
  std::string mode = argv[1];
  int np = mode == "det" ? atoi(argv[2]) : 2;
  char tmpl[] = "/tmp/gloo_probe_store.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (sh) Shared();
  std::vector<pid_t> pids;
  for (int r = 0; r < np; r++) {
    pid_t p = fork();
    if (p == 0) {
      try {
        run_rank(mode, r, np, dir, argv, argc, sh);
      } catch (const std::exception& e) {
        printf("rank %d: uncaught exception: %s\n", r, e.what());
        fflush(stdout);
        _exit(3);
      }
      fflush(stdout);
      _exit(0);
    }
    pids.push_back(p);
  }
  if (mode == "kill") {
    // wait until both ranks have done some iterations, then signal rank 1
    int sig = atoi(argv[5]);
    int delay_ms = argc > 6 ? atoi(argv[6]) : 300;
    while (sh->iters[0] < 3 || sh->iters[1] < 3) usleep(1000);
    usleep(delay_ms * 1000);
    sh->signal_time = now_s();
    kill(pids[1], sig);
    printf("launcher: sent signal %d to rank 1 after %ld/%ld iterations\n", sig, sh->iters[0].load(), sh->iters[1].load());
    fflush(stdout);
    int st;
    waitpid(pids[0], &st, 0);
    printf("launcher: rank 0 %s %d\n", WIFEXITED(st) ? "exited with" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    kill(pids[1], SIGKILL);
    waitpid(pids[1], &st, 0);
  } else {
    for (pid_t p : pids) {
      int st;
      waitpid(p, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st))
        printf("launcher: child %d %s %d\n", p, WIFEXITED(st) ? "exited with" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
  }
  std::string cmd = "rm -rf " + dir;
  system(cmd.c_str());
  return 0;
}
