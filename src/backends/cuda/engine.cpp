// The CUDA engine: nn.DataParallel over GPUs. Each physical GPU (a slot) holds
// one copy of the parameters, buffers, accumulated gradients and optimizer
// state; each replica on it has its own stream, activations and gradients. A
// device list that repeats a GPU puts several replicas on one slot: they
// share its parameters, as CPU replicas share the model's.
//
// A training step: every replica's host thread stages its rows in pinned
// memory and copies them up on its stream, runs forward, loss and backward;
// with one replica per GPU and several GPUs, gradient buckets are all-reduced
// with NCCL on a side stream while backward still runs. The host waits once
// (losses, statistics), checks the loss, then each slot sums what is left to
// sum and applies the optimizer with identical kernels, so the copies stay
// identical without a broadcast.
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backends/cuda/kernels.h"
#include "backends/cuda/pinned.h"
#include "backends/cuda/replica.h"
#include "group/engine.h"
#include "layers/loss_cross_entropy.h"

namespace dp {

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress)
    fail(DP_ERR_DEVICE, std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r) +
                            (ncclGetLastError(nullptr)[0] ? std::string(" (") + ncclGetLastError(nullptr) + ")" : ""));
}
#define DP_NCCL_CHECK(call) nccl_check((call), #call)

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  double s = std::atof(v);
  return s > 0 ? s : fallback;
}

struct Slot {
  int device = 0;
  std::vector<int> replicas;
  Tensor params, grads, buffers, step_sum, state0, state1;
  uint64_t opt_id = 0, opt_version = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t comm_stream = nullptr;
  cudaEvent_t bucket_ready = nullptr, comm_done = nullptr, updated = nullptr;
};

class CudaEngine final : public DeviceEngine {
 public:
  CudaEngine(Model& model, const std::vector<int>& ordinals, Workers* threads);
  ~CudaEngine() override;

  void run(const RunPlan& plan) override;
  const float* host_stats(int r, const Node& node) override {
    return reinterpret_cast<const float*>(results_.data() + r * result_stride_ + kStatsAt) + node.stats_offset;
  }
  void buffers_changed() override;
  void gather(Tensor& output) override;
  void reduce(Optimizer* opt) override;
  void zero_grad() override;
  void optimizer_step(Optimizer& opt) override;
  void optimizer_to_host(Optimizer& opt) override;
  void set_allow_tf32(bool allow) override;
  void set_cudnn_benchmark(bool on) override {
    for (auto& r : reps_) r->stream.ctx()->cudnn_benchmark = on;
  }
  void to_host() override;

 private:
  static void run_one(void* self, int r);
  void run_replica(int r);
  void start_bucket(int r, int64_t begin);
  void wait_all();
  void abort_comms(const std::string& why);
  void upload_if_stale();
  void prepare_optimizer(Slot& s, Optimizer& opt);
  void apply(Optimizer* opt, bool with_step_sum);
  cudaStream_t main_stream(const Slot& s) { return reps_[s.replicas[0]]->stream.ctx()->stream; }

  Model& model_;
  Workers* threads_;
  std::vector<std::unique_ptr<CudaReplica>> reps_;
  std::vector<int> slot_of_;
  std::vector<Slot> slots_;
  bool use_nccl_ = false, bucketed_ = false;
  int64_t bucket_floats_ = (int64_t(4) << 20) / 4;  // 4 MiB buckets
  double timeout_s_ = 300;
  std::string broken_;  // why the communicators were aborted
  uint64_t uploaded_version_ = ~uint64_t(0);
  bool device_newer_ = false;

  // The job in flight.
  const RunPlan* plan_ = nullptr;
  const Allocator* pinned_ = nullptr;  // batches from it need no staging
  Pinned in_stage_, target_stage_, gout_stage_, out_stage_, results_;
  // Per replica, read back once per job: the loss (float), the correct count
  // (int64) and the batch-norm statistics, at these byte offsets.
  static constexpr size_t kLossAt = 0, kCorrectAt = 8, kStatsAt = 16;
  size_t result_stride_ = 0;
  Shape out_shape_;
  int active_ = 0;
};

