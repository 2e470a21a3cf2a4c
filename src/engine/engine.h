// An engine executes a device group's work: its replicas, their memory, the
// gradient reduction (through a Communicator) and the optimizer update. The
// Group above it keeps the semantics (checks, the split, the step that keys
// dropout, the NaN check, merging batch-norm statistics) and knows no device.
//
// The job a replica runs (forward; loss; backward; the gradient buckets) is
// spelled once, in Engine::run_replica; a backend supplies the device half of
// each replica (ReplicaDevice: where rows go, how the loss is computed, where
// results are read back) and the reduction and update. Backends: the CPU
// (backends/cpu/engine.cpp) and CUDA (backends/cuda/engine.cpp).
#pragma once
#include <cfloat>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/workers.h"
#include "engine/comm.h"
#include "engine/replica.h"
#include "model/model.h"
#include "optim/optimizer.h"

namespace dp {

// kForward: outputs gathered. kBackward: gradients of the last forward
// summed over replicas, added into the model's by reduce(nullptr). kTrain:
// forward, loss, backward; the model's gradients become this batch's (not
// added to), and reduce(opt) steps; without an optimizer (gradient
// accumulation), they are summed as kBackward's, and reduce(nullptr) adds
// them. kEval: forward and loss, nothing changes.
enum class Job { kForward, kBackward, kTrain, kEval };

// One run of a job, as the group planned it. Tensors are the host's, the
// whole batch; replica r runs rows [offsets[r], offsets[r] + split[r]).
struct RunPlan {
  Job job = Job::kForward;
  const std::vector<int64_t>* split = nullptr;    // rows per active replica
  const std::vector<int64_t>* offsets = nullptr;  // first row of each
  const std::vector<RunCtx>* ctxs = nullptr;      // per active replica (the engine adds its device)
  const Tensor* input = nullptr;        // kForward, kTrain, kEval
  const Tensor* target = nullptr;       // kTrain, kEval
  const Tensor* grad_output = nullptr;  // kBackward
  Tensor* output = nullptr;             // kForward: resized by the group, filled here
  // kTrain: the step's optimizer, or null (accumulation). An engine may apply it to each gradient
  // bucket as soon as it is summed (while still in cache), but only once the
  // sum of the replicas' losses, in replica order, is known to be finite;
  // reduce(opt) then does what is left.
  Optimizer* opt = nullptr;
  // Some replica runs more rows than ever before, so it allocates during the
  // job: apply the optimizer only once every replica finished (a failure
  // midway then leaves parameters and optimizer state untouched).
  bool grows = false;
};

// The device half of one replica. Called on the replica's host thread, in
// the order Engine::run_replica spells; work may complete asynchronously
// (a GPU stream) until Engine::finish.
class ReplicaDevice {
 public:
  enum Rows { kInput, kTarget, kGradOutput };
  virtual ~ReplicaDevice() = default;
  virtual Replica& graph() = 0;
  // Before anything else in a job: binds ctx to this device (pool, stream).
  virtual void begin(RunCtx& ctx) = 0;
  // Rows [off, off + rows) of a host tensor, where this replica's layers read
  // them (a CPU: a view; a GPU: a copy on the device).
  virtual const Tensor& load(Rows which, const Tensor& host, int64_t off, int64_t rows) = 0;
  // graph().output() into rows [off, ...) of the host tensor `host`.
  virtual void store_output(Tensor& host, int64_t off) = 0;
  // The loss of the last forward against `target`, its gradient into
  // graph().loss_grad(); with count_correct, also the rows whose arg-max is
  // the class target.
  virtual void loss(const RunCtx& ctx, const Tensor& target, bool count_correct) = 0;
  // The training forward's batch-norm statistics, for the host to read.
  virtual void keep_stats() = 0;
  // Results of the last job, valid after Engine::finish.
  virtual double loss_value() = 0;
  virtual int64_t correct_value() = 0;
  virtual const float* stats() = 0;  // model.stats_total floats
};

class Engine {
 public:
  // replicas: how many; members of the gradient communicator are replicas
  // or groups of them, as the backend decides.
  Engine(Model& model, int replicas);
  virtual ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs plan.job on every replica at once and waits for all of it,
  // gradient buckets included; then loss(r), correct(r), stats(r) hold the
  // results. Throws dp::Error; the engine stays usable unless it says
  // otherwise (a failed NCCL communicator).
  void run(const RunPlan& plan);
  // Results of replica r (with processes: of the replica r of all processes'
  // replicas, in rank order; gathered by every job but kBackward).
  double loss(int r);
  // The sum of the replicas' losses, in replica order (what the group
  // checks for NaN); with processes, of all processes' replicas.
  double total_loss();
  // Whether a loss counts as finite: as the float the C ABI returns it (a sum
  // finite in double but beyond FLT_MAX is infinite to the caller, and
  // gradients that large overflow the float parameters they update).
  static bool finite_loss(double loss) { return std::fabs(loss) <= FLT_MAX; }
  // Whether a training step may update: its loss is finite and, across
  // processes, every process's optimizer settings are the same (engines
  // update nothing otherwise; the group then says which).
  bool may_step();
  bool settings_differ() const { return settings_differ_; }
  int64_t correct(int r);
  const float* stats(int r);

