#include "plugin/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "dp_plugin.h"

// dp_plugin.h repeats a few of dp.h's constants so that a plugin needs only it.
static_assert(DP_PLUGIN_MAX_DIMS == DP_MAX_DIMS, "dp_plugin.h and dp.h disagree on the dimension limit");
static_assert(int{DP_PLUGIN_F32} == int{DP_F32} && int{DP_PLUGIN_I64} == int{DP_I64}, "dp_plugin.h and dp.h disagree on dtypes");
static_assert(int{DP_PLUGIN_INIT_ZEROS} == int{dp::Init::kZeros} && int{DP_PLUGIN_INIT_ONES} == int{dp::Init::kOnes} &&
                  int{DP_PLUGIN_INIT_UNIFORM} == int{dp::Init::kUniform},
              "dp_plugin.h and layer.h disagree on initialisations");

// A registered type: the plugin's struct, copied, and its library kept open.
struct PluginTypeHolder {
  dp_plugin_layer_type t{};
  dp_plugin_device_impls impls{};  // t.device_impls points here when the plugin gave device code
  std::string name;
  std::shared_ptr<dp::PluginLib> lib;
};

// The opaque host objects of dp_plugin.h.
struct dp_plugin_registrar {
  dp::Registry* registry;
  const std::map<std::string, std::string>* origin;
  std::shared_ptr<dp::PluginLib> lib;
  std::vector<std::shared_ptr<PluginTypeHolder>> pending;
  std::string error;
  std::vector<uint32_t> refused_versions;
  uint32_t api_version = 0;  // the highest version get_api gave this plugin
};

struct dp_plugin_args {
  dp::Args* args;
  std::string json, error;
  std::deque<std::string> strings;  // args_string results, valid until create returns
};

struct dp_plugin_build {
  std::vector<dp::TensorSpec>* params;
  std::vector<dp::TensorSpec>* buffers;
  int64_t* stats;
  std::string error;
};

