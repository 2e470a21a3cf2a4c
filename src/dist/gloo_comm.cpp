#include "dist/gloo_comm.h"

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

namespace dp {

namespace {

// Gloo's rendezvous through dp's store.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(TcpStore& store, double timeout_s) : store_(store), timeout_s_(timeout_s) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_.get({key}, timeout_s_)[0];
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_.get(keys, timeout_s_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.get(keys, static_cast<double>(timeout.count()) / 1000);
  }

 private:
  TcpStore& store_;
  double timeout_s_;
};

// Writing to a connection whose peer died raises SIGPIPE, whose default
// action ends the process: a survivor would die instead of getting an
// error. While Gloo runs, this thread blocks SIGPIPE (threads Gloo starts
// meanwhile inherit the block); one raised meanwhile is taken back before
// the caller's mask returns. The process's own handling is left alone.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~NoSigpipe() {
    if (sigismember(&old_, SIGPIPE)) return;  // blocked already by the caller
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    timespec zero{0, 0};
    while (sigtimedwait(&pipe, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

// The address this host reaches host:port from: the source address the
// kernel's routing picks for it (connecting a UDP socket sends nothing).
// Peers reach this rank there, as they reach rank 0's store; the machine's
// host name, Gloo's default, may resolve to loopback (Debian's 127.0.1.1, a
// network namespace's shared /etc/hosts) or to another network's address.
// "" when unknown.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res)) return "";
  std::string out;
  for (addrinfo* a = res; a && out.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char buf[NI_MAXHOST];
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) == 0)
      out = buf;
    ::close(fd);
  }
  freeaddrinfo(res);
  return out;
}

// A context whose next slot can be set: a bucket's algorithms, made again
// for data that moved on one rank only, take the slots they had before, so
// that they still match the other ranks'.
class SlotContext final : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;
  void set_next_slot(int slot) { slot_ = slot; }
  int next_slot() const { return slot_; }
};

// The socket of this process whose own address is `want` (a connected
// pair's address() is its socket's), or -1. Found without touching any
// descriptor: Gloo's event-loop thread closes its own sockets whenever it
// likes (a listening socket once accepted, a pair whose peer left), so
// fstat() or getsockname() on every descriptor of the process would race
// with it, and could even read a number closed and reused meanwhile. The
// kernel's table of TCP sockets (/proc/self/net/tcp, tcp6) gives the
// inodes of the connections at `want`; /proc/self/fd links name the
// descriptor of the one that is ours.
int socket_at(const sockaddr_storage& want) {
  // The table's local address: the address's 32-bit words as the kernel
  // prints them (each in host byte order), ":", the port.
  char local[64];
  const char* table = nullptr;
  if (want.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&want);
    std::snprintf(local, sizeof local, "%08X:%04X", a->sin_addr.s_addr, ntohs(a->sin_port));
    table = "/proc/self/net/tcp";
  } else if (want.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&want);
    uint32_t w[4];
    std::memcpy(w, &a->sin6_addr, sizeof w);
    std::snprintf(local, sizeof local, "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3], ntohs(a->sin6_port));
    table = "/proc/self/net/tcp6";
  } else {
    return -1;
  }
  // "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...";
  // a listening socket (st 0A) at the same address is not the connection.
  std::vector<std::string> inodes;
  if (FILE* f = std::fopen(table, "r")) {
    char line[512], sl[32], addr[64], rem[64], st[8], inode[32];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "%31s %63s %63s %7s %*s %*s %*s %*s %*s %31s", sl, addr, rem, st, inode) == 5 &&
          std::strcmp(addr, local) == 0 && std::strcmp(st, "0A") != 0 && std::strcmp(inode, "0") != 0)
        inodes.push_back(std::string("socket:[") + inode + "]");
    std::fclose(f);
  }
  if (inodes.empty()) return -1;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char link[64];
    const ssize_t n = ::readlinkat(::dirfd(d), e->d_name, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (std::find(inodes.begin(), inodes.end(), link) != inodes.end()) {
      found = std::atoi(e->d_name);
      break;
    }
  }
  ::closedir(d);
  return found;
}

// A prepared all-reduce: halving-doubling per piece of at most 512 KB,
// bound to data. The largest piece: halving-doubling's largest blocking
// write (half a piece, between 2 ranks) must fit the socket buffers
// (Linux's default wmem_max is 208 KB, doubled), or two ranks writing to
// each other at once both wait until their time limit.
template <class T>
struct Prepared {
  static constexpr int64_t kPiece = (512 << 10) / sizeof(T);
  T* data = nullptr;
  int64_t count = -1;
  int slot = 0;  // the first of its pieces' slots, the same on every rank
  std::vector<std::unique_ptr<gloo::Algorithm>> pieces;

