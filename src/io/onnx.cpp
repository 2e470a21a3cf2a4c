// ONNX export (io/onnx.h) with ONNX's own protobuf classes and checker
// (libonnx, libonnx_proto).
//
// How a layer's hyperparameters are recovered: each built-in layer class
// derives from a plain *Attrs struct (layers/conv2d.h, layers/pool2d.h, ...)
// holding its parsed hyperparameters and the shapes infer() recorded; the
// CUDA backend reads them with dynamic_cast, and so does this exporter. That
// is exactly what the model runs (defaults applied, pairs expanded, negative
// dims as given), with no second parser of the JSON text to keep in step.
// The type name picks the mapping: plugins cannot register a built-in's name
// (plugin.cpp refuses it), so a "conv2d" is always the built-in, and any
// other type (a plugin's) has no mapping and is refused by name.
#include "io/onnx.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/whole_file.h"
#include "layers/activations.h"
#include "layers/batch_norm.h"
#include "layers/layer_norm.h"
#include "layers/concat.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/elementwise.h"
#include "layers/flatten.h"
#include "layers/global_avg_pool.h"
#include "layers/linear.h"
#include "layers/pool2d.h"
#include "layers/softmax.h"
#include "layers/util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ONNX raw_data is little-endian: this exporter copies floats as they are in memory"
#endif

namespace dp::io {

namespace {

// The types with a mapping, for the error message (the registry's order).
const char* const kMapped =
    "add, avg_pool2d, batch_norm, batch_norm1d, batch_norm2d, concat, conv2d, dropout, flatten, gelu, "
    "global_avg_pool, layer_norm, leaky_relu, linear, log_softmax, max_pool2d, relu, sigmoid, softmax, tanh";

std::string describe(const Layer& l) { return l.path + " (" + l.type + " '" + l.name + "')"; }

template <class T>
const T& attrs(const Layer& l) {
  const auto* a = dynamic_cast<const T*>(&l);
  if (!a) fail(DP_ERR_INTERNAL, "ONNX export: " + describe(l) + " is not the built-in layer of its type");
  return *a;
}

// An ONNX graph under construction: unique value names, initializers,
// nodes.
class Graph {
 public:
  explicit Graph(onnx::GraphProto* g) : g_(g) {}

  // name if no value has it yet, else name_1, name_2, ...
  std::string fresh(const std::string& name) {
    std::string n = name;
    for (int k = 1; !values_.insert(n).second; ++k) n = name + "_" + std::to_string(k);
    return n;
  }

  // A float32 initializer, data copied (numel(dims) floats).
  std::string floats(const std::string& name, const std::vector<int64_t>& dims, const float* data) {
    std::string n = fresh(name);
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(n);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t numel = 1;
    for (int64_t d : dims) t->add_dims(d), numel *= d;
    t->set_raw_data(data, static_cast<size_t>(numel) * sizeof(float));
    return n;
  }

  // A float32 scalar (shape []), one per value.
  std::string scalar(float v) {
    auto it = scalars_.find(v);
    if (it != scalars_.end()) return it->second;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
    return scalars_[v] = floats(std::string("const_") + buf, {}, &v);
  }

  // An int64 vector initializer (shapes, pads, axes for the ops that take them as inputs).
  std::string int64s(const std::string& name, const std::vector<int64_t>& v) {
    std::string n = fresh(name);
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(n);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return n;
  }

  // A node: op_type over inputs, writing outputs (already fresh names).
  onnx::NodeProto* node(const std::string& op, const std::string& node_name, const std::vector<std::string>& in,
                        const std::vector<std::string>& out) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    std::string nn = node_name;
    for (int k = 1; !node_names_.insert(nn).second; ++k) nn = node_name + "_" + std::to_string(k);
    n->set_name(nn);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  // A one-output node whose output is a fresh value named after it.
  std::string op(const std::string& op_type, const std::string& base, const std::vector<std::string>& in) {
    std::string out = fresh(base);
    node(op_type, base, in, {out});
    return out;
  }

