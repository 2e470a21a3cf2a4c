// The CUDA engine: nn.DataParallel over GPUs. Each physical GPU (a slot) holds
// one copy of the parameters, buffers, accumulated gradients and optimizer
// state; each replica on it has its own stream, activations and gradients
// (backends/cuda/replica.h). A device list that repeats a GPU puts several
// replicas on one slot: they share its parameters, as CPU replicas share the
// model's.
//
// A training step is Engine::run_replica on every replica's host thread: rows
// go up through pinned staging, forward, loss and backward run on the
// replica's stream. Gradients are reduced through two communicators: the
// replicas sharing a GPU are summed on it (a LocalComm whose sum is a kernel),
// and the GPUs all-reduce with NCCL (an NcclComm). With one replica per GPU
// and several GPUs, NCCL all-reduces gradient buckets on its own streams
// while backward still runs. The host waits once (losses, statistics), the
// group checks the loss, then each slot applies the optimizer with identical
// kernels, so the copies stay identical without a broadcast.
//
// Across processes (set_processes), NCCL spans every process's GPUs: the
// buckets are summed over all of them, and each replica's loss, correct
// count and statistics are gathered over the process communicator (Gloo).
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels.h"
#include "backends/cuda/nccl_comm.h"
#include "backends/cuda/replica.h"
#include "engine/engine.h"
#include "engine/local_comm.h"
#include "layers/loss_cross_entropy.h"

namespace dp {

namespace {

struct Slot {
  int device = 0;
  std::vector<int> replicas;
  Tensor params, grads, buffers, step_sum, state0, state1;
  Tensor norm_scratch;  // clip_grad_norm_'s and the grad scaler's partial sums: kNormBlocks + 1 doubles
  uint64_t opt_id = 0, opt_version = 0;
  cudaEvent_t updated = nullptr;               // recorded after each change of the slot's arrays
  std::unique_ptr<LocalComm> local;            // sums the slot's replicas on its GPU
};

class CudaEngine final : public Engine, public DeviceCopy {
 public:
  CudaEngine(Model& model, const std::vector<int>& ordinals);
  ~CudaEngine() override;

  void reduce(Optimizer* opt) override;
  void zero_grad() override;
  void optimizer_step(Optimizer& opt) override {
    apply(&opt, false);
    opt.check_held();
  }
  void optimizer_to_host(Optimizer& opt) override;
  void set_allow_tf32(bool allow) override {
    for (int r = 0; r < n_; ++r) rep(r).stream().set_allow_tf32(allow);
  }
  void set_precision(int precision) override {
    // bfloat16 products (cublasGemmEx, cuDNN) need Ampere (8.0) or later:
    // refused by name before anything changes, not a cuBLAS error mid-step.
    for (const Slot& s : slots_) {
      int major = 0, minor = 0;
      DP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, s.device));
      DP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, s.device));
      if (precision == DP_PRECISION_BF16 && major < 8)
        fail(DP_ERR_DEVICE, "cuda:" + std::to_string(s.device) + " has compute capability " + std::to_string(major) +
                                "." + std::to_string(minor) +
                                "; bf16 needs 8.0 or later (Ampere): use fp16 (with the grad scaler) or fp32");
    }
    for (int r = 0; r < n_; ++r) rep(r).stream().ctx()->precision = precision;
  }
  void set_cudnn_benchmark(bool on) override {
    for (int r = 0; r < n_; ++r) rep(r).stream().ctx()->cudnn_benchmark = on;
  }
  void to_host() override;
  void set_processes(Communicator* procs, int rank, int first, int global) override;

 protected:
  void prepare(const RunPlan& plan) override;
  void finish(const RunPlan& plan) override;
  void end_replica(int r, bool buckets) override;
  void abandon() override;
  bool bucketed() const override { return bucketed_; }
  void reduce_bucket(int r, int64_t begin, int64_t count) override;

 private:
  CudaReplica& rep(int r) { return static_cast<CudaReplica&>(*devices_[r]); }
  cudaStream_t main_stream(const Slot& s) { return rep(s.replicas[0]).stream().ctx()->stream; }
  void check_usable() const {
    if (nccl_ && !nccl_->broken().empty()) fail(nccl_->failure_status(), nccl_->broken());
  }
  void upload_if_stale();
  void evict_optimizer(const Optimizer& next);
  void prepare_optimizer(Slot& s, Optimizer& opt);
  void apply(Optimizer* opt, bool with_step_sum);
  bool prepare_grads(Optimizer& opt, bool with_step_sum);
  double sum_squares();  // of slot 0's gradients, read by the host

  std::vector<int> slot_of_;
  std::vector<Slot> slots_;
  std::unique_ptr<NcclComm> nccl_;  // across slots, when there are several (or DP_CUDA_NCCL=1)
  // Across processes, per replica: recorded when its results are on the host
  // (before it waits for NCCL), so that they are gathered over Gloo first.
  std::vector<cudaEvent_t> results_;
  bool bucketed_ = false;           // NCCL, one replica per slot: buckets during backward
  std::atomic<bool> buckets_started_{false};
  uint64_t uploaded_version_ = ~uint64_t(0), uploaded_buffers_ = ~uint64_t(0);
  bool device_newer_ = false;
  // The optimizer whose state the slots hold (their opt_id), while it exists.
  std::weak_ptr<Optimizer*> resident_;
  CudaStaging staging_;
};

