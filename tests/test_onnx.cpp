// ONNX export (io/onnx.h): small models that together use every built-in
// layer type (checked against the registry, so a new built-in without an
// ONNX mapping fails here) export to graphs that parse and pass ONNX's
// checker, with the input, output and weights where dp has them; a layer type
// without a mapping (a plugin's) and a bad opset or path fail with a clear
// error and write nothing. The numbers themselves are compared with ONNX
// Runtime by tests/check_onnx.py. Built without ONNX support, the one test
// checks the stub's message.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/onnx.h"
#include "layers/registry.h"
#include "model/model.h"

#ifdef DP_HAVE_ONNX
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#endif

namespace {

std::unique_ptr<dp::Model> build(const std::string& text, const dp::Registry& registry = dp::Registry()) {
  return dp::Model::from_json(registry, text);
}

// dp::Error's status and message from running f.
template <class F>
std::pair<dp_status, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const dp::Error& e) {
    return {e.status(), e.what()};
  }
  return {DP_OK, ""};
}

struct TmpDir {
  std::string path;
  TmpDir() {
    char tmpl[] = "/tmp/dp_test_onnx_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  size_t count() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) (void)e, ++n;
    return n;
  }
};

}  // namespace

#ifndef DP_HAVE_ONNX

TEST_CASE("built without ONNX: export says so") {
  auto m = build(R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 2}]})");
  CHECK_FALSE(dp::io::onnx_supported());
  auto [status, msg] = error_of([&] { dp::io::export_onnx(*m, "/tmp/dp_test_onnx_never.onnx"); });
  CHECK(status == DP_ERR_IO);
  CHECK(msg.find("built without ONNX support") != std::string::npos);
  CHECK(msg.find("libonnx-dev") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists("/tmp/dp_test_onnx_never.onnx"));
}

#else

namespace {

// A plugin-like layer type: registered at run time, not a built-in.
class Swish final : public dp::Layer {
 public:
  dp::Shape infer(const std::vector<dp::Shape>& in) override { return in[0]; }
  void forward(const dp::RunCtx&, dp::LayerIO&) const override {}
  void backward(const dp::RunCtx&, dp::LayerIO&) const override {}
};
std::unique_ptr<dp::Layer> make_swish(dp::Args&) { return std::make_unique<Swish>(); }

const char* kSwishNet = R"({"input": {"shape": [4]},
  "layers": [{"type": "linear", "out_features": 3}, {"type": "swish_test", "name": "act"},
             {"type": "linear", "out_features": 2}]})";

// Models that, together, use every built-in layer type and the options that
// change the mapping (tests/check_onnx.py runs the same ones in ONNX Runtime).
struct Case {
  const char* name;
  const char* json;
  std::vector<std::string> ops;  // op types the graph must have
};

