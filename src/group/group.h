// A device group: nn.DataParallel's replicate / scatter / parallel_apply /
// gather, with gradient reduction into the model. The group holds the
// semantics: the devices it was given, checks of inputs and targets, the
// split rule, the step count that keys dropout, the NaN check and merging
// batch-norm statistics. An engine (engine/engine.h: the CPU's or CUDA's)
// executes: replicas persist on their devices, gradients are summed over
// replicas in device order, so results are deterministic for a given split.
//
// On a process group (dist/process_group.h) of more than one process, the
// group's devices are this process's share of one group spanning all
// processes: every process makes its group with the same model, then calls
// the same functions in the same order. A batch is then this process's rows
// of the global batch (a loader sharded by the group reads them), which is
// split over all processes' devices in rank order by the same rule as in
// one process; losses, accuracy, batch-norm statistics and gradients are
// the global batch's, and every process applies the same update.
#pragma once
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"
#include "dist/process_group.h"
#include "engine/engine.h"
#include "group/split.h"
#include "optim/optimizer.h"

namespace dp {

class Group {
 public:
  // devices: "cpu:0,cpu:1" or "cuda:0,cuda:1" (a GPU may repeat); throws
  // DP_ERR_DEVICE naming the bad entry. With `procs` (collective): this
  // process's devices; throws DP_ERR_INVALID_ARGUMENT on every process when
  // the models differ (naming the rank), and starts from rank 0's weights.
  Group(Model& model, const std::string& devices, ProcessGroup* procs = nullptr);
  ~Group();

  int size() const { return static_cast<int>(devices_.size()); }
  // Over all processes: the devices, and where this process's begin.
  int global_size() const { return global_; }
  int first_device() const { return first_; }
  ProcessGroup* process_group() const { return procs_; }
  // Engine::comm_seconds.
  void comm_seconds(double* busy, double* exposed) const { engine_->comm_seconds(busy, exposed); }
  Model& model() { return model_; }
  const std::vector<int64_t>& last_split() const { return split_; }
  // Host memory this group holds beside the model's arrays (its replicas'
  // gradients and statistics, and the activations of the largest batch so
  // far, estimated), kept in the model's attached_bytes while the group
  // lives: each check of the model's memory limit counts every group's.
  uint64_t held_bytes() const;

  void set_split(SplitMode mode) { mode_ = mode; }
  SplitMode split_mode() const { return mode_; }
  void set_threads_per_device(int threads);
  // Lets float32 matrix products and convolutions on GPUs use TF32 (off by default).
  void set_allow_tf32(bool allow);
  // Convolution algorithms timed by cuDNN once per shape, the fastest taken
  // (PyTorch's cudnn.benchmark); off: cuDNN's heuristics, deterministic first.
  void set_cudnn_benchmark(bool on);
  // DP_PRECISION_*: matrix products and convolutions on GPUs in bf16 or fp16
  // (mixed precision); DP_ERR_DEVICE on CPUs for anything but float32.
  void set_precision(int precision);
  int precision() const { return precision_; }
  bool on_gpus() const { return !gpu_ordinals_.empty(); }
  // Optimizer state kept on GPUs, copied into opt.state() (before a checkpoint).
  void optimizer_to_host(Optimizer& opt);
  void set_training(bool training) { training_ = training; }
  // Training forward passes so far: keys dropout masks, so a checkpoint holds it.
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  // output: resized to [B, ...] and filled with the gathered outputs.
  void forward(const Tensor& input, Tensor& output);
  // Adds the gradients of the last forward's graph into the model's gradients.
  void backward(const Tensor& grad_output);
  void zero_grad();
  // One optimizer step on the model's gradients; none (no update, no step
  // counted) when no backward ran since zero_grad or the group was made, as
  // torch.optim skips parameters whose .grad is None (zero_grad's default).
  void optimizer_step(Optimizer& opt);
  // zero_grad, forward, loss over the whole batch, backward, step.
  double train_step(Optimizer& opt, const Tensor& input, const Tensor& target);
  // Forward, loss over the whole batch, backward of loss_scale * loss, its
  // gradients added into the model's (no zero_grad, no step): gradient
  // accumulation. Returns the (unscaled) loss.
  double forward_backward(const Tensor& input, const Tensor& target, double loss_scale);
  // The loss in evaluation mode (no dropout, running statistics); nothing changes.
  double evaluate(const Tensor& input, const Tensor& target, int64_t* correct);

