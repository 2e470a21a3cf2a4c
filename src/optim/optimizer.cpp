#include "optim/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/args.h"
#include "core/memory.h"
#include "core/simd.h"
#include "optim/rules.h"

namespace dp {

using nlohmann::json;

uint64_t Optimizer::next_id() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

// The lr start_step() will set.
static double next_lr(const Optimizer& o) {
  return o.schedule ? o.schedule->lr(o.base_lr, o.steps + o.skipped_steps) : o.lr;
}

uint64_t Optimizer::settings_hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values' bytes
  auto add = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  const double values[] = {next_lr(*this), max_grad_norm, scaler.growth_factor, scaler.backoff_factor};
  const int64_t counts[] = {steps, skipped_steps, scaler.enabled ? 1 : 0, scaler.growth_interval, scaler.growth_tracker};
  const float scales[] = {scaler.init_scale, scaler.scale};
  add(values, sizeof values);
  add(counts, sizeof counts);
  add(scales, sizeof scales);
  return h >> 12;
}

std::string Optimizer::settings_text() const {
  char text[320];
  std::snprintf(text, sizeof text, "lr %.9g%s%s, clip_grad_norm %.9g, steps %lld (skipped %lld), grad scaler %s",
                next_lr(*this), schedule ? " (schedule " : "", schedule ? (schedule->type() + ")").c_str() : "",
                max_grad_norm, static_cast<long long>(steps), static_cast<long long>(skipped_steps),
                scaler.enabled ? (scaler.config() + ", scale " + std::to_string(scaler.scale) + ", tracker " +
                                  std::to_string(scaler.growth_tracker))
                                     .c_str()
                               : "off");
  return text;
}

bool Optimizer::step(float* params, float* grads, int64_t n, Workers* pool) {
  if (!prepare(grads, n, pool)) return false;
  start_step();
  parallel_for(pool, n, kGrain, [&](int64_t b, int64_t e) { update(params, grads, b, e); });
  return true;
}

float Optimizer::clip_coef(double norm) const {
  // torch: clip_coef = max_norm / (total_norm + 1e-6), float32 tensors; clamp(max=1).
  const float coef = static_cast<float>(max_grad_norm) / (static_cast<float>(norm) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

namespace {
std::string float_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

void Optimizer::check_held() const {
  if (scaler.enabled && !scaler_skipped_ && !std::isfinite(scaler.inv_scale()))
    fail(DP_ERR_NUMERIC, "the grad scaler's scale is " + float_text(scaler.scale) +
                             ", whose inverse overflows float32" +
                             (skipped_steps > 0 ? " (backed off by " + std::to_string(skipped_steps) +
                                                      " skipped steps: the gradients were inf or NaN at every scale)"
                                                : std::string()) +
                             "; no step was taken, the parameters are unchanged (dp_optimizer_set_grad_scaler "
                             "starts the scale again)");
  if (!clips() || std::isfinite(grad_norm) || (scaler.enabled && scaler_skipped_)) return;
  // With the scaler on, the scaled gradients were finite but not the unscaled
  // ones (a scale below 1): the true gradients overflow float32, which no
  // scale mends, so it is an error as without the scaler (PyTorch would step
  // with the NaN that clipping an inf makes).
  fail(DP_ERR_NUMERIC, "the gradient norm is " + std::string(std::isnan(grad_norm) ? "NaN" : "infinite") +
                           " (clip_grad_norm)" +
                           (scaler.enabled ? " after unscaling finite gradients by the grad scaler's 1/" +
                                                 float_text(scaler.scale) + ": the gradients overflow float32"
                                           : std::string()) +
                           "; no step was taken, the parameters are unchanged");
}

bool Optimizer::set_grad_norm(double sum_squares) {
  grad_norm = std::sqrt(sum_squares);
  return std::isfinite(grad_norm);
}

bool Optimizer::scale_usable() {
  if (std::isfinite(scaler.inv_scale())) return true;
  scaler_skipped_ = false;  // held, not skipped: check_held() fails the step
  return false;
}

bool Optimizer::check_scaled(double sum_squares) {
  // A float's square is at most 1.2e77 in double, so the sum of finite
  // gradients' squares is finite: it is not iff some gradient is inf or NaN.
  scaler_skipped_ = !std::isfinite(sum_squares);
  if (!scaler_skipped_) return true;
  if (clips()) grad_norm = std::sqrt(sum_squares);  // what clip_grad_norm_ would return: inf or NaN
  scaler.update(true);
  ++skipped_steps;
  return false;
}

bool Optimizer::prepare(float* grads, int64_t n, Workers* pool) {
  if (!defers()) return true;
  const bool unscale = scaler.enabled, norm = clips();
  const float inv = scaler.inv_scale();
  if (unscale && !scale_usable()) return false;
  const int64_t chunks = (n + kGrain - 1) / kGrain;
  if (static_cast<int64_t>(chunk_sums_.size()) != 2 * chunks) chunk_sums_.assign(static_cast<size_t>(2 * chunks), 0.0);
  double* scaled_sums = chunk_sums_.data();
  double* sums = scaled_sums + chunks;
  // One pass: the check of the scaled gradient, the unscaled one written
  // back, its square summed (the same sum clipping alone takes).
  parallel_for(pool, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t begin = c * kGrain, end = std::min(n, begin + kGrain);
      double scaled = 0, s = 0;
      if (unscale && norm) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = grads[i];
          scaled += double(g) * g;
          const float u = g * inv;
          grads[i] = u;
          s += double(u) * u;
        }
      } else if (unscale) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = grads[i];
          scaled += double(g) * g;
          grads[i] = g * inv;
        }
      } else {
        for (int64_t i = begin; i < end; ++i) s += double(grads[i]) * grads[i];
      }
      scaled_sums[c] = scaled;
      sums[c] = s;
    }
  });
  if (unscale) {
    double total = 0;
    for (int64_t c = 0; c < chunks; ++c) total += scaled_sums[c];
    if (!check_scaled(total)) return false;
  }
  if (!norm) return true;
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += sums[c];
  if (!set_grad_norm(total)) return false;
  const float coef = clip_coef(grad_norm);
  if (coef < 1.0f)
    parallel_for(pool, n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) grads[i] *= coef;
    });
  return true;
}