namespace dp {

struct PluginLib {
  void* handle = nullptr;
  std::string path;
  ~PluginLib() {
    if (handle) dlclose(handle);
  }
};

namespace {

// What dp_plugin_run::host points to during one call.
struct RunHost {
  LayerIO* io;
  const RunCtx* ctx;
  // Whether, and what, a parallel_for function threw (parallel_for returns
  // nothing): the forward or backward that called it fails with it.
  bool threw = false;
  std::string thrown;
};

// ---- the host API, versions 1 and 2 ----
// Every function catches everything: nothing may unwind into a plugin.

void copy_message(std::string& dst, const char* src) {
  try {
    dst = src;
  } catch (...) {
  }
}

// The registrar of the dp_plugin_init running on this thread: register_layer
// is valid only there (dp_plugin.h). A plugin that kept base->registrar and
// calls later (from create, say) gets 1, not a write through a dead pointer.
thread_local const dp_plugin_registrar* t_live_registrar = nullptr;

int h_register_layer(dp_plugin_registrar* r, const dp_plugin_layer_type* t) {
  try {
    if (!r || !t || r != t_live_registrar) return 1;
    if (t->struct_size < offsetof(dp_plugin_layer_type, device_impls) + sizeof(void*))
      fail(DP_ERR_PLUGIN, "register_layer: struct_size " + std::to_string(t->struct_size) + " is smaller than version 1's");
    if (!t->name || !*t->name) fail(DP_ERR_PLUGIN, "register_layer: a layer type without a name");
    std::string name = t->name;
    // Type names are identifiers, as the built-ins' are: they appear in
    // JSON, messages and checkpoints.
    bool ident = name.size() <= 64 && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ident)
      fail(DP_ERR_PLUGIN, "register_layer: type name \"" + name.substr(0, 80) +
                              "\" is not an identifier (letters, digits and '_', not starting with a digit, at most 64)");
    if (!t->create || !t->infer || !t->forward || !t->backward)
      fail(DP_ERR_PLUGIN, "register_layer '" + name + "': create, infer, forward and backward are required");
    dp_plugin_device_impls impls{};
    if (t->device_impls) {
      if (r->api_version < 2)
        fail(DP_ERR_PLUGIN, "register_layer '" + name +
                                "': device_impls must be NULL for a plugin that asked for host API version 1 "
                                "(device code needs version 2)");
      const auto* d = static_cast<const dp_plugin_device_impls*>(t->device_impls);
      if (d->struct_size < offsetof(dp_plugin_device_impls, cuda_backward) + sizeof(d->cuda_backward))
        fail(DP_ERR_PLUGIN, "register_layer '" + name + "': device_impls' struct_size " + std::to_string(d->struct_size) +
                                " is smaller than version 2's");
      std::memcpy(&impls, d, std::min(d->struct_size, sizeof impls));
      impls.struct_size = sizeof impls;
      if (!impls.cuda_forward != !impls.cuda_backward)
        fail(DP_ERR_PLUGIN, "register_layer '" + name + "': device_impls gives cuda_" +
                                (impls.cuda_forward ? "forward without cuda_backward" : "backward without cuda_forward") +
                                " (both or neither)");
    }
    if (t->min_inputs < 1 || (t->max_inputs >= 0 && t->max_inputs < t->min_inputs))
      fail(DP_ERR_PLUGIN, "register_layer '" + name + "': inputs must be [min >= 1, max >= min or < 0]");
    auto o = r->origin->find(name);
    if (o != r->origin->end())
      fail(DP_ERR_PLUGIN, "layer type '" + name + "' is already registered by plugin " + o->second);
    if (r->registry->has_layer(name)) fail(DP_ERR_PLUGIN, "layer type '" + name + "' is already registered (a built-in type)");
    for (const auto& p : r->pending)
      if (p->name == name) fail(DP_ERR_PLUGIN, "layer type '" + name + "' is registered twice by this plugin");
    auto h = std::make_shared<PluginTypeHolder>();
    std::memcpy(&h->t, t, std::min(t->struct_size, sizeof(dp_plugin_layer_type)));
    h->t.struct_size = sizeof(dp_plugin_layer_type);
    h->impls = impls;
    h->t.device_impls = t->device_impls ? &h->impls : nullptr;
    h->name = name;
    h->t.name = h->name.c_str();
    h->lib = r->lib;
    r->pending.push_back(std::move(h));
    return 0;
  } catch (const std::exception& e) {
    if (r && r->error.empty()) copy_message(r->error, e.what());
    return 1;
  } catch (...) {
    return 1;
  }
}

const char* h_args_json(const dp_plugin_args* a) { return a ? a->json.c_str() : ""; }
const char* h_args_path(const dp_plugin_args* a) { return a ? a->args->path().c_str() : ""; }
int h_args_has(const dp_plugin_args* a, const char* key) { return a && key && a->args->has(key); }

template <class F>
int args_call(dp_plugin_args* a, const char* key, F&& f) {
  if (!a || !key) return 1;
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    copy_message(a->error, e.what());
  } catch (...) {
    copy_message(a->error, "unknown error");
  }
  return 1;
}

int h_args_int(dp_plugin_args* a, const char* key, int64_t def, int64_t min, int64_t* out) {
  return args_call(a, key, [&] {
    int64_t v = a->args->integer(key, def, min);
    if (out) *out = v;
  });
}
int h_args_int_range(dp_plugin_args* a, const char* key, int64_t def, int64_t min, int64_t max, int64_t* out) {
  return args_call(a, key, [&] {
    if (max < min) fail(DP_ERR_PLUGIN, a->args->path_of(key) + ": args_int_range called with max < min");
    int64_t v = a->args->integer(key, def, min, max);
    if (out) *out = v;
  });
}
int h_args_float(dp_plugin_args* a, const char* key, double def, double lo, double hi, double* out) {
  return args_call(a, key, [&] {
    double v = a->args->number(key, def, lo, hi);
    if (out) *out = v;
  });
}
int h_args_bool(dp_plugin_args* a, const char* key, int def, int* out) {
  return args_call(a, key, [&] {
    bool v = a->args->boolean(key, def != 0);
    if (out) *out = v;
  });
}
int h_args_string(dp_plugin_args* a, const char* key, const char* def, const char** out) {
  return args_call(a, key, [&] {
    a->strings.push_back(a->args->string(key, def ? def : ""));
    if (out) *out = a->strings.back().c_str();
  });
}