  // The level of processes (a process group): this engine's replicas are
  // replicas [first, first + n) of the `global` replicas of all processes,
  // in rank order, and `procs` (a member per process, this one `rank`) sums
  // gradients over the processes after the replicas' sum. A plan's split,
  // offsets and contexts are then this process's share. Set once, before
  // the first run.
  virtual void set_processes(Communicator* procs, int rank, int first, int global);
  // With processes: the stop request that each job's gathered results carry
  // (engine/comm.h); null: none.
  void set_stop(StopRequest* stop) { stop_ = stop; }
  // With processes, since the engine was made: seconds spent in collectives
  // between processes, and the part of them a job waited for after its
  // replicas had finished (what overlap with backward did not hide).
  virtual void comm_seconds(double* busy, double* exposed) const { *busy = *exposed = 0; }
  // How many gradient buckets a step's reduction is cut into.
  size_t bucket_count() const { return buckets_.size(); }
  // Where they are, as text to compare between processes: "3 buckets at
  // 0, 401408, 535040" (the start of each, the first 8 and a count after).
  std::string bucket_layout() const;

  // After kBackward: the model's gradients += the last run's, summed over the
  // replicas. After kTrain: the model's gradients = the last run's, then one
  // step of opt on every copy (the plan's optimizer).
  virtual void reduce(Optimizer* opt) = 0;
  virtual void zero_grad() = 0;
  virtual void optimizer_step(Optimizer& opt) = 0;
  // Optimizer state kept on devices, copied into opt.state() (for a checkpoint).
  virtual void optimizer_to_host(Optimizer& opt) { (void)opt; }
  virtual void set_threads_per_device(int threads) { (void)threads; }
  virtual void set_allow_tf32(bool allow) { (void)allow; }
  virtual void set_cudnn_benchmark(bool on) { (void)on; }
  // DP_PRECISION_*; an engine without 16-bit products (the CPU's) refuses
  // anything but DP_PRECISION_FP32 with DP_ERR_DEVICE.
  virtual void set_precision(int precision);

 protected:
  // A backend's part of run(), around the replicas' jobs: prepare() on the
  // calling thread before them (size staging), finish() after them (wait for
  // the devices, read results back).
  virtual void prepare(const RunPlan& plan) { (void)plan; }
  virtual void finish(const RunPlan& plan) { (void)plan; }
  // On replica r's thread, after its job: with `buckets`, until its gradient
  // buckets are reduced (a GPU: the stream waits for them).
  virtual void end_replica(int r, bool buckets) { (void)r, (void)buckets; }
  // After a failed run: leave nothing in flight.
  virtual void abandon() {}
  // Gradient buckets: `bucketed()` says whether backward reduces gradients
  // as it goes; then reduce_bucket(r, begin, count) is called on replica r's
  // thread as soon as gradients [begin, begin + count) are final there (also
  // on replicas outside the split, which hold no gradients). Buckets follow
  // the layers in reverse and are the same on every replica.
  // On replica r's thread in a training job, once its loss is computed
  // (before its backward; for a replica outside the split, at once when the
  // engine reduces in buckets).
  virtual void loss_done(int r) { (void)r; }
  virtual bool bucketed() const { return false; }
  virtual void reduce_bucket(int r, int64_t begin, int64_t count) { (void)r, (void)begin, (void)count; }
  // The communicator a failed job aborts, so that no replica waits forever
  // on one that threw.
  virtual Communicator* comm() { return nullptr; }
  // Layer `node` finished its backward on replica r: starts every bucket
  // whose gradients are all final by now (those at and above the node's
  // param_offset, not started yet). node_final: the same during the layer's
  // backward, once its gradients from param_offset + from on are (with
  // split buckets, Layer::grad_splits). Backends call them from their
  // Executor, on replica r's thread.
  void node_done(int r, size_t node);
  void node_final(int r, size_t node, int64_t from);
  // With processes: every replica's loss, correct count and statistics, all
  // processes' (an all-reduce in which each process adds only its own
  // replicas'). Every process calls it once per job but kBackward, at the
  // same point of the job: after its replicas' forward and loss. The same
  // all-reduce carries the stop request (set_stop).
  void gather_results();

  Model& model_;
  const int n_;
  std::vector<std::unique_ptr<ReplicaDevice>> devices_;  // made by the backend's constructor
  Workers threads_;  // one per replica: replica r's host work runs on thread r
  int active_ = 0;   // replicas in the current run's split
  // Gradient bucket size: the backend's default, or DP_BUCKET_MB (a decimal
  // number of MiB: 0.001 gives buckets of 262 floats). split_layers: buckets
  // may also end inside a layer, at its grad_splits() (an engine whose
  // executor reports them: node_final).
  void set_bucket_mb(double default_mb, bool split_layers = false);
  // The buckets, in the order replicas reach them (the layers in reverse):
  // gradients [begin, begin + count).
  struct Bucket {
    int64_t begin, count;
  };
  std::vector<Bucket> buckets_;
  // The bucket that begins at gradient `begin`.
  int bucket_at(int64_t begin) const;

  Communicator* procs_ = nullptr;  // the level of processes, or null
  int rank_ = 0, first_ = 0, global_ = 0;
  bool gathered_ = false;  // this run's results are gathered
  StopRequest* stop_ = nullptr;
  bool settings_differ_ = false;  // this run's gathered optimizer settings differ between processes

 private:
  static void run_one(void* self, int r);
  void run_replica(int r);

  const RunPlan* plan_ = nullptr;
  std::vector<size_t> next_bucket_;  // per replica: the first bucket of this job it has not started
  std::vector<double> results_;  // gathered: per global replica, loss, correct, statistics
  std::vector<float> stats_;     // gathered statistics, per global replica
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first failure of the run in flight
};

// The backends' factories. "cuda:0,cuda:0" parsed into ordinals; throws
// DP_ERR_DEVICE with the reason when this build or machine has no such GPU,
// or a layer has no CUDA code.
std::unique_ptr<Engine> make_cpu_engine(Model& model, int devices, int threads_per_device);
std::unique_ptr<Engine> make_cuda_engine(Model& model, const std::vector<int>& ordinals);

}  // namespace dp
