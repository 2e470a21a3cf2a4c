// Optimizers over the model's flat parameter array, with PyTorch's update
// formulas (torch.optim.SGD, Adam, AdamW; no amsgrad, no maximize). State is
// sized at creation, so a step allocates nothing; the update is split over
// the group's device workers (elementwise, so the split changes no result).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/workers.h"

namespace dp {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // {"type": "sgd" | "adam" | "adamw", ...}; throws DP_ERR_JSON / DP_ERR_MODEL with the JSON path.
  static std::unique_ptr<Optimizer> from_json(const std::string& text, int64_t num_params);
  virtual void step(float* params, const float* grads, int64_t n, Workers* pool) = 0;
  double lr = 0;
  int64_t steps = 0;
};

}  // namespace dp
