#include "group/group.h"

#include <cmath>
#include <cstring>

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
    bool ok = (kind == "cpu" || kind == "cuda") && !num.empty() && num.size() < 6 &&
              num.find_first_not_of("0123456789") == std::string::npos;
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

Group::Group(Model& model, const std::string& devices) : model_(model), devices_(parse_devices(devices, &gpu_ordinals_)) {
  size_t n = devices_.size();
  if (!gpu_ordinals_.empty()) {
    workers_ = std::make_unique<Workers>(size());  // a host thread drives each GPU replica
    engine_ = make_cuda_engine(model_, gpu_ordinals_, workers_.get());
  } else {
    set_threads_per_device(1);
  }
  split_.reserve(n);
  offsets_.assign(n, 0);
  ctxs_.resize(n);
  losses_.assign(n, 0.0);
  correct_.assign(n, 0);
  stat_ptrs_.assign(n, nullptr);
}

Group::~Group() = default;

void Group::set_threads_per_device(int threads) {
  if (threads < 1 || threads > 256) fail(DP_ERR_INVALID_ARGUMENT, "threads per device must be in [1, 256], got " + std::to_string(threads));
  if (engine_) return;  // a GPU replica's work is on its GPU
  replicas_.clear();
  workers_.reset();
  for (size_t i = 0; i < devices_.size(); ++i) replicas_.push_back(std::make_unique<Replica>(model_, threads));
  workers_ = std::make_unique<Workers>(size());
  have_forward_ = false;
}

void Group::set_allow_tf32(bool allow) {
  if (engine_) engine_->set_allow_tf32(allow);
}

void Group::set_cudnn_benchmark(bool on) {
  if (engine_) engine_->set_cudnn_benchmark(on);
}

void Group::optimizer_to_host(Optimizer& opt) {
  if (engine_) engine_->optimizer_to_host(opt);
}

void Group::check_input(const Tensor& input) const {
  Shape want = Shape::batched(0, model_.input_shape);
  bool ok = input.dtype() == DP_F32 && input.shape().ndim == want.ndim && input.shape()[0] >= 1;
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
}

void Group::run_one(void* self, int r) {
  auto* g = static_cast<Group*>(self);
  if (r >= static_cast<int>(g->split_.size())) return;  // idle device
  Replica& rep = *g->replicas_[r];
  const RunCtx& ctx = g->ctxs_[r];
  const int64_t off = g->offsets_[r], rows = g->split_[r];
  switch (g->job_) {
    case Job::kForward:
      rep.forward(ctx, g->job_input_->rows(off, rows));
      break;
    case Job::kBackward:
      rep.backward(ctx, g->job_grad_->rows(off, rows));
      break;
    case Job::kTrain:
      rep.forward(ctx, g->job_input_->rows(off, rows));
      g->losses_[r] = rep.loss(ctx, g->job_target_->rows(off, rows));
      rep.backward(ctx, rep.loss_grad());
      break;
    case Job::kEval:
      rep.forward(ctx, g->job_input_->rows(off, rows));
      g->losses_[r] = rep.loss(ctx, g->job_target_->rows(off, rows));
      g->correct_[r] = rep.correct(g->job_target_->rows(off, rows));
      break;
  }
}

void Group::run(Job job, bool training, const Tensor& input, const Tensor* target, const Tensor* grad_output) {
  if (job != Job::kBackward) {
    int64_t batch = input.shape()[0];
    split_batch(batch, size(), mode_, split_);
    int64_t off = 0;
    for (size_t r = 0; r < split_.size(); ++r) {
      offsets_[r] = off;
      RunCtx& c = ctxs_[r];
      c.training = training;
      c.seed = model_.seed;
      c.step = step_;
      c.sample_offset = off;
      c.batch_total = batch;
      c.pool = engine_ ? nullptr : replicas_[r]->pool();
      c.cuda = nullptr;
      off += split_[r];
    }
  }
  if (engine_) {
    RunPlan plan;
    plan.job = job;
    plan.split = &split_;
    plan.offsets = &offsets_;
    plan.ctxs = &ctxs_;
    plan.input = &input;
    plan.target = target;
    plan.grad_output = grad_output;
    plan.losses = losses_.data();
    plan.correct = correct_.data();
    engine_->run(plan);
    return;
  }
  model_.pull();  // a GPU group may have trained this model last
  job_ = job;
  job_input_ = &input;
  job_target_ = target;
  job_grad_ = grad_output;
  workers_->run(size(), &Group::run_one, this);
}