 private:
  onnx::GraphProto* g_;
  std::set<std::string> values_, node_names_;
  std::map<float, std::string> scalars_;
};

void set_int(onnx::NodeProto* n, const char* name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_ints(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_float(onnx::NodeProto* n, const char* name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void set_type(onnx::ValueInfoProto* v, const std::string& name, const Shape& sample) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("N");
  for (int i = 0; i < sample.ndim; ++i) s->add_dim()->set_dim_value(sample[i]);
}

// ceil_mode, written without it. dp (as PyTorch) counts a last window that
// overhangs the input, unless it would start in the right padding; ONNX's
// original formula counts that one too, and runtimes (and their shape
// inference) differ. Floor mode with the right end padding is unambiguous:
// the pad after the input that makes floor((in + begin + end - eff) / s) + 1
// equal dp's count. Pooling ignores padded cells (MaxPool; AveragePool with
// count_include_pad 0), so the overhang's windows are dp's.
int64_t ceil_end_pad(int64_t in, int64_t k, int64_t s, int64_t begin, int64_t d, int64_t out) {
  return std::max<int64_t>(0, (out - 1) * s + d * (k - 1) + 1 - in - begin);
}

// Everything about one dp node the emitters need.
struct Ctx {
  Graph& g;
  const Layer& l;
  std::vector<std::string> in;  // value names of the inputs
  std::vector<Shape> in_shape;  // per sample
  std::string out;              // the value to write (fresh already)
  std::map<std::string, std::string> w;  // suffix ("weight") -> initializer
  int opset = kOnnxOpsetDefault;         // the file's
};

void emit_linear(Ctx& c) {
  const auto& a = attrs<LinearAttrs>(c.l);
  const std::string& x = c.in[0];
  if (c.in_shape[0].ndim == 1) {
    // [N, in] x [out, in]^T + [out]: one Gemm.
    std::vector<std::string> ins{x, c.w.at("weight")};
    if (a.bias_) ins.push_back(c.w.at("bias"));
    set_int(c.g.node("Gemm", c.l.name, ins, {c.out}), "transB", 1);
    return;
  }
  // [N, ..., in]: MatMul with the transposed weight (a constant Transpose
  // that runtimes fold), then the bias.
  onnx::NodeProto* t = c.g.node("Transpose", c.l.name + "/Transpose", {c.w.at("weight")}, {c.g.fresh(c.l.name + "/weight_t")});
  set_ints(t, "perm", {1, 0});
  if (!a.bias_) {
    c.g.node("MatMul", c.l.name, {x, t->output(0)}, {c.out});
    return;
  }
  std::string mm = c.g.op("MatMul", c.l.name + "/MatMul", {x, t->output(0)});
  c.g.node("Add", c.l.name, {mm, c.w.at("bias")}, {c.out});
}

void emit_conv2d(Ctx& c) {
  const auto& a = attrs<Conv2dAttrs>(c.l);
  std::vector<std::string> ins{c.in[0], c.w.at("weight")};
  if (a.bias_) ins.push_back(c.w.at("bias"));
  onnx::NodeProto* n = c.g.node("Conv", c.l.name, ins, {c.out});
  set_ints(n, "kernel_shape", {a.kh_, a.kw_});
  set_ints(n, "strides", {a.sh_, a.sw_});
  set_ints(n, "pads", {a.ph_, a.pw_, a.ph_, a.pw_});
  set_ints(n, "dilations", {a.dh_, a.dw_});
  set_int(n, "group", a.groups_);
}

// The layer's input less its mean over `axes`, and sqrt(its biased variance
// over them + eps): a normalization written out in ONNX ops.
std::pair<std::string, std::string> centered_and_std(Ctx& c, const std::vector<int64_t>& axes, double eps) {
  const std::string& x = c.in[0];
  const std::string& n = c.l.name;
  onnx::NodeProto* mean = c.g.node("ReduceMean", n + "/mean", {x}, {c.g.fresh(n + "/mean")});
  set_ints(mean, "axes", axes);
  std::string d = c.g.op("Sub", n + "/centered", {x, mean->output(0)});
  std::string sq = c.g.op("Mul", n + "/squared", {d, d});
  onnx::NodeProto* var = c.g.node("ReduceMean", n + "/var", {sq}, {c.g.fresh(n + "/var")});
  set_ints(var, "axes", axes);
  std::string ve = c.g.op("Add", n + "/var_eps", {var->output(0), c.g.scalar(static_cast<float>(eps))});
  return {d, c.g.op("Sqrt", n + "/std", {ve})};
}

void emit_batch_norm(Ctx& c) {
  const auto& a = attrs<BatchNormAttrs>(c.l);
  const int rank = c.in_shape[0].ndim + 1;  // with the batch
  std::string scale, bias;
  if (a.affine_) {
    scale = c.w.at("weight"), bias = c.w.at("bias");
  }
  if (a.track_) {
    // Evaluation form: the running statistics.
    if (!a.affine_) {
      std::vector<float> ones(static_cast<size_t>(a.C_), 1.f), zeros(static_cast<size_t>(a.C_), 0.f);
      scale = c.g.floats(c.l.name + "/ones", {a.C_}, ones.data());
      bias = c.g.floats(c.l.name + "/zeros", {a.C_}, zeros.data());
    }
    onnx::NodeProto* n = c.g.node("BatchNormalization", c.l.name,
                                  {c.in[0], scale, bias, c.w.at("running_mean"), c.w.at("running_var")}, {c.out});
    set_float(n, "epsilon", static_cast<float>(a.eps_));
    return;
  }
  // track_running_stats false: evaluation normalises with the batch's own
  // statistics (biased variance), as in training; written out, since
  // BatchNormalization's training mode is not for inference runtimes.
  std::vector<int64_t> axes{0};
  for (int i = 2; i < rank; ++i) axes.push_back(i);
  const std::string& n = c.l.name;
  const auto [d, sd] = centered_and_std(c, axes, a.eps_);
  if (!a.affine_) {
    c.g.node("Div", n, {d, sd}, {c.out});
    return;
  }
  if (rank > 2) {
    // [C] -> [C, 1, ...] to broadcast over [N, C, ...].
    std::vector<int64_t> shape{a.C_};
    for (int i = 2; i < rank; ++i) shape.push_back(1);
    std::string sh = c.g.int64s(n + "/affine_shape", shape);
    scale = c.g.op("Reshape", n + "/weight", {scale, sh});
    bias = c.g.op("Reshape", n + "/bias", {bias, sh});
  }
  std::string xhat = c.g.op("Div", n + "/normalized", {d, sd});
  std::string sc = c.g.op("Mul", n + "/scaled", {xhat, scale});
  c.g.node("Add", n, {sc, bias}, {c.out});
}

// LayerNormalization from opset 17; before it written out (as PyTorch's
// exporter does): the mean and biased variance over the trailing axes.
void emit_layer_norm(Ctx& c) {
  const auto& a = attrs<LayerNormAttrs>(c.l);
  const int rank = c.in_shape[0].ndim + 1;  // with the batch
  const int axis = rank - a.shape_.ndim;
  const std::string& x = c.in[0];
  const std::string& n = c.l.name;
  std::string scale = a.affine_ ? c.w.at("weight") : "";
  const std::string bias = a.affine_ && a.bias_ ? c.w.at("bias") : "";
  if (c.opset >= 17) {
    if (scale.empty()) {
      std::vector<float> ones(static_cast<size_t>(a.D_), 1.f);
      scale = c.g.floats(n + "/ones", std::vector<int64_t>(a.shape_.d, a.shape_.d + a.shape_.ndim), ones.data());
    }
    std::vector<std::string> ins{x, scale};
    if (!bias.empty()) ins.push_back(bias);
    onnx::NodeProto* node = c.g.node("LayerNormalization", n, ins, {c.out});
    set_int(node, "axis", axis);
    set_float(node, "epsilon", static_cast<float>(a.eps_));
    return;
  }
  std::vector<int64_t> axes;
  for (int i = axis; i < rank; ++i) axes.push_back(i);
  const auto [d, sd] = centered_and_std(c, axes, a.eps_);
  if (scale.empty()) {
    c.g.node("Div", n, {d, sd}, {c.out});
    return;
  }
  std::string xhat = c.g.op("Div", n + "/normalized", {d, sd});
  if (bias.empty()) {
    c.g.node("Mul", n, {xhat, scale}, {c.out});
    return;
  }
  std::string sc = c.g.op("Mul", n + "/scaled", {xhat, scale});
  c.g.node("Add", n, {sc, bias}, {c.out});
}

void emit_max_pool2d(Ctx& c) {
  const auto& a = attrs<MaxPool2dAttrs>(c.l);
  std::string x = c.in[0];
  std::vector<int64_t> pads{a.ph_, a.pw_, a.ph_, a.pw_};
  if (a.ceil_) {
    const int64_t eh = ceil_end_pad(a.H_, a.kh_, a.sh_, a.ph_, a.dh_, a.Ho_);
    const int64_t ew = ceil_end_pad(a.W_, a.kw_, a.sw_, a.pw_, a.dw_, a.Wo_);
    pads = {a.ph_, a.pw_, eh, ew};
    if (eh >= a.kh_ || ew >= a.kw_) {
      // ONNX Runtime requires pads smaller than the kernel; a dilated
      // kernel's end pad may reach it. Then the padding is explicit, with
      // -inf, which no maximum takes.
      const std::string p = c.g.int64s(c.l.name + "/pads", {0, 0, a.ph_, a.pw_, 0, 0, eh, ew});
      x = c.g.op("Pad", c.l.name + "/Pad", {x, p, c.g.scalar(-std::numeric_limits<float>::infinity())});
      pads = {0, 0, 0, 0};
    }
  }
  onnx::NodeProto* n = c.g.node("MaxPool", c.l.name, {x}, {c.out});
  set_ints(n, "kernel_shape", {a.kh_, a.kw_});
  set_ints(n, "strides", {a.sh_, a.sw_});
  set_ints(n, "pads", pads);
  set_ints(n, "dilations", {a.dh_, a.dw_});
}

void emit_avg_pool2d(Ctx& c) {
  // dp's (PyTorch's) divisor: with count_include_pad, the window clipped to
  // the padded input (not to the ceil_mode overhang); without, to the input.
  // AveragePool's count_include_pad=1 counts the overhang too in some
  // runtimes, so the padding is made explicit (zeros) and AveragePool counts
  // only what lies in its input: the same divisor in every runtime.
  const auto& a = attrs<AvgPool2dAttrs>(c.l);
  std::string x = c.in[0];
  int64_t ph = a.ph_, pw = a.pw_, H = a.H_, W = a.W_;  // AveragePool's padding and input
  if (a.include_pad_ && (ph > 0 || pw > 0)) {
    x = c.g.op("Pad", c.l.name + "/Pad", {x, c.g.int64s(c.l.name + "/pads", {0, 0, ph, pw, 0, 0, ph, pw})});
    H += 2 * ph, W += 2 * pw;
    ph = pw = 0;
  }
  int64_t eh = ph, ew = pw;
  if (a.ceil_) {
    // Below the kernel's size: dp's last window starts inside the input
    // or its padding.
    eh = ceil_end_pad(H, a.kh_, a.sh_, ph, 1, a.Ho_);
    ew = ceil_end_pad(W, a.kw_, a.sw_, pw, 1, a.Wo_);
  }
  onnx::NodeProto* n = c.g.node("AveragePool", c.l.name, {x}, {c.out});
  set_ints(n, "kernel_shape", {a.kh_, a.kw_});
  set_ints(n, "strides", {a.sh_, a.sw_});
  set_ints(n, "pads", {ph, pw, eh, ew});
  set_int(n, "count_include_pad", 0);
}

void emit_gelu(Ctx& c) {
  // Opset 17 has no Gelu (it came with 20): its formula, written out.
  const auto& op = attrs<Elementwise<GeluOp>>(c.l).op;
  const std::string& x = c.in[0];
  const std::string& n = c.l.name;
  std::string inner;
  if (op.tanh_approx) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    std::string x2 = c.g.op("Mul", n + "/x2", {x, x});
    std::string x3 = c.g.op("Mul", n + "/x3", {x2, x});
    std::string cx3 = c.g.op("Mul", n + "/cx3", {x3, c.g.scalar(0.044715f)});
    std::string s = c.g.op("Add", n + "/sum", {x, cx3});
    std::string k = c.g.op("Mul", n + "/scaled", {s, c.g.scalar(0.7978845608028654f)});
    inner = c.g.op("Tanh", n + "/tanh", {k});
  } else {
    // 0.5 x (1 + erf(x / sqrt(2)))
    std::string k = c.g.op("Mul", n + "/scaled", {x, c.g.scalar(0.7071067811865476f)});
    inner = c.g.op("Erf", n + "/erf", {k});
  }
  std::string one = c.g.op("Add", n + "/one_plus", {inner, c.g.scalar(1.f)});
  std::string hx = c.g.op("Mul", n + "/half_x", {x, c.g.scalar(0.5f)});
  c.g.node("Mul", n, {hx, one}, {c.out});
}

void emit(Ctx& c) {
  const std::string& t = c.l.type;
  const std::string& x = c.in[0];
  if (t == "linear") return emit_linear(c);
  if (t == "conv2d") return emit_conv2d(c);
  if (t == "batch_norm" || t == "batch_norm1d" || t == "batch_norm2d") return emit_batch_norm(c);
  if (t == "layer_norm") return emit_layer_norm(c);
  if (t == "max_pool2d") return emit_max_pool2d(c);
  if (t == "avg_pool2d") return emit_avg_pool2d(c);
  if (t == "gelu") return emit_gelu(c);
  if (t == "relu") {
    attrs<Elementwise<ReluOp>>(c.l);
    c.g.node("Relu", c.l.name, {x}, {c.out});
  } else if (t == "sigmoid") {
    attrs<Elementwise<SigmoidOp>>(c.l);
    c.g.node("Sigmoid", c.l.name, {x}, {c.out});
  } else if (t == "tanh") {
    attrs<Elementwise<TanhOp>>(c.l);
    c.g.node("Tanh", c.l.name, {x}, {c.out});
  } else if (t == "leaky_relu") {
    set_float(c.g.node("LeakyRelu", c.l.name, {x}, {c.out}), "alpha", attrs<Elementwise<LeakyReluOp>>(c.l).op.slope);
  } else if (t == "softmax" || t == "log_softmax") {
    const auto& a = attrs<SoftmaxAttrs>(c.l);
    set_int(c.g.node(a.log_ ? "LogSoftmax" : "Softmax", c.l.name, {x}, {c.out}), "axis",
            resolve_dim(a.dim_, c.in_shape[0].ndim + 1));
  } else if (t == "global_avg_pool") {
    attrs<GlobalAvgPoolAttrs>(c.l);
    onnx::NodeProto* n = c.g.node("ReduceMean", c.l.name, {x}, {c.out});
    set_ints(n, "axes", {2, 3});
    set_int(n, "keepdims", 0);
  } else if (t == "flatten") {
    const auto& a = attrs<FlattenAttrs>(c.l);
    if (a.out_.ndim == 1) {
      set_int(c.g.node("Flatten", c.l.name, {x}, {c.out}), "axis", 1);  // [N, everything]
    } else {
      std::vector<int64_t> shape{0};  // 0: the input's batch dim
      for (int i = 0; i < a.out_.ndim; ++i) shape.push_back(a.out_[i]);
      c.g.node("Reshape", c.l.name, {x, c.g.int64s(c.l.name + "/shape", shape)}, {c.out});
    }
  } else if (t == "concat") {
    const auto& a = attrs<ConcatAttrs>(c.l);
    set_int(c.g.node("Concat", c.l.name, c.in, {c.out}), "axis", resolve_dim(a.dim_, c.in_shape[0].ndim + 1));
  } else if (t == "add") {
    c.g.node(c.in.size() == 2 ? "Add" : "Sum", c.l.name, c.in, {c.out});
  } else if (t == "dropout") {
    attrs<DropoutAttrs>(c.l);
    c.g.node("Identity", c.l.name, {x}, {c.out});  // only when the model's output (see below)
  } else {
    fail(DP_ERR_MODEL, "cannot export " + describe(c.l) + " to ONNX: layer type '" + t +
                           "' has no ONNX mapping (a plugin's layer type); ONNX export supports " + kMapped);
  }
}

bool is_mapped(const std::string& t) {
  return std::string(", ").append(kMapped).append(", ").find(", " + t + ", ") != std::string::npos;
}

// ONNX's checker, then strict shape inference (a conflict throws), which
// also records the intermediate shapes (value_info) that viewers show. Each
// layer's output must then have, as ONNX infers it, dp's shape: [batch] +
// the per-sample shape (libonnx 1.12's inference lets some mismatches
// through, such as a Gemm's inner dimensions; this catches them one layer
// on).
void check_model(onnx::ModelProto& mp, const Model& model, const std::vector<std::string>& value) {
  try {
    onnx::checker::check_model(mp);
    onnx::ShapeInferenceOptions opts(/*check_type=*/true, /*strict_mode=*/1);
    onnx::shape_inference::InferShapes(mp, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    fail(DP_ERR_INTERNAL, std::string("ONNX export: the graph fails ONNX's checker (a bug in dp): ") + e.what());
  }
  std::map<std::string, const onnx::TensorShapeProto*> inferred;
  for (const auto& v : mp.graph().value_info())
    if (v.type().tensor_type().has_shape()) inferred[v.name()] = &v.type().tensor_type().shape();
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    auto it = inferred.find(value[i]);
    if (it == inferred.end()) continue;
    const onnx::TensorShapeProto& s = *it->second;
    const Shape& want = model.nodes[i].out_shape;
    bool ok = s.dim_size() == want.ndim + 1 && !s.dim(0).has_dim_value();
    for (int k = 0; ok && k < want.ndim; ++k)
      ok = !s.dim(k + 1).has_dim_value() || s.dim(k + 1).dim_value() == want[k];
    if (!ok) {
      std::string got = "[";
      for (int k = 0; k < s.dim_size(); ++k)
        got += (k ? ", " : "") + (s.dim(k).has_dim_value() ? std::to_string(s.dim(k).dim_value()) : s.dim(k).dim_param());
      fail(DP_ERR_INTERNAL, "ONNX export: ONNX infers the shape " + got + "] for the output of " +
                                describe(*model.nodes[i].layer) + ", which dp computes as [N] + " + want.str() +
                                " (a bug in dp)");
    }
  }
}

}  // namespace

bool onnx_supported() { return true; }

std::string onnx_model_bytes(const Model& model, int opset) {
  if (opset < kOnnxOpsetMin || opset > kOnnxOpsetMax)
    fail(DP_ERR_INVALID_ARGUMENT, "ONNX opset " + std::to_string(opset) + " is not supported: dp writes opsets " +
                                      std::to_string(kOnnxOpsetMin) + " to " + std::to_string(kOnnxOpsetMax));
  // Refuse an unmapped layer before building anything.
  for (const Node& node : model.nodes)
    if (!is_mapped(node.layer->type))
      fail(DP_ERR_MODEL, "cannot export " + describe(*node.layer) + " to ONNX: layer type '" + node.layer->type +
                             "' has no ONNX mapping (a plugin's layer type); ONNX export supports " + kMapped);
  // Protobuf cannot serialize a message of 2 GiB or more (ONNX's external
  // data format would be needed; not supported).
  const uint64_t weight_bytes = 4 * static_cast<uint64_t>(model.num_params() + model.num_buffers());
  if (weight_bytes >= (uint64_t{1} << 31) - (uint64_t{1} << 24))
    fail(DP_ERR_MODEL, "cannot export to ONNX: the model's weights take " + std::to_string(weight_bytes) +
                           " bytes, over the 2 GiB a single ONNX file can hold (external data is not supported)");

  onnx::ModelProto mp;
  mp.set_ir_version(onnx::IR_VERSION);
  mp.set_producer_name("dp");
  mp.set_domain("dp");
  mp.set_model_version(1);
  onnx::OperatorSetIdProto* os = mp.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  onnx::StringStringEntryProto* meta = mp.add_metadata_props();
  meta->set_key("dp.model");
  meta->set_value(model.description);

  onnx::GraphProto* gp = mp.mutable_graph();
  gp->set_name("dp");
  Graph g(gp);
  g.fresh("input");
  g.fresh("output");
  set_type(gp->add_input(), "input", model.input_shape);
  set_type(gp->add_output(), "output", model.output_shape());

  // Weights: parameters and buffers under their state_dict names.
  const std::vector<float>& params = model.params();  // the newest, from a device if it trained last
  const std::vector<float>& buffers = model.buffers();
  std::vector<std::map<std::string, std::string>> weights(model.nodes.size());
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    const Layer& l = *node.layer;
    int64_t at = node.param_offset;
    for (const TensorSpec& s : l.params()) {
      std::vector<int64_t> dims(s.shape.d, s.shape.d + s.shape.ndim);
      weights[i][s.suffix] = g.floats(l.name + "." + s.suffix, dims, params.data() + at);
      at += s.shape.numel();
    }
    at = node.buffer_offset;
    for (const TensorSpec& s : l.buffers()) {
      std::vector<int64_t> dims(s.shape.d, s.shape.d + s.shape.ndim);
      weights[i][s.suffix] = g.floats(l.name + "." + s.suffix, dims, buffers.data() + at);
      at += s.shape.numel();
    }
  }