namespace {

// Where an optimizer sizes its state: `slots` floats per parameter, checked first.
struct StateBudget {
  uint64_t limit, held;
  void check(const std::string& type, int slots, int64_t n) const {
    const int64_t bytes = checked_mul(checked_mul(n, slots, "optimizer state"), 4, "optimizer state");
    check_fits(held, static_cast<uint64_t>(bytes), limit,
               "the " + type + " optimizer's state (" + std::to_string(slots) + " x " + std::to_string(n) + " floats)");
  }
};

// The updates' loops over [b, e): one per case, each branch-free, so each
// vectorises (and is cloned for AVX2: core/simd.h).
DP_VECTOR_CLONES void sgd_loop(const OptimRule r, float* __restrict p, const float* __restrict g, float* __restrict buf,
                               int64_t b, int64_t e) {
  switch (r.kind) {
    case OptimRule::kSgd:
      for (int64_t i = b; i < e; ++i) sgd_plain(p[i], g[i], r);
      break;
    case OptimRule::kSgdMomentumFirst:
      for (int64_t i = b; i < e; ++i) sgd_first(p[i], g[i], buf[i], r);
      break;
    case OptimRule::kSgdNesterov:
      for (int64_t i = b; i < e; ++i) sgd_nesterov(p[i], g[i], buf[i], r);
      break;
    default:
      for (int64_t i = b; i < e; ++i) sgd_momentum(p[i], g[i], buf[i], r);
  }
}

DP_VECTOR_CLONES void adam_loop(const OptimRule r, float* __restrict p, const float* __restrict g, float* __restrict m,
                                float* __restrict v, int64_t b, int64_t e) {
  if (adam_lerp_from_start(r))
    for (int64_t i = b; i < e; ++i) adam_from<true>(p[i], g[i], m[i], v[i], r);
  else
    for (int64_t i = b; i < e; ++i) adam_from<false>(p[i], g[i], m[i], v[i], r);
}

// torch.optim.SGD: d = g + wd*p; with momentum, buf = d on the first step,
// else momentum*buf + (1-dampening)*d, and d = nesterov ? d + momentum*buf : buf;
// p -= lr*d. One branch-free loop per case, so each vectorises.
class Sgd : public Optimizer {
 public:
  Sgd(Args& a, int64_t n, const StateBudget& budget) {
    lr = a.number("lr", 1e-3, 0, INFINITY);
    momentum_ = a.number("momentum", 0, 0, INFINITY);
    dampening_ = a.number("dampening", 0, -INFINITY, INFINITY);
    weight_decay_ = a.number("weight_decay", 0, 0, INFINITY);
    nesterov_ = a.boolean("nesterov", false);
    if (nesterov_ && (momentum_ <= 0 || dampening_ != 0))
      fail(DP_ERR_MODEL, a.path_of("nesterov") + ": Nesterov momentum requires a momentum > 0 and zero dampening");
    if (momentum_ > 0) {
      budget.check("sgd", 1, n);
      buf_.assign(n, 0.0f);
    }
  }