CudaEngine::CudaEngine(Model& model, const std::vector<int>& ordinals, Workers* threads)
    : model_(model), threads_(threads) {
  std::string why;
  int count = cuda_device_count(&why);
  for (int d : ordinals) {
    if (count == 0) fail(DP_ERR_DEVICE, "device 'cuda:" + std::to_string(d) + "': " + why);
    if (d >= count)
      fail(DP_ERR_DEVICE, "device 'cuda:" + std::to_string(d) + "' does not exist: this machine has " +
                              std::to_string(count) + " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1));
  }
  pinned_ = cuda_pinned_allocator();
  // Slots in order of first appearance; replicas keep the device list's order.
  for (int d : ordinals) {
    int s = 0;
    while (s < static_cast<int>(slots_.size()) && slots_[s].device != d) ++s;
    if (s == static_cast<int>(slots_.size())) {
      slots_.emplace_back();
      slots_.back().device = d;
    }
    if (slots_[s].replicas.size() >= static_cast<size_t>(kMaxReplicasPerDevice))
      fail(DP_ERR_DEVICE, "cuda:" + std::to_string(d) + " is listed more than " + std::to_string(kMaxReplicasPerDevice) + " times");
    slots_[s].replicas.push_back(static_cast<int>(slot_of_.size()));
    slot_of_.push_back(s);
  }
  for (int d : ordinals) reps_.push_back(std::make_unique<CudaReplica>(model, d, false));

  const int64_t P = static_cast<int64_t>(model.params.size()), B = static_cast<int64_t>(model.buffers.size());
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    Allocator* a = reps_[s.replicas[0]]->stream.ctx()->alloc;  // the slot's work runs on that stream
    for (Tensor* t : {&s.params, &s.grads, &s.buffers, &s.step_sum, &s.state0, &s.state1}) *t = Tensor(a);
    s.params.resize(DP_F32, Shape{P});
    s.grads.resize(DP_F32, Shape{P});
    s.buffers.resize(DP_F32, Shape{B});
    s.step_sum.resize(DP_F32, Shape{P});
    DP_CUDA_CHECK(cudaStreamCreateWithFlags(&s.comm_stream, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&s.bucket_ready, &s.comm_done, &s.updated})
      DP_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    for (int r : s.replicas) reps_[r]->graph.set_weights(s.params.f32(), s.buffers.f32());
  }

  // NCCL across GPUs (DP_CUDA_NCCL=1 also for one GPU: tests the path on a
  // one-GPU machine). A repeated GPU cannot be an NCCL rank twice: its
  // replicas are summed on the GPU first.
  const char* force = std::getenv("DP_CUDA_NCCL");
  use_nccl_ = slots_.size() > 1 || (force && std::string(force) == "1");
  if (use_nccl_) {
    std::vector<ncclComm_t> comms(slots_.size());
    std::vector<int> devs;
    for (const Slot& s : slots_) devs.push_back(s.device);
    DP_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devs.size()), devs.data()));
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].comm = comms[i];
  }
  bucketed_ = use_nccl_;
  for (const Slot& s : slots_) bucketed_ = bucketed_ && s.replicas.size() == 1;
  timeout_s_ = env_seconds("DP_NCCL_TIMEOUT", 300);
  if (const char* b = std::getenv("DP_BUCKET_MB")) bucket_floats_ = std::max<int64_t>(1, std::atoll(b)) * (int64_t(1) << 20) / 4;
  if (bucketed_)
    for (size_t r = 0; r < reps_.size(); ++r)
      reps_[r]->exec.on_backward_done = [this, r](size_t node) {
        const Node& n = model_.nodes[node];
        CudaReplica& rep = *reps_[r];
        if (rep.reduced_begin - n.param_offset >= bucket_floats_ || (node == 0 && rep.reduced_begin > 0))
          start_bucket(static_cast<int>(r), n.param_offset);
      };
  upload_if_stale();
  model_.device_copy = this;
}

CudaEngine::~CudaEngine() {
  if (model_.device_copy == this) {
    try {
      to_host();  // the model keeps what was trained
    } catch (...) {
    }
    model_.device_copy = nullptr;
  }
  for (auto& r : reps_) cudaStreamSynchronize(r->stream.ctx()->stream);
  for (Slot& s : slots_)  // their memory is the first replica's allocator's, which goes with it
    for (Tensor* t : {&s.params, &s.grads, &s.buffers, &s.step_sum, &s.state0, &s.state1}) *t = Tensor();
  reps_.clear();
  for (Slot& s : slots_) {
    cudaSetDevice(s.device);
    if (s.comm) (broken_.empty() ? ncclCommDestroy(s.comm) : ncclCommAbort(s.comm));
    if (s.comm_stream) cudaStreamSynchronize(s.comm_stream), cudaStreamDestroy(s.comm_stream);
    for (cudaEvent_t e : {s.bucket_ready, s.comm_done, s.updated})
      if (e) cudaEventDestroy(e);
  }
}

