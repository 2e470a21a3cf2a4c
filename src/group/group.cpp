#include "group/group.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/memory.h"

namespace dp {

// "cpu:0,cpu:1" or "cuda:0,cuda:0"; a bare "cpu" or "cuda" is device 0.
static std::vector<std::string> parse_devices(const std::string& text, std::vector<int>* gpus) {
  std::vector<std::string> out;
  size_t pos = 0;
  int kinds = 0;  // bit 0: cpu, bit 1: cuda
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string d = text.substr(pos, comma - pos);
    while (!d.empty() && d.front() == ' ') d.erase(d.begin());
    while (!d.empty() && d.back() == ' ') d.pop_back();
    if (d == "cpu" || d == "cuda") d += ":0";
    const size_t colon = d.find(':');
    const std::string kind = d.substr(0, colon == std::string::npos ? 0 : colon);
    const std::string num = colon == std::string::npos ? "" : d.substr(colon + 1);
    bool ok = (kind == "cpu" || kind == "cuda") && !num.empty() && num.find_first_not_of("0123456789") == std::string::npos;
    if (ok && num.size() >= 6)
      fail(DP_ERR_DEVICE, "device '" + d + "' in \"" + text + "\": the device number is too large (at most 99999)");
    if (!ok) fail(DP_ERR_DEVICE, "device '" + d + "' in \"" + text + "\": expected cpu:N or cuda:N, as in \"cpu:0,cpu:1\"");
    kinds |= kind == "cpu" ? 1 : 2;
    if (kinds == 3)
      fail(DP_ERR_DEVICE, "devices \"" + text + "\" mix CPU and CUDA devices: a group's devices are all CPUs or all GPUs");
    if (kind == "cuda") gpus->push_back(std::stoi(num));
    out.push_back(d);
    pos = comma + 1;
  }
  return out;
}

// What must be the same on every process: what the model JSON means, and its layout.
static std::string fingerprint(const Model& m) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char c : m.canonical) h = (h ^ c) * 1099511628211ull;  // what it means, not how it is written
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "model JSON hash " + std::string(hex) + ", " + std::to_string(m.num_params()) + " parameters in " +
         std::to_string(m.param_info.size()) + " tensors, " + std::to_string(m.num_buffers()) + " buffer floats";
}

