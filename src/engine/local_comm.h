// The communicator of one process's replicas that can read each other's
// memory: CPU replicas (threads), or replicas sharing a GPU (then the sum
// runs as a kernel on that GPU's stream). Each collective is computed in
// chunks by the members waiting in wait() and (eager, the default) by the
// member that arrives last, at once; so a CPU replica that finishes its
// backward first spends its wait summing.
//
// all_reduce accepts a null `in` (an idle replica adds nothing; with every in
// null, out is zeroed) and members that share one `out` (it is written once).
// Calls may come from the members' own threads or, in order, from one thread
// for all of them. Thread-safe; no allocation after construction.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/comm.h"

namespace dp {

class LocalComm final : public Communicator {
 public:
  // out[i] = in[0][i] + in[1][i] + ... + in[k-1][i] for i in [begin, end),
  // added in that order (k = 0: zeroes; out may equal in[0]).
  using SumFn = std::function<void(float* out, const float* const* in, int k, int64_t begin, int64_t end)>;
  // Called once per collective, by the member that computed its last chunk,
  // as soon as it is complete: its (first) output and count.
  using DoneFn = std::function<void(float* out, int64_t count)>;
  // `max_pending`: collectives a member may start between two wait()s.
  // `chunk`: floats per unit of work (0: a whole collective at once, as a GPU
  // kernel wants). `done` may be null.
  LocalComm(int members, int max_pending, SumFn sum, int64_t chunk, DoneFn done = nullptr);
  ~LocalComm() override;

  int size() const override { return members_; }
  void all_reduce(int member, const float* in, float* out, int64_t count) override;
  void broadcast(int member, float* data, int64_t count, int root) override;
  void barrier(int member) override;
  void wait(int member) override;
  void abort(const std::string& why) override;
  bool reset() override;

  // Eager (the default): the member that joins a collective last computes
  // it at once, with those already waiting. Not eager: only members in
  // wait() compute collectives, so a member still running its backward is
  // never delayed by one (the members that finished first do the work).
  void set_eager(bool eager) { eager_ = eager; }
  // Floats per unit of work from the next collective on (0: whole
  // collectives). Set while no collective is in flight.
  void set_chunk(int64_t chunk) { chunk_ = chunk; }

  // The host sum (CPU replicas): a plain loop per source, vectorised.
  static void host_sum(float* out, const float* const* in, int k, int64_t begin, int64_t end);

 private:
  struct Op;
  void start(int member, const float* in, float* out, int64_t count, int root);
  void work(Op& op);
  void check_aborted();

  const int members_;
  int64_t chunk_;
  bool eager_ = true;
  SumFn sum_;
  DoneFn done_;
  std::vector<std::unique_ptr<Op>> ring_;  // collective s lives in ring_[s % size]
  std::vector<uint64_t> started_, waited_;  // per member: collectives started / waited for
  std::atomic<uint64_t> ready_{0};      // collectives every member has joined (in order)
  std::atomic<uint64_t> completed_{0};  // collectives fully computed
  std::atomic<bool> aborted_{false};
  std::string why_;
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace dp
