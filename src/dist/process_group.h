// A process group: the processes that train one model together, as
// torch.distributed's default group is for PyTorch. Each process makes one,
// then its device groups (group/group.h) on it; the group's devices are
// this process's share of all the processes' devices, in rank order.
//
// Made collectively: every rank meets the others through the start-up store
// (dist/store.h; rank 0 serves it at MASTER_ADDR:MASTER_PORT), then connects
// the communicator of the processes (GlooComm). A world of one process needs
// neither, and works in a build without Gloo.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/store.h"
#include "engine/comm.h"

namespace dp {

// A config as JSON: {"rank": 0, "world_size": 2, "local_rank": 0,
// "master_addr": "10.0.0.1", "master_port": 29500, "timeout_s": 300};
// keys left out come from the environment (dist_config_from_env), then the
// defaults. Throws DP_ERR_JSON, DP_ERR_MODEL naming the key.
DistConfig dist_config_from_json(const std::string& text);

class ProcessGroup {
 public:
  // Joins the group: returns once every rank has, or throws DP_ERR_COMM
  // naming the ranks missing after config.timeout_s and the address tried
  // (DP_ERR_IO when rank 0 cannot serve the store there; DP_ERR_DEVICE for a
  // world of more than one process in a build without Gloo).
  explicit ProcessGroup(const DistConfig& config);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return config_.rank; }
  int world_size() const { return config_.world_size; }
  int local_rank() const { return config_.local_rank; }
  // The processes of this group on this machine (the same host name).
  int local_world_size() const { return local_world_size_; }
  const DistConfig& config() const { return config_; }
  // The communicator of the processes (a member per rank); null in a world of one.
  Communicator* comm() { return comm_.get(); }

  // Collective, through the store (start-up and checks, not tensors): every
  // rank's `value`, in rank order. Rank 0 returns once every rank has read.
  std::vector<std::string> all_gather(const std::string& value);
  // Collective: throws DP_ERR_INVALID_ARGUMENT on every rank when some rank's
  // `value` differs from rank 0's, naming the first such rank, `what`, and
  // both values.
  void check_same(const std::string& what, const std::string& value);

  // A stop asked by this process (Ctrl-C in its shell), agreed by every
  // process after the same job of a group on this process group: each job's
  // gathered results carry it (engine/comm.h's StopRequest). stop_agreed():
  // how many processes had asked, 0 while none has; in a world of one, the
  // request is agreed at once.
  void request_stop() {
    stop_.asked = true;
    if (!comm_) stop_.agreed = 1;
  }
  int stop_agreed() const { return stop_.agreed; }
  StopRequest& stop() { return stop_; }

 private:
  std::vector<std::string> wait_ranks(const std::string& prefix, int* lost, int* left, std::string* missing);

  DistConfig config_;
  std::unique_ptr<TcpStore> store_;
  std::unique_ptr<Communicator> comm_;
  uint64_t seq_ = 0;  // all_gather calls so far (the same on every rank)
  StopRequest stop_;
  int local_world_size_ = 1;
};

}  // namespace dp