  // Binds the pieces to data[0, count), once; `fresh` is the next slot no
  // one has. A new or resized one (on every rank alike) takes fresh slots;
  // data that moved (on this rank only) keeps its slots.
  void bind(const std::shared_ptr<SlotContext>& ctx, int* fresh, T* to, int64_t n) {
    if (data == to && count == n) return;
    const int64_t k = (n + kPiece - 1) / kPiece;
    if (count != n) {
      slot = *fresh;
      *fresh += static_cast<int>(k) * 2 * ctx->size * (ctx->size - 1);  // the slots a halving-doubling takes
    }
    pieces.clear();  // their slots are taken again
    data = nullptr;
    ctx->set_next_slot(slot);
    for (int64_t at = 0; at < n; at += kPiece)
      pieces.emplace_back(std::make_unique<gloo::AllreduceHalvingDoubling<T>>(
          ctx, std::vector<T*>{to + at}, static_cast<int>(std::min(kPiece, n - at))));
    data = to;
    count = n;
  }
  void run() {
    for (auto& piece : pieces) piece->run();
  }
};

}  // namespace

struct GlooComm::Impl {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::chrono::milliseconds timeout{0};
  uint32_t tag = 0;  // every collective its own, the same on every rank
  // Prepared all-reduces: the sync-mode context, used by one thread at a
  // time; its sockets (to shut down on abort: closing its pairs would wait
  // for a read in flight to time out); gradient buckets by key, and the
  // small sums of doubles by count, through a buffer of their own; the next
  // slot no one has.
  std::shared_ptr<SlotContext> sync;
  std::mutex sync_mu;
  std::vector<int> sync_fds;
  std::map<int, Prepared<float>> buckets;
  std::map<int64_t, std::pair<std::vector<double>, Prepared<double>>> doubles;
  int fresh_slot = 0;
};

GlooComm::GlooComm(TcpStore& store, const DistConfig& c)
    : impl_(std::make_unique<Impl>()), store_(&store), rank_(c.rank), world_size_(c.world_size) {
  set_timeout_s(c.timeout_s);
  impl_->timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000));
  NoSigpipe no_sigpipe;  // Gloo's threads start here, and keep SIGPIPE blocked
  try {
    // This rank listens where its peers can reach it: GLOO_SOCKET_IFNAME's
    // interface (PyTorch's variable, for machines with several networks),
    // else the address it reaches rank 0's store from.
    gloo::transport::tcp::attr attr;
    if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface)
      attr.iface = iface;
    else
      attr.hostname = local_address_towards(c.master_addr, c.master_port);
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
    impl_->context = std::make_shared<gloo::rendezvous::Context>(c.rank, c.world_size);
    // Gloo waits five times its timeout for a pair's first connection:
    // connecting takes a fifth, so a peer lost meanwhile is an error within
    // DP_COMM_TIMEOUT.
    impl_->context->setTimeout(impl_->timeout / 5);
    StoreAdapter adapter(store, c.timeout_s);
    gloo::rendezvous::PrefixStore prefixed("dp/gloo", adapter);
    impl_->context->connectFullMesh(prefixed, impl_->device);
    impl_->context->setTimeout(impl_->timeout);
    // The buckets' context: its connections' time limit is fixed when they
    // connect (every rank is known alive by now).
    impl_->sync = std::make_shared<SlotContext>(c.rank, c.world_size);
    impl_->sync->setTimeout(impl_->timeout);
    gloo::rendezvous::PrefixStore sync_prefixed("dp/gloo-buckets", adapter);
    impl_->sync->connectFullMesh(sync_prefixed, impl_->device);
    for (int r = 0; r < c.world_size; ++r) {
      if (r == c.rank) continue;
      auto& pair = impl_->sync->getPair(r);
      pair->setSync(true, /*busyPoll=*/false);
      auto* at = dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address());
      const int fd = at ? socket_at(at->getSockaddr()) : -1;
      if (fd < 0) fail(DP_ERR_INTERNAL, "cannot find the socket of Gloo's connection to rank " + std::to_string(r));
      impl_->sync_fds.push_back(fd);
    }
    impl_->fresh_slot = impl_->sync->next_slot();
  } catch (const std::exception& e) {
    fail(DP_ERR_COMM, "rank " + std::to_string(c.rank) + " could not connect to the other " +
                        std::to_string(c.world_size - 1) + " rank(s) with Gloo: " + e.what());
  }
}