// The host's arrays are newer (a new engine, set_parameters, a checkpoint):
// copy them to the first GPU and broadcast them from there with NCCL.
void CudaEngine::upload_if_stale() {
  if (uploaded_version_ == model_.host_version) return;
  const bool broadcast = use_nccl_ && slots_.size() > 1;
  for (size_t i = 0; i < (broadcast ? 1 : slots_.size()); ++i) {
    Slot& s = slots_[i];
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    cudaStream_t st = main_stream(s);
    DP_CUDA_CHECK(cudaMemcpyAsync(s.params.f32(), model_.params.data(), s.params.bytes(), cudaMemcpyHostToDevice, st));
    DP_CUDA_CHECK(cudaMemcpyAsync(s.grads.f32(), model_.grads.data(), s.grads.bytes(), cudaMemcpyHostToDevice, st));
    if (!model_.buffers.empty())
      DP_CUDA_CHECK(cudaMemcpyAsync(s.buffers.f32(), model_.buffers.data(), s.buffers.bytes(), cudaMemcpyHostToDevice, st));
    DP_CUDA_CHECK(cudaStreamSynchronize(st));  // pageable sources: the host may change them next
  }
  if (broadcast) {
    DP_NCCL_CHECK(ncclGroupStart());
    for (Slot& s : slots_)
      for (Tensor* t : {&s.params, &s.grads, &s.buffers})
        if (t->numel() > 0)
          DP_NCCL_CHECK(ncclBroadcast(t->f32(), t->f32(), static_cast<size_t>(t->numel()), ncclFloat, 0, s.comm,
                                      main_stream(s)));
    DP_NCCL_CHECK(ncclGroupEnd());
  }
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    DP_CUDA_CHECK(cudaEventRecord(s.updated, main_stream(s)));
  }
  uploaded_version_ = model_.host_version;
  device_newer_ = false;
}

void CudaEngine::to_host() {
  if (!device_newer_) return;
  Slot& s = slots_[0];
  DP_CUDA_CHECK(cudaSetDevice(s.device));
  cudaStream_t st = main_stream(s);
  DP_CUDA_CHECK(cudaMemcpyAsync(model_.params.data(), s.params.f32(), s.params.bytes(), cudaMemcpyDeviceToHost, st));
  DP_CUDA_CHECK(cudaMemcpyAsync(model_.grads.data(), s.grads.f32(), s.grads.bytes(), cudaMemcpyDeviceToHost, st));
  DP_CUDA_CHECK(cudaStreamSynchronize(st));
  device_newer_ = false;
}

void CudaEngine::set_allow_tf32(bool allow) {
  for (auto& r : reps_) r->stream.set_allow_tf32(allow);
}

