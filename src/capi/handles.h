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
  // Set while a call runs the group (GroupInUse): one thread at a time
  // (dp.h); a second thread's call fails rather than waiting forever on the
  // group's workers, which serve one job at a time.
  mutable std::atomic<bool> busy{false};
};

namespace dp {
// Holds g for one call; throws DP_ERR_INVALID_ARGUMENT naming `fn` when
// another thread's call holds it.
class GroupInUse {
 public:
  GroupInUse(const dp_group* g, const char* fn) : g_(g) {
    if (g_->busy.exchange(true, std::memory_order_acquire))
      fail(DP_ERR_INVALID_ARGUMENT, std::string(fn) + ": the group is in use by another thread's call (a group, with its "
                                                       "optimizers, is used by one thread at a time)");
  }
  ~GroupInUse() { g_->busy.store(false, std::memory_order_release); }
  GroupInUse(const GroupInUse&) = delete;
  GroupInUse& operator=(const GroupInUse&) = delete;

 private:
  const dp_group* g_;
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
