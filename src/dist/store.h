// Start-up of a process group (issue 11's first piece): who the processes
// are, and a key-value store through which they find each other before any
// collective engine connects, as PyTorch's TCPStore does for c10d (Gloo
// ships no TCP store: bench/comm_engines/README.md). Only start-up goes
// through it; tensors go through the collective engine.
//
// Rank 0 serves the store on MASTER_ADDR:MASTER_PORT; every rank, rank 0
// too, is a client. Values are bytes. Every wait has a deadline, and its
// error says what was missing, where, and for how long.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dp {

// A process's place in a process group, from the launcher's environment:
// torchrun and Kubernetes jobs (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK)
// or Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), the first
// that is set; DP_COMM_TIMEOUT in seconds (default 300). Under torchrun
// (TORCHELASTIC_USE_AGENT_STORE=True), whose agent serves a store at
// MASTER_PORT, dp's store is at MASTER_PORT + 1.
// A time limit as the messages give it: "300 s", "0.5 s".
std::string seconds_text(double s);

struct DistConfig {
  int rank = 0, world_size = 1, local_rank = 0;
  bool local_rank_given = false;  // by the launcher or the config; else the group counts it from host names
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // torchrun's default
  double timeout_s = 300;
  std::string launcher;  // "torchrun", "mpirun", "slurm" or "" (no launcher: one process)
  std::string backend = "gloo";  // the processes' communicator: "gloo", or "mpi" under mpirun (DP_BACKEND)
};

// Whether `backend` names a communicator of processes ("gloo", "mpi").
bool known_backend(const std::string& backend);

// Throws DP_ERR_INVALID_ARGUMENT naming the variable that is malformed or
// inconsistent (a rank outside [0, world size), a port outside [1, 65535]).
DistConfig dist_config_from_env();

class TcpStore {
 public:
  // Serves the store when `serve` (rank 0), then connects to host:port,
  // retrying until timeout_s has passed. Throws DP_ERR_IO: the port cannot
  // be bound; DP_ERR_COMM: nothing answers at host:port in time.
  TcpStore(const std::string& host, int port, bool serve, double timeout_s);
  // Once a rank was lost, rank 0's store keeps serving until every other
  // rank has left (2 s at most), for the survivors to learn which.
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // The values of `keys`, once all are set; throws DP_ERR_COMM naming the
  // keys still missing after timeout_s.
  std::vector<std::string> get(const std::vector<std::string>& keys, double timeout_s);
  // Whether each key is set now, and its value ("" when not).
  std::vector<std::string> try_get(const std::vector<std::string>& keys, std::vector<bool>* found);

  const std::string& address() const { return address_; }  // "host:port"
  // The first rank whose connection to rank 0's store closed without
  // leaving on purpose (its process died), waiting up to wait_s for one to
  // show: "rank 2"; "rank 0 ..." when the store itself is gone; "" when none
  // is known.
  std::string lost_rank(int world_size, double wait_s);

 private:
  class Server;
  std::string request(char op, const std::string& key, const std::string& value, bool* found);

  std::unique_ptr<Server> server_;
  std::mutex mu_;  // one request at a time on fd_
  int fd_ = -1;
  std::string address_;
};

// Every rank announces itself and its world size, and returns once all
// world_size ranks have (or throws DP_ERR_COMM naming the ranks that did not
// join within config.timeout_s and the address, or one that announced
// another world size).
void rendezvous(TcpStore& store, const DistConfig& config);

}  // namespace dp