CudaEngine::CudaEngine(Model& model, const std::vector<int>& ordinals)
    : Engine(model, static_cast<int>(ordinals.size())) {
  std::string why;
  int count = cuda_device_count(&why);
  for (int d : ordinals) {
    if (count == 0) fail(DP_ERR_DEVICE, "device 'cuda:" + std::to_string(d) + "': " + why);
    if (d >= count)
      fail(DP_ERR_DEVICE, "device 'cuda:" + std::to_string(d) + "' does not exist: this machine has " +
                              std::to_string(count) + " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1));
  }
  staging_.pinned = cuda_pinned_allocator();
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
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    DP_CUDA_CHECK(cudaEventCreateWithFlags(&s.updated, cudaEventDisableTiming));
  }
  for (int r = 0; r < n_; ++r) {
    devices_.push_back(std::make_unique<CudaReplica>(model, ordinals[r], r, &staging_, &slots_[slot_of_[r]].updated));
    rep(r).exec().on_backward_done = [this, r](size_t node) { node_done(r, node); };
  }

  const int64_t P = model.num_params(), B = model.num_buffers();
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    Allocator* a = rep(s.replicas[0]).stream().ctx()->alloc;  // the slot's work runs on that stream
    for (Tensor* t : {&s.params, &s.grads, &s.buffers, &s.step_sum, &s.state0, &s.state1, &s.norm_scratch}) *t = Tensor(a);
    s.params.resize(DP_F32, Shape{P});
    s.norm_scratch.resize(DP_I64, Shape{kNormBlocks + 1});  // DP_I64: 8-byte elements
    s.grads.resize(DP_F32, Shape{P});
    s.buffers.resize(DP_F32, Shape{B});
    s.step_sum.resize(DP_F32, Shape{P});
    for (int r : s.replicas) rep(r).graph().set_weights(s.params.f32(), s.buffers.f32());
    // The slot's replicas are summed on its main stream, after the run (all
    // of their work is done then): one kernel, no chunks.
    cudaStream_t st = main_stream(s);
    s.local = std::make_unique<LocalComm>(
        static_cast<int>(s.replicas.size()), 1,
        [st](float* out, const float* const* in, int k, int64_t b, int64_t e) {
          (void)b;  // whole collectives: b == 0
          cuda_sum(st, out, in, k, e);
        },
        0);
  }

  // NCCL across GPUs (DP_CUDA_NCCL=1 also for one GPU: tests the path on a
  // one-GPU machine). A repeated GPU cannot be an NCCL rank twice: its
  // replicas are summed on the GPU first.
  const char* force = std::getenv("DP_CUDA_NCCL");
  if (slots_.size() > 1 || (force && std::string(force) == "1")) {
    std::vector<int> devs;
    for (const Slot& s : slots_) devs.push_back(s.device);
    nccl_ = std::make_unique<NcclComm>(devs);
  }
  bucketed_ = nccl_ != nullptr;
  for (const Slot& s : slots_) bucketed_ = bucketed_ && s.replicas.size() == 1;
  set_bucket_mb(4);
  upload_if_stale();  // and the model's device copy from now on
}