const Case kCases[] = {
    {"fashion_mnist_cnn", R"({"seed": 1, "input": {"shape": [1, 28, 28]},
      "layers": [
        {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1},
        {"type": "batch_norm2d"}, {"type": "relu"}, {"type": "max_pool2d", "kernel_size": 2},
        {"type": "conv2d", "out_channels": 16, "kernel_size": 3, "padding": 1},
        {"type": "batch_norm2d"}, {"type": "relu"}, {"type": "max_pool2d", "kernel_size": 2},
        {"type": "flatten"}, {"type": "dropout", "p": 0.25},
        {"type": "linear", "out_features": 32}, {"type": "relu"}, {"type": "linear", "out_features": 10}],
      "loss": {"type": "cross_entropy"}})",
     {"Conv", "BatchNormalization", "Relu", "MaxPool", "Flatten", "Gemm"}},
    {"pools", R"({"seed": 2, "input": {"shape": [2, 9, 9]},
      "layers": [
        {"type": "max_pool2d", "kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": true,
         "name": "mp_dil", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g1"},
        {"type": "max_pool2d", "kernel_size": 2, "padding": 1, "ceil_mode": true, "name": "mp_ceil", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g2"},
        {"type": "avg_pool2d", "kernel_size": 2, "padding": 1, "ceil_mode": true, "name": "ap_inc", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g3"},
        {"type": "avg_pool2d", "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": true,
         "count_include_pad": false, "name": "ap_exc", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g4"},
        {"type": "avg_pool2d", "kernel_size": [3, 2], "stride": [2, 3], "name": "ap_plain", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g5"},
        {"type": "avg_pool2d", "kernel_size": 3, "stride": 2, "padding": 1, "name": "ap_pad", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g6"},
        {"type": "max_pool2d", "kernel_size": 2, "stride": 4, "padding": 1, "dilation": 3, "ceil_mode": true,
         "name": "mp_far", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g7"},
        {"type": "max_pool2d", "kernel_size": 2, "ceil_mode": true, "name": "mp_over", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g8"},
        {"type": "avg_pool2d", "kernel_size": 2, "ceil_mode": true, "name": "ap_over", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g9"},
        {"type": "avg_pool2d", "kernel_size": 3, "stride": 2, "ceil_mode": true, "count_include_pad": false,
         "name": "ap_over_exc", "inputs": ["input"]},
        {"type": "global_avg_pool", "name": "g10"},
        {"type": "concat", "inputs": ["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "g9", "g10"]},
        {"type": "linear", "out_features": 4}]})",
     {"MaxPool", "AveragePool", "Pad", "ReduceMean", "Concat", "Gemm"}},
    {"mlp_ops", R"({"seed": 3, "input": {"shape": [6, 5]},
      "layers": [
        {"type": "linear", "out_features": 8, "name": "l3d"},
        {"type": "batch_norm1d", "name": "bn1d"},
        {"type": "gelu"},
        {"type": "flatten"},
        {"type": "linear", "out_features": 16, "bias": false, "name": "nobias"},
        {"type": "batch_norm", "affine": false, "name": "bn_noaffine"},
        {"type": "gelu", "approximate": "tanh", "name": "gt"},
        {"type": "dropout", "p": 0.3, "name": "drop"},
        {"type": "sigmoid", "name": "s"},
        {"type": "tanh", "name": "t"},
        {"type": "leaky_relu", "negative_slope": 0.2, "name": "lr", "inputs": ["drop"]},
        {"type": "add", "inputs": ["s", "t", "lr"], "name": "sum3"},
        {"type": "add", "inputs": ["sum3", "gt"], "name": "sum2"},
        {"type": "batch_norm", "track_running_stats": false, "name": "bn_batch"},
        {"type": "linear", "out_features": 10},
        {"type": "softmax", "dim": -1},
        {"type": "dropout", "p": 0.5}]})",
     {"MatMul", "Transpose", "BatchNormalization", "Erf", "Tanh", "Sigmoid", "LeakyRelu", "Sum", "Add",
      "ReduceMean", "Sqrt", "Softmax", "Identity", "Gemm", "Flatten"}},
    {"shapes", R"({"seed": 4, "input": {"shape": [2, 3, 4, 5]},
      "layers": [
        {"type": "flatten", "start_dim": 2, "end_dim": 3, "name": "flat"},
        {"type": "softmax", "dim": 2, "name": "soft"},
        {"type": "concat", "dim": -1, "inputs": ["flat", "soft"]},
        {"type": "batch_norm", "track_running_stats": false, "affine": false},
        {"type": "linear", "out_features": 3, "bias": false},
        {"type": "relu"}]})",
     {"Reshape", "Softmax", "Concat", "ReduceMean", "MatMul", "Relu"}},
    {"convs", R"({"seed": 5, "input": {"shape": [4, 8, 8]},
      "layers": [
        {"type": "conv2d", "out_channels": 6, "kernel_size": [3, 1], "stride": [2, 1], "padding": [1, 0],
         "dilation": [2, 1], "groups": 2},
        {"type": "batch_norm2d", "track_running_stats": false},
        {"type": "conv2d", "out_channels": 6, "kernel_size": 1, "bias": false},
        {"type": "batch_norm2d", "affine": false, "eps": 0.001},
        {"type": "relu"},
        {"type": "global_avg_pool"},
        {"type": "linear", "out_features": 3}]})",
     {"Conv", "BatchNormalization", "Reshape", "ReduceMean", "Relu", "Gemm"}},
};

// Running statistics away from their initial 0 and 1.
void perturb_buffers(dp::Model& m) {
  std::vector<float>& b = m.mutable_buffers();
  for (const dp::NamedTensor& t : m.buffer_info) {
    const bool var = t.name.size() > 4 && t.name.compare(t.name.size() - 4, 4, "_var") == 0;
    for (int64_t i = 0; i < t.shape.numel(); ++i)
      b[static_cast<size_t>(t.offset + i)] = var ? 0.5f + 0.25f * static_cast<float>(i % 5) : 0.1f * static_cast<float>(i % 7) - 0.3f;
  }
}

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto mp;
  REQUIRE(mp.ParseFromString(bytes));
  return mp;
}

// [N, dims...] with N symbolic.
void check_value(const onnx::ValueInfoProto& v, const std::string& name, const dp::Shape& sample) {
  CHECK(v.name() == name);
  const auto& t = v.type().tensor_type();
  CHECK(t.elem_type() == onnx::TensorProto::FLOAT);
  REQUIRE(t.shape().dim_size() == sample.ndim + 1);
  CHECK(t.shape().dim(0).dim_param() == "N");
  for (int i = 0; i < sample.ndim; ++i) CHECK(t.shape().dim(i + 1).dim_value() == sample[i]);
}

// Every parameter and buffer is an initializer of its state_dict name, with
// its shape and exactly its values.
void check_weights(const onnx::GraphProto& g, const dp::Model& m) {
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  auto check = [&](const std::vector<dp::NamedTensor>& infos, const std::vector<float>& data) {
    for (const dp::NamedTensor& nt : infos) {
      CAPTURE(nt.name);
      REQUIRE(inits.count(nt.name) == 1);
      const onnx::TensorProto& t = *inits[nt.name];
      CHECK(t.data_type() == onnx::TensorProto::FLOAT);
      REQUIRE(t.dims_size() == nt.shape.ndim);
      for (int i = 0; i < nt.shape.ndim; ++i) CHECK(t.dims(i) == nt.shape[i]);
      const size_t bytes = static_cast<size_t>(nt.shape.numel()) * sizeof(float);
      REQUIRE(t.raw_data().size() == bytes);
      CHECK(std::memcmp(t.raw_data().data(), data.data() + nt.offset, bytes) == 0);
    }
  };
  check(m.param_info, m.params());
  check(m.buffer_info, m.buffers());
}

}  // namespace