void Group::forward(const Tensor& input, Tensor& output) {
  check_input(input);
  have_forward_ = false;
  run(Job::kForward, training_, input, nullptr, nullptr);
  if (training_) {
    merge_stats();
    ++step_;
  }
  int64_t batch = input.shape()[0];
  last_output_shape_ = Shape::batched(batch, model_.output_shape());
  if (engine_) {
    engine_->gather(output);
    have_forward_ = true;
    return;
  }
  output.resize(DP_F32, last_output_shape_);
  // Gather onto the first device: each replica's rows, in order.
  const int64_t inner = last_output_shape_.inner();
  for (size_t r = 0; r < split_.size(); ++r)
    std::memcpy(output.f32() + offsets_[r] * inner, replicas_[r]->output().f32(),
                static_cast<size_t>(split_[r] * inner) * sizeof(float));
  have_forward_ = true;
}

void Group::backward(const Tensor& grad_output) {
  if (!have_forward_) fail(DP_ERR_INVALID_ARGUMENT, "backward needs a forward first (on this group, since it was created or reconfigured)");
  if (grad_output.dtype() != DP_F32 || grad_output.shape() != last_output_shape_)
    fail(DP_ERR_SHAPE, std::string("grad_output is ") + dtype_name(grad_output.dtype()) + " " + grad_output.shape().str() +
                           "; the last forward's output is float32 " + last_output_shape_.str());
  run(Job::kBackward, training_, grad_output, nullptr, &grad_output);
  reduce_grads(nullptr);
}

void Group::zero_grad() {
  if (engine_) return engine_->zero_grad();
  model_.pull();
  std::fill(model_.grads.begin(), model_.grads.end(), 0.0f);
}

static void add_into(float* __restrict dst, const float* __restrict src, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) dst[i] += src[i];
}

// model.grads[i] += sum over replicas, in device order: the same sum whatever
// thread computes which range. With an optimizer, each range is updated right
// after it is reduced, while it is still in cache.
void Group::reduce_grads(Optimizer* opt) {
  if (engine_) return engine_->reduce(opt);
  if (opt) model_.host_written();  // GPU copies of these parameters are stale
  const int n = static_cast<int>(split_.size());
  float* dst = model_.grads.data();
  float* params = model_.params.data();
  if (opt) opt->begin_step();
  parallel_for(workers_.get(), static_cast<int64_t>(model_.grads.size()), Optimizer::kGrain, [&](int64_t b, int64_t e) {
    for (int r = 0; r < n; ++r) add_into(dst, replicas_[r]->grads(), b, e);
    if (opt) opt->update(params, dst, b, e);
  });
}

void Group::optimizer_step(Optimizer& opt) {
  if (engine_) return engine_->optimizer_step(opt);
  model_.pull();
  model_.host_written();
  opt.step(model_.params.data(), model_.grads.data(), static_cast<int64_t>(model_.params.size()), workers_.get());
}

void Group::merge_stats() {
  for (const Node& node : model_.nodes) {
    if (node.stats_count == 0) continue;
    for (size_t r = 0; r < split_.size(); ++r)
      stat_ptrs_[r] = engine_ ? engine_->host_stats(static_cast<int>(r), node) : replicas_[r]->stats(node);
    node.layer->merge_stats(model_.buffers.data() + node.buffer_offset, stat_ptrs_.data(), split_.data(),
                            static_cast<int>(split_.size()));
  }
  if (engine_ && model_.stats_total > 0) engine_->buffers_changed();
}

double Group::train_step(Optimizer& opt, const Tensor& input, const Tensor& target) {
  check_input(input);
  check_target(target, input.shape()[0]);
  zero_grad();
  have_forward_ = false;
  run(Job::kTrain, training_, input, &target, nullptr);
  if (training_) ++step_;
  double loss = 0;
  for (size_t r = 0; r < split_.size(); ++r) loss += losses_[r];
  if (!std::isfinite(loss))
    fail(DP_ERR_NUMERIC, "the loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                             std::to_string(step_ - 1) + "; parameters and running statistics are unchanged");
  if (training_) merge_stats();
  reduce_grads(&opt);
  return loss;
}

double Group::evaluate(const Tensor& input, const Tensor& target, int64_t* correct) {
  check_input(input);
  check_target(target, input.shape()[0]);
  have_forward_ = false;
  run(Job::kEval, false, input, &target, nullptr);
  double loss = 0;
  int64_t hits = 0;
  for (size_t r = 0; r < split_.size(); ++r) {
    loss += losses_[r];
    hits += correct_[r];
  }
  if (correct) *correct = hits;
  return loss;
}

}  // namespace dp
