#include "optim/optimizer.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/args.h"

namespace dp {

using nlohmann::json;

void Optimizer::step(float* params, const float* grads, int64_t n, Workers* pool) {
  begin_step();
  parallel_for(pool, n, kGrain, [&](int64_t b, int64_t e) { update(params, grads, b, e); });
}

namespace {

// torch.optim.SGD: d = g + wd*p; with momentum, buf = d on the first step,
// else momentum*buf + (1-dampening)*d, and d = nesterov ? d + momentum*buf : buf;
// p -= lr*d. One branch-free loop per case, so each vectorises.
class Sgd : public Optimizer {
 public:
  Sgd(Args& a, int64_t n) {
    lr = a.number("lr", 1e-3, 0, INFINITY);
    momentum_ = a.number("momentum", 0, 0, INFINITY);
    dampening_ = a.number("dampening", 0, -INFINITY, INFINITY);
    weight_decay_ = a.number("weight_decay", 0, 0, INFINITY);
    nesterov_ = a.boolean("nesterov", false);
    if (nesterov_ && (momentum_ <= 0 || dampening_ != 0))
      fail(DP_ERR_MODEL, a.path_of("nesterov") + ": Nesterov momentum requires a momentum > 0 and zero dampening");
    if (momentum_ > 0) buf_.assign(n, 0.0f);
  }

  void update(float* __restrict p, const float* __restrict g, int64_t b, int64_t e) override {
    const float lr_f = float(lr), wd = float(weight_decay_), mom = float(momentum_), damp = float(1 - dampening_);
    float* __restrict buf = buf_.data();
    if (mom == 0) {
      for (int64_t i = b; i < e; ++i) p[i] -= lr_f * (g[i] + wd * p[i]);
    } else if (steps == 1) {
      for (int64_t i = b; i < e; ++i) {
        float d = g[i] + wd * p[i];
        buf[i] = d;
        p[i] -= lr_f * (nesterov_ ? d + mom * d : d);
      }
    } else if (nesterov_) {
      for (int64_t i = b; i < e; ++i) {
        float d = g[i] + wd * p[i];
        buf[i] = mom * buf[i] + damp * d;
        p[i] -= lr_f * (d + mom * buf[i]);
      }
    } else {
      for (int64_t i = b; i < e; ++i) {
        buf[i] = mom * buf[i] + damp * (g[i] + wd * p[i]);
        p[i] -= lr_f * buf[i];
      }
    }
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
  Adam(Args& a, int64_t n, bool decoupled) : decoupled_(decoupled) {
    lr = a.number("lr", 1e-3, 0, INFINITY);
    auto betas = a.numbers("betas", {0.9, 0.999}, 2, 0, 0.999999999);
    beta1_ = betas[0];
    beta2_ = betas[1];
    eps_ = a.number("eps", 1e-8, 0, INFINITY);
    weight_decay_ = a.number("weight_decay", decoupled ? 1e-2 : 0, 0, INFINITY);
    if (a.boolean("amsgrad", false)) fail(DP_ERR_MODEL, a.path_of("amsgrad") + ": amsgrad is not supported");
    m_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
  }

  void begin_step() override {
    ++steps;
    step_size_ = float(lr / (1 - std::pow(beta1_, double(steps))));
    bc2_sqrt_ = float(std::sqrt(1 - std::pow(beta2_, double(steps))));
  }

  void update(float* __restrict p, const float* __restrict g, int64_t b, int64_t e) override {
    const float b1 = float(beta1_), b2 = float(beta2_), eps = float(eps_);
    const float wd = decoupled_ ? 0.f : float(weight_decay_);
    const float decay = decoupled_ ? float(1 - lr * weight_decay_) : 1.f;
    const float step_size = step_size_, bc2_sqrt = bc2_sqrt_;
    float* __restrict m = m_.data();
    float* __restrict v = v_.data();
    for (int64_t i = b; i < e; ++i) {
      float pi = p[i] * decay;
      float gi = g[i] + wd * pi;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      p[i] = pi - step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    }
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

std::unique_ptr<Optimizer> Optimizer::from_json(const std::string& text, int64_t n) {
  json doc;
  try {
    doc = json::parse(text, nullptr, true, true);
  } catch (const json::parse_error& e) {
    fail(DP_ERR_JSON, std::string("optimizer JSON: ") + e.what());
  }
  Args a(doc, "");
  std::string type = a.string("type", "");
  std::unique_ptr<Optimizer> opt;
  if (type == "sgd")
    opt = std::make_unique<Sgd>(a, n);
  else if (type == "adam" || type == "adamw")
    opt = std::make_unique<Adam>(a, n, type == "adamw");
  else
    fail(DP_ERR_MODEL, "/type: unknown optimizer '" + type + "' (known: adam, adamw, sgd)");
  a.finish(type);
  return opt;
}

}  // namespace dp
