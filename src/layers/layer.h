// The interface every layer implements, built-in or (later) from a plugin.
// A Layer object holds hyperparameters and shapes only; it is shared by all
// replicas of a model and must be stateless during forward/backward (several
// replicas call it at once). Per-replica memory lives in LayerIO::scratch.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/workers.h"
#include "core/args.h"
#include "tensor/tensor.h"

namespace dp {

struct CudaCtx;  // src/backends/cuda/cuda.h

// How a parameter or buffer starts, as PyTorch's reset_parameters() does it.
struct Init {
  enum Kind { kZeros, kOnes, kUniform, kConstant } kind = kZeros;
  float bound = 0;  // kUniform: U(-bound, bound); kConstant: the value
};

// A parameter or buffer a layer declares; the model names it
// "<layer name>.<suffix>" and stores it in one flat array, in declaration order.
struct TensorSpec {
  std::string suffix;  // "weight", "bias", "running_mean", ...
  Shape shape;
  Init init;
};

// What one replica's call sees.
struct RunCtx {
  bool training = true;
  uint64_t seed = 0;          // the model's seed
  int64_t step = 0;           // training forward passes so far (dropout key)
  int64_t sample_offset = 0;  // global batch index of this replica's first row
  int64_t batch_total = 0;    // the whole batch, over all replicas (loss mean)
  // What a loss's mean divides by, over the whole batch (Loss::weight_of
  // summed over every replica of every process); < 0: batch_total.
  double loss_total = -1;
  double loss_scale = 1;      // losses: the gradient is of loss_scale * loss (accumulation's 1/K)
  Workers* pool = nullptr;    // this device's intra-op workers
  CudaCtx* cuda = nullptr;    // a CUDA replica's device, stream and handles; null on a CPU
  // The same replica's CUDA ordinal and cudaStream_t, for code that cannot
  // include CUDA's headers (a plugin layer's device code); -1 and null on a CPU.
  int cuda_device = -1;
  void* cuda_stream = nullptr;
};

struct LayerIO {
  std::vector<const Tensor*> in;  // inputs, batch on dim 0
  Tensor* out = nullptr;          // forward: resize and fill
  const Tensor* gout = nullptr;   // backward: gradient of out
  // backward: gradients of the inputs, to overwrite (resize first); an entry is
  // null when that input needs no gradient (the model's input).
  std::vector<Tensor*> gin;
  const float* params = nullptr;  // this layer's parameters, in declaration order
  float* grads = nullptr;         // their gradients: backward ACCUMULATES (+=)
  // backward: overwrite grads (=) instead of adding to them. Set only for a
  // layer whose assigns_grads() is true, in place of zeroing them first.
  bool assign_grads = false;
  const float* buffers = nullptr; // this layer's buffers (running statistics), shared
  float* stats = nullptr;         // per replica, stats_size() floats, written by a training forward
  std::vector<Tensor>* scratch = nullptr;  // per replica and layer, kept across steps
  Allocator* alloc = nullptr;  // where scratch lives: null for host memory, a GPU's allocator
  // backward: a layer with grad_splits() calls grads_final(final_user, s)
  // for each of its splits s, in decreasing order, once the gradients of its
  // parameters from s to their end are final (their reduction can start
  // while it computes the rest). Null when nobody listens.
  void (*grads_final)(void* user, int64_t from) = nullptr;
  void* final_user = nullptr;

  // Scratch tensor k of this replica (created on first use, then reused).
  Tensor& tmp(size_t k) {
    while (scratch->size() <= k) scratch->emplace_back(alloc);
    return (*scratch)[k];
  }
};

class Layer {
 public:
  virtual ~Layer() = default;

  // Filled in by the model builder.
  std::string type;   // "conv2d"
  std::string name;   // "3" or the JSON "name"
  std::string path;   // "/layers/3"
  int index = 0;      // position in the model (keys dropout's random stream)

  // Inputs this layer takes: {min, max}; max < 0 means any number.
  virtual std::pair<int, int> arity() const { return {1, 1}; }
  // Per-sample output shape from per-sample input shapes. Called once at
  // build; may record shapes and decide parameter shapes. Throws
  // DP_ERR_SHAPE with a message naming what was expected.
  virtual Shape infer(const std::vector<Shape>& in) = 0;
  virtual std::vector<TensorSpec> params() const { return {}; }
  virtual std::vector<TensorSpec> buffers() const { return {}; }
  // Floats of per-replica statistics a training forward writes (batch norm).
  virtual int64_t stats_size() const { return 0; }
  // Floats of scratch a CPU replica keeps for this layer per worker thread,
  // whatever the batch (conv2d's unfolded input): the group counts them
  // against the model's memory limit before any step allocates them. After
  // infer; DP_ERR_SHAPE (checked_mul) if the count overflows.
  virtual int64_t scratch_floats() const { return 0; }
  // Offsets within this layer's parameters (increasing, inside (0, count))
  // at which its CPU backward reports gradients final early (LayerIO::
  // grads_final): a large layer's gradient then reaches the reduction in
  // pieces. The same on every replica; none by default.
  virtual std::vector<int64_t> grad_splits() const { return {}; }
  // Whether backward honours LayerIO::assign_grads: then it writes every one
  // of its gradients, and the replica need not zero them before (a pass over
  // them per step saved).
  virtual bool assigns_grads() const { return false; }

