// The `dp` command line, built on the C ABI only (as any other program
// embedding dp would be): train, eval, bench, devices.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dp.h"

namespace dpcli {

// Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input.
enum Exit { kOk = 0, kRuntime = 1, kUsage = 2 };

// A failed dp call or bad input, with the exit code it maps to.
struct Failure : std::runtime_error {
  int code;
  Failure(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

// Throws Failure for a non-OK status: bad input (JSON, model, shape, files,
// arguments, devices) exits 2, the rest 1.
void check(dp_status s, const std::string& what);
// The same for a call that writes a file: its DP_ERR_IO (a full disk, a
// folder gone) is a runtime failure, exit 1.
void check_write(dp_status s, const std::string& what);

template <class T, void (*Destroy)(T*)>
struct Deleter {
  void operator()(T* p) const { Destroy(p); }
};
using Context = std::unique_ptr<dp_context, Deleter<dp_context, dp_context_destroy>>;
using Model = std::unique_ptr<dp_model, Deleter<dp_model, dp_model_destroy>>;
using Group = std::unique_ptr<dp_group, Deleter<dp_group, dp_group_destroy>>;
using Optimizer = std::unique_ptr<dp_optimizer, Deleter<dp_optimizer, dp_optimizer_destroy>>;
using Tensor = std::unique_ptr<dp_tensor, Deleter<dp_tensor, dp_tensor_destroy>>;
using Dataset = std::unique_ptr<dp_dataset, Deleter<dp_dataset, dp_dataset_destroy>>;
using Loader = std::unique_ptr<dp_loader, Deleter<dp_loader, dp_loader_destroy>>;
using ProcessGroup = std::unique_ptr<dp_process_group, Deleter<dp_process_group, dp_process_group_destroy>>;

// --data: a training and a test set, and how their inputs are prepared
// (what checkpoints record): the pixels' scaling, and the transforms'
// JSON (dp_dataset_set_transform) of each set.
struct Data {
  std::string name;
  Dataset train, test;
  std::string pixels, train_transform = "{}", test_transform = "{}";
};
// "fashion-mnist[:DIR]", "mnist:DIR", "cifar10:DIR", "synthetic:N".
// `option`: what errors name (bench's synthetic set comes from its --batch-size).
Data open_data(dp_context* ctx, const std::string& spec, const dp_model* model, uint64_t seed,
               const std::string& option = "--data");

// "auto" (every GPU, else one CPU device per core) or a list as
// dp_group_create takes it; local_processes > 0: in a process group with
// that many processes on this machine, this one being local_rank, which
// share its GPUs (when there are at least as many as processes: torchrun's
// one GPU per process, cuda:LOCAL_RANK; every GPU it sees when
// CUDA_VISIBLE_DEVICES shows it fewer) or else its cores.
std::string resolve_devices(const std::string& spec, int local_processes = 0, int local_rank = 0);

// This process's place among the processes a launcher started.
struct Launch {
  ProcessGroup pg;  // null: no launcher, or a world of one process
  int rank = 0, world = 1;
  int local_processes = 0;  // of the group, on this machine (0 without one)
  int local_rank = 0;       // this process's place among them
};
// When a launcher started this process (torchrun, mpirun, srun: WORLD_SIZE,
// OMPI_COMM_WORLD_SIZE or SLURM_NTASKS is set) in a world of more than one
// process: joins it (dp_process_group_create from the environment).
Launch join_if_launched();
// The rank a launcher gave this process (RANK, OMPI_COMM_WORLD_RANK or
// SLURM_PROCID), without joining; 0 without one. dp eval and dp export run
// on rank 0 alone (the others would print the same result, or write the
// same file at once).
int launched_rank();

// Progress on stderr: redrawn in place at most ten times a second on a
// terminal, a plain line every few seconds otherwise.
class Progress {
 public:
  Progress();
  // With accumulate > 1 the line names the batch of the epoch and the
  // optimizer step (--log, --eval-every and "steps" count those).
  void step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t accumulate, int64_t opt_step,
            double loss, double samples_per_second, double eta_seconds);
  void line(const std::string& text);  // a finished line (epoch summary)

 private:
  bool tty_;
  double last_ = -1;
  bool dirty_ = false;
};

double now_seconds();

}  // namespace dpcli