CudaEngine::~CudaEngine() {
  if (model_.device_copy() == this) {
    try {
      to_host();  // the model keeps what was trained
    } catch (...) {
    }
    model_.set_device_copy(nullptr);
  }
  for (int r = 0; r < n_; ++r) cudaStreamSynchronize(rep(r).stream().ctx()->stream);
  for (Slot& s : slots_)  // their memory is the first replica's allocator's, which goes with it
    for (Tensor* t : {&s.params, &s.grads, &s.buffers, &s.step_sum, &s.state0, &s.state1, &s.norm_scratch}) *t = Tensor();
  // A failed process group may have left a peer dead: NCCL is aborted, not
  // finalized (which would wait for it).
  if (nccl_ && procs_ && !procs_->reset()) nccl_->abort("the process group failed");
  nccl_.reset();
  for (int r = 0; r < static_cast<int>(results_.size()); ++r) {
    cudaSetDevice(rep(r).device());
    cudaEventDestroy(results_[static_cast<size_t>(r)]);
  }
  devices_.clear();
  for (Slot& s : slots_) {
    cudaSetDevice(s.device);
    if (s.updated) cudaEventDestroy(s.updated);
  }
}

// The host's arrays are newer (a new engine, set_parameters, a checkpoint):
// copy them to the first GPU and broadcast them from there with NCCL. Only
// the buffers (merged running statistics): copy them to every GPU. Called
// before anything changes the devices' arrays, so the devices are never
// newer than the host in one array while older in another (a host write
// first fetches the devices' newest values: Model::mutable_params).
void CudaEngine::upload_if_stale() {
  model_.claim_device_copy(this);  // another GPU group on this model ran last: its values first
  if (uploaded_version_ == model_.host_version()) {
    if (uploaded_buffers_ == model_.buffers_version()) return;
    const std::vector<float>& buffers = model_.buffers();
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      cudaStream_t st = main_stream(s);
      if (!buffers.empty())
        DP_CUDA_CHECK(cudaMemcpyAsync(s.buffers.f32(), buffers.data(), s.buffers.bytes(), cudaMemcpyHostToDevice, st));
      DP_CUDA_CHECK(cudaEventRecord(s.updated, st));
    }
    uploaded_buffers_ = model_.buffers_version();
    return;
  }
  // Across processes every process uploads its own host arrays (the same
  // on every rank): a broadcast would be a collective that ranks reach
  // only when their host arrays changed.
  const bool broadcast = nccl_ && slots_.size() > 1 && !procs_;
  // The host wrote last (or another GPU group ran: claimed above, its values
  // are on the host): this engine is the model's device copy, so the host
  // arrays are read as they are.
  const std::vector<float>& params = host_params(model_);
  const std::vector<float>& grads = host_grads(model_);
  const std::vector<float>& buffers = model_.buffers();
  for (size_t i = 0; i < (broadcast ? 1 : slots_.size()); ++i) {
    Slot& s = slots_[i];
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    cudaStream_t st = main_stream(s);
    DP_CUDA_CHECK(cudaMemcpyAsync(s.params.f32(), params.data(), s.params.bytes(), cudaMemcpyHostToDevice, st));
    DP_CUDA_CHECK(cudaMemcpyAsync(s.grads.f32(), grads.data(), s.grads.bytes(), cudaMemcpyHostToDevice, st));
    if (!buffers.empty())
      DP_CUDA_CHECK(cudaMemcpyAsync(s.buffers.f32(), buffers.data(), s.buffers.bytes(), cudaMemcpyHostToDevice, st));
    DP_CUDA_CHECK(cudaStreamSynchronize(st));  // pageable sources: the host may change them next
  }
  if (broadcast) {
    for (size_t i = 0; i < slots_.size(); ++i) nccl_->after(static_cast<int>(i), main_stream(slots_[i]));
    nccl_->group_start();
    for (size_t i = 0; i < slots_.size(); ++i)
      for (Tensor* t : {&slots_[i].params, &slots_[i].grads, &slots_[i].buffers})
        nccl_->broadcast(static_cast<int>(i), t->f32(), t->numel(), 0);
    nccl_->group_end();
    for (size_t i = 0; i < slots_.size(); ++i) nccl_->before(static_cast<int>(i), main_stream(slots_[i]));
  }
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    DP_CUDA_CHECK(cudaEventRecord(s.updated, main_stream(s)));
  }
  uploaded_version_ = model_.host_version();
  uploaded_buffers_ = model_.buffers_version();
  device_newer_ = false;
}