  virtual void forward(const RunCtx& ctx, LayerIO& io) const = 0;
  virtual void backward(const RunCtx& ctx, LayerIO& io) const = 0;
  // Whether forward and backward above also run on a CUDA replica (ctx.cuda
  // set, every pointer of io on its GPU): a plugin type with CUDA code. The
  // built-ins' CUDA code is in backends/cuda/ops instead.
  virtual bool runs_on_cuda() const { return false; }

  // After a training forward on every replica: folds the replicas' stats
  // (stats[r], from count[r] samples) into the shared buffers, in replica
  // order. Runs on one thread.
  virtual void merge_stats(float* buffers, const float* const* stats, const int64_t* count, int replicas) const {
    (void)buffers, (void)stats, (void)count, (void)replicas;
  }
};

// A loss reduces over the whole batch even though each replica sees a part:
// forward_backward returns this replica's share of the batch loss and writes
// d(batch loss)/d(out) for its rows.
class Loss {
 public:
  virtual ~Loss() = default;
  std::string type;
  // reduction "sum" (PyTorch's reduction="sum"): the batch's loss is the sum
  // over its rows, not their mean; false: "mean".
  bool sum_ = false;
  // What the batch's loss divides by: the mean's `denominator`, or 1 for a sum.
  double divisor(double denominator) const { return sum_ ? 1.0 : denominator; }
  // Checks the model's per-sample output shape; returns the target's per-sample
  // shape and dtype that the loss needs.
  virtual Shape target_shape(const Shape& out_sample, dp_dtype* dtype) const = 0;
  virtual double forward_backward(const RunCtx& ctx, const Tensor& out, const Tensor& target, Tensor* gout) const = 0;
  // Before any replica runs (the group's checks, which every process
  // refuses alike): throws DP_ERR_INVALID_ARGUMENT for target values the
  // loss cannot take (a class outside [0, C), bce's outside [0, 1]), naming
  // the row of `target` (host memory; out_sample: the model's output per
  // sample). Nothing by default.
  virtual void check_target_values(const Shape& out_sample, const Tensor& target) const {
    (void)out_sample, (void)target;
  }
  // What these target rows weigh in the batch's mean: their number, or, for
  // cross entropy with class weights or ignore_index, as PyTorch's mean, the
  // weights of their classes, ignored rows left out. The group adds it up
  // over the whole batch (RunCtx::loss_total). Never throws: a bad target is
  // forward_backward's to report.
  virtual double weight_of(const Tensor& target) const { return target.shape().ndim ? static_cast<double>(target.shape()[0]) : 0; }
};

// Makes a layer from its JSON arguments: a plain function (the built-ins) or
// a shared function object carrying state (a plugin's layer type). Copies
// compare equal when they make layers the same way; null when unset.
class LayerFactory {
 public:
  using Fn = std::unique_ptr<Layer> (*)(Args& args);
  using Stateful = std::function<std::unique_ptr<Layer>(Args& args)>;
  LayerFactory(Fn fn = nullptr) : fn_(fn) {}  // NOLINT: implicit, as the built-ins' list needs
  LayerFactory(std::nullptr_t) {}
  explicit LayerFactory(Stateful f) : state_(std::make_shared<const Stateful>(std::move(f))) {}

  std::unique_ptr<Layer> operator()(Args& args) const { return state_ ? (*state_)(args) : fn_(args); }
  explicit operator bool() const { return fn_ != nullptr || state_ != nullptr; }
  bool operator==(const LayerFactory& o) const { return fn_ == o.fn_ && state_ == o.state_; }
  bool operator!=(const LayerFactory& o) const { return !(*this == o); }
  bool operator==(std::nullptr_t) const { return !*this; }
  bool operator!=(std::nullptr_t) const { return !!*this; }

 private:
  Fn fn_ = nullptr;
  std::shared_ptr<const Stateful> state_;
};
using LossFactory = std::unique_ptr<Loss> (*)(Args& args);

}  // namespace dp
