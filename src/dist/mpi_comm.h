// The communicator of a process group's processes over Open MPI, for jobs
// that `mpirun` starts (backend "mpi", as torch.distributed names it; Gloo,
// dist/gloo_comm.h, is the default). On one machine Open MPI moves buckets
// through shared memory where Gloo goes through loopback TCP
// (bench/comm_engines/results.md: 119 us against 2.3 ms for 1 MB), which is
// what a fast CPU step spends its time on across processes.
//
// What it does not have, and Gloo has: Open MPI 4.1 fails no single
// collective. A peer killed mid-step ends the whole job through mpirun
// (about a second, non-zero exit), and any failure of this process inside a
// step (abort()) ends the job too, after printing why; DP_COMM_TIMEOUT
// bounds each collective, past which the job is ended the same way. So a
// failed step never returns an error status here: choose Gloo where a
// program must go on after one.
//
// The start-up store (dist/store.h) still checks that every rank agrees on
// the model and the world; Open MPI's own world (MPI_COMM_WORLD, under
// mpirun) must have the config's rank and size. Built only where Open MPI is
// found (DP_HAVE_MPI).
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "dist/store.h"
#include "engine/comm.h"

namespace dp {

class MpiComm final : public Communicator {
 public:
  // Initialises MPI (once per process, with MPI_THREAD_MULTIPLE: buckets are
  // reduced on the stage thread while the caller's thread may broadcast).
  // Throws DP_ERR_COMM when MPI's world is not the config's.
  explicit MpiComm(const DistConfig& config);
  ~MpiComm() override;

  int size() const override { return world_size_; }
  int rank() const { return rank_; }
  // Collectives complete before they return (wait() has nothing to do).
  // Sums follow the algorithm dp asks of Open MPI's non-blocking all-reduce
  // (libnbc's reduce-scatter then all-gather, mpi_comm.cpp; the user's MCA
  // setting wins), fixed by the sizes alone: with 2 processes they are
  // bitwise Gloo's, and bitwise run to run
  // (tests/dist/check_launch.py); with more, within the tolerance of one
  // process (tested with 3).
  void all_reduce(int member, const float* in, float* out, int64_t count) override;
  void all_reduce_f64(int member, double* data, int64_t count) override;
  void all_reduce_bucket(int member, int key, float* data, int64_t count) override;
  void broadcast(int member, float* data, int64_t count, int root) override;
  void barrier(int member) override;
  void wait(int member) override;
  // Prints why, and ends the MPI job (MPI_Abort): no collective of Open MPI
  // can be failed alone.
  void abort(const std::string& why) override;
  bool reset() override { return true; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_size_ = 1;
};

}  // namespace dp
