// Dynamic loss scaling, as torch.amp.GradScaler computes it: the loss's
// gradient is multiplied by `scale` (a float32), the summed gradients by
// inv_scale() before the step and checked for inf/NaN; a step with a
// non-finite gradient is skipped, and update() backs the scale off (or grows
// it after growth_interval clean steps). The Optimizer holds one (off by
// default) and the engines apply it; this file is the state and the rules.
#pragma once
#include <cstdint>
#include <string>

namespace dp {

struct GradScaler {
  bool enabled = false;
  // torch.amp.GradScaler's arguments and defaults.
  float init_scale = 65536.0f;  // 2**16, as float32 (PyTorch's torch.full((), init_scale, dtype=float32))
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // The state: the scale the next step's loss gradient is multiplied by, and
  // the consecutive steps without inf/NaN since the last change of it.
  float scale = 65536.0f;
  int64_t growth_tracker = 0;

  // {"init_scale": 65536, "growth_factor": 2, "backoff_factor": 0.5,
  //  "growth_interval": 2000, "enabled": true} (all optional); null or "":
  // disabled. Throws DP_ERR_JSON (not JSON) or DP_ERR_MODEL naming the key.
  // The state starts at init_scale, tracker 0.
  static GradScaler from_json(const char* text);
  // The settings as canonical JSON (what processes compare), "" when disabled.
  std::string config() const;

  // PyTorch's self._scale.double().reciprocal().float().
  float inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale)); }
  // The loss's gradient factor this step: the scale, 1 when disabled.
  double loss_factor() const { return enabled ? static_cast<double>(scale) : 1.0; }
  // torch._amp_update_scale_ (CPU kernel): found_inf: scale *= backoff,
  // tracker = 0; else ++tracker, and at growth_interval scale *= growth
  // (kept only if finite), tracker = 0. Products in double, stored as float.
  void update(bool found_inf);
};

}  // namespace dp