Group::Group(Model& model, const std::string& devices, ProcessGroup* procs) : model_(model) {
  const bool distributed = procs && procs->world_size() > 1;
  // Across processes, a rank that cannot make its part (devices it cannot
  // parse or use, replicas that would not fit) says so to the others, so
  // that every rank fails at once, with its words and status, rather than
  // at the time limit.
  std::string failed;
  try {
    devices_ = parse_devices(devices, &gpu_ordinals_);
    global_ = size();
    rank_devices_ = {size()};
    const size_t n = devices_.size();
    // Per sample, each layer's output and its gradient; on CPUs, each
    // replica's gradients and statistics, checked before they are allocated.
    for (const Node& node : model_.nodes)
      activation_floats_ =
          checked_add(activation_floats_, node.out_shape.checked_numel(node.layer->path + " output"), "activations");
    activation_floats_ = checked_mul(activation_floats_, 2, "activations and their gradients");
    if (gpu_ordinals_.empty()) {
      for (const Node& node : model_.nodes)
        scratch_floats_ = checked_add(scratch_floats_, node.layer->scratch_floats(), "layer scratch");
      const int64_t per_replica =
          checked_add(checked_add(model_.num_params(), model_.stats_total, "replica"), scratch_floats_, "replica");
      replica_bytes_ = static_cast<uint64_t>(
          checked_mul(checked_mul(static_cast<int64_t>(n), per_replica, "replicas"), 4, "replicas"));
      check_fits(model_.held_total(), replica_bytes_, model_.memory_limit,
                 "a group of " + std::to_string(n) + " CPU devices (each replica's gradients, statistics and layer " +
                     "scratch: " + std::to_string(per_replica) + " floats" + largest_scratch() + ")");
    }
    engine_ = gpu_ordinals_.empty() ? make_cpu_engine(model_, size(), 1) : make_cuda_engine(model_, gpu_ordinals_);
  } catch (const Error& e) {
    if (!distributed) throw;
    failed = "!" + std::to_string(static_cast<int>(e.status())) + "!" + e.what();
  } catch (const std::bad_alloc&) {
    if (!distributed) throw;
    failed = "!" + std::to_string(static_cast<int>(DP_ERR_OUT_OF_MEMORY)) + "!out of memory";
  } catch (const std::exception& e) {
    if (!distributed) throw;
    failed = "!" + std::to_string(static_cast<int>(DP_ERR_DEVICE)) + "!" + e.what();
  }
  if (distributed) {
    const std::vector<std::string> counts =
        procs->all_gather(failed.empty() ? std::to_string(size()) + (on_gpus() ? " cuda" : " cpu") : failed);
    for (int r = 0; r < procs->world_size(); ++r) {
      const std::string& c = counts[static_cast<size_t>(r)];
      if (c[0] != '!') continue;
      const size_t mark = c.find('!', 1);
      fail(static_cast<dp_status>(std::stoi(c.substr(1, mark - 1))),
           "rank " + std::to_string(r) + " could not use its devices: " + c.substr(mark + 1));
    }
    rank_devices_.clear();
    global_ = 0;
    for (int r = 0; r < procs->world_size(); ++r) {
      const std::string& c = counts[static_cast<size_t>(r)];
      if ((c.find("cuda") != std::string::npos) != on_gpus())  // one engine beneath all: Gloo or NCCL
        fail(DP_ERR_DEVICE, "devices \"" + devices + "\": rank " + std::to_string(r) + " gave " +
                                (on_gpus() ? "CPU" : "CUDA") + " devices and this rank " + (on_gpus() ? "CUDA" : "CPU") +
                                " ones; a group across processes runs on CPUs on every rank or on GPUs on every rank");
      rank_devices_.push_back(std::stoi(c));
      if (r < procs->rank()) first_ += rank_devices_.back();
      global_ += rank_devices_.back();
    }
    procs->check_same("model", fingerprint(model_));
    procs_ = procs;
    // Every process starts from rank 0's weights and running statistics.
    Communicator& c = *procs->comm();
    c.broadcast(procs->rank(), model_.mutable_params().data(), model_.num_params(), 0);
    c.broadcast(procs->rank(), model_.mutable_buffers().data(), model_.num_buffers(), 0);
    engine_->set_processes(&c, procs->rank(), first_, global_);
    engine_->set_stop(&procs->stop());
    // Buckets are collectives: every rank must cut the same ones.
    procs->check_same("gradient bucket layout (DP_BUCKET_MB, DP_SPLIT_LAYERS)", engine_->bucket_layout());
  }
  global_split_.reserve(static_cast<size_t>(global_));
  split_.reserve(devices_.size());
  offsets_.reserve(devices_.size());
  ctxs_.reserve(devices_.size());
  stat_ptrs_.assign(static_cast<size_t>(global_), nullptr);
  held_.set(model_.attached_bytes, held_bytes());
}

Group::~Group() = default;

uint64_t Group::held_bytes() const {
  return replica_bytes_ + (on_gpus() ? 0 : 4 * static_cast<uint64_t>(seen_rows_) * static_cast<uint64_t>(activation_floats_));
}

void Group::check_activations(int64_t rows) {
  if (rows <= seen_rows_ || on_gpus()) return;  // GPU memory: the device's allocator reports its own failures
  const int64_t more = checked_mul(checked_mul(rows - seen_rows_, activation_floats_, "activations"), 4, "activations");
  int64_t largest = 0;
  const Node* at = &model_.nodes[0];
  for (const Node& node : model_.nodes)
    if (node.out_shape.numel() > largest) {
      largest = node.out_shape.numel();
      at = &node;
    }
  check_fits(model_.held_total(), static_cast<uint64_t>(more), model_.memory_limit,
             "a batch of " + std::to_string(rows) + " rows (activations and their gradients, " +
                 format_bytes(4.0 * double(activation_floats_)) + " a row; the largest output is " + at->layer->path + " (" +
                 at->layer->type + " '" + at->layer->name + "') with " + std::to_string(largest) + " floats a row)");
}

