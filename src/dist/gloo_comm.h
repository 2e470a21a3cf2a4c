// The communicator of a process group's processes, over Gloo's TCP
// transport (bench/comm_engines/README.md says why Gloo): one member per
// process, this one being config.rank. Collectives complete before they
// return. Each has a time limit (config.timeout_s); a peer that died or
// timed out fails the call with DP_ERR_COMM, closes this process's
// connections so that every other rank fails at once too, and leaves the
// communicator broken (reset() is false): the process group must be made
// again. A dead peer never kills this process through SIGPIPE (Gloo runs
// with it blocked). Built only where Gloo is found (DP_HAVE_GLOO).
//
// Gradient buckets (all_reduce_bucket) and the step's small sums of doubles
// (all_reduce_f64) take a faster way than the other collectives
// (bench/comm_engines/gloo_algorithms/: 5-20x at 64 KB-1 MB on loopback):
// a second Gloo context whose connections the calling thread reads itself
// (sync mode: no event-loop thread spinning against it), and Gloo's
// halving-doubling all-reduce prepared once per bucket, in pieces of at
// most 512 KB. There the time limit holds for each read or write on a
// connection; one thread at a time uses it.
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "dist/store.h"
#include "engine/comm.h"

namespace dp {

class GlooComm final : public Communicator {
 public:
  // Connects to every other rank, through the rendezvous `store` (which
  // must have seen every rank join: rendezvous(), and must outlive this:
  // after a failure, it says which rank was lost). Throws DP_ERR_COMM.
  GlooComm(TcpStore& store, const DistConfig& config);
  ~GlooComm() override;

  int size() const override { return world_size_; }
  int rank() const { return rank_; }
  // `member` must be this process's rank; `in` must not be null. Sums are
  // bitwise the same on every rank and run to run for one world size.
  void all_reduce(int member, const float* in, float* out, int64_t count) override;
  void all_reduce_f64(int member, double* data, int64_t count) override;
  void all_reduce_bucket(int member, int key, float* data, int64_t count) override;
  void broadcast(int member, float* data, int64_t count, int root) override;
  void barrier(int member) override;
  void wait(int member) override;
  void abort(const std::string& why) override;
  bool reset() override;

 private:
  struct Impl;
  template <class F>
  void guarded(const char* what, F&& f);

  std::unique_ptr<Impl> impl_;
  TcpStore* store_ = nullptr;  // to learn which rank was lost
  int rank_ = 0, world_size_ = 1;
  std::mutex mu_;  // abort() may come from any thread
  std::string broken_;
};

}  // namespace dp