int declare(dp_plugin_build* b, std::vector<TensorSpec>* to, const char* what, const char* suffix, int32_t ndim,
            const int64_t* shape, int32_t init, double bound) {
  if (!b) return 1;
  try {
    std::string w = what;
    if (!suffix || !*suffix) fail(DP_ERR_PLUGIN, w + ": empty name");
    if (ndim < 0 || ndim >= DP_MAX_DIMS || (ndim > 0 && !shape))
      fail(DP_ERR_PLUGIN, w + " '" + suffix + "': ndim must be in [0, " + std::to_string(DP_MAX_DIMS - 1) + "]");
    if (init < DP_PLUGIN_INIT_ZEROS || init > DP_PLUGIN_INIT_CONSTANT)
      fail(DP_ERR_PLUGIN, w + " '" + suffix + "': unknown init " + std::to_string(init) +
                              " (DP_PLUGIN_INIT_ZEROS, _ONES, _UNIFORM or _CONSTANT)");
    if (!std::isfinite(bound) || (init == DP_PLUGIN_INIT_UNIFORM && bound < 0))
      fail(DP_ERR_PLUGIN, w + " '" + suffix + "': bound " + std::to_string(bound) + " must be " +
                              (init == DP_PLUGIN_INIT_UNIFORM ? "finite and >= 0 for U(-bound, bound)" : "finite"));
    TensorSpec s;
    s.suffix = suffix;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] < 1) fail(DP_ERR_PLUGIN, w + " '" + suffix + "': dimension " + std::to_string(i) + " is not positive");
      s.shape.push(shape[i]);
    }
    s.init.kind = static_cast<Init::Kind>(init);
    s.init.bound = static_cast<float>(bound);
    for (const auto* list : {b->params, b->buffers})
      for (const auto& t : *list)
        if (t.suffix == s.suffix) fail(DP_ERR_PLUGIN, w + " '" + suffix + "': declared twice");
    to->push_back(s);
    return 0;
  } catch (const std::exception& e) {
    copy_message(b->error, e.what());
  } catch (...) {
  }
  return 1;
}
int h_declare_param(dp_plugin_build* b, const char* suffix, int32_t ndim, const int64_t* shape, int32_t init,
                    double bound) {
  return declare(b, b ? b->params : nullptr, "declare_param", suffix, ndim, shape, init, bound);
}
int h_declare_buffer(dp_plugin_build* b, const char* suffix, int32_t ndim, const int64_t* shape, int32_t init,
                     double bound) {
  return declare(b, b ? b->buffers : nullptr, "declare_buffer", suffix, ndim, shape, init, bound);
}
int h_declare_stats(dp_plugin_build* b, int64_t count) {
  if (!b) return 1;
  if (count < 0) {
    try {
      b->error = "declare_stats: count must be >= 0, got " + std::to_string(count);
    } catch (...) {
    }
    return 1;
  }
  *b->stats = count;
  return 0;
}

void* h_scratch(const dp_plugin_run* run, int32_t slot, size_t bytes) {
  if (!run || !run->host || slot < 0) return nullptr;
  try {
    auto* h = static_cast<RunHost*>(run->host);
    Tensor& t = h->io->tmp(static_cast<size_t>(slot));
    // Rounded up without overflow: bytes near SIZE_MAX must fail below, not wrap to a small block.
    int64_t floats = static_cast<int64_t>(bytes / sizeof(float) + (bytes % sizeof(float) != 0));
    if (floats < 1) floats = 1;
    t.resize(DP_F32, Shape{floats});
    return t.data();
  } catch (...) {
    return nullptr;
  }
}

