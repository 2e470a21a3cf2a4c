#include "dist/store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace dp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An integer environment variable in [lo, hi]; `fallback` when unset.
long env_int(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (*end || errno || n < lo || n > hi)
    fail(DP_ERR_INVALID_ARGUMENT, std::string(name) + "=\"" + v + "\": expected an integer in [" + std::to_string(lo) +
                                      ", " + std::to_string(hi) + "]");
  return n;
}

// Whole messages over a blocking socket; false when the peer is gone.
bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool recv_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
// A string as a 4-byte length and its bytes.
bool send_str(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  std::string msg(4 + s.size(), '\0');  // one write: one segment
  std::memcpy(&msg[0], &n, 4);
  std::memcpy(&msg[4], s.data(), s.size());
  return send_all(fd, msg.data(), msg.size());
}
bool recv_str(int fd, std::string* s) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4) || n > (64u << 20)) return false;
  s->resize(n);
  return recv_all(fd, &(*s)[0], n);
}

}  // namespace

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

bool known_backend(const std::string& backend) { return backend == "gloo" || backend == "mpi"; }

DistConfig dist_config_from_env() {
  DistConfig c;
  const char* sources[][4] = {{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                              {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                              {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  for (const auto& s : sources) {
    if (!std::getenv(s[1]) && !std::getenv(s[2])) continue;
    if (!std::getenv(s[1]) || !std::getenv(s[2]))
      fail(DP_ERR_INVALID_ARGUMENT, std::string(std::getenv(s[1]) ? s[1] : s[2]) + " is set but " +
                                        (std::getenv(s[1]) ? s[2] : s[1]) + " is not (" + s[0] + "'s launch sets both)");
    c.launcher = s[0];
    c.world_size = static_cast<int>(env_int(s[2], 1, 1, 1 << 20));
    c.rank = static_cast<int>(env_int(s[1], 0, 0, 1 << 20));
    if (c.rank >= c.world_size)
      fail(DP_ERR_INVALID_ARGUMENT, std::string(s[1]) + "=" + std::to_string(c.rank) + " is outside the world of " +
                                        s[2] + "=" + std::to_string(c.world_size));
    c.local_rank = static_cast<int>(env_int(s[3], 0, 0, 1 << 20));
    c.local_rank_given = std::getenv(s[3]) != nullptr;
    break;
  }
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) c.master_addr = a;
  c.master_port = static_cast<int>(env_int("MASTER_PORT", c.master_port, 1, 65535));
  // torchrun's agent serves its own store (PyTorch's TCPStore) at
  // MASTER_PORT and says so: dp's takes the next port.
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); agent && std::string(agent) == "True") {
    if (c.master_port == 65535) fail(DP_ERR_INVALID_ARGUMENT, "MASTER_PORT=65535: under torchrun dp's store needs the next port");
    ++c.master_port;
  }
  if (const char* b = std::getenv("DP_BACKEND"); b && *b) {
    c.backend = b;
    if (!known_backend(c.backend))
      fail(DP_ERR_INVALID_ARGUMENT, std::string("DP_BACKEND=\"") + b + "\": expected gloo or mpi (CPU tensors across processes)");
  }
  if (const char* t = std::getenv("DP_COMM_TIMEOUT"); t && *t) {
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    if (*end || !(s >= 0.001 && s <= 86400))
      fail(DP_ERR_INVALID_ARGUMENT, std::string("DP_COMM_TIMEOUT=\"") + t + "\": expected seconds in [0.001, 86400]");
    c.timeout_s = s;
  }
  return c;
}

// One thread accepts; one thread per connection answers: 'S' key value
// (set; answered with an empty ack), 'G' key (answered with found and the
// value) and 'Q' (a client leaving on purpose). Start-up traffic is a few
// small messages per rank. A connection stays open while its process group
// lives, so the server also sees a rank vanish: a connection that announced
// rank r ("dp/rank/r") and closes without 'Q' sets "dp/lost/r". The
// handlers are detached and counted (open_), and the destructor waits for
// the count to reach 0: a connection's thread ends with it, so a process
// that exits without destroying its group (a rank failing at once) leaves
// no finished thread unjoined behind it. A connection's handler closes its
// socket as it ends: whatever else connects to the port over a long run (a
// probe, a scanner) costs no descriptor once it has gone.
class TcpStore::Server {
 public:
  Server(const std::string& host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const std::string where = host + ":" + std::to_string(port);
    if (int e = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res))
      fail(DP_ERR_IO, "store at " + where + ": " + gai_strerror(e));
    std::string why = "no address";
    bool in_use = false;
    for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
        listen_fd_ = fd;
      } else {
        in_use = in_use || errno == EADDRINUSE;
        why = std::strerror(errno);
        ::close(fd);
      }
    }
    freeaddrinfo(res);
    if (listen_fd_ < 0)
      fail(DP_ERR_IO, "rank 0 cannot serve the store at " + where + ": " + why +
                          (in_use ? " (another process holds the port: a second rank 0, or another job; MASTER_PORT "
                                    "chooses it)"
                                  : " (MASTER_ADDR, MASTER_PORT)"));
    accepter_ = std::thread([this] { accept_loop(); });
  }

  // Rank 0 leaving first would take the store from under the ranks still
  // asking it why a peer failed ("dp/lost/r") or why the rendezvous was
  // given up ("dp/abort"): once either happened, it keeps serving until
  // every other rank has left, or for 2 s at most.
  ~Server() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      left_.wait_for(lock, std::chrono::seconds(2),
                     [this] { return open_ == 0 || (lost_ == 0 && !data_.count("dp/abort")); });
    }
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    accepter_.join();
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
      left_.wait(lock, [this] { return open_ == 0; });  // the handlers are done with this, and closed theirs
    }
    ::close(listen_fd_);
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        // Out of descriptors (EMFILE), the connection waits in the queue and
        // poll() answers at once: pause rather than spin.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) {
        ::close(fd);
        break;
      }
      // Answers are small writes: without TCP_NODELAY, Nagle holds each
      // second one until the client's delayed ACK (40 ms a request).
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      clients_.push_back(fd);
      ++open_;
      std::thread([this, fd] { serve(fd); }).detach();
    }
  }

  // A handler's last touch of the server: the destructor waits for open_
  // to reach 0 (the notification comes under the lock, so the server
  // outlives it).
  void serve(int fd) {
    std::string rank;  // the rank this connection announced
    const bool bye = answer(fd, &rank);
    std::lock_guard<std::mutex> lock(mu_);
    if (!rank.empty()) {
      auto it = announced_.find(rank);
      if (it != announced_.end() && it->second == fd) announced_.erase(it);
      if (!bye && !stop_) data_["dp/lost/" + rank] = std::to_string(++lost_);  // numbered in the order noticed
    }
    clients_.erase(std::find(clients_.begin(), clients_.end(), fd));
    ::close(fd);  // under the lock: the destructor never shuts down a number reused since
    --open_;
    left_.notify_all();
  }

  // Answers fd's requests until it leaves: true when it said so ('Q'),
  // false when it vanished or broke the protocol. *rank: the rank it
  // announced ("dp/rank/r"), if it did.
  bool answer(int fd, std::string* rank) {
    for (;;) {
      char op = 0;
      std::string key, value;
      if (!recv_all(fd, &op, 1)) return false;
      if (op == 'Q') return true;
      if (!recv_str(fd, &key)) return false;
      if (op == 'S') {
        if (!recv_str(fd, &value)) return false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          // A rank announced by a second live connection: two processes
          // were given one RANK. Every rank in the rendezvous is told.
          if (key.compare(0, 8, "dp/rank/") == 0) {
            const std::string r = key.substr(8);
            if (announced_.emplace(r, fd).first->second == fd)
              *rank = r;
            else if (!data_.count("dp/abort"))
              data_["dp/abort"] = "two processes announced rank " + r +
                                  " (each process of a world needs its own rank: RANK, OMPI_COMM_WORLD_RANK or "
                                  "SLURM_PROCID differ between them; or two jobs share this MASTER_ADDR:MASTER_PORT: "
                                  "give each job its own MASTER_PORT)";
          }
          data_[key] = value;
        }
        const char ok = 1;
        if (!send_all(fd, &ok, 1) || !send_str(fd, "")) return false;
      } else if (op == 'G') {
        char found = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = data_.find(key);
          if (it != data_.end()) found = 1, value = it->second;
        }
        if (!send_all(fd, &found, 1) || !send_str(fd, value)) return false;
      } else {
        return false;  // not a dp store client
      }
    }
  }

  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accepter_;
  std::mutex mu_;
  std::condition_variable left_;
  std::vector<int> clients_;
  int open_ = 0;  // connections still being answered: their (detached) handler threads
  std::map<std::string, std::string> data_;
  std::map<std::string, int> announced_;  // rank -> the live connection that announced it
  int lost_ = 0;  // connections lost so far
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, double timeout_s)
    : address_(host + ":" + std::to_string(port)) {
  if (serve) server_ = std::make_unique<Server>(host, port);
  const auto t0 = Clock::now();
  std::string why = "nothing answered";
  while (fd_ < 0) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (int e = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res)) {
      why = gai_strerror(e);
    } else {
      for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          why = std::strerror(errno);
          ::close(fd);
        }
      }
      freeaddrinfo(res);
    }
    if (fd_ >= 0) break;
    if (seconds_since(t0) > timeout_s)
      fail(DP_ERR_COMM, "cannot reach the store of rank 0 at " + address_ + " within " + seconds_text(timeout_s) +
                          ": " + why + " (is rank 0 running? MASTER_ADDR and MASTER_PORT must name it)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{};  // the server answers at once: a silent one is gone
  tv.tv_sec = static_cast<time_t>(timeout_s) + 1;
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) {
    const char bye = 'Q';
    send_all(fd_, &bye, 1);
    ::close(fd_);
  }
  server_.reset();
}

