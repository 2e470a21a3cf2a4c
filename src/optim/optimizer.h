// Optimizers over the model's flat parameter array, with PyTorch's update
// formulas (torch.optim.SGD, Adam, AdamW; no amsgrad, no maximize). State is
// sized at creation, so a step allocates nothing. An update is elementwise:
// begin_step() once, then update() over disjoint ranges from any threads, so
// the group can fuse it with the gradient reduction range by range (the data
// is still in cache) and no split of the ranges changes the result.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/workers.h"
#include "optim/grad_scaler.h"
#include "optim/rules.h"
#include "optim/schedule.h"

namespace dp {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // {"type": "sgd" | "adam" | "adamw", ...}; throws DP_ERR_JSON / DP_ERR_MODEL with the JSON path.
  // State that would not fit (core/memory.h's check_fits: `held` bytes taken
  // already, `memory_limit`, 0 for the machine's available memory) is
  // refused with DP_ERR_OUT_OF_MEMORY before it is allocated.
  static std::unique_ptr<Optimizer> from_json(const std::string& text, int64_t num_params, uint64_t memory_limit = 0,
                                              uint64_t held = 0);

  // What every step begins with: the grad scaler's update for a step taken
  // (if it is on), the learning rate from the schedule (if any), then
  // begin_step(). Engines call this, once per step taken.
  void start_step() {
    if (scaler.enabled) scaler.update(false);
    if (schedule) lr = schedule->lr(base_lr, steps + skipped_steps);
    begin_step();
  }
  // Counts the step and computes what is shared by all elements (bias corrections).
  virtual void begin_step() { ++steps; }
  // Updates params[b, e) from grads[b, e). Thread-safe for disjoint ranges.
  virtual void update(float* params, const float* grads, int64_t b, int64_t e) = 0;
  // The rule update() applies, for backends that apply it themselves (CUDA).
  virtual OptimRule rule() const = 0;
  // A whole step over n parameters, split over pool: prepare(), then,
  // unless that holds the step, start_step() and update(). Returns whether
  // it stepped.
  bool step(float* params, float* grads, int64_t n, Workers* pool);

  // clip_grad_norm_ (torch.nn.utils) before each step, on the summed
  // gradients of every device and process: their global 2-norm, and when it
  // is over max_grad_norm, the gradients scaled (in place) by
  // max_grad_norm / (norm + 1e-6), computed in float32 as PyTorch does.
  // 0: off; infinity: the norm is measured, nothing is clipped.
  double max_grad_norm = 0;
  double grad_norm = 0;  // the last step's norm, before clipping (after unscaling)
  bool clips() const { return max_grad_norm > 0; }
  // torch.amp.GradScaler (off by default): the loss's gradient is scaled by
  // scaler.scale, the gradients unscaled and checked before each step, a
  // step with an inf/NaN gradient skipped (parameters and state unchanged)
  // and counted in skipped_steps, which the schedule counts as steps (as
  // PyTorch's scheduler.step() runs on every iteration).
  GradScaler scaler;
  int64_t skipped_steps = 0;
  // Whether prepare() has work: the update must wait until every gradient
  // is summed (a CPU engine otherwise updates range by range).
  bool defers() const { return clips() || scaler.enabled; }
  // Before each step, on the summed gradients grads[0, n), PyTorch's recipe
  // (scaler.unscale_, clip_grad_norm_, scaler.step): with the scaler, every
  // gradient multiplied by scaler.inv_scale() and checked; an inf or NaN
  // (in the scaled gradients, as PyTorch checks) skips the step: the scaler
  // backs off, skipped_steps grows, and it returns false. Then, with
  // clips(): grad_norm = the norm, the gradients clipped if need be, or
  // false (nothing clipped) when the norm is not finite (without the
  // scaler: an error, check_held()). Norms are summed in double over
  // fixed chunks, in order, so every pool (and every split of the batch)
  // sums the same way.
  bool prepare(float* grads, int64_t n, Workers* pool);
  // clip()'s factor for a norm: max_grad_norm / (norm + 1e-6), at most 1.
  float clip_coef(double norm) const;
  // For backends that sum the squares themselves (CUDA): grad_norm =
  // sqrt(sum_squares); whether it is finite.
  bool set_grad_norm(double sum_squares);
  // For those with the scaler on: the sum of the squares of the scaled
  // gradients. Not finite (some gradient is inf or NaN): the step is
  // skipped (as prepare() does) and it returns false.
  bool check_scaled(double sum_squares);
  // For those with the scaler on, first: whether its scale can unscale (its
  // inverse is a finite float32); if not, the step is held, an error.
  bool scale_usable();
  // After a prepare() that returned false (the step held): throws
  // DP_ERR_NUMERIC naming why, unless the scaler skipped the step (no
  // error): the norm was not finite (also when it became so only once
  // unscaled, by a scale below 1), or the scaler's scale has backed off so
  // far (below 2^-127) that its inverse overflows float32, which prepare()
  // refuses to multiply the gradients by (PyTorch would, into NaN).
  void check_held() const;

  // The state a checkpoint must hold, by name, in PyTorch's state_dict terms:
  // sgd "momentum_buffer" (with momentum), adam/adamw "exp_avg", "exp_avg_sq";
  // plus `steps` below. Each vector has one float per parameter.
  virtual std::vector<std::pair<std::string, std::vector<float>*>> state() { return {}; }
  virtual std::string type() const = 0;
  // What its JSON means, every hyperparameter with its default filled in
  // ({"type": "sgd", "lr": 0.1, "momentum": 0.9, ...}): checkpoints record it
  // and a load compares it (all but lr, which is the loading optimizer's).
  std::string config;

  // What decides the next step's update beyond the JSON it was made from
  // (which processes compare once): the learning rate the step will use,
  // clipping, the grad scaler's settings and state, the steps taken. The
  // processes of a group compare the hash before every step (an optimizer
  // set differently on one rank must not silently train another model), the
  // text only when the hashes differ: "lr 0.05 (schedule cosine), ...".
  // The hash is below 2^52, so a double holds it exactly.
  uint64_t settings_hash() const;
  std::string settings_text() const;

  static const int64_t kGrain = 1 << 14;  // elements per range: stays in L2
  double lr = 0;
  // A schedule (null: none) sets lr = schedule->lr(base_lr, steps) as each
  // step starts: a function of the steps taken, which checkpoints hold.
  // base_lr is the lr the caller gave (the JSON's, or the last set_lr).
  std::unique_ptr<LrSchedule> schedule;
  double base_lr = 0;
  int64_t steps = 0;
  // Bumped whenever state() is written on the host (a checkpoint load), so a
  // GPU group's copy of the state knows to reload it.
  uint64_t host_version = 0;
  const uint64_t id = next_id();  // keys a GPU group's copy of the state
  // Expires with the optimizer: a GPU group holding this optimizer's state
  // keeps a weak reference, so that before it uploads another optimizer's
  // state it can return this one's to the host, if it still exists.
  std::weak_ptr<Optimizer*> alive() const { return alive_; }

 private:
  static uint64_t next_id();
  const std::shared_ptr<Optimizer*> alive_ = std::make_shared<Optimizer*>(this);
  // prepare(): per chunk of kGrain gradients, the squares of the scaled and
  // of the unscaled gradients; sized once.
  std::vector<double> chunk_sums_;
  bool scaler_skipped_ = false;  // the last check_scaled() skipped its step
};

}  // namespace dp