 private:
  std::string where_in_training() const;  // for a refused loss: "in training batch N (counting from 1)"
  void check_input(const Tensor& input) const;
  void check_target(const Tensor& target, int64_t batch) const;
  // Plans the split of `batch` rows and runs the job on the engine.
  // kTrain without opt: forward_backward's job.
  void run(Job job, bool training, const Tensor* input, const Tensor* target, const Tensor* grad_output, Tensor* output,
           Optimizer* opt = nullptr, double loss_scale = 1.0);
  // The replicas' training statistics folded into the model's buffers. A
  // layer whose merge fails (a plugin's merge_stats threw) holds what it
  // wrote before failing, and the others are merged; its error is returned, for the caller to raise
  // (with raise_merge_failure) once the call's work is done: in a training
  // step the update is already under way when the statistics merge.
  std::exception_ptr merge_stats();
  [[noreturn]] static void raise_merge_failure(std::exception_ptr failure, const char* what_happened);
  // With processes: every process's job and rows (kept in exchange_);
  // returns the global batch. Throws on every process when they called
  // different jobs, or one's checks refused its tensors (`refused`: this
  // one's did, and it throws its own error after).
  // `accumulate`: kTrain is forward_backward's.
  // `loss_total`, where given: this process's Loss::weight_of its targets
  // in, the whole batch's out.
  int64_t exchange(Job job, int64_t rows, bool refused, bool accumulate = false, double* loss_total = nullptr);
  int64_t rows_of_rank(int r) const;  // from the last exchange
  // The checks of a job's tensors; with processes, a refusal reaches every
  // process (so that none waits for the others' step).
  void check_job(Job job, const Tensor& input, const Tensor* target, bool accumulate = false);
  // A batch of more rows than any before needs more activation memory:
  // estimated and checked (DP_ERR_OUT_OF_MEMORY) before the step allocates it.
  void check_activations(int64_t rows);

  Model& model_;
  std::vector<int> gpu_ordinals_;  // before devices_: parsing fills both
  std::vector<std::string> devices_;
  ProcessGroup* procs_ = nullptr;  // with more than one process
  void check_settings(const Optimizer& opt, bool compare);
  std::vector<double> settings_;  // check_settings' hashes, one per process (sized once)
  int first_ = 0, global_ = 0;
  std::vector<int> rank_devices_;
  std::vector<double> exchange_;
  static constexpr int kExchangeSlots = 4;  // per rank: job, rows, refused, the loss's weight of its rows
  std::unique_ptr<Engine> engine_;
  SplitMode mode_ = SplitMode::kChunk;
  int precision_ = DP_PRECISION_FP32;
  bool training_ = true;
  int64_t step_ = 0;  // training forward passes so far (keys dropout)

  // The last run: the split over all devices (all processes'), this
  // process's part of it, offsets into this process's rows, and contexts.
  std::vector<int64_t> global_split_, split_, offsets_;
  std::vector<RunCtx> ctxs_;
  std::vector<const float*> stat_ptrs_;
  Shape last_output_shape_;
  bool have_forward_ = false;
  // The most rows this process, and each of its replicas, ran so far: a
  // step beyond them allocates (checked first, and applied only at its end).
  int64_t seen_rows_ = 0;
  std::vector<int64_t> seen_split_;
  uint64_t replica_bytes_ = 0;   // the replicas' gradients, statistics and layer scratch (CPU)
  int64_t scratch_floats_ = 0;   // layer scratch of one worker thread of a replica (CPU)
  int threads_ = 1;              // worker threads per CPU device
  std::string largest_scratch() const;
  int64_t activation_floats_ = 0;  // per sample: every layer's output, and its gradient
  HeldShare held_;                 // held_bytes(), in the model's attached_bytes
};

}  // namespace dp