// ", the most conv2d's unfolded input at /layers/0 (...)": the layer with
// the most scratch, when there is any.
std::string Group::largest_scratch() const {
  const Node* at = nullptr;
  for (const Node& node : model_.nodes)
    if (node.layer->scratch_floats() > (at ? at->layer->scratch_floats() : 0)) at = &node;
  if (!at) return "";
  return "; the most scratch, " + std::to_string(at->layer->scratch_floats()) + " floats a thread, is " +
         at->layer->path + "'s (" + at->layer->type + " '" + at->layer->name + "')";
}

void Group::set_threads_per_device(int threads) {
  if (threads < 1 || threads > 256) fail(DP_ERR_INVALID_ARGUMENT, "threads per device must be in [1, 256], got " + std::to_string(threads));
  if (on_gpus()) return;  // a GPU replica's work is on its GPU
  // Each worker thread keeps its own layer scratch: checked before the
  // engine makes the threads.
  const uint64_t scratch = 4 * static_cast<uint64_t>(scratch_floats_) * static_cast<uint64_t>(size());
  if (threads > threads_)
    check_fits(model_.held_total(), scratch * static_cast<uint64_t>(threads - threads_), model_.memory_limit,
               std::to_string(threads) + " threads per device (layer scratch for each thread: " +
                   format_bytes(double(scratch) / size()) + " a device" + largest_scratch() + ")");
  engine_->set_threads_per_device(threads);
  replica_bytes_ = replica_bytes_ - scratch * static_cast<uint64_t>(threads_) + scratch * static_cast<uint64_t>(threads);
  threads_ = threads;
  held_.set(model_.attached_bytes, held_bytes());
  have_forward_ = false;  // new replicas hold no forward, and no activations
  seen_split_.clear();
}

void Group::set_allow_tf32(bool allow) { engine_->set_allow_tf32(allow); }

void Group::set_cudnn_benchmark(bool on) { engine_->set_cudnn_benchmark(on); }

void Group::set_precision(int precision) {
  engine_->set_precision(precision);  // throws, changing nothing, where the devices cannot
  precision_ = precision;
}

void Group::optimizer_to_host(Optimizer& opt) { engine_->optimizer_to_host(opt); }

void Group::check_input(const Tensor& input) const {
  Shape want = Shape::batched(0, model_.input_shape);
  // With processes, a process's share of a small batch may be no rows.
  bool ok = input.dtype() == DP_F32 && input.shape().ndim == want.ndim && input.shape()[0] >= (procs_ ? 0 : 1);
  for (int i = 1; ok && i < want.ndim; ++i) ok = input.shape()[i] == want[i];
  if (!ok)
    fail(DP_ERR_SHAPE, std::string("input is ") + dtype_name(input.dtype()) + " " + input.shape().str() +
                           "; the model takes float32 [B, " + model_.input_shape.str().substr(1) + " (B >= 1; /input/shape)");
}

void Group::check_target(const Tensor& target, int64_t batch) const {
  if (!model_.loss) fail(DP_ERR_MODEL, "the model has no loss: add {\"loss\": {\"type\": \"cross_entropy\"}} to its JSON");
  Shape want = Shape::batched(batch, model_.target_shape);
  if (target.dtype() != model_.target_dtype || target.shape() != want)
    fail(DP_ERR_SHAPE, std::string("target is ") + dtype_name(target.dtype()) + " " + target.shape().str() + "; the " +
                           model_.loss->type + " loss needs " + dtype_name(model_.target_dtype) + " " + want.str());
  model_.loss->check_target_values(model_.output_shape(), target);
}

void Group::check_job(Job job, const Tensor& input, const Tensor* target, bool accumulate) {
  try {
    check_input(input);
    if (target) check_target(*target, input.shape()[0]);
    check_activations(input.shape()[0]);
  } catch (const Error&) {
    if (procs_) {
      try {
        exchange(job, 0, true, accumulate);
      } catch (const Error&) {  // this process's own error is the one to report
      }
    }
    throw;
  }
}

// A job as the processes compare it: kTrain without an optimizer
// (forward_backward) is a call of its own.
static const char* job_name(double code) {
  static const char* names[] = {"forward", "backward", "train_step", "evaluate", "forward_backward"};
  const int j = static_cast<int>(code) - 1;
  return j >= 0 && j < 5 ? names[j] : "nothing";
}