std::string TcpStore::request(char op, const std::string& key, const std::string& value, bool* found) {
  std::lock_guard<std::mutex> lock(mu_);
  bool ok = send_all(fd_, &op, 1) && send_str(fd_, key) && (op != 'S' || send_str(fd_, value));
  char f = 0;
  std::string reply;
  ok = ok && recv_all(fd_, &f, 1) && recv_str(fd_, &reply);
  if (!ok) fail(DP_ERR_COMM, "the store at " + address_ + " stopped answering (rank 0 gone?)");
  if (found) *found = f != 0;
  return reply;
}

void TcpStore::set(const std::string& key, const std::string& value) { request('S', key, value, nullptr); }

std::vector<std::string> TcpStore::try_get(const std::vector<std::string>& keys, std::vector<bool>* found) {
  std::vector<std::string> out(keys.size());
  found->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    bool f = false;
    out[i] = request('G', keys[i], "", &f);
    (*found)[i] = f;
  }
  return out;
}

std::vector<std::string> TcpStore::get(const std::vector<std::string>& keys, double timeout_s) {
  const auto t0 = Clock::now();
  std::vector<bool> found;
  for (;;) {
    std::vector<std::string> v = try_get(keys, &found);
    std::string missing;
    for (size_t i = 0; i < keys.size(); ++i)
      if (!found[i]) missing += (missing.empty() ? "" : ", ") + keys[i];
    if (missing.empty()) return v;
    if (seconds_since(t0) > timeout_s)
      fail(DP_ERR_COMM, "store at " + address_ + ": still no " + missing + " after " + seconds_text(timeout_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string TcpStore::lost_rank(int world_size, double wait_s) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("dp/lost/" + std::to_string(r));
  const auto t0 = Clock::now();
  for (;;) {
    std::vector<bool> found;
    std::vector<std::string> order;
    try {
      order = try_get(keys, &found);
    } catch (const Error&) {
      return "rank 0 (whose store at " + address_ + " is gone too)";
    }
    // The first rank lost is the cause; others may have left after it.
    int first = -1;
    for (int r = 0; r < world_size; ++r)
      if (found[static_cast<size_t>(r)] && (first < 0 || std::stoi(order[static_cast<size_t>(r)]) < std::stoi(order[static_cast<size_t>(first)])))
        first = r;
    if (first >= 0) return "rank " + std::to_string(first);
    if (seconds_since(t0) >= wait_s) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A rank that gives up tells the others why ("dp/abort"), so that they fail
// with the reason rather than with rank 0's store vanishing under them;
// rank 0 keeps serving until the ranks that joined have read it (or 2 s).
// The store's server sets "dp/abort" too, when two processes announce one
// rank.
void rendezvous(TcpStore& store, const DistConfig& c) {
  const std::string world = std::to_string(c.world_size);
  // (Rank 0's store also keeps serving, up to 2 s more, while the ranks
  // still connected have not left: TcpStore::Server's destructor.)
  auto give_up = [&](const std::string& why, bool tell) {
    try {
      if (tell) store.set("dp/abort", why);
      store.set("dp/abort_seen/" + std::to_string(c.rank), "1");
      if (c.rank == 0) {
        const auto t1 = Clock::now();
        for (bool all = false; !all && seconds_since(t1) < 2;) {
          all = true;
          for (int r = 1; r < c.world_size && all; ++r) {
            std::vector<bool> f;
            store.try_get({"dp/rank/" + std::to_string(r), "dp/abort_seen/" + std::to_string(r)}, &f);
            all = !f[0] || f[1];  // not joined, or has read the reason
          }
          if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    } catch (const Error&) {  // rank 0's store went away meanwhile: the reason is still this one
    }
    fail(DP_ERR_COMM, why);
  };
  store.set("dp/rank/" + std::to_string(c.rank), world);
  std::vector<std::string> keys;
  for (int r = 0; r < c.world_size; ++r) keys.push_back("dp/rank/" + std::to_string(r));
  keys.push_back("dp/abort");
  const auto t0 = Clock::now();
  std::vector<bool> found;
  for (;;) {
    std::vector<std::string> v = store.try_get(keys, &found);
    if (found.back()) give_up(v.back(), false);  // another rank gave up, or the store saw a rank twice
    std::string missing, why;
    int nmissing = 0;
    for (int r = 0; r < c.world_size && why.empty(); ++r) {
      if (found[r] && v[r] != world)
        why = "rank " + std::to_string(r) + " joined a world of " + v[r] + " processes, rank " + std::to_string(c.rank) +
              " one of " + world + " (WORLD_SIZE differs between the processes)";
      if (!found[r]) missing += (nmissing++ ? ", " : "") + std::to_string(r);
    }
    if (why.empty() && nmissing == 0) break;
    if (why.empty() && seconds_since(t0) > c.timeout_s)
      why = std::string(nmissing > 1 ? "ranks " : "rank ") + missing + " of " + world + " did not join within " +
            seconds_text(c.timeout_s) + " (store at " + store.address() + "; DP_COMM_TIMEOUT or timeout_s sets the limit)";
    if (!why.empty()) give_up(why, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Rank 0 serves the store: it leaves only once every rank has seen
  // everyone, or one gave up meanwhile.
  store.set("dp/joined/" + std::to_string(c.rank), "1");
  if (c.rank == 0) {
    std::vector<std::string> joined;
    for (int r = 0; r < c.world_size; ++r) joined.push_back("dp/joined/" + std::to_string(r));
    joined.push_back("dp/abort");
    const auto t1 = Clock::now();
    for (;;) {
      std::vector<std::string> v = store.try_get(joined, &found);
      std::string missing;
      for (int r = 0; r < c.world_size; ++r)
        if (!found[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      // Every rank went on: an abort now comes from outside this world (a
      // late duplicate), which fails alone.
      if (missing.empty()) break;
      if (found.back()) give_up(v.back(), false);
      if (seconds_since(t1) > c.timeout_s)
        give_up("rank(s) " + missing + " of " + world + " joined but did not go on within " + seconds_text(c.timeout_s) +
                    " (store at " + store.address() + ")",
                true);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

}  // namespace dp