void h_parallel_for(const dp_plugin_run* run, int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t),
                    void* user) {
  if (!run || !fn) return;
  auto* host = static_cast<RunHost*>(run->host);
  const RunCtx* ctx = host ? host->ctx : nullptr;
  Workers* pool = ctx && !ctx->cuda ? ctx->pool : nullptr;  // on a CUDA replica: this thread, once
  // fn may be C++ (a lambda) and throw: Workers::run rethrows the first
  // range's exception here, after every range has ended. The calling
  // forward or backward then fails with it, whatever it returns.
  try {
    parallel_for(pool, n, grain, [&](int64_t b, int64_t e) { fn(user, b, e); });
  } catch (const std::exception& e) {
    if (host && !host->threw) host->threw = true, copy_message(host->thrown, e.what());
  } catch (...) {
    if (host && !host->threw) host->threw = true, copy_message(host->thrown, "an exception that is not a std::exception");
  }
}

float h_uniform01(const dp_plugin_run* run, int64_t row, uint64_t counter) {
  if (!run) return 0.f;
  uint64_t key = hash_keys(run->seed, 0x9106 + static_cast<uint64_t>(run->layer_index), static_cast<uint64_t>(run->step));
  return uniform01(hash_keys(key, static_cast<uint64_t>(run->sample_offset + row)), counter);
}

const dp_host_api kApiV1 = {
    sizeof(dp_host_api), 1,
    h_register_layer,
    h_args_json, h_args_path, h_args_has, h_args_int, h_args_float, h_args_bool, h_args_string,
    h_declare_param, h_declare_buffer, h_declare_stats,
    h_scratch, h_parallel_for, h_uniform01,
    h_args_int_range,
};
// Version 2 has the same functions; it lets a layer type bring device code
// (register_layer checks which version the plugin asked for).
dp_host_api with_version(dp_host_api api, uint32_t version) {
  api.version = version;
  return api;
}
const dp_host_api kApiV2 = with_version(kApiV1, 2);

const dp_host_api* h_get_api(const dp_host_api_base* base, uint32_t version) {
  if (version == 1 || version == 2) {
    if (base && base->registrar) base->registrar->api_version = std::max(base->registrar->api_version, version);
    return version == 1 ? &kApiV1 : &kApiV2;
  }
  if (base && base->registrar) {
    try {
      base->registrar->refused_versions.push_back(version);
    } catch (...) {
    }
  }
  return nullptr;
}

dp_plugin_tensor view_of(const RunCtx& ctx, const Tensor* t, bool present = true) {
  dp_plugin_tensor v;
  std::memset(&v, 0, sizeof v);
  if (!t) return v;
  v.data = present ? const_cast<void*>(t->data()) : nullptr;
  v.dtype = t->dtype();
  v.ndim = t->shape().ndim;
  int64_t stride = 1;
  for (int i = v.ndim; i-- > 0;) {
    v.shape[i] = t->shape()[i];
    v.strides[i] = stride;
    stride *= t->shape()[i];
  }
  v.device_type = ctx.cuda ? DP_PLUGIN_DEVICE_CUDA : DP_PLUGIN_DEVICE_CPU;
  v.device_index = ctx.cuda ? ctx.cuda_device : 0;
  return v;
}

dp_plugin_shape shape_of(const Shape& s) {
  dp_plugin_shape p;
  std::memset(&p, 0, sizeof p);
  p.ndim = s.ndim;
  for (int i = 0; i < s.ndim; ++i) p.dims[i] = s[i];
  return p;
}

// Whether v nests more than `levels` containers deep (bounded recursion).
static bool nested_deeper(const nlohmann::json& v, int levels) {
  if (!v.is_structured()) return false;
  if (levels == 0) return true;
  for (const auto& e : v)
    if (nested_deeper(e, levels - 1)) return true;
  return false;
}

// A plugin's layer, as every other layer.
class PluginLayer : public Layer {
  static constexpr int kMaxDepth = 64;

 public:
  PluginLayer(std::shared_ptr<const PluginTypeHolder> type, Args& args) : type_(std::move(type)) {
    dp_plugin_args a;
    a.args = &args;
    // The text args_json hands the plugin: json::dump recurses once per level.
    if (nested_deeper(args.object(), kMaxDepth))
      fail(DP_ERR_MODEL, args.path() + " (" + type_->name + "): nested deeper than " + std::to_string(kMaxDepth) + " levels");
    a.json = args.object().dump();
    char err[kErrCap] = "";
    auto where = [&] { return args.path() + " (" + type_->name + ", plugin " + type_->lib->path + "): "; };
    int rc = 0;
    try {
      rc = guarded(where, "create", [&] { return type_->t.create(type_->t.user, &a, &instance_, err, sizeof err); });
    } catch (...) {
      destroy_instance();  // the constructor throws: ~PluginLayer will not destroy what create made
      throw;
    }
    if (rc != 0 || !a.error.empty()) destroy_instance();
    if (!a.error.empty()) fail(DP_ERR_MODEL, a.error);  // path-named by Args
    if (rc != 0) fail(DP_ERR_MODEL, where() + message(err, "create failed"));
  }
  ~PluginLayer() override { destroy_instance(); }

