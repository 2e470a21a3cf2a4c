// A model: a DAG of layers built from JSON (docs/model-format.md), with all
// parameters in one flat array (declaration order, as nn.Module.parameters()
// yields them), gradients in a second, buffers in a third. One flat array is
// what makes gradient reduction, optimizers and checkpoints simple loops.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/layer.h"
#include "layers/registry.h"

namespace dp {

struct Node {
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;  // node indices; -1 is the model's input
  Shape out_shape;          // per sample
  int64_t param_offset = 0, param_count = 0;
  int64_t buffer_offset = 0, buffer_count = 0;
  int64_t stats_offset = 0, stats_count = 0;
};

struct NamedTensor {
  std::string name;  // "0.weight"
  Shape shape;
  int64_t offset = 0;  // in the flat array
};

// A copy of the model's arrays on devices (a GPU group's): the host arrays
// are brought up to date before the host reads them.
class DeviceCopy {
 public:
  virtual ~DeviceCopy() = default;
  // Copies parameters and gradients to the host if the devices hold newer ones.
  virtual void to_host() = 0;
};

class Model {
 public:
  // Loads the plugin named by entry i of the top-level "plugins" list (json_path
  // "/plugins/i") into the registry being built from; throws dp::Error.
  using PluginHook = std::function<void(const std::string& entry, const std::string& json_path)>;

  // Throws dp::Error (DP_ERR_JSON, DP_ERR_MODEL, DP_ERR_SHAPE, DP_ERR_PLUGIN)
  // naming the JSON path. Without a hook, a "plugins" key is an error.
  static std::unique_ptr<Model> from_json(const Registry& registry, const std::string& text,
                                          const PluginHook& load_plugin = nullptr);

  uint64_t seed = 0;
  Shape input_shape;  // per sample
  std::vector<Node> nodes;  // in execution order; the last one is the output
  std::unique_ptr<Loss> loss;  // null when the JSON names none
  Shape target_shape;          // per sample, when there is a loss
  dp_dtype target_dtype = DP_I64;
  std::string description;  // the JSON text, as given

  std::vector<float> params, grads, buffers;
  std::vector<NamedTensor> param_info, buffer_info;
  int64_t stats_total = 0;  // per-replica statistics floats, all layers

  const Shape& output_shape() const { return nodes.back().out_shape; }

  // Before the host reads params, grads or buffers: the newest values.
  void pull() const {
    if (device_copy) device_copy->to_host();
  }
  // After the host writes params or buffers: device copies reload them.
  void host_written() { ++host_version; }

  DeviceCopy* device_copy = nullptr;  // the GPU group that trains this model, if any
  uint64_t host_version = 0;
};

}  // namespace dp
