#include "dist/gloo_comm.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

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

}  // namespace

struct GlooComm::Impl {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::chrono::milliseconds timeout{0};
  uint32_t tag = 0;  // every collective its own, the same on every rank
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
    abort(std::string(what) + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) + ": " +
          (lost.empty() ? "a peer left, or did not answer within " + std::to_string(int(timeout_s())) + " s (DP_COMM_TIMEOUT)"
                        : lost + " died or left") +
          " (" + e.what() + ")");
    wait(rank_);
  }
}

// Gloo's all-reduce of data[0, count) in place, summed; the same for floats and doubles.
template <class T>
void GlooComm::sum_in_place(T* data, int64_t count) {
  if (count <= 0) return;
  guarded("an all-reduce", [&] {
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(data, static_cast<size_t>(count));
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    opts.setTag(impl_->tag++);
    opts.setTimeout(impl_->timeout);
    gloo::allreduce(opts);
  });
}

void GlooComm::all_reduce(int member, const float* in, float* out, int64_t count) {
  if (member != rank_ || !in) fail(DP_ERR_INTERNAL, "GlooComm::all_reduce: member must be this rank, with an input");
  if (in != out && count > 0) std::memcpy(out, in, static_cast<size_t>(count) * sizeof(float));
  sum_in_place(out, count);
}

void GlooComm::all_reduce_f64(int member, double* data, int64_t count) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "GlooComm::all_reduce_f64: member must be this rank");
  sum_in_place(data, count);
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
  try {
    impl_->context->closeConnections();  // the other ranks fail now, not at their time limit
  } catch (...) {
  }
}

}  // namespace dp