void CudaEngine::run(const RunPlan& plan) {
  if (!broken_.empty()) fail(DP_ERR_DEVICE, broken_);
  upload_if_stale();
  plan_ = &plan;
  active_ = static_cast<int>(plan.split->size());
  const int64_t batch = plan.input->shape()[0];
  const bool computes_loss = plan.job == Job::kTrain || plan.job == Job::kEval;
  if (computes_loss && dynamic_cast<const CrossEntropyAttrs*>(model_.loss.get()))
    check_class_targets(*plan.target, model_.output_shape().numel(), 0);
  // Staging sized here, on one thread, before the replicas' threads use it.
  auto stage_for = [&](Pinned& stage, const Tensor& t) {  // pinned tensors go up directly
    if (t.allocator() != pinned_) stage.reserve(t.bytes());
  };
  stage_for(in_stage_, *plan.input);
  if (computes_loss) stage_for(target_stage_, *plan.target);
  if (plan.job == Job::kBackward) stage_for(gout_stage_, *plan.grad_output);
  if (plan.job == Job::kForward) {
    out_shape_ = Shape::batched(batch, model_.output_shape());
    out_stage_.reserve(static_cast<size_t>(out_shape_.numel()) * sizeof(float));
  }
  result_stride_ = (kStatsAt + static_cast<size_t>(model_.stats_total) * sizeof(float) + 63) / 64 * 64;
  results_.reserve(result_stride_ * reps_.size());
  for (int r = 0; r < static_cast<int>(reps_.size()); ++r)
    if (r < active_) (*plan.ctxs)[r].cuda = reps_[r]->stream.ctx();
  try {
    threads_->run(static_cast<int>(reps_.size()), &CudaEngine::run_one, this);
    wait_all();
  } catch (...) {
    for (auto& r : reps_) cudaStreamSynchronize(r->stream.ctx()->stream);  // leave nothing in flight
    for (Slot& s : slots_) cudaStreamSynchronize(s.comm_stream);
    cudaGetLastError();
    plan_ = nullptr;
    throw;
  }
  for (int r = 0; r < active_; ++r) {
    const char* res = results_.data() + r * result_stride_;
    if (plan.losses) plan.losses[r] = computes_loss ? *reinterpret_cast<const float*>(res + kLossAt) : 0.0;
    if (plan.correct) plan.correct[r] = plan.job == Job::kEval ? *reinterpret_cast<const int64_t*>(res + kCorrectAt) : 0;
  }
  plan_ = nullptr;
}

void CudaEngine::run_one(void* self, int r) { static_cast<CudaEngine*>(self)->run_replica(r); }

// Copies rows [off, off + rows) of a host tensor up to `dst`: straight from
// a pinned tensor, else through pinned staging (a copy on this replica's
// host thread, so the replicas stage in parallel).
static void stage_up(const Tensor& host, int64_t off, int64_t rows, Pinned& stage, Tensor& dst, cudaStream_t st,
                     const Allocator* pinned) {
  Shape s = host.shape();
  s.d[0] = rows;
  dst.resize(host.dtype(), s);
  const size_t row_bytes = static_cast<size_t>(host.shape().inner()) * dtype_size(host.dtype());
  const char* src = static_cast<const char*>(host.data()) + off * row_bytes;
  if (host.allocator() != pinned) {
    char* pin = stage.data() + off * row_bytes;
    std::memcpy(pin, src, rows * row_bytes);
    src = pin;
  }
  DP_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, rows * row_bytes, cudaMemcpyHostToDevice, st));
}

void CudaEngine::run_replica(int r) {
  CudaReplica& rep = *reps_[r];
  Slot& slot = slots_[slot_of_[r]];
  const RunPlan& plan = *plan_;
  DP_CUDA_CHECK(cudaSetDevice(rep.device));
  cudaStream_t st = rep.stream.ctx()->stream;
  DP_CUDA_CHECK(cudaStreamWaitEvent(st, slot.updated, 0));  // the slot's last update or upload
  const bool backward = plan.job == Job::kTrain || plan.job == Job::kBackward;
  rep.reduced_begin = static_cast<int64_t>(model_.params.size());
  if (r >= active_) {
    // An idle replica still takes part in every bucket's all-reduce, with zeros.
    if (backward && bucketed_) {
      rep.exec.zero(rep.graph.grads(), rep.reduced_begin);
      for (size_t k = model_.nodes.size(); k-- > 0;) rep.exec.backward_done(k);
    }
  } else {
    const RunCtx& ctx = (*plan.ctxs)[r];
    const int64_t off = (*plan.offsets)[r], rows = (*plan.split)[r];
    char* res = results_.data() + r * result_stride_;
    if (plan.job == Job::kBackward) {
      stage_up(*plan.grad_output, off, rows, gout_stage_, rep.grad_output, st, pinned_);
      rep.graph.backward(ctx, rep.grad_output);
    } else {
      stage_up(*plan.input, off, rows, in_stage_, rep.input, st, pinned_);
      rep.graph.forward(ctx, rep.input);
      if (plan.job == Job::kForward) {
        const size_t row_bytes = static_cast<size_t>(out_shape_.inner()) * sizeof(float);
        DP_CUDA_CHECK(cudaMemcpyAsync(out_stage_.data() + off * row_bytes, rep.graph.output().data(), rows * row_bytes,
                                      cudaMemcpyDeviceToHost, st));
      } else {
        stage_up(*plan.target, off, rows, target_stage_, rep.target, st, pinned_);
        rep.loss->forward_backward(ctx, rep.graph.output(), rep.target, &rep.graph.loss_grad(), rep.loss_value.f32());
        DP_CUDA_CHECK(cudaMemcpyAsync(res + kLossAt, rep.loss_value.data(), sizeof(float), cudaMemcpyDeviceToHost, st));
        if (plan.job == Job::kEval) {
          cuda_count_correct(ctx, rep.graph.output(), rep.target, rep.correct.i64());
          DP_CUDA_CHECK(cudaMemcpyAsync(res + kCorrectAt, rep.correct.data(), sizeof(int64_t), cudaMemcpyDeviceToHost, st));
        } else {
          rep.graph.backward(ctx, rep.graph.loss_grad());
        }
      }
    }
    if (ctx.training && model_.stats_total > 0 && plan.job != Job::kBackward)
      DP_CUDA_CHECK(cudaMemcpyAsync(res + kStatsAt, rep.graph.all_stats(),
                                    static_cast<size_t>(model_.stats_total) * sizeof(float), cudaMemcpyDeviceToHost, st));
  }
  if (backward && bucketed_) {  // the replica's job ends when its last bucket is reduced
    DP_CUDA_CHECK(cudaEventRecord(slot.comm_done, slot.comm_stream));
    DP_CUDA_CHECK(cudaStreamWaitEvent(st, slot.comm_done, 0));
  }
  DP_CUDA_CHECK(cudaEventRecord(rep.done, st));
}

