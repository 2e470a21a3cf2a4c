// A group's devices when they are not CPU threads: the Group keeps the
// semantics (checks, the split, the step counter, the loss, batch-norm
// statistics merged on the host), an engine keeps the replicas and their
// memory on the devices. The CUDA engine is backends/cuda/engine.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/workers.h"
#include "model/model.h"
#include "optim/optimizer.h"

namespace dp {

enum class Job { kForward, kBackward, kTrain, kEval };

// What one run of a job is: the split Group computed, and where results go.
struct RunPlan {
  Job job = Job::kForward;
  const std::vector<int64_t>* split = nullptr;    // rows per active replica
  const std::vector<int64_t>* offsets = nullptr;  // first row of each
  std::vector<RunCtx>* ctxs = nullptr;            // per replica; the engine sets ctx.cuda
  const Tensor* input = nullptr;                  // host tensors
  const Tensor* target = nullptr;
  const Tensor* grad_output = nullptr;
  double* losses = nullptr;    // per replica, kTrain and kEval
  int64_t* correct = nullptr;  // per replica, kEval
};

class DeviceEngine : public DeviceCopy {
 public:
  ~DeviceEngine() override = default;
  // Runs the job on every replica and waits for it: on return, losses and
  // correct counts are on the host, and so are the batch-norm statistics
  // (host_stats). Throws dp::Error; the engine stays usable unless it says otherwise.
  virtual void run(const RunPlan& plan) = 0;
  virtual const float* host_stats(int replica, const Node& node) = 0;
  // The model's buffers changed on the host (statistics merged): upload them.
  virtual void buffers_changed() = 0;
  // The last forward's outputs, gathered into a host tensor of the full batch.
  virtual void gather(Tensor& output) = 0;
  // Model gradients += the replicas' gradients of the last run, summed over
  // all replicas; then, with opt, one optimizer step on every device.
  virtual void reduce(Optimizer* opt) = 0;
  virtual void zero_grad() = 0;
  virtual void optimizer_step(Optimizer& opt) = 0;
  // Copies opt's state from the devices into opt.state() (for a checkpoint).
  virtual void optimizer_to_host(Optimizer& opt) = 0;
  virtual void set_allow_tf32(bool allow) = 0;
  virtual void set_cudnn_benchmark(bool on) = 0;
};

// "cuda:0,cuda:0" parsed into ordinals; throws DP_ERR_DEVICE with the reason
// when this build or machine has no such GPU, or a layer has no CUDA code.
std::unique_ptr<DeviceEngine> make_cuda_engine(Model& model, const std::vector<int>& ordinals, Workers* threads);

}  // namespace dp
