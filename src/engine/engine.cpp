#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace dp {

// The message of the exception being handled (inside a catch block).
static std::string current_what() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

Engine::Engine(Model& model, int replicas) : model_(model), n_(replicas), threads_(replicas), global_(replicas) {}

Engine::~Engine() = default;

void Engine::run(const RunPlan& plan) {
  plan_ = &plan;
  active_ = static_cast<int>(plan.split->size());
  error_ = nullptr;
  gathered_ = false;
  settings_differ_ = false;
  try {
    prepare(plan);
    threads_.run(n_, &Engine::run_one, this);
    if (error_) std::rethrow_exception(error_);
    finish(plan);
  } catch (...) {
    // The other processes may be waiting for this one: they fail now too.
    if (procs_) procs_->abort("rank " + std::to_string(rank_) + " failed: " + current_what());
    abandon();  // first: a stage thread may still read the plan
    plan_ = nullptr;
    error_ = nullptr;
    if (Communicator* c = comm()) c->reset();
    throw;
  }
  plan_ = nullptr;
}

double Engine::loss(int r) {
  return procs_ ? results_[static_cast<size_t>(r) * (2 + model_.stats_total)] : devices_[r]->loss_value();
}

int64_t Engine::correct(int r) {
  return procs_ ? static_cast<int64_t>(results_[static_cast<size_t>(r) * (2 + model_.stats_total) + 1])
                : devices_[r]->correct_value();
}

const float* Engine::stats(int r) {
  return procs_ ? stats_.data() + static_cast<size_t>(r) * model_.stats_total : devices_[r]->stats();
}

// Inactive replicas add 0, exactly: the sum is the one of the active ones.
double Engine::total_loss() {
  double loss = 0;
  const int n = procs_ ? global_ : active_;
  for (int r = 0; r < n; ++r) loss += Engine::loss(r);
  return loss;
}

bool Engine::may_step() { return !settings_differ_ && finite_loss(total_loss()); }

void Engine::set_precision(int precision) {
  if (precision == DP_PRECISION_FP32) return;
  fail(DP_ERR_DEVICE, std::string(precision == DP_PRECISION_BF16 ? "bf16" : "fp16") +
                          " mixed precision runs on CUDA devices: CPU devices compute in float32 only (DP_PRECISION_FP32)");
}

void Engine::set_processes(Communicator* procs, int rank, int first, int global) {
  procs_ = procs;
  rank_ = rank;
  first_ = first;
  global_ = global;
}

void Engine::gather_results() {
  const int64_t stride = 2 + model_.stats_total;
  // After every replica's results: the processes asking to stop, then in a
  // training step each replica's optimizer settings (every replica of this
  // process writes this process's), so that every process learns, before
  // any updates, whether all will update alike.
  const size_t stop_at = static_cast<size_t>(global_ * stride);
  results_.assign(stop_at + 1 + static_cast<size_t>(global_), 0.0);
  if (stop_ && stop_->asked) results_[stop_at] = 1;
  const double settings = plan_->opt ? static_cast<double>(plan_->opt->settings_hash()) : 0;
  for (int r = 0; r < n_; ++r) results_[stop_at + 1 + static_cast<size_t>(first_ + r)] = settings;
  for (int r = 0; r < active_; ++r) {
    double* mine = results_.data() + (first_ + r) * stride;
    mine[0] = devices_[r]->loss_value();
    mine[1] = static_cast<double>(devices_[r]->correct_value());
    if (model_.stats_total > 0 && (*plan_->ctxs)[r].training) {
      const float* st = devices_[r]->stats();
      for (int64_t i = 0; i < model_.stats_total; ++i) mine[2 + i] = st[i];
    }
  }
  procs_->all_reduce_f64(rank_, results_.data(), static_cast<int64_t>(results_.size()));
  if (stop_ && results_[stop_at] > 0) stop_->agreed = static_cast<int>(results_[stop_at]);
  settings_differ_ = false;
  for (int r = 1; r < global_; ++r) settings_differ_ = settings_differ_ || results_[stop_at + 1 + r] != results_[stop_at + 1];
  stats_.resize(static_cast<size_t>(global_ * model_.stats_total));
  for (int r = 0; r < global_; ++r)
    for (int64_t i = 0; i < model_.stats_total; ++i)
      stats_[r * model_.stats_total + i] = static_cast<float>(results_[r * stride + 2 + i]);
  gathered_ = true;
}

void Engine::run_one(void* self, int r) { static_cast<Engine*>(self)->run_replica(r); }