// Gradients [begin, reduced_begin) are final on replica r: all-reduce them
// on the slot's communication stream while backward goes on.
void CudaEngine::start_bucket(int r, int64_t begin) {
  CudaReplica& rep = *reps_[r];
  Slot& slot = slots_[slot_of_[r]];
  const int64_t count = rep.reduced_begin - begin;
  if (count <= 0) return;
  DP_CUDA_CHECK(cudaEventRecord(slot.bucket_ready, rep.stream.ctx()->stream));
  DP_CUDA_CHECK(cudaStreamWaitEvent(slot.comm_stream, slot.bucket_ready, 0));
  float* g = rep.graph.grads() + begin;
  DP_NCCL_CHECK(ncclAllReduce(g, g, static_cast<size_t>(count), ncclFloat, ncclSum, slot.comm, slot.comm_stream));
  rep.reduced_begin = begin;
}

// Waits for every replica's job. With NCCL, polls instead of blocking, so an
// asynchronous NCCL error or a collective that never completes (a peer that
// died, a mismatched call) ends in an error instead of a hang.
void CudaEngine::wait_all() {
  if (!use_nccl_) {
    for (auto& r : reps_) DP_CUDA_CHECK(cudaEventSynchronize(r->done));
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    bool all = true;
    for (auto& r : reps_) {
      cudaError_t e = cudaEventQuery(r->done);
      if (e == cudaErrorNotReady) {
        all = false;
        continue;
      }
      if (e != cudaSuccess) cuda_fail(e, "a replica's step");
    }
    if (all) return;
    for (Slot& s : slots_) {
      ncclResult_t async = ncclSuccess;
      DP_NCCL_CHECK(ncclCommGetAsyncError(s.comm, &async));
      if (async != ncclSuccess && async != ncclInProgress)
        abort_comms(std::string("NCCL reported an asynchronous error on cuda:") + std::to_string(s.device) + ": " +
                    ncclGetErrorString(async));
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s_)
      abort_comms("a gradient all-reduce did not finish within " + std::to_string(static_cast<int>(timeout_s_)) +
                  " s (DP_NCCL_TIMEOUT)");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void CudaEngine::abort_comms(const std::string& why) {
  for (Slot& s : slots_)
    if (s.comm) ncclCommAbort(s.comm), s.comm = nullptr;
  broken_ = why + "; the NCCL communicators were aborted: destroy this group and create a new one";
  fail(DP_ERR_DEVICE, broken_);
}

void CudaEngine::buffers_changed() {
  if (model_.buffers.empty()) return;
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    cudaStream_t st = main_stream(s);
    DP_CUDA_CHECK(cudaMemcpyAsync(s.buffers.f32(), model_.buffers.data(), s.buffers.bytes(), cudaMemcpyHostToDevice, st));
    DP_CUDA_CHECK(cudaEventRecord(s.updated, st));
  }
}

void CudaEngine::gather(Tensor& output) {
  output.resize(DP_F32, out_shape_);
  std::memcpy(output.f32(), out_stage_.data(), output.bytes());
}

void CudaEngine::prepare_optimizer(Slot& s, Optimizer& opt) {
  if (s.opt_id == opt.id && s.opt_version == opt.host_version) return;
  auto state = opt.state();
  Tensor* dst[2] = {&s.state0, &s.state1};
  for (size_t i = 0; i < state.size() && i < 2; ++i) {
    dst[i]->resize(DP_F32, Shape{static_cast<int64_t>(state[i].second->size())});
    DP_CUDA_CHECK(cudaMemcpyAsync(dst[i]->data(), state[i].second->data(), dst[i]->bytes(), cudaMemcpyHostToDevice,
                                  main_stream(s)));
  }
  DP_CUDA_CHECK(cudaStreamSynchronize(main_stream(s)));  // from pageable memory the host may change next
  s.opt_id = opt.id;
  s.opt_version = opt.host_version;
}

// acc += step sum (when there is one), then the optimizer, on every slot.
void CudaEngine::apply(Optimizer* opt, bool with_step_sum) {
  OptimRule rule;
  if (opt) {
    opt->begin_step();
    rule = opt->rule();
  }
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    if (opt) prepare_optimizer(s, *opt);
    cudaStream_t st = main_stream(s);
    const float* step = nullptr;
    if (with_step_sum) step = bucketed_ ? reps_[s.replicas[0]]->graph.grads() : s.step_sum.f32();
    cuda_update(st, s.params.f32(), s.grads.f32(), step, opt ? &rule : nullptr, s.state0.f32(), s.state1.f32(),
                s.params.numel());
    DP_CUDA_CHECK(cudaEventRecord(s.updated, st));
  }
  device_newer_ = true;
}

