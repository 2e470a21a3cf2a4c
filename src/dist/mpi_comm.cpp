#include "dist/mpi_comm.h"

#define OMPI_SKIP_MPICXX 1  // the C API only: no libmpi_cxx
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "core/error.h"

namespace dp {

namespace {

// Whether the MPI library is Open MPI of at least this version (callable
// before MPI_Init).
bool open_mpi_at_least(int major, int minor, int release) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return false;
  const char* at = std::strstr(text, "Open MPI v");
  int v[3] = {0, 0, 0};
  if (!at || std::sscanf(at, "Open MPI v%d.%d.%d", &v[0], &v[1], &v[2]) != 3) return false;
  return std::make_tuple(v[0], v[1], v[2]) >= std::make_tuple(major, minor, release);
}

// MPI is initialised once per process, and finalised at its exit: a process
// of an mpirun job that exits without MPI_Finalize fails the job.
void init_mpi_once() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return;
  // Open MPI's non-blocking all-reduce (libnbc) picks a binomial tree for 2
  // or 3 processes and for every in-place call: one rank sums the whole
  // buffer while the other waits, then sends it back. Reduce-scatter then
  // all-gather (Rabenseifner's; 3; below one float per process it falls back
  // to libnbc's ring) has each rank sum its share: 256 KB, a CPU bucket, in
  // 46 us instead of 90, 1 MB in 120 instead of 263, 32 MB in 17 ms instead
  // of 41 (build/bench/dist_allreduce, bench/RESULTS.md run 8). Only from
  // Open MPI 4.1.2: before it that ring summed in-place calls (all of dp's)
  // wrongly (open-mpi/ompi#9385). Read at MPI_Init; a value set with mpirun
  // --mca or in the environment wins (one in an MCA parameter file does
  // not: the environment outranks it).
  if (open_mpi_at_least(4, 1, 2)) setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    fail(DP_ERR_COMM, "MPI_Init_thread failed");
  std::atexit([] {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  });
  if (provided < MPI_THREAD_MULTIPLE)
    fail(DP_ERR_COMM, "this Open MPI does not support MPI_THREAD_MULTIPLE, which the mpi backend needs "
                      "(buckets are reduced on a thread of their own): use the gloo backend");
}

}  // namespace

// A communicator per kind of call, so that calls from different threads
// never meet in one: each is used by one thread at a time (its mutex).
struct MpiComm::Impl {
  MPI_Comm general = MPI_COMM_NULL, buckets = MPI_COMM_NULL, doubles = MPI_COMM_NULL;
  std::mutex general_mu, buckets_mu, doubles_mu;
};

MpiComm::MpiComm(const DistConfig& c) : impl_(std::make_unique<Impl>()), rank_(c.rank), world_size_(c.world_size) {
  set_timeout_s(c.timeout_s);
  if (c.launcher != "mpirun")
    fail(DP_ERR_COMM, "the mpi backend runs under mpirun (Open MPI's launcher), which sets OMPI_COMM_WORLD_RANK and "
                      "OMPI_COMM_WORLD_SIZE; this process was started " +
                          (c.launcher.empty() ? std::string("without a launcher") : "by " + c.launcher) +
                          ": use the gloo backend there");
  init_mpi_once();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != c.rank || size != c.world_size)
    fail(DP_ERR_COMM, "MPI's world is rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ", the process group's rank " + std::to_string(c.rank) + " of " + std::to_string(c.world_size));
  // Errors return (they are turned into an abort with the reason) rather
  // than end the job silently.
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->general);
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->buckets);
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->doubles);
  for (MPI_Comm comm : {impl_->general, impl_->buckets, impl_->doubles}) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
}

MpiComm::~MpiComm() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  for (MPI_Comm* comm : {&impl_->general, &impl_->buckets, &impl_->doubles})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

static std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

