#include "engine/local_comm.h"

#include <chrono>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/simd.h"

namespace dp {

// One collective: what each member passed, and the chunks of work left.
struct LocalComm::Op {
  explicit Op(int members) : in(members), out(members), count(members), srcs(members), dsts(members) {}
  std::vector<const float*> in;
  std::vector<float*> out;
  std::vector<int64_t> count;
  int root = -1;  // >= 0: a broadcast from that member
  // Set by the last to join: the non-null inputs, and the distinct outputs
  // that need the result (a broadcast's root needs nothing).
  std::vector<const float*> srcs;
  std::vector<float*> dsts;
  int nsrc = 0, ndst = 0;
  int64_t n = 0, chunks = 0;
  std::atomic<int> joined{0};
  std::atomic<int64_t> next{0};  // next chunk to claim
  std::atomic<int64_t> left{0};  // chunks not yet done
};

LocalComm::LocalComm(int members, int max_pending, SumFn sum, int64_t chunk, DoneFn done)
    : members_(members), chunk_(chunk), sum_(std::move(sum)), done_(std::move(done)), started_(members, 0), waited_(members, 0) {
  for (int i = 0; i < max_pending + 1; ++i) ring_.push_back(std::make_unique<Op>(members));
  // The members are threads of this process: one that fails aborts the
  // others (Engine::run_replica), none can vanish. No time limit, then.
  set_timeout_s(std::numeric_limits<double>::infinity());
}

LocalComm::~LocalComm() = default;

// One pass of the sum, cloned for AVX2 (core/simd.h): out[i] = x[i] + y[i];
// out may be x.
DP_VECTOR_CLONES static void add_pass(float* out, const float* x, const float* y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = x[i] + y[i];
}

void LocalComm::host_sum(float* out, const float* const* in, int k, int64_t b, int64_t e) {
  const size_t bytes = static_cast<size_t>(e - b) * sizeof(float);
  if (k == 0) {
    std::memset(out + b, 0, bytes);
    return;
  }
  if (k == 1) {
    if (in[0] != out) std::memcpy(out + b, in[0] + b, bytes);
    return;
  }
  // The first two sources in one pass, then one pass per further source;
  // out may be in[0] (each element is read before it is written).
  add_pass(out, in[0], in[1], b, e);
  for (int j = 2; j < k; ++j) add_pass(out, out, in[j], b, e);
}

void LocalComm::check_aborted() {
  if (!aborted_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  fail(DP_ERR_DEVICE, why_);
}

void LocalComm::all_reduce(int member, const float* in, float* out, int64_t count) {
  start(member, in, out, count, -1);
}

void LocalComm::broadcast(int member, float* data, int64_t count, int root) {
  if (root < 0 || root >= members_) fail(DP_ERR_INTERNAL, "broadcast: root " + std::to_string(root) + " is not a member");
  start(member, data, data, count, root);
}

void LocalComm::barrier(int member) {
  start(member, nullptr, nullptr, 0, -1);
  wait(member);
}

void LocalComm::start(int member, const float* in, float* out, int64_t count, int root) {
  check_aborted();
  const uint64_t s = started_[member]++;
  if (s - waited_[member] >= ring_.size())
    fail(DP_ERR_INTERNAL, "LocalComm: more than " + std::to_string(ring_.size() - 1) + " collectives before a wait()");
  Op& op = *ring_[s % ring_.size()];
  op.in[member] = in;
  op.out[member] = out;
  op.count[member] = count;
  if (member == 0) op.root = root;
  if (op.joined.fetch_add(1, std::memory_order_acq_rel) + 1 < members_) return;

  // The last to join: check the call matches, plan the chunks, publish.
  op.joined.store(0, std::memory_order_relaxed);
  for (int m = 1; m < members_; ++m)
    if (op.count[m] != op.count[0]) {
      abort("collective " + std::to_string(s) + ": member " + std::to_string(m) + " passed " + std::to_string(op.count[m]) +
            " floats, member 0 passed " + std::to_string(op.count[0]));
      check_aborted();
    }
  op.nsrc = 0;
  if (op.root >= 0) {
    op.srcs[op.nsrc++] = op.in[op.root];
  } else {
    for (int m = 0; m < members_; ++m)
      if (op.in[m]) op.srcs[op.nsrc++] = op.in[m];
  }
  op.ndst = 0;
  for (int m = 0; m < members_; ++m) {
    float* o = op.out[m];
    bool needed = o != nullptr && !(op.root >= 0 && o == op.in[op.root]);
    for (int d = 0; d < op.ndst && needed; ++d) needed = op.dsts[d] != o;
    if (needed) op.dsts[op.ndst++] = o;
  }
  op.n = op.count[0];
  op.chunks = chunk_ > 0 && op.n > chunk_ ? (op.n + chunk_ - 1) / chunk_ : 1;
  op.next.store(0, std::memory_order_relaxed);
  op.left.store(op.chunks, std::memory_order_relaxed);
  ready_.store(s + 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_.notify_all();
  if (eager_) work(op);  // otherwise members compute it in wait()
}

// Claims and computes chunks of `op` until none is left to claim.
void LocalComm::work(Op& op) {
  for (;;) {
    const int64_t c = op.next.fetch_add(1, std::memory_order_acq_rel);
    if (c >= op.chunks) return;
    const int64_t b = op.chunks == 1 ? 0 : c * chunk_;
    const int64_t e = op.chunks == 1 ? op.n : std::min(op.n, b + chunk_);
    if (e > b && op.ndst > 0) {
      sum_(op.dsts[0], op.srcs.data(), op.nsrc, b, e);  // the first destination gets the sum,
      const float* first = op.dsts[0];
      for (int d = 1; d < op.ndst; ++d) sum_(op.dsts[d], &first, 1, b, e);  // the others a copy
    }
    if (op.left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (done_ && op.ndst > 0) done_(op.dsts[0], op.n);
      completed_.fetch_add(1, std::memory_order_acq_rel);
      {
        std::lock_guard<std::mutex> lock(mu_);
      }
      cv_.notify_all();
    }
  }
}

void LocalComm::wait(int member) {
  const uint64_t target = started_[member];
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t from = waited_[member];
  for (;;) {
    check_aborted();
    // Help with the collectives every member has joined.
    const uint64_t ready = ready_.load(std::memory_order_acquire);
    for (uint64_t s = from; s < ready; ++s) work(*ring_[s % ring_.size()]);
    from = ready;
    if (completed_.load(std::memory_order_acquire) >= target) break;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(10), [&] {
      return aborted_.load() || completed_.load() >= target || ready_.load() > from;
    });
    lock.unlock();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s() && completed_.load() < target) {
      abort("a collective of the local communicator did not complete within " + std::to_string(timeout_s()) + " s");
      check_aborted();
    }
  }
  waited_[member] = target;
}

void LocalComm::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.load()) why_ = why;
    aborted_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool LocalComm::reset() {
  for (auto& op : ring_) {
    op->joined.store(0);
    op->next.store(0);
    op->left.store(0);
    op->chunks = 0;
  }
  std::fill(started_.begin(), started_.end(), 0);
  std::fill(waited_.begin(), waited_.end(), 0);
  ready_.store(0);
  completed_.store(0);
  std::lock_guard<std::mutex> lock(mu_);
  why_.clear();
  aborted_.store(false);
  return true;
}

}  // namespace dp
