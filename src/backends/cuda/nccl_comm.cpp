#include "backends/cuda/nccl_comm.h"

#include <chrono>
#include <cstdlib>
#include <thread>

namespace dp {

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress)
    fail(DP_ERR_DEVICE, std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r) +
                            (ncclGetLastError(nullptr)[0] ? std::string(" (") + ncclGetLastError(nullptr) + ")" : ""));
}
#define DP_NCCL_CHECK(call) nccl_check((call), #call)

}  // namespace

NcclComm::NcclComm(const std::vector<int>& devices) : members_(devices.size()) {
  std::vector<ncclComm_t> comms(devices.size());
  DP_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  for (size_t i = 0; i < devices.size(); ++i) {
    members_[i].device = devices[i];
    members_[i].comm = comms[i];
  }
  make_streams();
  const char* t = std::getenv("DP_NCCL_TIMEOUT");
  if (t && std::atof(t) > 0) set_timeout_s(std::atof(t));
}

// Every process calls this at once, after its peers were seen alive (the
// process group's Gloo exchange that handed out the id): NCCL's own
// bootstrap then connects them, within timeout_s.
NcclComm::NcclComm(const std::vector<int>& devices, const ncclUniqueId& id, int nranks, int first_rank, double timeout_s)
    : members_(devices.size()), status_(DP_ERR_COMM), nonblocking_(true) {
  set_timeout_s(timeout_s);
  bool open = false;
  try {
    DP_NCCL_CHECK(ncclGroupStart());
    open = true;
    for (size_t i = 0; i < devices.size(); ++i) {
      members_[i].device = devices[i];
      DP_CUDA_CHECK(cudaSetDevice(devices[i]));
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      DP_NCCL_CHECK(ncclCommInitRankConfig(&members_[i].comm, nranks, id, first_rank + static_cast<int>(i), &config));
    }
    open = false;
    DP_NCCL_CHECK(ncclGroupEnd());
    settle(0, size(), "joining the other processes' GPUs", true);
    make_streams();
  } catch (const Error& e) {
    if (open) ncclGroupEnd();
    for (Member& m : members_)
      if (m.comm) ncclCommAbort(m.comm), m.comm = nullptr;
    fail(DP_ERR_COMM, "NCCL could not join this process's " + std::to_string(devices.size()) + " GPU(s) as ranks " +
                          std::to_string(first_rank) + ".." + std::to_string(first_rank + static_cast<int>(devices.size()) - 1) +
                          " of " + std::to_string(nranks) + ": " + e.what());
  }
}

void NcclComm::settle(int first, int last, const char* what, bool may_abort) {
  if (!nonblocking_) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = first; i < last;) {
    check_usable();
    ncclResult_t state = ncclSuccess;
    DP_NCCL_CHECK(ncclCommGetAsyncError(members_[i].comm, &state));
    if (state == ncclSuccess) {
      ++i;
      continue;
    }
    std::string why;
    if (state != ncclInProgress)
      why = std::string(what) + ": NCCL failed on cuda:" + std::to_string(members_[i].device) + ": " +
            ncclGetErrorString(state) + " (a peer process may have died or left)";
    else if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s())
      why = std::string(what) + ": NCCL did not finish within " + std::to_string(static_cast<int>(timeout_s())) +
            " s (DP_COMM_TIMEOUT; a peer process may have died or stopped)";
    if (!why.empty()) {
      // A replica's thread only reports: the engine aborts once every
      // replica's thread is done with the communicators (abandon).
      if (!may_abort) fail(status_, why);
      abort(why);
      check_usable();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

ncclUniqueId NcclComm::unique_id() {
  ncclUniqueId id{};
  DP_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

void NcclComm::make_streams() {
  for (Member& m : members_) {
    DP_CUDA_CHECK(cudaSetDevice(m.device));
    DP_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&m.in, &m.out}) DP_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
}

NcclComm::~NcclComm() {
  if (nonblocking_ && broken_.empty()) {
    // Finalizing is non-blocking too: poll it, within the time limit, and
    // abort what did not finish (ncclCommDestroy would wait for it).
    for (Member& m : members_)
      if (m.comm) {
        const ncclResult_t r = ncclCommFinalize(m.comm);
        if (r != ncclSuccess && r != ncclInProgress) broken_ = "finalize failed";
      }
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < members_.size() && broken_.empty();) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(members_[i].comm, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
        broken_ = "finalize failed";
      else if (state == ncclSuccess)
        ++i;
      else if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s())
        broken_ = "finalize timed out";
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  for (Member& m : members_) {
    cudaSetDevice(m.device);
    if (m.comm) (broken_.empty() ? ncclCommDestroy(m.comm) : ncclCommAbort(m.comm));
    if (m.stream) cudaStreamSynchronize(m.stream), cudaStreamDestroy(m.stream);
    for (cudaEvent_t e : {m.in, m.out})
      if (e) cudaEventDestroy(e);
  }
  for (size_t i = 0; i < one_.size(); ++i) cudaSetDevice(members_[i].device), cudaFree(one_[i]);
}

void NcclComm::check_usable() const {
  if (!broken_.empty()) fail(status_, broken_);
}

void NcclComm::after(int member, cudaStream_t compute) {
  Member& m = members_[member];
  DP_CUDA_CHECK(cudaEventRecord(m.in, compute));
  DP_CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.in, 0));
}