  std::pair<int, int> arity() const override { return {type_->t.min_inputs, type_->t.max_inputs}; }
  bool runs_on_cuda() const override { return type_->t.device_impls && type_->impls.cuda_forward; }

  Shape infer(const std::vector<Shape>& in) override {
    std::vector<dp_plugin_shape> shapes;
    for (const Shape& s : in) shapes.push_back(shape_of(s));
    params_.clear(), buffers_.clear(), stats_ = 0;
    dp_plugin_build b{&params_, &buffers_, &stats_, {}};
    dp_plugin_shape out = shape_of(Shape{});
    char err[kErrCap] = "";
    // As forward's messages: the model adds the layer's path, type and name.
    const std::string from = "plugin " + type_->lib->path + ": ";
    int rc = guarded([&] { return from; }, "infer", [&] {
      return type_->t.infer(instance_, &b, shapes.data(), static_cast<int32_t>(shapes.size()), &out, err, sizeof err);
    });
    if (!b.error.empty()) fail(DP_ERR_PLUGIN, from + b.error);  // a bad declaration: the plugin's bug
    if (rc != 0) fail(DP_ERR_SHAPE, from + "infer failed: " + message(err, "error"));  // inputs it cannot take
    if (out.ndim < 0 || out.ndim >= DP_MAX_DIMS)
      fail(DP_ERR_PLUGIN, from + "infer gave an output of " + std::to_string(out.ndim) + " dimensions");
    Shape s;
    for (int i = 0; i < out.ndim; ++i) {
      if (out.dims[i] < 1) fail(DP_ERR_PLUGIN, from + "infer gave a non-positive output dimension");
      s.push(out.dims[i]);
    }
    out_sample_ = s;
    return s;
  }
  std::vector<TensorSpec> params() const override { return params_; }
  std::vector<TensorSpec> buffers() const override { return buffers_; }
  int64_t stats_size() const override { return stats_; }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    io.out->resize(DP_F32, Shape::batched(io.in[0]->shape()[0], out_sample_));
    auto& ins = inputs_buffer();
    ins.clear();
    for (const Tensor* t : io.in) ins.push_back(view_of(ctx, t));
    dp_plugin_io pio = io_of(io, ins);
    pio.output = view_of(ctx, io.out);
    call(ctx.cuda ? type_->impls.cuda_forward : type_->t.forward, "forward", ctx, io, pio);
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    auto& ins = inputs_buffer();
    ins.clear();
    for (const Tensor* t : io.in) ins.push_back(view_of(ctx, t));
    auto& gins = gin_buffer();
    gins.clear();
    for (size_t i = 0; i < io.gin.size(); ++i) {
      if (io.gin[i]) {
        io.gin[i]->resize(DP_F32, io.in[i]->shape());
        gins.push_back(view_of(ctx, io.gin[i]));
      } else {
        gins.push_back(view_of(ctx, io.in[i], false));
      }
    }
    dp_plugin_io pio = io_of(io, ins);
    pio.grad_output = view_of(ctx, io.gout);
    pio.output = view_of(ctx, io.out);
    pio.grad_inputs = gins.data();
    call(ctx.cuda ? type_->impls.cuda_backward : type_->t.backward, "backward", ctx, io, pio);
  }

  void merge_stats(float* buffers, const float* const* stats, const int64_t* count, int replicas) const override {
    if (!type_->t.merge_stats) return;
    guarded([this] { return where(); }, "merge_stats",
            [&] { type_->t.merge_stats(instance_, buffers, stats, count, replicas); });
  }

 private:
  static constexpr size_t kErrCap = 1024;  // the err buffer every callback gets
  // A callback's err: at most kErrCap - 1 characters, whether or not the
  // plugin ended it with a NUL.
  static std::string message(const char* err, const char* fallback) {
    size_t n = strnlen(err, kErrCap - 1);
    return n ? std::string(err, n) : std::string(fallback) + " (the plugin gave no message)";
  }
  // Calls a plugin callback. Callbacks are C functions and must not throw
  // (dp_plugin.h), but one written in C++ may: what escapes is caught here
  // and reported as DP_ERR_PLUGIN, "<where()><what> threw: <message>"
  // (where() is called only then: a step allocates nothing).
  template <class Where, class F>
  static auto guarded(const Where& where, const char* what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const std::exception& e) {
      fail(DP_ERR_PLUGIN, where() + what + " threw: " + e.what());
    } catch (...) {
      fail(DP_ERR_PLUGIN, where() + what + " threw an exception that is not a std::exception");
    }
  }
  // "/layers/1 (swish 's', plugin /abs/swish.so): "
  std::string where() const { return path + " (" + type + " '" + name + "', plugin " + type_->lib->path + "): "; }
  // destroy, NULL-safe and once; an exception it throws is dropped (there is
  // no caller to report it to: it runs from model and layer destructors).
  void destroy_instance() noexcept {
    void* instance = instance_;
    instance_ = nullptr;
    if (!instance || !type_->t.destroy) return;
    try {
      type_->t.destroy(instance);
    } catch (...) {
    }
  }
  // Grown once per thread, then reused: no allocation per step.
  static std::vector<dp_plugin_tensor>& inputs_buffer() {
    static thread_local std::vector<dp_plugin_tensor> v;
    return v;
  }
  static std::vector<dp_plugin_tensor>& gin_buffer() {
    static thread_local std::vector<dp_plugin_tensor> v;
    return v;
  }
  static dp_plugin_io io_of(const LayerIO& io, const std::vector<dp_plugin_tensor>& ins) {
    dp_plugin_io p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.num_inputs = static_cast<int32_t>(ins.size());
    p.inputs = ins.data();
    p.params = io.params;
    p.grads = io.grads;
    p.buffers = io.buffers;
    p.stats = io.stats;
    return p;
  }
  void call(dp_plugin_run_fn fn, const char* what, const RunCtx& ctx, LayerIO& io, const dp_plugin_io& pio) const {
    RunHost host{&io, &ctx, false, {}};
    dp_plugin_run run;
    std::memset(&run, 0, sizeof run);
    run.struct_size = sizeof run;
    run.training = ctx.training;
    run.layer_index = index;
    run.seed = ctx.seed;
    run.step = ctx.step;
    run.sample_offset = ctx.sample_offset;
    run.batch_total = ctx.batch_total;
    run.host = &host;
    run.device_type = ctx.cuda ? DP_PLUGIN_DEVICE_CUDA : DP_PLUGIN_DEVICE_CPU;
    run.device_index = ctx.cuda ? ctx.cuda_device : 0;
    run.stream = ctx.cuda_stream;
    if (!fn) fail(DP_ERR_DEVICE, path + " (" + type + " '" + name + "'): the plugin gave no code for this device");
    // Device code launches on the replica's stream: never on the legacy one.
    if (ctx.cuda && !ctx.cuda_stream) fail(DP_ERR_INTERNAL, path + ": a CUDA replica's RunCtx without its stream");
    char err[kErrCap];
    err[0] = 0;
    auto on = [&] { return where() + (ctx.cuda ? "CUDA " : ""); };
    int rc = guarded(on, what, [&] { return fn(instance_, &run, &pio, err, sizeof err); });
    if (host.threw)
      fail(DP_ERR_PLUGIN, on() + what + ": a parallel_for function threw: " +
                              (host.thrown.empty() ? std::string("(no message)") : host.thrown));
    if (rc != 0) fail(DP_ERR_PLUGIN, on() + what + " failed: " + message(err, "error"));
  }

  std::shared_ptr<const PluginTypeHolder> type_;
  void* instance_ = nullptr;
  std::vector<TensorSpec> params_, buffers_;
  int64_t stats_ = 0;
  Shape out_sample_;
};

bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

namespace {
// <libdir>/dp/plugins, libdir being the folder libdp.so was loaded from
// (pkg-config's plugindir for an installed dp, wherever it was moved); ""
// where that is unknown. Worked out once, as the library loads: a relative
// path it was opened by (dlopen("build/src/libdp.so")) means the directory
// current then, not after a chdir. Only a shared libdp counts: linked into a
// program, dladdr names the program (argv[0], a bare name resolved against
// whatever directory is current), which must not decide what a model loads.
std::string find_installed_plugin_dir() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&find_installed_plugin_dir), &info) || !info.dli_fname) return "";
  const std::string file = info.dli_fname;
  const std::string base = file.substr(file.rfind('/') + 1);
  if (base.compare(0, 8, "libdp.so") != 0) return "";
  char real[PATH_MAX];
  if (!realpath(info.dli_fname, real)) return "";
  const std::string lib = real;
  return lib.substr(0, lib.rfind('/')) + "/dp/plugins";
}
const std::string g_installed_plugin_dir = find_installed_plugin_dir();
}  // namespace

std::string installed_plugin_dir() { return g_installed_plugin_dir; }

std::string resolve_plugin_path(const std::string& entry, const std::string& base_dir, std::string* tried, bool search_base) {
  std::vector<std::string> candidates;
  if (entry.find('/') != std::string::npos) {
    candidates.push_back(entry[0] == '/' ? entry : join(base_dir, entry));
  } else {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("DP_PLUGIN_PATH")) {
      std::string s = env;
      size_t pos = 0;
      while (pos <= s.size()) {
        size_t c = s.find(':', pos);
        if (c == std::string::npos) c = s.size();
        if (c > pos) dirs.push_back(s.substr(pos, c - pos));
        pos = c + 1;
      }
    }
    const std::string installed = installed_plugin_dir();
    if (!installed.empty()) dirs.push_back(installed);
    if (search_base) dirs.push_back(base_dir.empty() ? "." : base_dir);
    for (const auto& d : dirs)
      for (const std::string& n : {entry, entry + ".so", "lib" + entry + ".so"}) candidates.push_back(join(d, n));
  }
  for (const auto& c : candidates)
    if (is_file(c)) return c;
  if (tried) {
    tried->clear();
    for (const auto& c : candidates) *tried += (tried->empty() ? "" : ", ") + c;
  }
  return "";
}

