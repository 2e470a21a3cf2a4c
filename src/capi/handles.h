// What the opaque handles of dp.h are.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "group/group.h"
#include "layers/registry.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "plugin/plugin.h"

struct dp_context {
  // Declared first, so destroyed last: the registry's plugin factories go
  // before the context's hold on the libraries (which close when nothing
  // built from them remains).
  dp::Plugins plugins;
  dp::Registry registry;
  uint64_t memory_limit = 0;         // DP_CONTEXT_MEMORY_LIMIT (0: the machine's available memory)
  bool allow_model_plugins = false;  // DP_CONTEXT_ALLOW_MODEL_PLUGINS
  dp::Plugins::Trust model_trust() const {
    return allow_model_plugins ? dp::Plugins::Trust::kAny : dp::Plugins::Trust::kInstalledOnly;
  }
};

struct dp_model {
  dp_context* ctx;
  std::unique_ptr<dp::Model> model;
  // The call running on this model now (ModelInUse): this model's own
  // dp_model_* call, or one of its groups' (the group's address); null when
  // none. One thread at a time (dp.h): a call from a second thread fails
  // rather than racing the first on the parameters.
  mutable std::atomic<const void*> holder{nullptr};
};

struct dp_tensor {
  dp::Tensor t;
  // A borrowed tensor (dp_tensor_from_host_borrowed): t is a view of the
  // caller's memory, which release(user) lets go of when the handle goes.
  bool borrowed = false;
  dp_release_fn release = nullptr;
  void* user = nullptr;
  dp_tensor() = default;
  dp_tensor(const dp_tensor&) = delete;
  dp_tensor& operator=(const dp_tensor&) = delete;
  ~dp_tensor() {
    if (release) release(user);
  }
};

struct dp_process_group {
  std::shared_ptr<dp::ProcessGroup> pg;
};

struct dp_group {
  dp_model* model;
  std::shared_ptr<dp::ProcessGroup> procs;  // kept alive while the group lives (declared first: destroyed last)
  std::unique_ptr<dp::Group> group;
};

namespace dp {
// Holds a model for one call, on behalf of `holder` (the model itself, or
// one of its groups); throws DP_ERR_INVALID_ARGUMENT naming `fn` when another
// thread's call holds it. A group's workers serve one job at a time (a second
// caller used to wait forever), and two groups of one model, or a group and a
// dp_model_* call, would race on its parameters.
class ModelInUse {
 public:
  ModelInUse(const dp_model* m, const void* holder, const char* fn) : m_(m) {
    const void* expected = nullptr;
    if (m_->holder.compare_exchange_strong(expected, holder, std::memory_order_acquire)) return;
    // `expected` is the other call's holder (it may have ended since: it only words the message).
    std::string what = expected == holder && holder != m ? "the group is in use by another thread's call"
                       : expected == m                   ? "the model is in use by another thread's call"
                                                         : "the model is in use by another thread's call through another group";
    fail(DP_ERR_INVALID_ARGUMENT,
         std::string(fn) + ": " + what + " (a model, with its groups and optimizers, is used by one thread at a time)");
  }
  ~ModelInUse() { m_->holder.store(nullptr, std::memory_order_release); }
  ModelInUse(const ModelInUse&) = delete;
  ModelInUse& operator=(const ModelInUse&) = delete;

 private:
  const dp_model* m_;
};

// A call running group g holds g's model.
class GroupInUse : public ModelInUse {
 public:
  GroupInUse(const dp_group* g, const char* fn) : ModelInUse(g->model, g, fn) {}
};
}  // namespace dp

struct dp_optimizer {
  dp_group* group;
  std::unique_ptr<dp::Optimizer> opt;
  std::vector<std::string> state_names;  // Optimizer::state()'s, for dp_optimizer_state_name
  // opt's state, counted in its model's attached_bytes while the handle lives.
  dp::HeldShare held;
  void hold_state() {
    uint64_t bytes = 0;
    for (const auto& s : opt->state()) bytes += 4 * static_cast<uint64_t>(s.second->size());
    held.set(group->group->model().attached_bytes, bytes);
  }
};
