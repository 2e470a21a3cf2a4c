#include "model/model.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/memory.h"
#include "core/rng.h"

namespace dp {

using nlohmann::json;

static std::string describe(const Node& n) {
  return n.layer->path + " (" + n.layer->type + " '" + n.layer->name + "')";
}

static void init_tensor(float* p, int64_t n, const Init& init, uint64_t key) {
  for (int64_t i = 0; i < n; ++i) {
    switch (init.kind) {
      case Init::kZeros: p[i] = 0; break;
      case Init::kOnes: p[i] = 1; break;
      case Init::kUniform: p[i] = (2 * uniform01(key, static_cast<uint64_t>(i)) - 1) * init.bound; break;
      case Init::kConstant: p[i] = init.bound; break;
    }
  }
}

// Resolves "inputs" (names of earlier layers, or "input" for the model's
// input); without it a layer takes the previous layer's output.
static std::vector<int> resolve_inputs(const json& spec, const std::string& path, int index,
                                       const std::map<std::string, int>& names) {
  if (!spec.contains("inputs")) return {index - 1};
  const json& in = spec["inputs"];
  std::string p = path + "/inputs";
  if (!in.is_array() || in.empty()) fail(DP_ERR_MODEL, p + ": expected a non-empty list of layer names");
  std::vector<int> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].is_string()) fail(DP_ERR_MODEL, p + "/" + std::to_string(i) + ": expected a layer name, got " + json_brief(in[i]));
    auto it = names.find(in[i].get<std::string>());
    if (it == names.end()) {
      std::string known = "input";
      for (const auto& kv : names)
        if (kv.second >= 0) known += ", " + kv.first;
      fail(DP_ERR_MODEL, p + "/" + std::to_string(i) + ": no earlier layer named '" + in[i].get<std::string>() +
                             "' (known: " + known + ")");
    }
    out.push_back(it->second);
  }
  return out;
}

std::unique_ptr<Model> Model::from_json(const Registry& registry, const std::string& text,
                                        const PluginHook& load_plugin, uint64_t memory_limit) {
  return read(registry, text, load_plugin, memory_limit, false);
}

std::string Model::canonical_of(const Registry& registry, const std::string& text) {
  return read(registry, text, [](const std::string&, const std::string&) {}, 0, true)->canonical;
}

