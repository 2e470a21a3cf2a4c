// A model: a DAG of layers built from JSON (docs/model-format.md), with all
// parameters in one flat array (declaration order, as nn.Module.parameters()
// yields them), gradients in a second, buffers in a third. One flat array is
// what makes gradient reduction, optimizers and checkpoints simple loops.
#pragma once
#include <atomic>
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

class Model;

// A copy of the model's arrays on devices (a GPU engine): the model asks it
// for the newest values before the host reads them, and counts the host's
// writes (Model::host_version) for it to compare before it runs. It alone
// reaches the host arrays without either.
class DeviceCopy {
 public:
  virtual ~DeviceCopy() = default;
  // Copies parameters and gradients to the host if the devices hold newer ones.
  virtual void to_host() = 0;

 protected:
  static std::vector<float>& host_params(Model& m);
  static std::vector<float>& host_grads(Model& m);
};

class Model {
 public:
  // Loads the plugin named by entry i of the top-level "plugins" list (json_path
  // "/plugins/i") into the registry being built from; throws dp::Error.
  using PluginHook = std::function<void(const std::string& entry, const std::string& json_path)>;

  // Throws dp::Error (DP_ERR_JSON, DP_ERR_MODEL, DP_ERR_SHAPE, DP_ERR_PLUGIN)
  // naming the JSON path. Without a hook, a "plugins" key is an error. A model
  // whose parameters, gradients and buffers would not fit in memory_limit
  // bytes (0: the machine's available memory) is refused before anything is
  // allocated (DP_ERR_OUT_OF_MEMORY, naming the largest layer).
  static std::unique_ptr<Model> from_json(const Registry& registry, const std::string& text,
                                          const PluginHook& load_plugin = nullptr, uint64_t memory_limit = 0);
  // The canonical text (below) of a model JSON, read as from_json reads it
  // but allocating and initialising nothing; the layer types it uses must be
  // in `registry` already (its "plugins" are not loaded). Throws as from_json.
  static std::string canonical_of(const Registry& registry, const std::string& text);

  uint64_t seed = 0;
  Shape input_shape;  // per sample
  std::vector<Node> nodes;  // in execution order; the last one is the output
  std::unique_ptr<Loss> loss;  // null when the JSON names none
  Shape target_shape;          // per sample, when there is a loss
  dp_dtype target_dtype = DP_I64;
  std::string description;  // the JSON text, as given
  // What the JSON means, as compact JSON: seed, input, loss, and each layer's
  // type, name, inputs (by name) and hyperparameters as read, defaults
  // included; free text (name, description), plugin paths, spacing,
  // comments and how a value was written (3 or [3, 3]) left out. Two models
  // with the same canonical text compute the same function from the same
  // initial values: checkpoints and process groups compare it.
  std::string canonical;

  std::vector<NamedTensor> param_info, buffer_info;

 private:
  static std::unique_ptr<Model> read(const Registry& registry, const std::string& text, const PluginHook& load_plugin,
                                     uint64_t memory_limit, bool describe_only);
  void allocate(uint64_t memory_limit);

 public:
  // What groups, optimizers and batches built on this model may take, with
  // the model's own arrays (0: the machine's available memory); and the
  // bytes of those arrays.
  uint64_t memory_limit = 0;
  uint64_t held_bytes() const { return 4 * static_cast<uint64_t>(2 * params_.size() + buffers_.size()); }
  // Bytes that the groups and optimizers built on this model hold (replicas'
  // gradients and statistics, activations, optimizer state), each through a
  // HeldShare: with held_bytes(), what memory_limit is checked against.
  // Shared, so that a share may outlive the model (a group destroyed after
  // its model, against dp.h's rule, must not write freed memory).
  std::shared_ptr<std::atomic<uint64_t>> attached_bytes = std::make_shared<std::atomic<uint64_t>>(0);
  uint64_t held_total() const { return held_bytes() + attached_bytes->load(); }
  int64_t stats_total = 0;  // per-replica statistics floats, all layers
  // Whether a backward added gradients since they were last zeroed (PyTorch:
  // .grad is not None): set by the group that ran it, cleared by every
  // engine's zero_grad (dp_group_zero_grad, a held or failed step), whichever
  // group of this model ran it. An optimizer step without them is none.
  bool has_grads = false;

  const Shape& output_shape() const { return nodes.back().out_shape; }
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  int64_t num_buffers() const { return static_cast<int64_t>(buffers_.size()); }

  // The flat arrays, on the host. Reading parameters or gradients returns
  // the newest values (copied back first from the device copy that trained
  // last, if any); writing them also marks every device copy stale, so that
  // it reloads them before it runs. Buffers (running statistics) are merged
  // on the host, so the host's are always the newest; writing them marks the
  // devices' buffers stale. Sizes never change: pointers stay valid.
  const std::vector<float>& params() const { return synced(params_); }
  const std::vector<float>& grads() const { return synced(grads_); }
  const std::vector<float>& buffers() const { return buffers_; }
  std::vector<float>& mutable_params() { return written(params_); }
  std::vector<float>& mutable_grads() { return written(grads_); }
  std::vector<float>& mutable_buffers() {
    ++buffers_version_;
    return buffers_;
  }

  // Bumped by every write through the accessors above: a device copy
  // compares them with the versions it last loaded.
  uint64_t host_version() const { return host_version_; }
  uint64_t buffers_version() const { return buffers_version_; }
  // The device copy that mirrors this model (one at a time; null: none).
  void set_device_copy(DeviceCopy* copy) { device_copy_ = copy; }
  DeviceCopy* device_copy() const { return device_copy_; }
  // A device copy about to run makes itself the one: the previous one's
  // newer values come to the host first, and the version moves on, so that
  // every copy (this one included) reloads before it runs. Two GPU groups on
  // one model then take turns, each starting from the other's results.
  void claim_device_copy(DeviceCopy* copy) {
    if (device_copy_ == copy) return;
    if (device_copy_) device_copy_->to_host();
    device_copy_ = copy;
    ++host_version_;
  }

 private:
  friend class DeviceCopy;
  const std::vector<float>& synced(const std::vector<float>& v) const {
    if (device_copy_) device_copy_->to_host();
    return v;
  }
  std::vector<float>& written(std::vector<float>& v) {
    synced(v);
    ++host_version_;
    return v;
  }

  std::vector<float> params_, grads_, buffers_;
  DeviceCopy* device_copy_ = nullptr;
  uint64_t host_version_ = 0, buffers_version_ = 0;
};

}  // namespace dp