GlooComm::~GlooComm() = default;

// Runs one Gloo collective; any failure breaks the communicator for good.
template <class F>
void GlooComm::guarded(const char* what, F&& f) {
  wait(rank_);
  NoSigpipe no_sigpipe;
  try {
    f();
  } catch (const std::exception& e) {
    // Which peer: the store's server saw its connection close (a second at
    // most to notice; a peer that hangs is not lost, it timed out).
    std::string lost = store_->lost_rank(world_size_, 1.0);
    // A connection a peer closed (its process ended: an exception, Ctrl-C)
    // is not a time limit reached; say which it was.
    const std::string why = e.what();
    const bool closed = why.find("reset by peer") != std::string::npos || why.find("Broken pipe") != std::string::npos ||
                        why.find("closed") != std::string::npos;
    abort(std::string(what) + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) + ": " +
          (!lost.empty() ? lost + " died or left"
           : closed      ? "a peer closed its connection (its process ended or failed: its output says why)"
                         : "a peer left, or did not answer within " + seconds_text(timeout_s()) + " (DP_COMM_TIMEOUT)") +
          " (" + why + ")");
    wait(rank_);
  }
}

// Gloo's ring all-reduce, on the event-loop context (any thread).
void GlooComm::all_reduce(int member, const float* in, float* out, int64_t count) {
  if (member != rank_ || !in) fail(DP_ERR_INTERNAL, "GlooComm::all_reduce: member must be this rank, with an input");
  if (count <= 0) return;
  if (in != out) std::memcpy(out, in, static_cast<size_t>(count) * sizeof(float));
  guarded("an all-reduce", [&] {
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(out, static_cast<size_t>(count));
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(impl_->tag++);
    opts.setTimeout(impl_->timeout);
    gloo::allreduce(opts);
  });
}

// A step's small exchanges (dp's results, a call's checks): prepared too.
void GlooComm::all_reduce_f64(int member, double* data, int64_t count) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "GlooComm::all_reduce_f64: member must be this rank");
  if (count <= 0) return;
  guarded("an all-reduce", [&] {
    std::lock_guard<std::mutex> lock(impl_->sync_mu);
    auto& [buf, p] = impl_->doubles[count];
    buf.assign(data, data + count);
    p.bind(impl_->sync, &impl_->fresh_slot, buf.data(), count);
    p.run();
    std::copy(buf.begin(), buf.end(), data);
  });
}

void GlooComm::all_reduce_bucket(int member, int key, float* data, int64_t count) {
  if (member != rank_ || !data) fail(DP_ERR_INTERNAL, "GlooComm::all_reduce_bucket: member must be this rank, with data");
  if (count <= 0) return;
  guarded("an all-reduce", [&] {
    std::lock_guard<std::mutex> lock(impl_->sync_mu);
    Prepared<float>& b = impl_->buckets[key];
    b.bind(impl_->sync, &impl_->fresh_slot, data, count);
    b.run();
  });
}

void GlooComm::broadcast(int member, float* data, int64_t count, int root) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "GlooComm::broadcast: member must be this rank");
  if (count <= 0) return;
  guarded("a broadcast", [&] {
    gloo::BroadcastOptions opts(impl_->context);
    opts.setOutput(data, static_cast<size_t>(count));
    opts.setRoot(root);
    opts.setTag(impl_->tag++);
    opts.setTimeout(impl_->timeout);
    gloo::broadcast(opts);
  });
}

void GlooComm::barrier(int member) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "GlooComm::barrier: member must be this rank");
  guarded("a barrier", [&] {
    gloo::BarrierOptions opts(impl_->context);
    opts.setTag(impl_->tag++);
    opts.setTimeout(impl_->timeout);
    gloo::barrier(opts);
  });
}

void GlooComm::wait(int) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) fail(DP_ERR_COMM, broken_);
}

bool GlooComm::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_.empty();
}

void GlooComm::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) return;
    broken_ = why + "; this process group cannot be used again";
  }
  NoSigpipe no_sigpipe;
  // The other ranks fail now, not at their time limit; so does a bucket's
  // all-reduce of this rank in flight on another thread.
  for (int fd : impl_->sync_fds) ::shutdown(fd, SHUT_RDWR);
  try {
    impl_->context->closeConnections();
  } catch (...) {
  }
}

}  // namespace dp