void CudaEngine::to_host() {
  if (!device_newer_) return;
  Slot& s = slots_[0];
  DP_CUDA_CHECK(cudaSetDevice(s.device));
  cudaStream_t st = main_stream(s);
  DP_CUDA_CHECK(cudaMemcpyAsync(host_params(model_).data(), s.params.f32(), s.params.bytes(), cudaMemcpyDeviceToHost, st));
  DP_CUDA_CHECK(cudaMemcpyAsync(host_grads(model_).data(), s.grads.f32(), s.grads.bytes(), cudaMemcpyDeviceToHost, st));
  DP_CUDA_CHECK(cudaStreamSynchronize(st));
  device_newer_ = false;
}

void CudaEngine::prepare(const RunPlan& plan) {
  buckets_started_ = false;
  check_usable();
  upload_if_stale();
  if (plan.job == Job::kTrain && plan.opt) zero_grad();  // a step's gradients replace the model's
  const bool computes_loss = plan.job == Job::kTrain || plan.job == Job::kEval;
  if (computes_loss && dynamic_cast<const CrossEntropyAttrs*>(model_.loss.get()))
    check_class_targets(*plan.target, model_.output_shape().numel(), 0);
  // Staging sized here, on one thread, before the replicas' threads use it.
  auto stage_for = [&](ReplicaDevice::Rows which, const Tensor* t) {  // pinned tensors go up directly
    if (t && t->allocator() != staging_.pinned) staging_.rows[which].reserve(t->bytes());
  };
  stage_for(ReplicaDevice::kInput, plan.input);
  if (computes_loss) stage_for(ReplicaDevice::kTarget, plan.target);
  if (plan.job == Job::kBackward) stage_for(ReplicaDevice::kGradOutput, plan.grad_output);
  if (plan.job == Job::kForward) staging_.output.reserve(plan.output->bytes());
  staging_.result_stride = (CudaStaging::kStatsAt + static_cast<size_t>(model_.stats_total) * sizeof(float) + 63) / 64 * 64;
  staging_.results.reserve(staging_.result_stride * static_cast<size_t>(n_));
}

