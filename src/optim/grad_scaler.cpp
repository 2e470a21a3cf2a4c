#include "optim/grad_scaler.h"

#include <cfloat>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/args.h"
#include "core/error.h"

namespace dp {

using nlohmann::json;

GradScaler GradScaler::from_json(const char* text) {
  GradScaler s;
  if (!text || !*text) return s;
  const json doc = parse_config(text, "grad scaler");
  Args a(doc, "");
  s.enabled = a.boolean("enabled", true);
  auto need = [&](const char* key, bool ok, const char* what, double got) {
    if (!ok) fail(DP_ERR_MODEL, a.path_of(key) + ": expected " + what + ", got " + json(got).dump());
  };
  const double init = a.number("init_scale", 65536.0, -INFINITY, INFINITY);
  s.init_scale = static_cast<float>(init);  // a float32, as PyTorch's scale tensor
  need("init_scale", init > 0 && init <= FLT_MAX && s.init_scale > 0, "a float32 number > 0 (65536 = 2**16 by default)",
       init);
  s.growth_factor = a.number("growth_factor", 2.0, -INFINITY, INFINITY);
  need("growth_factor", s.growth_factor > 1 && s.growth_factor <= FLT_MAX, "a number > 1 (PyTorch's default: 2)",
       s.growth_factor);
  s.backoff_factor = a.number("backoff_factor", 0.5, -INFINITY, INFINITY);
  need("backoff_factor", s.backoff_factor > 0 && s.backoff_factor < 1, "a number in (0, 1) (PyTorch's default: 0.5)",
       s.backoff_factor);
  s.growth_interval = a.integer("growth_interval", 2000, 1, INT32_MAX);  // PyTorch's tracker is an int32
  a.finish("grad scaler");
  s.scale = s.init_scale;
  s.growth_tracker = 0;
  return s;
}

std::string GradScaler::config() const {
  if (!enabled) return "";
  return json{{"init_scale", static_cast<double>(init_scale)},
              {"growth_factor", growth_factor},
              {"backoff_factor", backoff_factor},
              {"growth_interval", growth_interval}}
      .dump();
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    growth_tracker = 0;
    return;
  }
  const int64_t successful = growth_tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
    if (std::isfinite(grown)) scale = grown;  // never past float32's range
    growth_tracker = 0;
  } else {
    growth_tracker = successful;
  }
}

}  // namespace dp