// Completes a started collective (rc: what starting it returned), or ends
// the job: on an error, or at the time limit (Open MPI cannot cancel a
// collective).
static void finish(MpiComm& self, MPI_Request* request, int rc, const char* what) {
  auto fail_job = [&](const std::string& why) {
    self.abort(std::string(what) + " failed on rank " + std::to_string(self.rank()) + " of " + std::to_string(self.size()) +
               ": " + why);
  };
  if (rc != MPI_SUCCESS) fail_job(mpi_error_text(rc));
  const double timeout_s = self.timeout_s();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    if ((rc = MPI_Test(request, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) fail_job(mpi_error_text(rc));
    if (done) return;
    if ((spins & 255) == 0 && std::chrono::steady_clock::now() > deadline)
      fail_job("no answer within " + seconds_text(timeout_s) + " (DP_COMM_TIMEOUT)");
    // Between tests the core goes to whoever waits for it: on a machine whose
    // processes share its cores, that is the other rank computing (spinning
    // here, 2 processes x 1 device ran the Fashion-MNIST MLP at 0.71x one
    // process x 2 devices; yielding, 0.89x; sleeping 20 us, 0.62x:
    // bench/RESULTS.md). Open MPI progresses the collective inside MPI_Test.
    sched_yield();
  }
}

// An all-reduce (sum) in place, or from `in`, on `comm`; MPI counts are
// ints, so larger arrays go in pieces.
static constexpr int64_t kMaxCount = int64_t{1} << 30;

template <class T>
static void sum(MpiComm& self, MPI_Comm comm, std::mutex& mu, const T* in, T* out, int64_t count) {
  const MPI_Datatype type = sizeof(T) == 4 ? MPI_FLOAT : MPI_DOUBLE;
  std::lock_guard<std::mutex> lock(mu);
  for (int64_t at = 0; at < count; at += kMaxCount) {
    MPI_Request req;
    const int rc = MPI_Iallreduce(in == out ? MPI_IN_PLACE : in + at, out + at, static_cast<int>(std::min(kMaxCount, count - at)),
                                  type, MPI_SUM, comm, &req);
    finish(self, &req, rc, "an all-reduce");
  }
}

void MpiComm::all_reduce(int member, const float* in, float* out, int64_t count) {
  if (member != rank_ || !in) fail(DP_ERR_INTERNAL, "MpiComm::all_reduce: member must be this rank, with an input");
  sum(*this, impl_->general, impl_->general_mu, in, out, count);
}

void MpiComm::all_reduce_f64(int member, double* data, int64_t count) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "MpiComm::all_reduce_f64: member must be this rank");
  sum(*this, impl_->doubles, impl_->doubles_mu, data, data, count);
}

void MpiComm::all_reduce_bucket(int member, int, float* data, int64_t count) {
  if (member != rank_ || !data) fail(DP_ERR_INTERNAL, "MpiComm::all_reduce_bucket: member must be this rank, with data");
  sum(*this, impl_->buckets, impl_->buckets_mu, data, data, count);
}

void MpiComm::broadcast(int member, float* data, int64_t count, int root) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "MpiComm::broadcast: member must be this rank");
  std::lock_guard<std::mutex> lock(impl_->general_mu);
  for (int64_t at = 0; at < count; at += kMaxCount) {
    MPI_Request req;
    const int rc = MPI_Ibcast(data + at, static_cast<int>(std::min(kMaxCount, count - at)), MPI_FLOAT, root, impl_->general, &req);
    finish(*this, &req, rc, "a broadcast");
  }
}

void MpiComm::barrier(int member) {
  if (member != rank_) fail(DP_ERR_INTERNAL, "MpiComm::barrier: member must be this rank");
  std::lock_guard<std::mutex> lock(impl_->general_mu);
  MPI_Request req;
  const int rc = MPI_Ibarrier(impl_->general, &req);
  finish(*this, &req, rc, "a barrier");
}

void MpiComm::wait(int) {}

void MpiComm::abort(const std::string& why) {
  std::fprintf(stderr, "dp: rank %d of %d: %s; ending the MPI job (the mpi backend cannot fail one collective alone)\n",
               rank_, world_size_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace dp
