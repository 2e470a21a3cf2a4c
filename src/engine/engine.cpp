#include "engine/engine.h"

#include <algorithm>
#include <cstdlib>

namespace dp {

Engine::Engine(Model& model, int replicas)
    : model_(model), n_(replicas), threads_(replicas), reduced_begin_(static_cast<size_t>(replicas), 0) {}

Engine::~Engine() = default;

void Engine::run(const RunPlan& plan) {
  plan_ = &plan;
  active_ = static_cast<int>(plan.split->size());
  error_ = nullptr;
  try {
    prepare(plan);
    threads_.run(n_, &Engine::run_one, this);
    if (error_) std::rethrow_exception(error_);
    finish(plan);
  } catch (...) {
    plan_ = nullptr;
    error_ = nullptr;
    abandon();
    if (Communicator* c = comm()) c->reset();
    throw;
  }
  plan_ = nullptr;
}

double Engine::total_loss() {
  double loss = 0;
  for (int r = 0; r < active_; ++r) loss += devices_[r]->loss_value();
  return loss;
}

void Engine::run_one(void* self, int r) { static_cast<Engine*>(self)->run_replica(r); }

// One replica's part of a job, the same for every backend.
void Engine::run_replica(int r) {
  const RunPlan& p = *plan_;
  const bool backward = p.job == Job::kTrain || p.job == Job::kBackward;
  try {
    ReplicaDevice& d = *devices_[r];
    Replica& graph = d.graph();
    reduced_begin_[r] = model_.num_params();
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
          if (p.job == Job::kTrain) graph.backward(ctx, graph.loss_grad());
          break;
        }
      }
      if (ctx.training && model_.stats_total > 0 && p.job != Job::kBackward) d.keep_stats();
    } else if (backward && bucketed()) {
      // Outside the split: no gradients, but every bucket is a collective.
      for (size_t k = model_.nodes.size(); k-- > 0;) node_done(r, k);
    }
    end_replica(r, backward && bucketed());
  } catch (...) {
    std::string what = "an unknown exception";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    // The other replicas may be waiting for this one's buckets.
    if (Communicator* c = comm()) c->abort("replica " + std::to_string(r) + " failed: " + what);
  }
}

void Engine::set_bucket_mb(double mb) {
  const char* env = std::getenv("DP_BUCKET_MB");
  if (env && std::atof(env) > 0) mb = std::atof(env);
  bucket_floats_ = std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20) / sizeof(float)));
}

void Engine::node_done(int r, size_t node) {
  if (!bucketed()) return;
  const int64_t first = model_.nodes[node].param_offset;
  int64_t& begin = reduced_begin_[r];
  if (begin - first >= bucket_floats_ || (node == 0 && begin > 0)) {
    reduce_bucket(r, first, begin - first);
    begin = first;
  }
}

}  // namespace dp