// NCCL over every process's GPUs: this process's slots are ranks after the
// slots of the processes before it. Rank 0 makes the unique id; the process
// communicator hands it (and the slot counts) to every process.
void CudaEngine::set_processes(Communicator* procs, int rank, int first, int global) {
  Engine::set_processes(procs, rank, first, global);
  const int world = procs->size();
  // Every process's GPU count, and whether it repeats a GPU: buckets during
  // backward only if none does, or the processes' NCCL calls would differ.
  std::vector<double> counts(2 * static_cast<size_t>(world), 0.0);
  counts[static_cast<size_t>(rank)] = static_cast<double>(slots_.size());
  counts[static_cast<size_t>(world + rank)] = slots_.size() < static_cast<size_t>(n_) ? 1.0 : 0.0;
  procs->all_reduce_f64(rank, counts.data(), 2 * world);
  int first_slot = 0, total = 0;
  bool repeats = false;
  for (int r = 0; r < world; ++r) {
    if (r < rank) first_slot += static_cast<int>(counts[static_cast<size_t>(r)]);
    total += static_cast<int>(counts[static_cast<size_t>(r)]);
    repeats = repeats || counts[static_cast<size_t>(world + r)] != 0.0;
  }
  // Rank 0's unique id, as bytes (a broadcast copies them exactly); a rank
  // 0 that cannot make one sends zeros, and every rank fails alike.
  ncclUniqueId id{};
  std::vector<float> words((sizeof id + sizeof(float) - 1) / sizeof(float) + 1, 0.0f);
  if (rank == 0) {
    try {
      id = NcclComm::unique_id();
      words.back() = 1.0f;
    } catch (const Error&) {
    }
  }
  std::memcpy(words.data(), &id, sizeof id);
  procs->broadcast(rank, words.data(), static_cast<int64_t>(words.size()), 0);
  if (words.back() != 1.0f) fail(DP_ERR_COMM, "rank 0 could not make NCCL's unique id, so no process can join its GPUs");
  std::memcpy(&id, words.data(), sizeof id);
  std::vector<int> devs;
  for (const Slot& s : slots_) devs.push_back(s.device);
  if (nccl_) nccl_->wait_all();  // the constructor's broadcast
  nccl_.reset();
  nccl_ = std::make_unique<NcclComm>(devs, id, total, first_slot, procs->timeout_s());
  bucketed_ = !repeats;
  for (int r = 0; r < n_; ++r) {
    DP_CUDA_CHECK(cudaSetDevice(rep(r).device()));
    results_.push_back(nullptr);
    DP_CUDA_CHECK(cudaEventCreateWithFlags(&results_.back(), cudaEventDisableTiming));
  }
}

// Gradients [begin, begin + count) are final on replica r (one per slot):
// all-reduce them on NCCL's stream while backward goes on. A replica outside
// the split takes part with zeros.
void CudaEngine::reduce_bucket(int r, int64_t begin, int64_t count) {
  CudaReplica& p = rep(r);
  float* g = p.graph().grads();
  if (r >= active_ && begin + count == model_.num_params()) p.exec().zero(g, begin + count);  // its first bucket
  buckets_started_ = true;
  const int member = slot_of_[r];
  nccl_->after(member, p.stream().ctx()->stream);
  nccl_->all_reduce(member, g + begin, g + begin, count);
}

void CudaEngine::end_replica(int r, bool buckets) {
  cudaStream_t st = rep(r).stream().ctx()->stream;
  if (!results_.empty()) DP_CUDA_CHECK(cudaEventRecord(results_[static_cast<size_t>(r)], st));
  if (buckets) nccl_->before(slot_of_[r], st);  // the job ends when its last bucket is reduced
  DP_CUDA_CHECK(cudaEventRecord(rep(r).done(), st));
}

// Waits for every replica's job; NCCL's collectives first, with its time
// limit. Across processes the results are gathered over Gloo before that,
// so that a peer that died fails this at once rather than at NCCL's limit.
void CudaEngine::finish(const RunPlan& plan) {
  if (procs_ && plan.job != Job::kBackward) {
    for (cudaEvent_t e : results_) DP_CUDA_CHECK(cudaEventSynchronize(e));
    gather_results();
  }
  if (nccl_) nccl_->wait_all();
  for (int r = 0; r < n_; ++r) DP_CUDA_CHECK(cudaEventSynchronize(rep(r).done()));
  if (plan.job == Job::kForward) std::memcpy(plan.output->f32(), staging_.output.data(), plan.output->bytes());
}