// One replica's part of a job, the same for every backend.
void Engine::run_replica(int r) {
  const RunPlan& p = *plan_;
  const bool backward = p.job == Job::kTrain || p.job == Job::kBackward;
  try {
    next_bucket_[static_cast<size_t>(r)] = 0;
    ReplicaDevice& d = *devices_[r];
    Replica& graph = d.graph();
    RunCtx ctx = r < active_ ? (*p.ctxs)[r] : RunCtx{};
    d.begin(ctx);
    if (r < active_) {
      const int64_t off = (*p.offsets)[r], rows = (*p.split)[r];
      switch (p.job) {
        case Job::kForward:
          graph.forward(ctx, d.load(ReplicaDevice::kInput, *p.input, off, rows));
          d.store_output(*p.output, off);
          break;
        case Job::kBackward:
          graph.backward(ctx, d.load(ReplicaDevice::kGradOutput, *p.grad_output, off, rows));
          break;
        case Job::kTrain:
        case Job::kEval: {
          graph.forward(ctx, d.load(ReplicaDevice::kInput, *p.input, off, rows));
          d.loss(ctx, d.load(ReplicaDevice::kTarget, *p.target, off, rows), p.job == Job::kEval);
          if (p.job == Job::kTrain) {
            loss_done(r);
            graph.backward(ctx, graph.loss_grad());
          }
          break;
        }
      }
      if (ctx.training && model_.stats_total > 0 && p.job != Job::kBackward) d.keep_stats();
    } else if (backward && bucketed()) {
      // Outside the split: no gradients, but every bucket is a collective.
      if (p.job == Job::kTrain) loss_done(r);
      for (size_t k = model_.nodes.size(); k-- > 0;) node_done(r, k);
    }
    end_replica(r, backward && bucketed());
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    // The other replicas may be waiting for this one's buckets.
    if (Communicator* c = comm()) c->abort("replica " + std::to_string(r) + " failed: " + current_what());
  }
}

// Layers in reverse (and within a layer its splits, in reverse), a bucket
// closed as soon as it holds bucket_floats gradients (and the first layer
// closes the last one), so that each bucket is final as soon as the backward
// of its first layer (or piece of one) is.
void Engine::set_bucket_mb(double mb, bool split_layers) {
  if (const char* env = std::getenv("DP_BUCKET_MB"); env && *env) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (*end != '\0' || !(v > 0) || !std::isfinite(v))
      fail(DP_ERR_INVALID_ARGUMENT, std::string("DP_BUCKET_MB=") + env + ": expected the gradient bucket size in MiB, "
                                    "a number > 0 (e.g. 0.25)");
    mb = v;
  }
  const int64_t floats = std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20) / sizeof(float)));
  buckets_.clear();
  next_bucket_.assign(static_cast<size_t>(n_), 0);
  int64_t end = model_.num_params();
  auto close_at = [&](int64_t at) {
    buckets_.push_back({at, end - at});
    end = at;
  };
  for (size_t k = model_.nodes.size(); k-- > 0;) {
    const Node& n = model_.nodes[k];
    if (split_layers && n.param_count > 0) {
      const std::vector<int64_t> splits = n.layer->grad_splits();
      for (size_t i = splits.size(); i-- > 0;)
        if (end - (n.param_offset + splits[i]) >= floats) close_at(n.param_offset + splits[i]);
    }
    if (end - n.param_offset >= floats || (k == 0 && end > 0)) close_at(n.param_offset);
  }
}

int Engine::bucket_at(int64_t begin) const {
  // buckets_ is in decreasing order of begin.
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), begin,
                             [](const Bucket& b, int64_t at) { return b.begin > at; });
  if (it == buckets_.end() || it->begin != begin) fail(DP_ERR_INTERNAL, "no gradient bucket begins at " + std::to_string(begin));
  return static_cast<int>(it - buckets_.begin());
}

std::string Engine::bucket_layout() const {
  std::string s = std::to_string(buckets_.size()) + " bucket" + (buckets_.size() == 1 ? "" : "s") + " at";
  for (size_t j = buckets_.size(), shown = 0; j-- > 0; ++shown) {
    if (shown == 8) return s + " and " + std::to_string(j + 1) + " more";
    s += (shown ? ", " : " ") + std::to_string(buckets_[j].begin);
  }
  return s;
}

void Engine::node_final(int r, size_t node, int64_t from) {
  if (!bucketed()) return;
  size_t& j = next_bucket_[static_cast<size_t>(r)];
  const int64_t final_from = model_.nodes[node].param_offset + from;
  for (; j < buckets_.size() && buckets_[j].begin >= final_from; ++j) reduce_bucket(r, buckets_[j].begin, buckets_[j].count);
}

void Engine::node_done(int r, size_t node) { node_final(r, node, 0); }

}  // namespace dp
