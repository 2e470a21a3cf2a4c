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

#include <nlohmann/json.hpp>

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
// change the mapping, with the op types each graph must have:
// tests/onnx_models.json, which tests/check_onnx.py runs in ONNX Runtime.
struct Case {
  std::string name, json;
  std::vector<std::string> ops;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::ifstream f(DP_ONNX_MODELS);
    REQUIRE(f.good());
    const nlohmann::json doc = nlohmann::json::parse(f);
    std::vector<Case> out;
    for (auto it = doc.begin(); it != doc.end(); ++it)
      out.push_back({it.key(), it.value()["model"].dump(), it.value()["ops"].get<std::vector<std::string>>()});
    return out;
  }();
  return all;
}

const Case& named(const std::string& name) {
  for (const Case& c : cases())
    if (c.name == name) return c;
  FAIL("no model '" << name << "' in " << DP_ONNX_MODELS);
  return cases().front();  // not reached: FAIL throws
}

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
  for (const Case& c : cases()) {
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
  for (const Case& c : cases()) {
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
  auto m = build(named("mlp_ops").json);
  for (int opset = dp::io::kOnnxOpsetMin; opset <= dp::io::kOnnxOpsetMax; ++opset) {
    CAPTURE(opset);
    onnx::ModelProto mp = parse(dp::io::onnx_model_bytes(*m, opset));
    CHECK(mp.opset_import(0).version() == opset);
    CHECK_NOTHROW(onnx::checker::check_model(mp));
  }
  // layer_norm: LayerNormalization from opset 17, written out before it.
  auto norms = build(named("norms").json);
  for (int opset = dp::io::kOnnxOpsetMin; opset <= dp::io::kOnnxOpsetMax; ++opset) {
    CAPTURE(opset);
    onnx::ModelProto mp = parse(dp::io::onnx_model_bytes(*norms, opset));
    CHECK_NOTHROW(onnx::checker::check_model(mp));
    std::set<std::string> ops;
    for (const auto& n : mp.graph().node()) ops.insert(n.op_type());
    CHECK(ops.count("LayerNormalization") == (opset >= 17 ? 1u : 0u));
    CHECK(ops.count("ReduceMean") == (opset >= 17 ? 0u : 1u));
  }
  for (int opset : {12, 18, 0, -1}) {
    CAPTURE(opset);
    auto [status, msg] = error_of([&] { dp::io::onnx_model_bytes(*m, opset); });
    CHECK(status == DP_ERR_INVALID_ARGUMENT);
    CHECK(msg.find("opset " + std::to_string(opset) + " is not supported") != std::string::npos);
  }
}

TEST_CASE("export_onnx writes the checked bytes, atomically") {
  auto m = build(named("fashion_mnist_cnn").json);
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