int64_t Group::exchange(Job job, int64_t rows, bool refused, bool accumulate, double* loss_total) {
  const int world = procs_->world_size(), me = procs_->rank();
  exchange_.assign(static_cast<size_t>(kExchangeSlots * world), 0.0);
  double* mine = exchange_.data() + kExchangeSlots * me;
  mine[0] = accumulate ? 5 : 1 + static_cast<int>(job);
  mine[1] = static_cast<double>(rows);
  mine[2] = refused ? 1 : 0;
  mine[3] = loss_total ? *loss_total : 0;
  procs_->comm()->all_reduce_f64(me, exchange_.data(), static_cast<int64_t>(exchange_.size()));
  int64_t batch = 0;
  double weight = 0;  // summed in rank order: the same on every rank
  for (int r = 0; r < world; ++r) {
    const double* theirs = exchange_.data() + kExchangeSlots * r;
    if (theirs[0] != exchange_[0])
      fail(DP_ERR_INVALID_ARGUMENT, "rank " + std::to_string(r) + " called " + job_name(theirs[0]) + " while rank 0 called " +
                                        job_name(exchange_[0]) + ": every process must make the same calls in the same order");
    if (theirs[2] != 0)
      fail(DP_ERR_INVALID_ARGUMENT, "rank " + std::to_string(r) + "'s " + job_name(theirs[0]) +
                                        " was refused (its error says why): no process ran it");
    batch += static_cast<int64_t>(theirs[1]);
    weight += theirs[3];
  }
  if (batch < 1) fail(DP_ERR_SHAPE, std::string(job_name(exchange_[0])) + ": every process gave 0 rows");
  if (loss_total) *loss_total = weight;
  return batch;
}

int64_t Group::rows_of_rank(int r) const { return static_cast<int64_t>(exchange_[kExchangeSlots * static_cast<size_t>(r) + 1]); }

// A backward job reuses the last forward's split; the others split the
// (global) batch over every device of every process.
void Group::run(Job job, bool training, const Tensor* input, const Tensor* target, const Tensor* grad_output,
                Tensor* output, Optimizer* opt, double loss_scale) {
  if (job != Job::kBackward) {
    const int64_t rows = input->shape()[0];
    // What the loss's mean divides by: the whole batch's weight (its rows, or
    // cross entropy's class weights and ignored rows), from every process.
    double loss_total = target && model_.loss ? model_.loss->weight_of(*target) : -1;
    const int64_t batch =
        procs_ ? exchange(job, rows, false, job == Job::kTrain && !opt, target ? &loss_total : nullptr) : rows;
    split_batch(batch, global_, mode_, global_split_);
    // Each process's rows must be its devices' share: a loader sharded by
    // this group reads exactly that.
    int64_t at = 0, my_offset = 0;  // global rows before a rank's, and before this process's
    for (size_t r = 0, d = 0; r < rank_devices_.size(); ++r) {
      int64_t share = 0;
      if (procs_ && static_cast<int>(r) == procs_->rank()) my_offset = at;
      for (int i = 0; i < rank_devices_[r]; ++i, ++d) share += d < global_split_.size() ? global_split_[d] : 0;
      const int64_t given = procs_ ? rows_of_rank(static_cast<int>(r)) : rows;
      if (given != share)
        fail(DP_ERR_SHAPE, "rank " + std::to_string(r) + " gave " + std::to_string(given) + " rows of a global batch of " +
                               std::to_string(batch) + ", but its " + std::to_string(rank_devices_[r]) +
                               " device(s)' share by the split rule is " + std::to_string(share) +
                               " rows: read batches with a loader sharded by this group (dp_loader_shard)");
      at += share;
    }
    split_.clear();
    for (int d = first_; d < first_ + size() && d < static_cast<int>(global_split_.size()); ++d)
      split_.push_back(global_split_[static_cast<size_t>(d)]);
    offsets_.resize(split_.size());
    ctxs_.resize(split_.size());
    int64_t off = 0;
    for (size_t r = 0; r < split_.size(); ++r) {
      offsets_[r] = off;
      RunCtx& c = ctxs_[r];
      c.training = training;
      c.seed = model_.seed;
      c.step = step_;
      c.sample_offset = my_offset + off;  // dropout masks are keyed by the row of the global batch
      c.batch_total = batch;
      c.loss_total = loss_total;
      c.loss_scale = loss_scale;
      off += split_[r];
    }
  }
  RunPlan plan;
  plan.job = job;
  plan.split = &split_;
  plan.offsets = &offsets_;
  plan.ctxs = &ctxs_;
  plan.input = input;
  plan.target = target;
  plan.grad_output = grad_output;
  plan.output = output;
  plan.opt = opt;
  // A replica given more rows than ever before allocates during the step:
  // the engine then updates nothing until every replica is done, so that a
  // failed allocation leaves parameters and optimizer state as they were.
  seen_split_.resize(std::max(seen_split_.size(), split_.size()), 0);
  for (size_t r = 0; r < split_.size(); ++r) plan.grows = plan.grows || split_[r] > seen_split_[r];
  engine_->run(plan);
  for (size_t r = 0; r < split_.size(); ++r) seen_split_[r] = std::max(seen_split_[r], split_[r]);
  if (job != Job::kBackward && input->shape()[0] > seen_rows_) {
    seen_rows_ = input->shape()[0];
    held_.set(model_.attached_bytes, held_bytes());
  }
}

