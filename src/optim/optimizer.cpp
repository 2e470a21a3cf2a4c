#include "optim/optimizer.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/args.h"

namespace dp {

using nlohmann::json;

namespace {

const int64_t kGrain = 1 << 14;

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
  void step(float* p, const float* g, int64_t n, Workers* pool) override {
    // PyTorch: d = g + wd*p; buf = d on the first step, else
    // momentum*buf + (1-dampening)*d; d = nesterov ? d + momentum*buf : buf.
    const float lr_f = float(lr), wd = float(weight_decay_), mom = float(momentum_), damp = float(1 - dampening_);
    const bool first = steps == 0, nesterov = nesterov_;
    float* buf = buf_.data();
    parallel_for(pool, n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float d = g[i];
        if (wd != 0) d += wd * p[i];
        if (mom != 0) {
          buf[i] = first ? d : mom * buf[i] + damp * d;
          d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr_f * d;
      }
    });
    ++steps;
  }

 private:
  double momentum_, dampening_, weight_decay_;
  bool nesterov_;
  std::vector<float> buf_;
};

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
  void step(float* p, const float* g, int64_t n, Workers* pool) override {
    ++steps;
    const double bc1 = 1 - std::pow(beta1_, double(steps)), bc2 = 1 - std::pow(beta2_, double(steps));
    const float step_size = float(lr / bc1), bc2_sqrt = float(std::sqrt(bc2));
    const float b1 = float(beta1_), b2 = float(beta2_), eps = float(eps_), wd = float(weight_decay_);
    const float decay = float(1 - lr * weight_decay_);
    const bool decoupled = decoupled_;
    float *m = m_.data(), *v = v_.data();
    parallel_for(pool, n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float gi = g[i];
        if (decoupled)
          p[i] *= decay;
        else if (wd != 0)
          gi += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
      }
    });
  }

 private:
  bool decoupled_;
  double beta1_, beta2_, eps_, weight_decay_;
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