void CudaEngine::abandon() {
  // A replica that failed mid-backward left its peers' bucket all-reduces
  // waiting for it: only aborting NCCL ends them.
  if (buckets_started_ && nccl_) nccl_->abort("a replica failed while gradient buckets were being all-reduced");
  // Across processes the peers may be in a collective with this process's
  // GPUs: they fail now (NCCL on one machine does not see a peer give up).
  if (procs_ && nccl_) nccl_->abort("rank " + std::to_string(rank_) + " failed");
  for (int r = 0; r < n_; ++r) cudaStreamSynchronize(rep(r).stream().ctx()->stream);
  cudaGetLastError();
}

// Each GPU holds one optimizer's state. Before another optimizer's is
// uploaded, the one there goes back to its host arrays (if that optimizer
// still exists and its host copy is not newer), so that optimizers used in
// turn on one group each keep their own state, as on the CPU.
void CudaEngine::evict_optimizer(const Optimizer& next) {
  if (slots_[0].opt_id == 0 || slots_[0].opt_id == next.id) return;
  if (std::shared_ptr<Optimizer*> prev = resident_.lock()) optimizer_to_host(**prev);
  resident_.reset();
}

void CudaEngine::prepare_optimizer(Slot& s, Optimizer& opt) {
  if (s.opt_id == opt.id && s.opt_version == opt.host_version) return;
  resident_ = opt.alive();
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
  check_usable();
  upload_if_stale();
  if (opt) {
    // Every GPU's copy of the optimizer's state first: an allocation that
    // fails on one GPU (out of memory) then changes nothing anywhere, where
    // in the update loop it left the GPUs' parameters differing.
    evict_optimizer(*opt);
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      prepare_optimizer(s, *opt);
    }
  }
  if (opt && opt->defers()) {
    if (!prepare_grads(*opt, with_step_sum)) return;
    with_step_sum = false;  // prepare_grads() added it
  }
  OptimRule rule;
  if (opt) {
    opt->start_step();
    rule = opt->rule();
  }
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    cudaStream_t st = main_stream(s);
    const float* step = nullptr;
    if (with_step_sum) step = bucketed_ ? rep(s.replicas[0]).graph().grads() : s.step_sum.f32();
    cuda_update(st, s.params.f32(), s.grads.f32(), step, opt ? &rule : nullptr, s.state0.f32(), s.state1.f32(),
                s.params.numel());
    DP_CUDA_CHECK(cudaEventRecord(s.updated, st));
  }
  device_newer_ = true;
}

// The sum of slot 0's gradients' squares (every slot holds the same sums),
// in double and in a fixed order, on the device; the host waits for it.
double CudaEngine::sum_squares() {
  Slot& first = slots_[0];
  DP_CUDA_CHECK(cudaSetDevice(first.device));
  double* scratch = static_cast<double*>(first.norm_scratch.data());
  cuda_sum_squares(main_stream(first), first.grads.f32(), model_.num_params(), scratch);
  double sum = 0;
  DP_CUDA_CHECK(cudaMemcpyAsync(&sum, scratch + kNormBlocks, sizeof sum, cudaMemcpyDeviceToHost, main_stream(first)));
  DP_CUDA_CHECK(cudaStreamSynchronize(main_stream(first)));
  return sum;
}