void Plugins::load(Registry& registry, const std::string& entry, const std::string& base_dir, Trust trust) {
  const bool by_path = entry.find('/') != std::string::npos;
  std::string tried;
  std::string found = resolve_plugin_path(entry, base_dir, &tried, trust != Trust::kInstalledOnly);
  if (found.empty() && !by_path)  // a bare name may be a library already loaded from elsewhere
    for (const auto& lib : libs_) {
      const std::string file = lib->path.substr(lib->path.rfind('/') + 1);
      if (file == entry || file == entry + ".so" || file == "lib" + entry + ".so") return;
    }
  if (found.empty())
    fail(DP_ERR_PLUGIN, "plugin '" + entry + "' not found (looked for: " + (tried.empty() ? "nowhere: DP_PLUGIN_PATH is not set" : tried) +
                            "; bare names are searched in DP_PLUGIN_PATH, then in dp's own plugin folder" +
                            (trust == Trust::kInstalledOnly && !by_path ? " only, for a model's \"plugins\"" : "") + ")");
  char real[PATH_MAX];
  std::string path = realpath(found.c_str(), real) ? std::string(real) : found;
  for (const auto& lib : libs_)
    if (lib->path == path) return;  // already loaded: a no-op
  // A model file is data: it names code by path only when the program allows.
  if (trust == Trust::kInstalledOnly && by_path)
    fail(DP_ERR_PLUGIN, "the model names the plugin library '" + entry +
                            "' by path, and a model file loads no code unless the program allows it: load the plugin "
                            "first (dp_context_load_plugin, dp --plugin), or install it in a DP_PLUGIN_PATH directory and "
                            "name it bare, or allow model files to load libraries (DP_CONTEXT_ALLOW_MODEL_PLUGINS, "
                            "dp --allow-model-plugins) if you trust this one");

  auto lib = std::make_shared<PluginLib>();
  lib->path = path;
  dlerror();
  lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char* e = dlerror();
    std::string why = e ? e : "dlopen failed";
    if (why.compare(0, path.size() + 2, path + ": ") == 0) why.erase(0, path.size() + 2);  // dlerror names the file first
    fail(DP_ERR_PLUGIN, "cannot load plugin " + path + ": " + why);
  }
  void* sym = dlsym(lib->handle, "dp_plugin_init");
  if (!sym)
    fail(DP_ERR_PLUGIN, "plugin " + path + " does not export dp_plugin_init: not a dp plugin (see dp_plugin.h)");
  auto init = reinterpret_cast<dp_plugin_init_fn>(sym);

  dp_plugin_registrar reg;
  reg.registry = &registry;
  reg.origin = &origin_;
  reg.lib = lib;
  dp_host_api_base base;
  std::memset(&base, 0, sizeof base);
  base.struct_size = sizeof base;
  base.get_api = h_get_api;
  base.registrar = &reg;
  base.host_version = dp_version();
  char err[1024];
  err[0] = 0;
  int rc = 0;
  struct Live {  // register_layer accepts reg during init, on this thread only
    const dp_plugin_registrar* saved = t_live_registrar;
    explicit Live(const dp_plugin_registrar* r) { t_live_registrar = r; }
    ~Live() { t_live_registrar = saved; }
  } live(&reg);
  try {
    rc = init(&base, err, sizeof err);
  } catch (const std::exception& e) {
    fail(DP_ERR_PLUGIN, "plugin " + path + ": dp_plugin_init threw: " + e.what() + "; nothing from this plugin was registered");
  } catch (...) {
    fail(DP_ERR_PLUGIN, "plugin " + path + ": dp_plugin_init threw an exception that is not a std::exception; nothing "
                        "from this plugin was registered");
  }
  err[sizeof err - 1] = 0;
  // On any failure, reg.pending (and with it the library) goes away: nothing
  // stays registered.
  if (!reg.refused_versions.empty() && (rc != 0 || reg.pending.empty()))
    fail(DP_ERR_PLUGIN, "plugin " + path + " asks for host API version " + std::to_string(reg.refused_versions[0]) +
                            "; this dp (" + dp_version() + ") provides versions 1 and 2" + (err[0] ? std::string(" (plugin: ") + err + ")" : ""));
  if (!reg.error.empty())
    fail(DP_ERR_PLUGIN, "plugin " + path + ": " + reg.error + "; nothing from this plugin was registered");
  if (rc != 0)
    fail(DP_ERR_PLUGIN, "plugin " + path + ": dp_plugin_init failed: " + (err[0] ? err : "(no message)") +
                            "; nothing from this plugin was registered");
  // Commit: all of the plugin's types, or (on bad_alloc midway) none.
  std::string types;
  for (const auto& h : reg.pending) types += (types.empty() ? "" : ",") + h->name + "@" + std::to_string(h->t.version);
  libs_.push_back(lib);
  info_.push_back({path, types});
  try {
    for (const auto& h : reg.pending) {
      std::shared_ptr<const PluginTypeHolder> t = h;
      registry.add_layer(h->name, LayerFactory(LayerFactory::Stateful(
                                     [t](Args& a) -> std::unique_ptr<Layer> { return std::make_unique<PluginLayer>(t, a); })));
      origin_[h->name] = path;
    }
  } catch (...) {
    for (const auto& h : reg.pending) {
      registry.remove_layer(h->name);
      origin_.erase(h->name);
    }
    libs_.pop_back();
    info_.pop_back();
    throw;
  }
  // A library with CUDA code registered its kernels with the CUDA runtime as
  // it loaded; unloaded and loaded again, its launches failed ("invalid
  // argument"). It stays loaded until the process ends (RTLD_NODELETE, set on
  // the open library; the extra reference is dropped at once).
  for (const auto& h : reg.pending)
    if (h->t.device_impls) {
      if (void* keep = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) dlclose(keep);
      break;
    }
}

}  // namespace dp