// describe_only: the layers, loss and canonical text; no parameters.
std::unique_ptr<Model> Model::read(const Registry& registry, const std::string& text, const PluginHook& load_plugin,
                                   uint64_t memory_limit, bool describe_only) {
  const json doc = parse_config(text, "model");
  auto model = std::make_unique<Model>();
  model->description = text;
  Args top(doc, "");
  model->seed = static_cast<uint64_t>(top.integer("seed", 0, 0));
  // What the model means (Model::canonical), built as it is read.
  json canonical = {{"seed", model->seed}, {"layers", json::array()}, {"loss", nullptr}};
  top.accept("name");
  top.accept("description");
  top.accept("input");
  top.accept("loss");

  // "plugins": libraries that register layer types, loaded before the layers
  // are read (docs/plugins.md). The hook resolves relative paths.
  if (doc.contains("plugins")) {
    top.accept("plugins");
    const json& list = doc["plugins"];
    if (!list.is_array()) fail(DP_ERR_MODEL, "/plugins: expected a list of plugin paths or names, got " + json_brief(list));
    for (size_t i = 0; i < list.size(); ++i) {
      std::string p = "/plugins/" + std::to_string(i);
      if (!list[i].is_string() || list[i].get<std::string>().empty())
        fail(DP_ERR_MODEL, p + ": expected a plugin path or name, got " + json_brief(list[i]));
      if (!load_plugin) fail(DP_ERR_PLUGIN, p + ": plugins cannot be loaded here (build the model through a dp_context)");
      try {
        load_plugin(list[i].get<std::string>(), p);
      } catch (const Error& e) {
        fail(e.status(), p + ": " + e.what());
      }
    }
  }

  if (!doc.contains("input")) fail(DP_ERR_MODEL, "/input: missing; expected {\"shape\": [...]} (the shape of one sample)");
  {
    Args input(doc["input"], "/input");
    std::vector<int64_t> shape = input.integers("shape", {});
    if (shape.empty()) fail(DP_ERR_MODEL, "/input/shape: expected a non-empty list of positive integers");
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] < 1) fail(DP_ERR_MODEL, "/input/shape/" + std::to_string(i) + ": expected a positive integer, got " + std::to_string(shape[i]));
    if (shape.size() >= DP_MAX_DIMS) fail(DP_ERR_MODEL, "/input/shape: at most " + std::to_string(DP_MAX_DIMS - 1) + " dimensions per sample");
    for (int64_t v : shape) model->input_shape.push(v);
    model->input_shape.checked_numel("/input/shape");
    std::string dtype = input.string("dtype", "float32");
    if (dtype != "float32") fail(DP_ERR_MODEL, "/input/dtype: expected \"float32\", got \"" + dtype + "\"");
    input.finish("input");
    canonical["input"] = input.resolved();
  }

  if (!doc.contains("layers") || !doc["layers"].is_array() || doc["layers"].empty())
    fail(DP_ERR_MODEL, "/layers: expected a non-empty list of layers");
  top.accept("layers");
  const json& layers = doc["layers"];
  std::map<std::string, int> names{{"input", -1}};
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string path = "/layers/" + std::to_string(i);
    const json& spec = layers[i];
    Args args(spec, path);
    args.accept("type");
    args.accept("name");
    args.accept("inputs");
    if (!spec.contains("type") || !spec["type"].is_string())
      fail(DP_ERR_MODEL, path + "/type: missing; expected a layer type (known: " + registry.layer_names() + ")");
    std::string type = spec["type"].get<std::string>();
    LayerFactory factory = registry.layer(type);
    if (!factory)
      fail(DP_ERR_MODEL, "unknown layer type '" + type + "' at " + path + "/type (known: " + registry.layer_names() + ")");
    std::string name = std::to_string(i);
    if (spec.contains("name")) {
      if (!spec["name"].is_string() || spec["name"].get<std::string>().empty())
        fail(DP_ERR_MODEL, path + "/name: expected a non-empty string, got " + json_brief(spec["name"]));
      name = spec["name"].get<std::string>();
      // Names become state_dict keys and C strings: a NUL would cut them short ("a\u0000b" and "a\u0000c" were both "a").
      for (unsigned char c : name)
        if (c < 0x20 || c == 0x7f)
          fail(DP_ERR_MODEL, path + "/name: " + json(name).dump() + " holds a control character (" +
                                 (c == 0 ? std::string("NUL") : "code " + std::to_string(c)) + "); layer names are text");
    }
    if (names.count(name)) {
      if (!spec.contains("name"))  // its default name, the index, was taken by an earlier layer's "name"
        fail(DP_ERR_MODEL, path + ": this layer's default name '" + name + "' (its index) is already used by an earlier "
                                  "layer's \"name\"; give this one a \"name\", or rename that one");
      fail(DP_ERR_MODEL, path + "/name: '" + name + "' is already used" + (name == "input" ? " (the model's input)" : " by an earlier layer"));
    }

    Node node;
    node.inputs = resolve_inputs(spec, path, static_cast<int>(i), names);
    node.layer = factory(args);
    args.finish(type);
    node.layer->type = type;
    node.layer->name = name;
    node.layer->path = path;
    node.layer->index = static_cast<int>(i);

    auto arity = node.layer->arity();
    int n_in = static_cast<int>(node.inputs.size());
    if (n_in < arity.first || (arity.second >= 0 && n_in > arity.second)) {
      std::string want = arity.second == arity.first ? std::to_string(arity.first)
                         : arity.second < 0          ? "at least " + std::to_string(arity.first)
                                                     : std::to_string(arity.first) + " to " + std::to_string(arity.second);
      fail(DP_ERR_MODEL, path + "/inputs: " + type + " takes " + want + " input(s), got " + std::to_string(n_in));
    }
    std::vector<Shape> in_shapes;
    for (int j : node.inputs) in_shapes.push_back(j < 0 ? model->input_shape : model->nodes[j].out_shape);
    try {
      node.out_shape = node.layer->infer(in_shapes);
    } catch (const Error& e) {
      std::string from;
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        int j = node.inputs[k];
        from += (k ? ", " : "") + (j < 0 ? std::string("the model input") : describe(model->nodes[j])) + " gives " +
                in_shapes[k].str();
      }
      fail(e.status(), describe(node) + ": " + e.what() + " (input: " + from + ")");
    }
    if (node.out_shape.ndim >= DP_MAX_DIMS)
      fail(DP_ERR_SHAPE, describe(node) + ": output has too many dimensions");
    node.out_shape.checked_numel(describe(node) + ": output");
    json meant = spec;  // as given (a plugin may read keys of its own), then as read
    for (const auto& kv : args.resolved().items()) meant[kv.key()] = kv.value();
    // Sizes of built-in layers that the input implies, only checked where
    // given: they mean nothing more (a plugin's keys all count).
    if (type == "linear") meant.erase("in_features");
    if (type == "conv2d") meant.erase("in_channels");
    if (type == "batch_norm" || type == "batch_norm1d" || type == "batch_norm2d") meant.erase("num_features");
    meant["name"] = name;
    json from = json::array();
    for (int j : node.inputs) from.push_back(j < 0 ? std::string("input") : model->nodes[j].layer->name);
    meant["inputs"] = from;
    canonical["layers"].push_back(std::move(meant));
    names[name] = static_cast<int>(i);
    model->nodes.push_back(std::move(node));
  }

  if (!describe_only) model->allocate(memory_limit);

  if (doc.contains("loss")) {
    Args args(doc["loss"], "/loss");
    args.accept("type");
    const json& spec = doc["loss"];
    if (!spec.contains("type") || !spec["type"].is_string())
      fail(DP_ERR_MODEL, "/loss/type: missing; expected a loss type (known: " + registry.loss_names() + ")");
    std::string type = spec["type"].get<std::string>();
    LossFactory factory = registry.loss(type);
    if (!factory)
      fail(DP_ERR_MODEL, "unknown loss type '" + type + "' at /loss/type (known: " + registry.loss_names() + ")");
    model->loss = factory(args);
    args.finish(type);
    model->loss->type = type;
    canonical["loss"] = args.resolved();
    canonical["loss"]["type"] = type;
    try {
      model->target_shape = model->loss->target_shape(model->output_shape(), &model->target_dtype);
    } catch (const Error& e) {
      fail(e.status(), "/loss (" + type + "): " + e.what() + " (the model's output, from " + describe(model->nodes.back()) +
                           ", is " + model->output_shape().str() + " per sample)");
    }
  }
  top.finish("a model");
  model->canonical = canonical.dump();
  return model;
}