// What Optimizer::prepare() does on the host, on every slot: acc += the
// step's sum first (with_step_sum); with the grad scaler, the scaled
// gradients' squares summed (inf or NaN: the step is skipped) and every
// gradient multiplied by inv_scale; with clipping, the norm, and every
// slot's gradients scaled by the same factor. A step held (skipped, or a
// non-finite norm) steps nothing; after a training step's sum, the
// gradients become zero.
bool CudaEngine::prepare_grads(Optimizer& opt, bool with_step_sum) {
  const int64_t P = model_.num_params();
  const bool usable = !opt.scaler.enabled || opt.scale_usable();  // if not, held: check_held() fails the step
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    const float* step = bucketed_ ? rep(s.replicas[0]).graph().grads() : s.step_sum.f32();
    if (with_step_sum && usable)
      cuda_update(main_stream(s), s.params.f32(), s.grads.f32(), step, nullptr, nullptr, nullptr, P);
  }
  auto changed = [&] {
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      DP_CUDA_CHECK(cudaEventRecord(s.updated, main_stream(s)));
    }
    device_newer_ = true;
  };
  auto hold = [&] {
    if (with_step_sum)
      zero_grad();
    else
      changed();
    return false;
  };
  if (!usable) return hold();
  if (opt.scaler.enabled) {
    const double scaled = sum_squares();
    const float inv = opt.scaler.inv_scale();  // before check_scaled() backs the scale off
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      cuda_scale(main_stream(s), s.grads.f32(), inv, P);  // unscaled in place, as PyTorch's unscale_
    }
    if (!opt.check_scaled(scaled)) return hold();
  }
  if (opt.clips()) {
    if (!opt.set_grad_norm(sum_squares())) return hold();
    const float coef = opt.clip_coef(opt.grad_norm);
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      if (coef < 1.0f) cuda_scale(main_stream(s), s.grads.f32(), coef, P);
    }
  }
  changed();
  return true;
}

// Without buckets: each slot sums its active replicas in device order (the
// local communicator), then NCCL sums the slots. With buckets it is done.
void CudaEngine::reduce(Optimizer* opt) {
  check_usable();
  const int64_t P = model_.num_params();
  if (!bucketed_) {
    for (Slot& s : slots_) {
      DP_CUDA_CHECK(cudaSetDevice(s.device));
      s.local->reset();  // a sum that failed last time (a kernel error) is not waited for
      for (size_t m = 0; m < s.replicas.size(); ++m) {
        const int r = s.replicas[m];
        s.local->all_reduce(static_cast<int>(m), r < active_ ? rep(r).graph().grads() : nullptr, s.step_sum.f32(), P);
      }
      for (size_t m = 0; m < s.replicas.size(); ++m) s.local->wait(static_cast<int>(m));
    }
    if (nccl_) {
      for (size_t i = 0; i < slots_.size(); ++i) nccl_->after(static_cast<int>(i), main_stream(slots_[i]));
      nccl_->group_start();
      for (size_t i = 0; i < slots_.size(); ++i)
        nccl_->all_reduce(static_cast<int>(i), slots_[i].step_sum.f32(), slots_[i].step_sum.f32(), P);
      nccl_->group_end();
      for (size_t i = 0; i < slots_.size(); ++i) nccl_->before(static_cast<int>(i), main_stream(slots_[i]));
      if (procs_) nccl_->wait_all();  // a peer process lost here fails now, with the time limit
    }
  }
  apply(opt, true);
}

void CudaEngine::zero_grad() {
  upload_if_stale();
  for (Slot& s : slots_) {
    DP_CUDA_CHECK(cudaSetDevice(s.device));
    DP_CUDA_CHECK(cudaMemsetAsync(s.grads.data(), 0, s.grads.bytes(), main_stream(s)));
    DP_CUDA_CHECK(cudaEventRecord(s.updated, main_stream(s)));
  }
  device_newer_ = true;
  model_.has_grads = false;
}

void CudaEngine::optimizer_to_host(Optimizer& opt) {
  Slot& s = slots_[0];
  // Never stepped here, or the host state was written since (a checkpoint
  // loaded, not yet uploaded by a step): the host's is the current state.
  if (s.opt_id != opt.id || s.opt_version != opt.host_version) return;
  DP_CUDA_CHECK(cudaSetDevice(s.device));
  DP_CUDA_CHECK(cudaStreamSynchronize(main_stream(s)));
  auto state = opt.state();
  const Tensor* src[2] = {&s.state0, &s.state1};
  for (size_t i = 0; i < state.size() && i < 2; ++i)
    DP_CUDA_CHECK(cudaMemcpy(state[i].second->data(), src[i]->data(), src[i]->bytes(), cudaMemcpyDeviceToHost));
}

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(Model& model, const std::vector<int>& ordinals) {
  return std::make_unique<CudaEngine>(model, ordinals);
}

}  // namespace dp