TEST_CASE("the models below use every built-in layer type") {
  dp::Registry registry;
  std::set<std::string> used;
  for (const Case& c : kCases) {
    auto m = build(c.json);
    for (const dp::Node& n : m->nodes) used.insert(n.layer->type);
  }
  // "add, avg_pool2d, ..." (the registry's own list)
  std::string names = registry.layer_names() + ", ";
  for (size_t at = 0, next; (next = names.find(", ", at)) != std::string::npos; at = next + 2) {
    const std::string type = names.substr(at, next - at);
    CAPTURE(type);
    CHECK_MESSAGE(used.count(type) == 1, "add a model with this layer type here (and its ONNX mapping to io/onnx.cpp)");
  }
}

TEST_CASE("every built-in layer exports to a graph that passes ONNX's checker") {
  REQUIRE(dp::io::onnx_supported());
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    auto m = build(c.json);
    perturb_buffers(*m);
    const std::string bytes = dp::io::onnx_model_bytes(*m);
    onnx::ModelProto mp = parse(bytes);
    CHECK_NOTHROW(onnx::checker::check_model(mp));
    CHECK(mp.ir_version() == onnx::IR_VERSION);
    REQUIRE(mp.opset_import_size() == 1);
    CHECK(mp.opset_import(0).domain().empty());
    CHECK(mp.opset_import(0).version() == dp::io::kOnnxOpsetDefault);
    CHECK(mp.producer_name() == "dp");
    REQUIRE(mp.metadata_props_size() == 1);
    CHECK(mp.metadata_props(0).key() == "dp.model");
    CHECK(mp.metadata_props(0).value() == m->description);

    const onnx::GraphProto& g = mp.graph();
    REQUIRE(g.input_size() == 1);
    REQUIRE(g.output_size() == 1);
    check_value(g.input(0), "input", m->input_shape);
    check_value(g.output(0), "output", m->output_shape());
    check_weights(g, *m);

    std::multiset<std::string> ops;
    for (const auto& n : g.node()) {
      ops.insert(n.op_type());
      CHECK(n.domain().empty());
    }
    for (const std::string& op : c.ops) {
      CAPTURE(op);
      CHECK(ops.count(op) > 0);
    }
    CHECK(ops.count("Dropout") == 0);  // removed: evaluation form
    // Strict shape inference ran at export and recorded the intermediate shapes.
    CHECK(g.value_info_size() > 0);
    // ceil_mode is written as end padding: runtimes size it alike.
    for (const auto& n : g.node())
      for (const auto& a : n.attribute())
        if (a.name() == "ceil_mode") CHECK(a.i() == 0);
  }
}

