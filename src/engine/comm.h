// A communicator: the collectives that keep the copies of one model in step,
// as c10d's ProcessGroup or Gloo's algorithms are for PyTorch. The members
// are numbered 0 .. size()-1: CPU replicas (threads of this process sharing
// memory), replicas sharing one GPU, or GPUs (NCCL). Engines reduce
// gradients and broadcast parameters only through this interface.
//
// Every member makes the same collective calls in the same order, with the
// same counts; a call only starts the collective (it may complete later, on
// another thread or a GPU stream) and wait() completes them. Results are
// deterministic: sums are added in member order, whoever computes them.
//
// Implementations: LocalComm (engine/local_comm.h: threads in one process,
// and replicas sharing a GPU) and NcclComm (backends/cuda/nccl_comm.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace dp {

// A stop asked by any process of a group (Ctrl-C in one of its shells),
// agreed by all after the same job: every job's gathered results
// (Engine::gather_results) carry each process's `asked`, and `agreed` (the
// number of processes that had asked, 0 for none) is set on every process
// from the same sum. So all processes can stop after the same step, where
// one stopping alone would leave the others waiting in its next collective.
struct StopRequest {
  std::atomic<bool> asked{false};
  std::atomic<int> agreed{0};
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;

  // out[0, count) of every member becomes the sum over members of their
  // in[0, count), added in member order. in may equal out. Where the
  // implementation says so, in may be null (that member adds nothing) and
  // members may share one out (written once).
  virtual void all_reduce(int member, const float* in, float* out, int64_t count) = 0;
  // The same for doubles, in place (a process group's losses and
  // statistics: every member but one adding zeros, it is an exact gather).
  // Only communicators of processes have it (GlooComm).
  virtual void all_reduce_f64(int member, double* data, int64_t count) {
    (void)member, (void)data, (void)count;
    fail(DP_ERR_INTERNAL, "all_reduce_f64: only a process group's communicator has it");
  }
  // all_reduce(member, data, data, count) of a region summed again and
  // again: a gradient bucket, which `key` names the same on every member.
  // Implementations may keep state for it (GlooComm binds prepared
  // algorithms to it); data may move between calls.
  virtual void all_reduce_bucket(int member, int key, float* data, int64_t count) {
    (void)key;
    all_reduce(member, data, data, count);
  }
  // data[0, count) of every member becomes root's.
  virtual void broadcast(int member, float* data, int64_t count, int root) = 0;
  // Returns when every member has called it (and their earlier collectives are done).
  virtual void barrier(int member) = 0;
  // Blocks until every collective this member started has completed. Throws
  // dp::Error when one failed, the communicator was aborted, or nothing
  // completed within timeout_s(); in the last two cases the communicator is
  // aborted first, so no member waits forever.
  virtual void wait(int member) = 0;
  // Fails the pending collectives and wakes every waiter with `why`.
  virtual void abort(const std::string& why) = 0;
  // After an abort: whether the communicator can be used again (reset()), or
  // must be recreated (a failed NCCL communicator).
  virtual bool reset() = 0;

  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double s) { timeout_s_ = s; }

 private:
  double timeout_s_ = 300;
};

}  // namespace dp