  OptimRule rule() const override {
    OptimRule r;
    r.lr = float(lr);
    r.wd = float(weight_decay_);
    r.momentum = float(momentum_);
    r.damp = float(1 - dampening_);
    r.nesterov = nesterov_;
    r.kind = momentum_ == 0 ? OptimRule::kSgd
             : steps == 1   ? OptimRule::kSgdMomentumFirst
             : nesterov_    ? OptimRule::kSgdNesterov
                            : OptimRule::kSgdMomentum;
    return r;
  }

  void update(float* __restrict p, const float* __restrict g, int64_t b, int64_t e) override {
    sgd_loop(rule(), p, g, buf_.data(), b, e);
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    if (buf_.empty()) return {};
    return {{"momentum_buffer", &buf_}};
  }
  std::string type() const override { return "sgd"; }

 private:
  double momentum_, dampening_, weight_decay_;
  bool nesterov_;
  std::vector<float> buf_;
};

// torch.optim.Adam / AdamW (amsgrad off): Adam adds wd*p to the gradient,
// AdamW decays p by lr*wd first; then m, v, and
// p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
class Adam : public Optimizer {
 public:
  Adam(Args& a, int64_t n, bool decoupled, const StateBudget& budget) : decoupled_(decoupled) {
    lr = a.number("lr", 1e-3, 0, INFINITY);
    auto betas = a.numbers("betas", {0.9, 0.999}, 2, 0, 0.999999999);
    beta1_ = betas[0];
    beta2_ = betas[1];
    eps_ = a.number("eps", 1e-8, 0, INFINITY);
    weight_decay_ = a.number("weight_decay", decoupled ? 1e-2 : 0, 0, INFINITY);
    if (a.boolean("amsgrad", false)) fail(DP_ERR_MODEL, a.path_of("amsgrad") + ": amsgrad is not supported");
    budget.check(type(), 2, n);
    m_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
  }

  void begin_step() override {
    ++steps;
    step_size_ = float(lr / (1 - std::pow(beta1_, double(steps))));
    bc2_sqrt_ = float(std::sqrt(1 - std::pow(beta2_, double(steps))));
  }

  OptimRule rule() const override {
    OptimRule r;
    r.kind = OptimRule::kAdam;
    r.lr = float(lr);
    r.b1 = float(beta1_);
    r.b2 = float(beta2_);
    r.c1 = float(1 - beta1_);
    r.c2 = float(1 - beta2_);
    r.eps = float(eps_);
    r.wd = decoupled_ ? 0.f : float(weight_decay_);
    r.decay = decoupled_ ? float(1 - lr * weight_decay_) : 1.f;
    r.step_size = step_size_;
    r.bc2_sqrt = bc2_sqrt_;
    return r;
  }

  void update(float* __restrict p, const float* __restrict g, int64_t b, int64_t e) override {
    adam_loop(rule(), p, g, m_.data(), v_.data(), b, e);
  }

  std::vector<std::pair<std::string, std::vector<float>*>> state() override {
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  }
  std::string type() const override { return decoupled_ ? "adamw" : "adam"; }

 private:
  bool decoupled_;
  double beta1_, beta2_, eps_, weight_decay_;
  float step_size_ = 0, bc2_sqrt_ = 1;
  std::vector<float> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> Optimizer::from_json(const std::string& text, int64_t n, uint64_t memory_limit, uint64_t held) {
  const StateBudget budget{memory_limit, held};
  const json doc = parse_config(text, "optimizer");
  Args a(doc, "");
  std::string type = a.string("type", "");
  std::unique_ptr<Optimizer> opt;
  if (type == "sgd")
    opt = std::make_unique<Sgd>(a, n, budget);
  else if (type == "adam" || type == "adamw")
    opt = std::make_unique<Adam>(a, n, type == "adamw", budget);
  else if (!a.has("type"))
    fail(DP_ERR_MODEL, "/type: missing; expected an optimizer type (known: adam, adamw, sgd)");
  else
    fail(DP_ERR_MODEL, "/type: unknown optimizer '" + type + "' (known: adam, adamw, sgd)");
  a.finish(type);
  opt->base_lr = opt->lr;
  opt->config = a.resolved().dump();
  return opt;
}

}  // namespace dp