TEST_CASE("evaluation form: batch norm reads the running statistics, dropout is gone") {
  auto m = build(R"({"input": {"shape": [3]},
    "layers": [{"type": "batch_norm", "eps": 0.01, "name": "bn"}, {"type": "dropout", "p": 0.4, "name": "d"},
               {"type": "linear", "out_features": 2, "name": "fc"}]})");
  perturb_buffers(*m);
  onnx::ModelProto mp = parse(dp::io::onnx_model_bytes(*m));
  const onnx::GraphProto& g = mp.graph();
  REQUIRE(g.node_size() == 2);
  const onnx::NodeProto& bn = g.node(0);
  CHECK(bn.op_type() == "BatchNormalization");
  CHECK(bn.name() == "bn");
  REQUIRE(bn.input_size() == 5);
  CHECK(bn.input(0) == "input");
  CHECK(bn.input(1) == "bn.weight");
  CHECK(bn.input(2) == "bn.bias");
  CHECK(bn.input(3) == "bn.running_mean");
  CHECK(bn.input(4) == "bn.running_var");
  REQUIRE(bn.output_size() == 1);  // no training-mode outputs
  bool eps = false;
  for (const auto& a : bn.attribute()) {
    CHECK(a.name() != "training_mode");
    if (a.name() == "epsilon") {
      eps = true;
      CHECK(a.f() == doctest::Approx(0.01));
    }
  }
  CHECK(eps);
  // The dropout's output is its input: the linear reads the batch norm's.
  const onnx::NodeProto& fc = g.node(1);
  CHECK(fc.op_type() == "Gemm");
  CHECK(fc.input(0) == bn.output(0));
  CHECK(fc.output(0) == "output");
}

TEST_CASE("a layer type without an ONNX mapping (a plugin's) is refused by name") {
  dp::Registry registry;
  registry.add_layer("swish_test", make_swish);
  auto m = build(kSwishNet, registry);
  TmpDir dir;
  auto [status, msg] = error_of([&] { dp::io::export_onnx(*m, dir / "swish.onnx"); });
  CHECK(status == DP_ERR_MODEL);
  CHECK(msg.find("/layers/1 (swish_test 'act')") != std::string::npos);
  CHECK(msg.find("layer type 'swish_test' has no ONNX mapping") != std::string::npos);
  CHECK(msg.find("conv2d") != std::string::npos);  // what does export
  CHECK(dir.count() == 0);                         // nothing written
  CHECK(error_of([&] { dp::io::onnx_model_bytes(*m); }).first == DP_ERR_MODEL);
}

TEST_CASE("opsets 13 to 17 pass the checker; others are refused") {
  auto m = build(kCases[2].json);
  for (int opset = dp::io::kOnnxOpsetMin; opset <= dp::io::kOnnxOpsetMax; ++opset) {
    CAPTURE(opset);
    onnx::ModelProto mp = parse(dp::io::onnx_model_bytes(*m, opset));
    CHECK(mp.opset_import(0).version() == opset);
    CHECK_NOTHROW(onnx::checker::check_model(mp));
  }
  for (int opset : {12, 18, 0, -1}) {
    CAPTURE(opset);
    auto [status, msg] = error_of([&] { dp::io::onnx_model_bytes(*m, opset); });
    CHECK(status == DP_ERR_INVALID_ARGUMENT);
    CHECK(msg.find("opset " + std::to_string(opset) + " is not supported") != std::string::npos);
  }
}

TEST_CASE("export_onnx writes the checked bytes, atomically") {
  auto m = build(kCases[0].json);
  perturb_buffers(*m);
  TmpDir dir;
  const std::string path = dir / "cnn.onnx";
  dp::io::export_onnx(*m, path);
  CHECK(dir.count() == 1);  // no temporary file left
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(bytes == dp::io::onnx_model_bytes(*m));
  CHECK_NOTHROW(onnx::checker::check_model(path));
  // Over an existing file.
  dp::io::export_onnx(*m, path);
  CHECK(dir.count() == 1);

  // A directory that does not exist: DP_ERR_IO naming the path; nothing made.
  const std::string bad = dir / "missing/cnn.onnx";
  auto [status, msg] = error_of([&] { dp::io::export_onnx(*m, bad); });
  CHECK(status == DP_ERR_IO);
  CHECK(msg.rfind(bad + ": ", 0) == 0);
  CHECK(msg.find("No such file or directory") != std::string::npos);
  CHECK(dir.count() == 1);
}

TEST_CASE("a layer named like the graph's input or output keeps the names apart") {
  auto m = build(R"({"input": {"shape": [4]},
    "layers": [{"type": "linear", "out_features": 4, "name": "output"}, {"type": "relu", "name": "r"},
               {"type": "add", "inputs": ["output", "r"]}]})");
  onnx::ModelProto mp = parse(dp::io::onnx_model_bytes(*m));
  CHECK_NOTHROW(onnx::checker::check_model(mp));
  const onnx::GraphProto& g = mp.graph();
  CHECK(g.node(0).output(0) != "output");
  CHECK(g.node(g.node_size() - 1).output(0) == "output");
  // The initializers keep their state_dict names.
  check_weights(g, *m);
}

#endif
