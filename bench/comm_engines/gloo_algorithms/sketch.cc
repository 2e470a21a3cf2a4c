// Sketch of the fastest safe usage found by probe.cc, for gradient buckets at
// fixed addresses: old-style AllreduceHalvingDoubling<float> instances on a
// dedicated context whose pairs are in sync mode (no busy poll), one instance
// per piece of at most 512 KB of a bucket, created once, run() every step.
// A small 2-process test at the bottom (fork + FileStore).
//
// build: g++ -std=c++17 -O2 -o sketch sketch.cc -lgloo -pthread
// run:   ./sketch            (sums + timing)      ./sketch abort   (abort from another thread)
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

class SyncBuckets {
 public:
  // Largest piece: the biggest single blocking write HalvingDoubling makes
  // is half a piece (2 ranks), which must fit the socket send buffer
  // (2 x net.core.wmem_max, 425,984 bytes with Linux defaults), otherwise two
  // ranks writing to each other at once both block until SO_SNDTIMEO.
  static constexpr size_t kMaxPieceBytes = 512 << 10;

  // Collective: all ranks, same order, after the main (async) context.
  SyncBuckets(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> dev, int rank, int size,
              std::chrono::milliseconds timeout)
      : ctx_(std::make_shared<gloo::rendezvous::Context>(rank, size)) {
    // The context's timeout when connecting becomes each pair's fixed
    // timeout: SO_RCVTIMEO/SO_SNDTIMEO of its socket, i.e. a limit per
    // blocking read/write, not per all-reduce (and 5x it for connecting).
    ctx_->setTimeout(timeout);
    gloo::rendezvous::PrefixStore prefixed("dp/gloo-sync", store);
    ctx_->connectFullMesh(prefixed, dev);
    for (int i = 0; i < size; i++)
      if (i != rank) ctx_->getPair(i)->setSync(true, /*busyPoll=*/false);  // one-way switch
  }

  // Local (no communication), but slots come from a per-context counter:
  // every rank must add the same buckets in the same order, and should add
  // all of them before running any. p must stay valid and fixed.
  int add_bucket(float* p, size_t count) {
    Bucket b;
    const size_t per = kMaxPieceBytes / sizeof(float);
    for (size_t off = 0; off < count; off += per)
      b.pieces.emplace_back(new gloo::AllreduceHalvingDoubling<float>(
          ctx_, std::vector<float*>{p + off}, static_cast<int>(std::min(per, count - off))));
    buckets_.push_back(std::move(b));
    return static_cast<int>(buckets_.size()) - 1;
  }

  // In-place sum. One thread at a time (sync pairs are read by the caller);
  // buckets in the same order on every rank. Throws gloo::IoException when
  // a peer dies (EOF/ECONNRESET, ~1 ms) or a read/write times out; after
  // that the context is unusable (every later run throws at once).
  void run(int bucket) {
    for (auto& a : buckets_[static_cast<size_t>(bucket)].pieces) a->run();
  }

  // From another thread, while run() may be blocked in a read: shut the
  // pairs' sockets down. The blocked read returns at once ("Connection
  // closed by peer"), and the peers see EOF. (closeConnections() would
  // wait for the pair's mutex, held by the blocked read, until its timeout.)
  void abort() {
    for (int i = 0; i < ctx_->size; i++) {
      if (i == ctx_->rank) continue;
      auto* a = dynamic_cast<const gloo::transport::tcp::Address*>(&ctx_->getPair(i)->address());
      if (!a) continue;
      const int fd = socket_with_local_address(a->getSockaddr());
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
  }

 private:
  struct Bucket {
    std::vector<std::unique_ptr<gloo::Algorithm>> pieces;
  };

  // A connected pair's address() is its socket's own address (getsockname).
  static int socket_with_local_address(const sockaddr_storage& want) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    while (dirent* e = readdir(d)) {
      const int fd = atoi(e->d_name);
      struct stat st;
      if (fd <= 2 || fstat(fd, &st) || !S_ISSOCK(st.st_mode)) continue;
      sockaddr_storage me{}, peer{};
      socklen_t l = sizeof me, pl = sizeof peer;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &l) || getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl)) continue;
      if (me.ss_family != want.ss_family) continue;
      bool same = false;
      if (me.ss_family == AF_INET) {
        auto *x = reinterpret_cast<sockaddr_in*>(&me);
        auto *y = reinterpret_cast<const sockaddr_in*>(&want);
        same = x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
      } else if (me.ss_family == AF_INET6) {
        auto *x = reinterpret_cast<sockaddr_in6*>(&me);
        auto *y = reinterpret_cast<const sockaddr_in6*>(&want);
        same = x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr);
      }
      if (same) { found = fd; break; }
    }
    closedir(d);
    return found;
  }

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::vector<Bucket> buckets_;
};

// ------------------------------------------------------------ 2-process test
static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static int child(int rank, const std::string& dir, bool abort_test) {
  signal(SIGPIPE, SIG_IGN);  // dp: its NoSigpipe guard around the calls
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  SyncBuckets sb(store, dev, rank, 2, std::chrono::milliseconds(3000));
  const size_t counts[] = {100, 64 << 8, 1 << 18, (5 << 20) / 4 + 7};  // 400 B, 64 KB, 1 MB, 5 MB+
  std::vector<std::vector<float>> bufs;
  for (size_t c : counts) bufs.emplace_back(c);
  for (auto& b : bufs) sb.add_bucket(b.data(), b.size());
  if (abort_test) {
    for (auto& b : bufs) std::fill(b.begin(), b.end(), 1.0f);
    sb.run(0);
    if (rank == 1) { sleep(6); return 0; }  // stops taking part; rank 0 blocks in a read
    std::thread t([&] { usleep(300000); sb.abort(); });
    double a = now_s();
    try { sb.run(1); printf("run returned?!\n"); }
    catch (const std::exception& e) { printf("rank 0: run threw %.3fs after start (abort at 0.3 s): %s\n", now_s() - a, e.what()); }
    t.join();
    return 0;
  }
  for (int step = 0; step < 50; step++) {
    for (size_t j = 0; j < bufs.size(); j++) {
      for (size_t i = 0; i < bufs[j].size(); i++) bufs[j][i] = float(i % 97) + rank * 1000.0f + step;
      double a = now_s();
      sb.run(static_cast<int>(j));
      double t = now_s() - a;
      for (size_t i = 0; i < bufs[j].size(); i++)
        if (bufs[j][i] != 2 * float(i % 97) + 1000.0f + 2 * step) { printf("rank %d: WRONG bucket %zu\n", rank, j); return 1; }
      if (rank == 0 && step == 49) printf("bucket %zu (%zu B): %.0f us\n", j, counts[j] * 4, t * 1e6);
    }
  }
  if (rank == 0) printf("50 steps x %zu buckets: sums correct\n", bufs.size());
  return 0;
}

int main(int argc, char** argv) {
  bool abort_test = argc > 1 && std::string(argv[1]) == "abort";
  char tmpl[] = "/tmp/gloo_sketch_store.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  pid_t p[2];
  for (int r = 0; r < 2; r++)
    if ((p[r] = fork()) == 0) {
      int rc = 1;
      try { rc = child(r, dir, abort_test); } catch (const std::exception& e) { printf("rank %d: %s\n", r, e.what()); }
      fflush(stdout);
      _exit(rc);
    }
  int st, bad = 0;
  for (int r = 0; r < 2; r++) { waitpid(p[r], &st, 0); bad |= !WIFEXITED(st) || WEXITSTATUS(st); }
  system(("rm -rf " + dir).c_str());
  return bad;
}