void NcclComm::before(int member, cudaStream_t compute) {
  Member& m = members_[member];
  DP_CUDA_CHECK(cudaEventRecord(m.out, m.stream));
  DP_CUDA_CHECK(cudaStreamWaitEvent(compute, m.out, 0));
}

void NcclComm::group_start() {
  DP_NCCL_CHECK(ncclGroupStart());
  ++group_depth_;
}
void NcclComm::group_end() {
  --group_depth_;
  DP_NCCL_CHECK(ncclGroupEnd());
  if (group_depth_ == 0) settle(0, size(), "a group of collectives", true);
}

void NcclComm::all_reduce(int member, const float* in, float* out, int64_t count) {
  check_usable();
  if (count <= 0) return;
  const Member& m = members_[member];
  DP_NCCL_CHECK(ncclAllReduce(in, out, static_cast<size_t>(count), ncclFloat, ncclSum, m.comm, m.stream));
  if (group_depth_ == 0) settle(member, member + 1, "an all-reduce", false);
}

void NcclComm::broadcast(int member, float* data, int64_t count, int root) {
  check_usable();
  if (count <= 0) return;
  const Member& m = members_[member];
  DP_NCCL_CHECK(ncclBroadcast(data, data, static_cast<size_t>(count), ncclFloat, root, m.comm, m.stream));
  if (group_depth_ == 0) settle(member, member + 1, "a broadcast", false);
}

// One thread for all members (a barrier of one thread per member would need
// a host barrier too): every member all-reduces one float, then waits.
void NcclComm::barrier(int) {
  check_usable();
  for (size_t i = one_.size(); i < members_.size(); ++i) {
    DP_CUDA_CHECK(cudaSetDevice(members_[i].device));
    one_.push_back(nullptr);
    DP_CUDA_CHECK(cudaMalloc(&one_.back(), sizeof(float)));
  }
  group_start();
  for (size_t i = 0; i < members_.size(); ++i) all_reduce(static_cast<int>(i), one_[i], one_[i], 1);
  group_end();
  wait_all();
}

// Polls instead of blocking, so that an asynchronous NCCL error or a
// collective that never completes (a peer that died, a mismatched call) ends
// in an error instead of a hang.
void NcclComm::wait(int member) { wait_members(member, member + 1); }

void NcclComm::wait_all() { wait_members(0, size()); }

void NcclComm::wait_members(int first, int last) {
  check_usable();
  for (int i = first; i < last; ++i) {
    Member& m = members_[i];
    DP_CUDA_CHECK(cudaSetDevice(m.device));
    DP_CUDA_CHECK(cudaEventRecord(m.out, m.stream));
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = first; i < last;) {
    Member& m = members_[i];
    const cudaError_t e = cudaEventQuery(m.out);
    if (e == cudaSuccess) {
      ++i;
      continue;
    }
    if (e != cudaErrorNotReady) cuda_fail(e, "a collective on NCCL's stream");
    for (int j = i; j < last; ++j) {
      ncclResult_t async = ncclSuccess;
      DP_NCCL_CHECK(ncclCommGetAsyncError(members_[j].comm, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        abort(std::string("NCCL reported an asynchronous error on cuda:") + std::to_string(members_[j].device) + ": " +
              ncclGetErrorString(async) + (status_ == DP_ERR_COMM ? " (a peer process may have died or left)" : ""));
        check_usable();  // the members' communicators are gone: stop here
      }
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s())
      abort("a gradient all-reduce did not finish within " + std::to_string(static_cast<int>(timeout_s())) +
            (status_ == DP_ERR_COMM ? " s (DP_COMM_TIMEOUT; a peer process may have died or stopped)" : " s (DP_NCCL_TIMEOUT)"));
    check_usable();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclComm::abort(const std::string& why) {
  if (!broken_.empty()) return;
  for (Member& m : members_)
    if (m.comm) ncclCommAbort(m.comm), m.comm = nullptr;
  broken_ = why + "; the NCCL communicators were aborted: destroy this group and create a new one";
}

}  // namespace dp
