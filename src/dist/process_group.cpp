#include "dist/process_group.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/args.h"
#include "core/error.h"
#ifdef DP_HAVE_GLOO
#include "dist/gloo_comm.h"
#endif
#ifdef DP_HAVE_MPI
#include "dist/mpi_comm.h"
#endif

namespace dp {

using json = nlohmann::json;

DistConfig dist_config_from_json(const std::string& text) {
  DistConfig c = dist_config_from_env();
  if (text.empty()) return c;
  const json doc = parse_config(text, "process group");
  Args a(doc, "");
  c.world_size = static_cast<int>(a.integer("world_size", c.world_size, 1));
  c.rank = static_cast<int>(a.integer("rank", c.rank, 0));
  if (c.rank >= c.world_size)
    fail(DP_ERR_MODEL, "/rank: " + std::to_string(c.rank) + " is outside the world of " + std::to_string(c.world_size) + " processes");
  if (doc.is_object() && doc.contains("local_rank")) c.local_rank_given = true;
  c.local_rank = static_cast<int>(a.integer("local_rank", c.local_rank, 0));
  c.master_addr = a.string("master_addr", c.master_addr);
  const int64_t port = a.integer("master_port", c.master_port, 1);
  if (port > 65535) fail(DP_ERR_MODEL, "/master_port: expected a port in [1, 65535], got " + std::to_string(port));
  c.master_port = static_cast<int>(port);
  c.timeout_s = a.number("timeout_s", c.timeout_s, 0.001, 86400);
  c.backend = a.string("backend", c.backend);
  if (!known_backend(c.backend))
    fail(DP_ERR_MODEL, "/backend: expected \"gloo\" or \"mpi\", got \"" + c.backend + "\"");
  a.finish("a process group config");
  return c;
}

ProcessGroup::ProcessGroup(const DistConfig& config) : config_(config) {
  if (config_.world_size == 1) return;
#ifdef DP_HAVE_GLOO
  store_ = std::make_unique<TcpStore>(config_.master_addr, config_.master_port, config_.rank == 0, config_.timeout_s);
  rendezvous(*store_, config_);
  if (config_.backend == "mpi") {
#ifdef DP_HAVE_MPI
    comm_ = std::make_unique<MpiComm>(config_);
#else
    fail(DP_ERR_DEVICE, "this dp was built without Open MPI (Debian's libopenmpi-dev), so it has no mpi backend: use gloo");
#endif
  } else {
    comm_ = std::make_unique<GlooComm>(*store_, config_);
  }
  // Processes on this machine: those with this host name. Without a LOCAL_RANK (processes started
  // by hand with RANK and WORLD_SIZE), this one's place among them in rank order, so that two
  // processes on one machine do not both take cuda:0.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::vector<std::string> hosts = all_gather(host);
  local_world_size_ = 0;
  for (const std::string& h : hosts) local_world_size_ += h == host;
  if (!config_.local_rank_given) config_.local_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + config_.rank, std::string(host)));
#else
  fail(DP_ERR_DEVICE, "this dp was built without Gloo (Debian's libgloo-dev), so it cannot join a world of " +
                          std::to_string(config_.world_size) + " processes");
#endif
}

// Leaving, a rank says so: one that fails between two steps of setting up
// (an error of its own before the next all_gather) then fails the others'
// wait at once, rather than at the time limit.
ProcessGroup::~ProcessGroup() {
  if (!store_) return;
  try {
    store_->set("dp/left/" + std::to_string(config_.rank), "1");
  } catch (...) {  // rank 0's store is gone already: nobody is waiting on it
  }
}

// Polls the store until every rank's `prefix + rank` is set: their values,
// in rank order. Stops early when the store saw a rank die: *lost is that
// rank (else -1); when a rank whose value is missing left the group on
// purpose (its own error, before this step): *left is that rank (else -1);
// or at the time limit: *missing names the ranks not there.
std::vector<std::string> ProcessGroup::wait_ranks(const std::string& prefix, int* lost, int* left,
                                                  std::string* missing) {
  const int n = config_.world_size;
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(prefix + std::to_string(r));
  for (int r = 0; r < n; ++r) keys.push_back("dp/lost/" + std::to_string(r));
  for (int r = 0; r < n; ++r) keys.push_back("dp/left/" + std::to_string(r));
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<bool> found;
    std::vector<std::string> values = store_->try_get(keys, &found);
    *lost = *left = -1;
    missing->clear();
    for (int r = n - 1; r >= 0; --r) {
      if (found[static_cast<size_t>(n + r)]) *lost = r;
      if (found[static_cast<size_t>(2 * n + r)] && !found[static_cast<size_t>(r)]) *left = r;
    }
    for (int r = 0; r < n; ++r)
      if (!found[static_cast<size_t>(r)]) *missing += (missing->empty() ? "" : ", ") + std::to_string(r);
    if (missing->empty() || *lost >= 0 || *left >= 0 ||
        std::chrono::steady_clock::now() - start > std::chrono::duration<double>(config_.timeout_s)) {
      values.resize(static_cast<size_t>(n));
      return values;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& value) {
  if (config_.world_size == 1) return {value};
  const std::string base = "dp/gather/" + std::to_string(seq_++) + "/";
  store_->set(base + std::to_string(config_.rank), value);
  int lost = -1, left = -1;
  std::string missing;
  std::vector<std::string> all = wait_ranks(base, &lost, &left, &missing);
  // A rank lost after it gave its value (it read the result, failed on it
  // and exited) leaves a whole result: only a missing value is a failure.
  if (!missing.empty() && lost >= 0)
    fail(DP_ERR_COMM, "rank " + std::to_string(lost) + " died or left before every rank reached this step of setting up "
                      "(the store at " + store_->address() + " saw its connection close)");
  if (!missing.empty() && left >= 0)
    fail(DP_ERR_COMM, "rank " + std::to_string(left) + " left the process group before reaching this step of setting "
                      "up (an error of its own: its output says which)");
  if (!missing.empty())
    fail(DP_ERR_COMM, (missing.find(',') == std::string::npos ? "rank " : "ranks ") + missing + " did not reach this step of setting up within " +
                          seconds_text(config_.timeout_s) + " (store at " + store_->address() +
                          "; DP_COMM_TIMEOUT or timeout_s sets the limit)");
  // Rank 0 serves the store: it returns once every rank has read (or was
  // lost), so that a rank failing on the result and exiting at once
  // (without destroying its group) takes nobody's answer with it.
  store_->set(base + "read/" + std::to_string(config_.rank), "");
  if (config_.rank == 0) wait_ranks(base + "read/", &lost, &left, &missing);
  return all;
}

void ProcessGroup::check_same(const std::string& what, const std::string& value) {
  const std::vector<std::string> all = all_gather(value);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      fail(DP_ERR_INVALID_ARGUMENT, "rank " + std::to_string(r) + "'s " + what + " differs from rank 0's: rank 0 has " +
                                        all[0] + ", rank " + std::to_string(r) + " has " + all[r]);
}

}  // namespace dp