// Sizes first, overflow-checked, and the memory they take (parameters,
// gradients, buffers) against the limit, before anything is allocated; then
// the flat arrays, initialised from the seed.
void Model::allocate(uint64_t limit) {
  int64_t n_params = 0, n_buffers = 0, largest = 0;
  const Node* largest_node = nullptr;
  for (const auto& node : nodes) {
    int64_t mine = 0;
    for (const TensorSpec& s : node.layer->params())
      mine = checked_add(mine, s.shape.checked_numel(describe(node) + " parameter '" + s.suffix + "'"), describe(node));
    for (const TensorSpec& s : node.layer->buffers())
      n_buffers = checked_add(n_buffers, s.shape.checked_numel(describe(node) + " buffer '" + s.suffix + "'"), describe(node));
    n_params = checked_add(n_params, mine, "the model's parameters");
    if (mine > largest || !largest_node) {
      largest = mine;
      largest_node = &node;
    }
  }
  const int64_t floats = checked_add(checked_mul(n_params, 2, "the model's parameters and gradients"), n_buffers,
                                     "the model's parameters, gradients and buffers");
  check_fits(0, static_cast<uint64_t>(checked_mul(floats, 4, "the model's bytes")), limit,
             "the model (" + std::to_string(n_params) + " parameters, their gradients and " + std::to_string(n_buffers) +
                 " buffer floats; the largest layer is " + describe(*largest_node) + " with " + std::to_string(largest) +
                 " parameters, " + format_bytes(8.0 * double(largest)) + " with gradients)");
  memory_limit = limit;
  params_.reserve(static_cast<size_t>(n_params));
  buffers_.reserve(static_cast<size_t>(n_buffers));

  // Flat parameter and buffer arrays, initialised from the seed: parameter k
  // draws from its own stream, so adding a layer never shifts the others.
  for (auto& node : nodes) {
    node.param_offset = static_cast<int64_t>(params_.size());
    for (const TensorSpec& s : node.layer->params()) {
      NamedTensor nt{node.layer->name + "." + s.suffix, s.shape, static_cast<int64_t>(params_.size())};
      params_.resize(params_.size() + s.shape.numel());
      uint64_t key = hash_keys(seed, 0x9a5a, param_info.size());
      init_tensor(params_.data() + nt.offset, s.shape.numel(), s.init, key);
      param_info.push_back(nt);
    }
    node.param_count = static_cast<int64_t>(params_.size()) - node.param_offset;
    node.buffer_offset = static_cast<int64_t>(buffers_.size());
    for (const TensorSpec& s : node.layer->buffers()) {
      NamedTensor nt{node.layer->name + "." + s.suffix, s.shape, static_cast<int64_t>(buffers_.size())};
      buffers_.resize(buffers_.size() + s.shape.numel());
      init_tensor(buffers_.data() + nt.offset, s.shape.numel(), s.init, 0);
      buffer_info.push_back(nt);
    }
    node.buffer_count = static_cast<int64_t>(buffers_.size()) - node.buffer_offset;
    node.stats_offset = stats_total;
    node.stats_count = node.layer->stats_size();
    stats_total += node.stats_count;
  }
  grads_.assign(params_.size(), 0.0f);
}

std::vector<float>& DeviceCopy::host_params(Model& m) { return m.params_; }
std::vector<float>& DeviceCopy::host_grads(Model& m) { return m.grads_; }

}  // namespace dp