void Group::forward(const Tensor& input, Tensor& output) {
  check_job(Job::kForward, input, nullptr);
  have_forward_ = false;
  last_output_shape_ = Shape::batched(input.shape()[0], model_.output_shape());
  output.resize(DP_F32, last_output_shape_);
  run(Job::kForward, training_, &input, nullptr, nullptr, &output);
  if (training_) {
    std::exception_ptr merge_failed = merge_stats();
    ++step_;
    if (merge_failed) raise_merge_failure(merge_failed, "the forward ran (its step counted); its output is not returned");
  }
  have_forward_ = true;
}

void Group::backward(const Tensor& grad_output) {
  if (!have_forward_) fail(DP_ERR_INVALID_ARGUMENT, "backward needs a forward first (on this group, since it was created or reconfigured)");
  if (grad_output.dtype() != DP_F32 || grad_output.shape() != last_output_shape_)
    fail(DP_ERR_SHAPE, std::string("grad_output is ") + dtype_name(grad_output.dtype()) + " " + grad_output.shape().str() +
                           "; the last forward's output is float32 " + last_output_shape_.str());
  run(Job::kBackward, training_, nullptr, nullptr, &grad_output, nullptr);
  engine_->reduce(nullptr);
  model_.has_grads = true;
}

void Group::zero_grad() { engine_->zero_grad(); }

// Across processes, before a step: every process's optimizer must update
// alike. differ: the hashes of the settings already compared (a training
// step's gathered results); otherwise they are compared here (an
// all-reduce of one number per process). When they differ, the texts say
// how (a collective through the store, on every process alike).
void Group::check_settings(const Optimizer& opt, bool compare) {
  if (!procs_) return;
  bool differ = engine_->settings_differ();
  if (compare) {
    settings_.assign(static_cast<size_t>(procs_->world_size()), 0.0);
    settings_[static_cast<size_t>(procs_->rank())] = static_cast<double>(opt.settings_hash());
    procs_->comm()->all_reduce_f64(procs_->rank(), settings_.data(), static_cast<int64_t>(settings_.size()));
    differ = std::any_of(settings_.begin(), settings_.end(), [&](double h) { return h != settings_[0]; });
  }
  if (!differ) return;
  const std::string what = "optimizer settings (set_lr, the lr schedule, clip_grad_norm, the grad scaler or the steps "
                           "set on some ranks only?)";
  try {
    procs_->check_same(what, opt.settings_text());
  } catch (const Error& e) {
    fail(e.status(), std::string(e.what()) + "; no rank updated");
  }
  fail(DP_ERR_INVALID_ARGUMENT, "the " + what + " differ between ranks; no rank updated");
}

void Group::optimizer_step(Optimizer& opt) {
  if (!model_.has_grads) return;  // the same on every process: each ran the same calls
  check_settings(opt, true);
  engine_->optimizer_step(opt);
}

