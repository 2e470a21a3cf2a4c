#include "layers/registry.h"

#include "layers/builtin.h"

namespace dp {

namespace {
struct LayerEntry {
  const char* type;
  LayerFactory make;
};
struct LossEntry {
  const char* type;
  LossFactory make;
};

// THE list of built-ins.
const LayerEntry kLayers[] = {
    {"add", make_add},
    {"avg_pool2d", make_avg_pool2d},
    {"batch_norm", make_batch_norm},
    {"batch_norm1d", make_batch_norm1d},
    {"batch_norm2d", make_batch_norm2d},
    {"concat", make_concat},
    {"conv2d", make_conv2d},
    {"dropout", make_dropout},
    {"flatten", make_flatten},
    {"gelu", make_gelu},
    {"global_avg_pool", make_global_avg_pool},
    {"layer_norm", make_layer_norm},
    {"leaky_relu", make_leaky_relu},
    {"linear", make_linear},
    {"log_softmax", make_log_softmax},
    {"max_pool2d", make_max_pool2d},
    {"relu", make_relu},
    {"sigmoid", make_sigmoid},
    {"softmax", make_softmax},
    {"tanh", make_tanh},
};
const LossEntry kLosses[] = {
    {"bce", make_bce},
    {"bce_with_logits", make_bce_with_logits},
    {"cross_entropy", make_cross_entropy},
    {"huber", make_huber},
    {"l1", make_l1},
    {"mse", make_mse},
    {"nll", make_nll},
    {"smooth_l1", make_smooth_l1},
};

template <class M>
std::string names(const M& m) {
  std::string s;
  for (const auto& kv : m) s += (s.empty() ? "" : ", ") + kv.first;
  return s;
}
}  // namespace

Registry::Registry() {
  for (const auto& e : kLayers) add_layer(e.type, e.make);
  for (const auto& e : kLosses) add_loss(e.type, e.make);
}

void Registry::add_layer(const std::string& type, LayerFactory f) { layers_[type] = f; }
void Registry::add_loss(const std::string& type, LossFactory f) { losses_[type] = f; }

LayerFactory Registry::layer(const std::string& type) const {
  auto it = layers_.find(type);
  return it == layers_.end() ? nullptr : it->second;
}
LossFactory Registry::loss(const std::string& type) const {
  auto it = losses_.find(type);
  return it == losses_.end() ? nullptr : it->second;
}
std::string Registry::layer_names() const { return names(layers_); }
std::string Registry::loss_names() const { return names(losses_); }

}  // namespace dp
