// The communicator of this process's GPUs, over NCCL (ncclCommInitAll): one
// member per GPU, each with its own communication stream, so collectives
// overlap the compute streams. The caller orders them: after(m, s) makes
// member m's next collectives wait for the work queued on stream s so far;
// before(m, s) makes stream s wait for m's collectives so far.
//
// Collectives of one member may be called from its own thread (gradient
// buckets during backward); calls for several members from one thread go
// between group_start() and group_end(), as NCCL requires. wait() polls, so
// an asynchronous NCCL error or a collective that does not complete within
// timeout_s() (DP_NCCL_TIMEOUT, 300 s) aborts the communicators and throws,
// instead of hanging. An aborted NcclComm cannot be reset: the group that
// owns it must be recreated.
//
// Across processes (ncclCommInitRankConfig), this process's GPUs are ranks
// [first_rank, first_rank + devices.size()) of nranks, joined through a
// unique id that rank 0 made (unique_id()) and every process was given;
// failures then are DP_ERR_COMM (a peer process may have died). Those
// communicators are non-blocking, so that joining, and every call, has the
// time limit too: a call NCCL leaves in progress is polled until it is
// enqueued (settle).
#pragma once
#include <nccl.h>

#include <vector>

#include "backends/cuda/cuda.h"
#include "engine/comm.h"

namespace dp {

class NcclComm final : public Communicator {
 public:
  explicit NcclComm(const std::vector<int>& devices);
  NcclComm(const std::vector<int>& devices, const ncclUniqueId& id, int nranks, int first_rank, double timeout_s);
  static ncclUniqueId unique_id();
  ~NcclComm() override;

  int size() const override { return static_cast<int>(members_.size()); }
  void after(int member, cudaStream_t compute);
  void before(int member, cudaStream_t compute);
  void group_start();
  void group_end();

  // in may equal out; in must not be null (an idle member sends zeros).
  void all_reduce(int member, const float* in, float* out, int64_t count) override;
  void broadcast(int member, float* data, int64_t count, int root) override;
  // Called once, by one thread, for all members (member is ignored).
  void barrier(int member) override;
  void wait(int member) override;
  // Every member's collectives, with one deadline for all of them.
  void wait_all();
  void abort(const std::string& why) override;
  bool reset() override { return broken_.empty(); }
  // Empty unless aborted: then why, and what to do; and the status to fail with.
  const std::string& broken() const { return broken_; }
  dp_status failure_status() const { return status_; }

 private:
  struct Member {
    int device = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t in = nullptr, out = nullptr;  // after() and before()/wait()
  };
  void check_usable() const;
  void wait_members(int first, int last);
  void make_streams();
  // Non-blocking communicators: polls members [first, last) until none is
  // in progress; throws on an error or at the time limit, having aborted
  // the communicators when may_abort (the thread that drives them all).
  void settle(int first, int last, const char* what, bool may_abort);

  std::vector<Member> members_;
  std::string broken_;
  dp_status status_ = DP_ERR_DEVICE;  // DP_ERR_COMM across processes
  bool nonblocking_ = false;          // across processes
  int group_depth_ = 0;               // inside group_start() .. group_end()
  std::vector<float*> one_;  // barrier: a float per member, on its device
};

}  // namespace dp
