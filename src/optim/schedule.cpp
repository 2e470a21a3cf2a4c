#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/args.h"
#include "core/error.h"

namespace dp {

using nlohmann::json;

static const double kPi = 3.14159265358979323846;

std::unique_ptr<LrSchedule> LrSchedule::from_json(const std::string& text) {
  const json doc = parse_config(text, "lr schedule");
  Args a(doc, "");
  auto s = std::make_unique<LrSchedule>();
  s->type_ = a.string("type", "");
  const std::string& t = s->type_;
  if (t == "constant") {
  } else if (t == "linear") {
    s->start_factor_ = a.number("start_factor", 1.0 / 3, 1e-12, 1);
    s->end_factor_ = a.number("end_factor", 1, 0, 1);
    s->total_ = a.integer("total_iters", 5, 1);
  } else if (t == "step") {
    s->step_size_ = a.required_integer("step_size", 1);
    s->gamma_ = a.number("gamma", 0.1, 0, INFINITY);
  } else if (t == "exponential") {
    s->gamma_ = a.number("gamma", 0, 0, INFINITY);
    if (!a.has("gamma")) fail(DP_ERR_MODEL, "/gamma: missing; expected the factor of each step (ExponentialLR's gamma)");
  } else if (t == "multistep") {
    s->milestones_ = a.integers("milestones", {});
    if (s->milestones_.empty()) fail(DP_ERR_MODEL, "/milestones: expected a non-empty list of step numbers");
    for (size_t i = 0; i < s->milestones_.size(); ++i)
      if (s->milestones_[i] < 0 || (i && s->milestones_[i] < s->milestones_[i - 1]))
        fail(DP_ERR_MODEL, "/milestones/" + std::to_string(i) + ": expected non-negative step numbers in increasing order");
    s->gamma_ = a.number("gamma", 0.1, 0, INFINITY);
  } else if (t == "cosine") {
    s->total_ = a.required_integer("T_max", 1);
    s->eta_min_ = a.number("eta_min", 0, 0, INFINITY);
  } else if (t == "cosine_warmup") {
    s->warmup_ = a.required_integer("warmup_steps", 0);
    s->total_ = a.required_integer("total_steps", 1);
    if (s->total_ <= s->warmup_)
      fail(DP_ERR_MODEL, "/total_steps: expected more than warmup_steps (" + std::to_string(s->warmup_) + "), got " +
                             std::to_string(s->total_));
    s->start_factor_ = a.number("warmup_start_factor", 1.0 / 3, 1e-12, 1);
    s->eta_min_ = a.number("eta_min", 0, 0, INFINITY);
  } else if (t == "onecycle") {
    s->max_lr_ = a.number("max_lr", 0, 0, INFINITY);
    if (!a.has("max_lr")) fail(DP_ERR_MODEL, "/max_lr: missing; expected the peak learning rate");
    s->total_ = a.required_integer("total_steps", 2);
    s->pct_start_ = a.number("pct_start", 0.3, 0, 1);
    const std::string anneal = a.string("anneal_strategy", "cos");
    if (anneal != "cos" && anneal != "linear")
      fail(DP_ERR_MODEL, "/anneal_strategy: expected \"cos\" or \"linear\", got \"" + anneal + "\"");
    s->cos_ = anneal == "cos";
    s->div_ = a.number("div_factor", 25, 1e-12, INFINITY);
    s->final_div_ = a.number("final_div_factor", 1e4, 1e-12, INFINITY);
    s->three_phase_ = a.boolean("three_phase", false);
    // PyTorch's phases end at pct_start * total - 1 (and 2 * that - 2):
    // each must be longer than the one before.
    const double end1 = s->pct_start_ * double(s->total_) - 1;
    const double end2 = s->three_phase_ ? 2 * s->pct_start_ * double(s->total_) - 2 : end1;
    if (end1 <= 0 || end2 < end1 || double(s->total_ - 1) <= end2)
      fail(DP_ERR_MODEL, "/pct_start: with total_steps " + std::to_string(s->total_) +
                             ", every phase of the cycle needs at least one step");
  } else {
    fail(DP_ERR_MODEL, "/type: unknown lr schedule '" + t +
                           "' (known: constant, cosine, cosine_warmup, exponential, linear, multistep, onecycle, step)");
  }
  a.finish(t);
  return s;
}

double LrSchedule::onecycle(int64_t step) const {
  const double initial = max_lr_ / div_, min_lr = initial / final_div_;
  struct Phase {
    double end, start_lr, end_lr;
  };
  // Computed as each step starts: a fixed array, no allocation per step.
  const Phase three[3] = {{pct_start_ * double(total_) - 1, initial, max_lr_},
                          {2 * pct_start_ * double(total_) - 2, max_lr_, initial},
                          {double(total_) - 1, initial, min_lr}};
  const Phase two[2] = {{pct_start_ * double(total_) - 1, initial, max_lr_}, {double(total_) - 1, max_lr_, min_lr}};
  const Phase* phases = three_phase_ ? three : two;
  const size_t count = three_phase_ ? 3 : 2;
  const double t = double(std::min<int64_t>(step, total_ - 1));  // after the cycle: its last value
  double begin = 0;
  for (size_t i = 0; i < count; ++i) {
    const Phase& p = phases[i];
    if (t <= p.end || i + 1 == count) {
      const double pct = (t - begin) / (p.end - begin);
      return cos_ ? p.end_lr + (p.start_lr - p.end_lr) / 2 * (std::cos(kPi * pct) + 1)
                  : (p.end_lr - p.start_lr) * pct + p.start_lr;
    }
    begin = p.end;
  }
  return min_lr;
}

double LrSchedule::lr(double base, int64_t t) const {
  if (t < 0) t = 0;
  const std::string& k = type_;
  if (k == "linear")
    return base * (start_factor_ + (end_factor_ - start_factor_) * double(std::min(t, total_)) / double(total_));
  if (k == "step") return base * std::pow(gamma_, double(t / step_size_));
  if (k == "exponential") return base * std::pow(gamma_, double(t));
  if (k == "multistep") {
    const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin();
    return base * std::pow(gamma_, double(passed));
  }
  if (k == "cosine") return eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * double(t) / double(total_))) / 2;
  if (k == "cosine_warmup") {
    if (t < warmup_) return base * (start_factor_ + (1 - start_factor_) * double(t) / double(warmup_));
    return eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * double(t - warmup_) / double(total_ - warmup_))) / 2;
  }
  if (k == "onecycle") return onecycle(t);
  return base;  // constant
}

}  // namespace dp
