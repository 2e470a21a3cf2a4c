// Learning-rate schedules, as PyTorch's torch.optim.lr_scheduler computes
// them, in closed form: the learning rate of optimizer step t (0-based, the
// step after t calls of scheduler.step()) is a function of t and the base
// learning rate alone, so a resumed run (whose optimizer counts its steps in
// the checkpoint) follows the same curve.
//
//   {"type": "constant"}
//   {"type": "linear", "start_factor": 1/3, "end_factor": 1, "total_iters": 5}       LinearLR
//   {"type": "step", "step_size": 30, "gamma": 0.1}                                   StepLR
//   {"type": "multistep", "milestones": [30, 80], "gamma": 0.1}                       MultiStepLR
//   {"type": "cosine", "T_max": 1000, "eta_min": 0}                                   CosineAnnealingLR
//   {"type": "cosine_warmup", "warmup_steps": 100, "total_steps": 1000,
//    "warmup_start_factor": 1/3, "eta_min": 0}      SequentialLR(LinearLR, CosineAnnealingLR(T_max = total - warmup))
//   {"type": "onecycle", "max_lr": 0.1, "total_steps": 1000, "pct_start": 0.3,
//    "anneal_strategy": "cos", "div_factor": 25, "final_div_factor": 1e4,
//    "three_phase": false}                          OneCycleLR(cycle_momentum=False); after total_steps, its last value
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dp {

class LrSchedule {
 public:
  // Throws DP_ERR_JSON / DP_ERR_MODEL naming the JSON path.
  static std::unique_ptr<LrSchedule> from_json(const std::string& text);

  // The learning rate of step t (0-based) for base learning rate `base`.
  double lr(double base, int64_t t) const;
  const std::string& type() const { return type_; }

 private:
  std::string type_;
  double start_factor_ = 1.0 / 3, end_factor_ = 1, gamma_ = 0.1, eta_min_ = 0;
  int64_t total_ = 5, step_size_ = 1, warmup_ = 0;
  std::vector<int64_t> milestones_;
  // onecycle
  double max_lr_ = 0, pct_start_ = 0.3, div_ = 25, final_div_ = 1e4;
  bool cos_ = true, three_phase_ = false;
  double onecycle(int64_t t) const;
};

}  // namespace dp