// In replica order, weighted by their rows.
std::exception_ptr Group::merge_stats() {
  if (model_.stats_total == 0) return nullptr;
  float* buffers = model_.mutable_buffers().data();
  const std::vector<int64_t>& split = global_split_;
  std::exception_ptr failed;
  for (const Node& node : model_.nodes) {
    if (node.stats_count == 0) continue;
    for (size_t r = 0; r < split.size(); ++r) stat_ptrs_[r] = engine_->stats(static_cast<int>(r)) + node.stats_offset;
    try {
      node.layer->merge_stats(buffers + node.buffer_offset, stat_ptrs_.data(), split.data(),
                              static_cast<int>(split.size()));
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  return failed;
}

void Group::raise_merge_failure(std::exception_ptr failure, const char* what_happened) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    fail(e.status(), std::string(e.what()) + "; " + what_happened);
  } catch (const std::exception& e) {
    fail(DP_ERR_INTERNAL, std::string("merging statistics: ") + e.what() + "; " + what_happened);
  }
}

// A loss Engine::finite_loss refuses, named: NaN, infinite, or beyond float32.
static std::string loss_text(double loss) {
  if (std::isnan(loss)) return "NaN";
  if (std::isinf(loss)) return "infinite";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g, infinite as float32", loss);
  return buf;
}

// Which batch a refused loss came from: the group's training batches count
// from 1 (as dp train's progress); in evaluation mode they do not count.
std::string Group::where_in_training() const {
  return training_ ? " in training batch " + std::to_string(step_) + " (counting from 1)" : " (in evaluation mode)";
}

double Group::train_step(Optimizer& opt, const Tensor& input, const Tensor& target) {
  check_job(Job::kTrain, input, &target);
  have_forward_ = false;
  // With a grad scaler, the loss's gradient is scaled (scaler.scale(loss).backward()).
  run(Job::kTrain, training_, &input, &target, nullptr, nullptr, &opt, opt.scaler.loss_factor());
  if (training_) ++step_;
  const double loss = engine_->total_loss();  // an engine updates nothing unless this is finite
  model_.has_grads = Engine::finite_loss(loss);  // (else zero; a step the engine holds below zeroes them too)
  if (!Engine::finite_loss(loss))
    fail(DP_ERR_NUMERIC, "the loss is " + loss_text(loss) + where_in_training() +
                             "; parameters and running statistics are unchanged");
  check_settings(opt, false);  // nor unless every process's optimizer is set alike
  std::exception_ptr merge_failed = training_ ? merge_stats() : nullptr;
  engine_->reduce(&opt);
  // Clipping found a non-finite norm: the engine stepped nothing, and zeroed
  // the gradients. (With the grad scaler, an inf/NaN gradient is a skipped
  // step, no error: the gradients are zeroed as well.)
  opt.check_held();
  if (merge_failed)
    raise_merge_failure(merge_failed, "the step was taken (parameters and optimizer state updated, the other layers' "
                                      "statistics merged); this layer's merge did not finish");
  return loss;
}

double Group::forward_backward(const Tensor& input, const Tensor& target, double loss_scale) {
  if (!std::isfinite(loss_scale))
    fail(DP_ERR_INVALID_ARGUMENT, "loss_scale must be a finite number, got " + std::to_string(loss_scale));
  check_job(Job::kTrain, input, &target, true);
  have_forward_ = false;
  run(Job::kTrain, training_, &input, &target, nullptr, nullptr, nullptr, loss_scale);
  if (training_) ++step_;
  const double loss = engine_->total_loss();
  if (!Engine::finite_loss(loss))
    fail(DP_ERR_NUMERIC, "the loss is " + loss_text(loss) + where_in_training() +
                             "; the gradients and running statistics are unchanged");
  std::exception_ptr merge_failed = training_ ? merge_stats() : nullptr;
  engine_->reduce(nullptr);  // adds this batch's gradients into the model's
  model_.has_grads = true;
  if (merge_failed)
    raise_merge_failure(merge_failed, "the batch's gradients were added (and the other layers' statistics merged); "
                                      "this layer's merge did not finish");
  return loss;
}

double Group::evaluate(const Tensor& input, const Tensor& target, int64_t* correct) {
  check_job(Job::kEval, input, &target);
  have_forward_ = false;
  run(Job::kEval, false, &input, &target, nullptr, nullptr);
  double loss = 0;
  int64_t hits = 0;
  for (size_t r = 0; r < global_split_.size(); ++r) {  // every process's replicas
    loss += engine_->loss(static_cast<int>(r));
    hits += engine_->correct(static_cast<int>(r));
  }
  if (correct) *correct = hits;
  return loss;
}

}  // namespace dp