void CudaEngine::reduce(Optimizer* opt) {
  if (!broken_.empty()) fail(DP_ERR_DEVICE, broken_);
  const int64_t P = static_cast<int64_t>(model_.params.size());
  if (!bucketed_) {
    // Sum each slot's active replicas in device order, then across slots.
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      const float* src[kMaxReplicasPerDevice];
      int k = 0;
      for (int r : s.replicas)
        if (r < active_) src[k++] = reps_[r]->graph.grads();
      cuda_sum(main_stream(s), s.step_sum.f32(), src, k, P);
    }
    if (use_nccl_) {
      DP_NCCL_CHECK(ncclGroupStart());
      for (Slot& s : slots_)
        DP_NCCL_CHECK(ncclAllReduce(s.step_sum.f32(), s.step_sum.f32(), static_cast<size_t>(P), ncclFloat, ncclSum, s.comm,
                                    main_stream(s)));
      DP_NCCL_CHECK(ncclGroupEnd());
    }
  }
  apply(opt, true);
}

void CudaEngine::zero_grad() {
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    DP_CUDA_CHECK(cudaMemsetAsync(s.grads.data(), 0, s.grads.bytes(), main_stream(s)));
    DP_CUDA_CHECK(cudaEventRecord(s.updated, main_stream(s)));
  }
  device_newer_ = true;
}

void CudaEngine::optimizer_step(Optimizer& opt) { apply(&opt, false); }

void CudaEngine::optimizer_to_host(Optimizer& opt) {
  Slot& s = slots_[0];
  if (s.opt_id != opt.id) return;  // never stepped here: the host state is current
  DP_CUDA_CHECK(cudaSetDevice(s.device));
  DP_CUDA_CHECK(cudaStreamSynchronize(main_stream(s)));
  auto state = opt.state();
  const Tensor* src[2] = {&s.state0, &s.state1};
  for (size_t i = 0; i < state.size() && i < 2; ++i)
    DP_CUDA_CHECK(cudaMemcpy(state[i].second->data(), src[i]->data(), src[i]->bytes(), cudaMemcpyDeviceToHost));
}

}  // namespace

std::unique_ptr<DeviceEngine> make_cuda_engine(Model& model, const std::vector<int>& ordinals, Workers* threads) {
  return std::make_unique<CudaEngine>(model, ordinals, threads);
}

}  // namespace dp