  // The graph, in the model's order: each layer's output value is named
  // after the layer, the last one's "output". Dropout is removed: its output
  // is its input's value (an Identity only when it is the model's output).
  std::vector<std::string> value(model.nodes.size());
  const size_t last = model.nodes.size() - 1;
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    Ctx c{g, *node.layer, {}, {}, {}, weights[i], opset};
    for (int j : node.inputs) {
      c.in.push_back(j < 0 ? std::string("input") : value[static_cast<size_t>(j)]);
      c.in_shape.push_back(j < 0 ? model.input_shape : model.nodes[static_cast<size_t>(j)].out_shape);
    }
    if (node.layer->type == "dropout" && i != last) {
      value[i] = c.in[0];
      continue;
    }
    c.out = i == last ? std::string("output") : g.fresh(node.layer->name);
    value[i] = c.out;
    emit(c);
  }

  check_model(mp, model, value);
  std::string bytes;
  if (!mp.SerializeToString(&bytes))
    fail(DP_ERR_INTERNAL, "ONNX export: protobuf could not serialize the model");
  return bytes;
}

void export_onnx(const Model& model, const std::string& path, int opset) {
  const std::string bytes = onnx_model_bytes(model, opset);
  write_whole_file(path, {{bytes.data(), bytes.size()}});
}

}  // namespace dp::io
