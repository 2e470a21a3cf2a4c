// dp.hpp — a header-only C++17 wrapper over the C ABI of dp.h.
//
// - Every handle (Context, Model, Tensor, Group, Optimizer, Dataset, Loader)
//   owns one dp object: move-only, destroyed by its destructor. get() gives
//   the raw handle for the C API; release() gives up ownership; a handle can
//   adopt a raw one (explicit constructor). A moved-from handle is empty
//   (operator bool is false); calls on it throw dp::Error
//   (DP_ERR_INVALID_ARGUMENT), as the C API reports a NULL handle.
// - A failed call throws dp::Error (a std::runtime_error): status() is the
//   dp_status, what() the message of dp_last_error().
// - Data goes in and out through dp::Span<T> (pointer and size; built from a
//   std::vector, a std::array, a C array, or a pointer and a size) or as
//   std::vector.
// - Names follow PyTorch: group(x) / group.forward(x), group.train(),
//   group.eval(), group.zero_grad(), optimizer.step(), model.parameters(),
//   and group.train_step(opt, x, y) returns the loss.
// - Lifetimes are those of dp.h: a context outlives what is made from it, a
//   model its groups, a group its optimizers, a dataset its loaders. Moving a
//   handle does not move the object, so moving a Model that a Group uses is
//   fine.
//
// Namespace: dp (in the inline namespace dp::v1, so the mangled names of the
// wrapper never meet those of dp's internal C++ code, which uses namespace dp
// too but is hidden inside libdp.so). Link with libdp.so: -ldp.
#ifndef DP_HPP
#define DP_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dp.h"

namespace dp {
inline namespace v1 {

using Shape = std::vector<int64_t>;

// A failed dp call: the status and dp_last_error()'s message.
class Error : public std::runtime_error {
 public:
  Error(dp_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  dp_status status() const noexcept { return status_; }
  // "DP_ERR_MODEL".
  const char* status_name() const noexcept { return dp_status_name(status_); }

 private:
  dp_status status_;
};

// Throws dp::Error unless status is DP_OK.
inline void check(dp_status status) {
  if (status != DP_OK) throw Error(status, dp_last_error());
}

// A view of count contiguous T: what std::span is in C++20.
template <class T>
class Span {
  // C's elements, when c.data() is a pointer whose array converts to T[]
  // (so Span<const float> takes a std::vector<float>, Span<float> no const one).
  template <class C>
  using element_of = std::remove_pointer_t<decltype(std::declval<C>().data())>;
  template <class C>
  using enable_if_container =
      std::enable_if_t<!std::is_same<std::decay_t<C>, Span>::value &&
                       std::is_convertible<element_of<C> (*)[], T (*)[]>::value>;

 public:
  using element_type = T;
  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  template <size_t N>
  constexpr Span(T (&array)[N]) noexcept : data_(array), size_(N) {}
  // Any contiguous container whose data() converts to T*: std::vector,
  // std::array, std::string, another Span.
  template <class C, class = enable_if_container<C&>>
  constexpr Span(C& container) noexcept : data_(container.data()), size_(container.size()) {}
  template <class C, class = enable_if_container<const C&>>
  constexpr Span(const C& container) noexcept : data_(container.data()), size_(container.size()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// The dtype of an element type: float is DP_F32, int64_t DP_I64.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr dp_dtype value = DP_F32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr dp_dtype value = DP_I64;
};

inline std::string version() { return dp_version(); }

// Devices of a kind ("cpu", "cuda"); for "cuda", 0 when there is no usable GPU
// (and *why, if given, says why).
inline int device_count(const std::string& kind, std::string* why = nullptr) {
  int n = 0;
  const char* reason = nullptr;
  check(dp_device_count(kind.c_str(), &n, &reason));
  if (why) *why = reason ? reason : "";
  return n;
}
inline std::string device_name(const std::string& kind, int index) {
  const char* name = nullptr;
  check(dp_device_name(kind.c_str(), index, &name));
  return name;
}

namespace detail {

// unique_ptr-like ownership of one dp object of type T, destroyed by Destroy.
template <class T, void (*Destroy)(T*)>
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(T* adopt) noexcept : p_(adopt) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : p_(other.p_) { other.p_ = nullptr; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      p_ = other.p_;
      other.p_ = nullptr;
    }
    return *this;
  }
  ~Handle() { reset(); }

  T* get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  // Gives up ownership: the caller destroys the returned handle.
  T* release() noexcept {
    T* p = p_;
    p_ = nullptr;
    return p;
  }
  // Destroys the object now (if any); the handle is empty after.
  void reset(T* adopt = nullptr) noexcept {
    T* old = p_;
    p_ = adopt;
    Destroy(old);  // every dp_*_destroy accepts NULL
  }

 private:
  T* p_ = nullptr;
};

inline Shape to_shape(int ndim, const int64_t* dims) {
  Shape s;
  for (int i = 0; i < ndim && i < DP_MAX_DIMS; ++i) s.push_back(dims[i]);
  return s;
}

inline int ndim_of(const Shape& shape) { return static_cast<int>(shape.size()); }

// prod(shape), or -1 where a dimension is negative (dp reports it).
inline int64_t elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

}  // namespace detail

// ---- Context: the layer registry and the loaded plugins. ----
struct PluginInfo {
  std::string path;         // canonical path
  std::string layer_types;  // "swish@1,rms_norm@1"
};

class Context : public detail::Handle<dp_context, dp_context_destroy> {
 public:
  // A new context (dp_context_create).
  Context() : Handle(create()) {}
  explicit Context(dp_context* adopt) noexcept : Handle(adopt) {}

  // dp_context_load_plugin: a path with a '/', or a bare name searched in DP_PLUGIN_PATH, dp's plugin folder, then ".".
  void load_plugin(const std::string& path) { check(dp_context_load_plugin(get(), path.c_str())); }
  // dp_context_set_option: DP_CONTEXT_MEMORY_LIMIT, DP_CONTEXT_ALLOW_MODEL_PLUGINS.
  void set_option(dp_context_option option, int64_t value) { check(dp_context_set_option(get(), option, value)); }
  int num_plugins() const {
    int n = 0;
    check(dp_context_num_plugins(get(), &n));
    return n;
  }
  PluginInfo plugin_info(int index) const {
    const char* path = nullptr;
    const char* types = nullptr;
    check(dp_context_plugin_info(get(), index, &path, &types));
    return PluginInfo{path, types};
  }

 private:
  static dp_context* create() {
    dp_context* c = nullptr;
    check(dp_context_create(&c));
    return c;
  }
};

// ---- Tensor: dense, row-major, on the host. ----
class Tensor : public detail::Handle<dp_tensor, dp_tensor_destroy> {
 public:
  Tensor() noexcept = default;
  explicit Tensor(dp_tensor* adopt) noexcept : Handle(adopt) {}
  // A zero-filled tensor (dp_tensor_create); Shape{0} makes a buffer for Loader::next.
  Tensor(Context& ctx, dp_dtype dtype, const Shape& shape) : Handle(create(ctx, dtype, shape)) {}

  // A tensor holding a copy of data (float: DP_F32, int64_t: DP_I64); data
  // must hold exactly prod(shape) elements.
  template <class T>
  static Tensor from_host(Context& ctx, Span<const T> data, const Shape& shape) {
    dp_tensor* t = nullptr;
    if (!shape_fits(data.size(), shape)) {
      throw Error(DP_ERR_SHAPE, "dp::Tensor::from_host: " + std::to_string(data.size()) +
                                    " elements do not fill the shape " + shape_string(shape));
    }
    check(dp_tensor_from_host(ctx.get(), dtype_of<T>::value, data.data(), detail::ndim_of(shape), shape.data(), &t));
    return Tensor(t);
  }
  static Tensor from_host(Context& ctx, const std::vector<float>& data, const Shape& shape) {
    return from_host<float>(ctx, Span<const float>(data), shape);
  }
  static Tensor from_host(Context& ctx, const std::vector<int64_t>& data, const Shape& shape) {
    return from_host<int64_t>(ctx, Span<const int64_t>(data), shape);
  }
  // A 1-d tensor of the vector's elements.
  static Tensor from_host(Context& ctx, const std::vector<float>& data) {
    return from_host(ctx, data, Shape{static_cast<int64_t>(data.size())});
  }
  static Tensor from_host(Context& ctx, const std::vector<int64_t>& data) {
    return from_host(ctx, data, Shape{static_cast<int64_t>(data.size())});
  }

  Shape shape() const {
    int nd = 0;
    int64_t dims[DP_MAX_DIMS];
    check(dp_tensor_shape(get(), &nd, dims));
    return detail::to_shape(nd, dims);
  }
  int64_t numel() const {
    int nd = 0;
    int64_t dims[DP_MAX_DIMS];
    check(dp_tensor_shape(get(), &nd, dims));
    int64_t n = 1;
    for (int i = 0; i < nd && i < DP_MAX_DIMS; ++i) n *= dims[i];
    return n;
  }
  dp_dtype dtype() const {
    dp_dtype d = DP_F32;
    check(dp_tensor_dtype(get(), &d));
    return d;
  }

  // Overwrites the contents in place (dp_tensor_copy_from_host): the element
  // type must be the tensor's dtype and src exactly its size.
  template <class T>
  void copy_from(Span<const T> src) {
    check_dtype(dtype_of<T>::value);
    check(dp_tensor_copy_from_host(get(), src.data(), src.size_bytes()));
  }
  void copy_from(const std::vector<float>& src) { copy_from<float>(Span<const float>(src)); }
  void copy_from(const std::vector<int64_t>& src) { copy_from<int64_t>(Span<const int64_t>(src)); }
  // Tensor.pin_memory(): page-locked elements, copied to GPUs without staging.
  void pin_memory() { check(dp_tensor_pin_memory(get())); }

  // Copies the contents out into dst (at least numel() elements).
  template <class T>
  void copy_to(Span<T> dst) const {
    check_dtype(dtype_of<T>::value);
    check(dp_tensor_copy_to_host(get(), dst.data(), dst.size_bytes()));
  }
  // The contents as a vector (T must match the dtype): tensor.tolist().
  template <class T = float>
  std::vector<T> to_vector() const {
    std::vector<T> v(static_cast<size_t>(numel()));
    copy_to(Span<T>(v));
    return v;
  }

 private:
  static dp_tensor* create(Context& ctx, dp_dtype dtype, const Shape& shape) {
    dp_tensor* t = nullptr;
    check(dp_tensor_create(ctx.get(), dtype, detail::ndim_of(shape), shape.data(), &t));
    return t;
  }
  static bool shape_fits(size_t count, const Shape& shape) {
    const int64_t n = detail::elements(shape);
    return n < 0 || static_cast<size_t>(n) == count;  // (a negative dimension: dp reports it)
  }
  static std::string shape_string(const Shape& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
  void check_dtype(dp_dtype want) const {
    if (dtype() != want) {
      throw Error(DP_ERR_INVALID_ARGUMENT, std::string("dp::Tensor: the tensor's dtype is ") +
                                               (dtype() == DP_F32 ? "float32" : "int64") + ", not " +
                                               (want == DP_F32 ? "float32" : "int64"));
    }
  }
};

// ---- Model: built from JSON (docs/model-format.md). ----
struct ParameterInfo {
  std::string name;  // "0.weight"
  Shape shape;
};

class Model : public detail::Handle<dp_model, dp_model_destroy> {
 public:
  Model() noexcept = default;
  explicit Model(dp_model* adopt) noexcept : Handle(adopt) {}

  static Model from_json(Context& ctx, const std::string& json) {
    dp_model* m = nullptr;
    check(dp_model_from_json(ctx.get(), json.c_str(), &m));
    return Model(m);
  }
  static Model from_file(Context& ctx, const std::string& path) {
    dp_model* m = nullptr;
    check(dp_model_from_file(ctx.get(), path.c_str(), &m));
    return Model(m);
  }

  // The number of float parameters, all tensors together.
  int64_t num_parameters() const {
    int64_t n = 0;
    check(dp_model_num_parameters(get(), &n));
    return n;
  }
  // All parameters, flat, in declaration order.
  std::vector<float> parameters() const {
    std::vector<float> p(static_cast<size_t>(num_parameters()));
    copy_parameters(Span<float>(p));
    return p;
  }
  void copy_parameters(Span<float> dst) const {
    check(dp_model_copy_parameters(get(), dst.data(), static_cast<int64_t>(dst.size())));
  }
  void set_parameters(Span<const float> src) {
    check(dp_model_set_parameters(get(), src.data(), static_cast<int64_t>(src.size())));
  }
  // The accumulated gradients, laid out as parameters().
  std::vector<float> gradients() const {
    std::vector<float> g(static_cast<size_t>(num_parameters()));
    check(dp_model_copy_gradients(get(), g.data(), static_cast<int64_t>(g.size())));
    return g;
  }
  // The parameter tensors' names and shapes (named_parameters()).
  std::vector<ParameterInfo> parameter_info() const {
    return tensor_info(dp_model_num_parameter_tensors, dp_model_parameter_info);
  }
  // The buffers (batch-norm running statistics), flat.
  std::vector<float> buffers() const {
    int64_t n = 0;
    check(dp_model_num_buffers(get(), &n));
    std::vector<float> b(static_cast<size_t>(n));
    check(dp_model_copy_buffers(get(), b.data(), n));
    return b;
  }
  void set_buffers(Span<const float> src) {
    check(dp_model_set_buffers(get(), src.data(), static_cast<int64_t>(src.size())));
  }
  // The buffer tensors' names ("1.running_mean") and shapes.
  std::vector<ParameterInfo> buffer_info() const { return tensor_info(dp_model_num_buffer_tensors, dp_model_buffer_info); }
  Shape input_shape() const {
    int nd = 0;
    int64_t dims[DP_MAX_DIMS];
    check(dp_model_input_shape(get(), &nd, dims));
    return detail::to_shape(nd, dims);
  }
  Shape output_shape() const {
    int nd = 0;
    int64_t dims[DP_MAX_DIMS];
    check(dp_model_output_shape(get(), &nd, dims));
    return detail::to_shape(nd, dims);
  }
  // safetensors weights, by state_dict() names.
  void load_safetensors(const std::string& path) { check(dp_model_load_safetensors(get(), path.c_str())); }
  void save_safetensors(const std::string& path) const { check(dp_model_save_safetensors(get(), path.c_str())); }
  // The weights for PyTorch's load_state_dict(strict=True) (dp_model_save_weights).
  void save_weights(const std::string& path) const { check(dp_model_save_weights(get(), path.c_str())); }
  // The model and its weights as an ONNX file (evaluation form; dp_model_export_onnx).
  void export_onnx(const std::string& path) const { check(dp_model_export_onnx(get(), path.c_str())); }

 private:
  using CountFn = dp_status (*)(const dp_model*, int*);
  using InfoFn = dp_status (*)(const dp_model*, int, const char**, int*, int64_t*);
  std::vector<ParameterInfo> tensor_info(CountFn count, InfoFn info) const {
    int n = 0;
    check(count(get(), &n));
    std::vector<ParameterInfo> out;
    out.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const char* name = nullptr;
      int nd = 0;
      int64_t dims[DP_MAX_DIMS];
      check(info(get(), i, &name, &nd, dims));
      out.push_back(ParameterInfo{name, detail::to_shape(nd, dims)});
    }
    return out;
  }
};

class Optimizer;

// ---- ProcessGroup: the processes that train one model (docs/distributed.md). ----
class ProcessGroup : public detail::Handle<dp_process_group, dp_process_group_destroy> {
 public:
  ProcessGroup() noexcept = default;
  explicit ProcessGroup(dp_process_group* adopt) noexcept : Handle(adopt) {}
  // Joins (collective): "" reads the launcher's environment (torchrun,
  // mpirun, srun); a JSON object overrides it: {"rank": 1, "world_size": 2,
  // "master_addr": "10.0.0.1", "master_port": 29500, "timeout_s": 300}.
  explicit ProcessGroup(const std::string& json_config) : Handle(create(json_config)) {}

  int rank() const { return query(dp_process_group_rank); }
  int world_size() const { return query(dp_process_group_world_size); }
  int local_rank() const { return query(dp_process_group_local_rank); }
  int local_world_size() const { return query(dp_process_group_local_world_size); }
  void barrier() { check(dp_process_group_barrier(get())); }
  // Every process's value of a setting of its own must be the same (dp_process_group_check_same).
  void check_same(const std::string& what, const std::string& value) {
    check(dp_process_group_check_same(get(), what.c_str(), value.c_str()));
  }
  // Stopping together (dp.h): ask, then after each step the processes that had asked, the same on every process.
  void request_stop() { check(dp_process_group_request_stop(get())); }
  int stop_requested() const { return query(dp_process_group_stop_requested); }

 private:
  static dp_process_group* create(const std::string& json_config) {
    dp_process_group* pg = nullptr;
    check(dp_process_group_create(json_config.empty() ? nullptr : json_config.c_str(), &pg));
    return pg;
  }
  int query(dp_status (*fn)(const dp_process_group*, int*)) const {
    int v = 0;
    check(fn(get(), &v));
    return v;
  }
};

// What Group::evaluate returns.
struct Evaluation {
  float loss;
  int64_t correct;  // rows whose arg-max is the target (cross_entropy, nll)
};

// ---- Group: nn.DataParallel over a list of devices. ----
class Group : public detail::Handle<dp_group, dp_group_destroy> {
 public:
  Group() noexcept = default;
  explicit Group(dp_group* adopt) noexcept : Handle(adopt) {}
  // devices: "cpu:0,cpu:1". The model must outlive the group.
  Group(Model& model, const std::string& devices) : Handle(create(model, devices)) {}
  // This process's devices within one group over every process's
  // (collective; dp_group_create_distributed). The group keeps `processes` alive.
  Group(Model& model, const std::string& devices, ProcessGroup& processes)
      : Handle(create_distributed(model, devices, processes)) {}

  // Over all processes: the devices, and the first of this process's.
  std::pair<int, int> global_devices() const {
    int count = 0, first = 0;
    check(dp_group_global_devices(get(), &count, &first));
    return {count, first};
  }

  int num_devices() const {
    int n = 0;
    check(dp_group_num_devices(get(), &n));
    return n;
  }
  void set_option(dp_group_option option, int64_t value) { check(dp_group_set_option(get(), option, value)); }
  // DP_SPLIT_CHUNK (torch.chunk's rule, the default) or DP_SPLIT_BALANCED.
  void set_split(int split) { set_option(DP_GROUP_SPLIT, split); }
  void set_threads_per_device(int threads) { set_option(DP_GROUP_THREADS_PER_DEVICE, threads); }
  // GPU matrix products and convolutions may use TF32 (off by default).
  void set_allow_tf32(bool allow = true) { set_option(DP_GROUP_ALLOW_TF32, allow ? 1 : 0); }
  // cuDNN times convolution algorithms (PyTorch's cudnn.benchmark).
  void set_cudnn_benchmark(bool on = true) { set_option(DP_GROUP_CUDNN_BENCHMARK, on ? 1 : 0); }
  // DP_PRECISION_FP32, _BF16 or _FP16 (mixed precision on GPUs; dp.h).
  void set_precision(int precision) { set_option(DP_GROUP_PRECISION, precision); }

  // model.train() / model.eval().
  void train(bool training = true) { check(dp_group_set_training(get(), training ? 1 : 0)); }
  void eval() { train(false); }

  // Scatter, parallel forward, gather: a new tensor.
  Tensor forward(const Tensor& input) {
    dp_tensor* out = nullptr;
    check(dp_group_forward(get(), input.get(), &out));
    return Tensor(out);
  }
  Tensor operator()(const Tensor& input) { return forward(input); }
  // Accumulates the parameter gradients of the last forward.
  void backward(const Tensor& grad_output) { check(dp_group_backward(get(), grad_output.get())); }
  void zero_grad() { check(dp_group_zero_grad(get())); }
  // The rows each device ran last (idle devices not listed).
  std::vector<int64_t> last_split() const {
    std::vector<int64_t> sizes(static_cast<size_t>(num_devices()));
    int count = 0;
    check(dp_group_last_split(get(), sizes.data(), static_cast<int>(sizes.size()), &count));
    sizes.resize(static_cast<size_t>(count));
    return sizes;
  }

  // zero_grad, forward, loss, backward, optimizer step: the batch loss.
  inline float train_step(Optimizer& opt, const Tensor& input, const Tensor& target);
  // Gradient accumulation: forward, loss, backward of loss_scale * loss,
  // the gradients added into the model's (no step): the unscaled loss.
  float forward_backward(const Tensor& input, const Tensor& target, double loss_scale = 1.0) {
    float loss = 0;
    check(dp_group_forward_backward(get(), input.get(), target.get(), loss_scale, &loss));
    return loss;
  }
  // The loss without training, and the number of correct rows.
  Evaluation evaluate(const Tensor& input, const Tensor& target) {
    Evaluation e{0.0f, 0};
    check(dp_group_evaluate(get(), input.get(), target.get(), &e.loss, &e.correct));
    return e;
  }

 private:
  static dp_group* create(Model& model, const std::string& devices) {
    dp_group* g = nullptr;
    check(dp_group_create(model.get(), devices.c_str(), &g));
    return g;
  }
  static dp_group* create_distributed(Model& model, const std::string& devices, ProcessGroup& processes) {
    dp_group* g = nullptr;
    check(dp_group_create_distributed(model.get(), devices.c_str(), processes.get(), &g));
    return g;
  }
};

// ---- Optimizer: JSON config, PyTorch's names ({"type": "sgd", "lr": 0.1}). ----
class Optimizer : public detail::Handle<dp_optimizer, dp_optimizer_destroy> {
 public:
  Optimizer() noexcept = default;
  explicit Optimizer(dp_optimizer* adopt) noexcept : Handle(adopt) {}
  Optimizer(Group& group, const std::string& json_config) : Handle(create(group, json_config)) {}

  void step() { check(dp_optimizer_step(get())); }
  double lr() const {
    double lr = 0;
    check(dp_optimizer_lr(get(), &lr));
    return lr;
  }
  void set_lr(double lr) { check(dp_optimizer_set_lr(get(), lr)); }
  // dp_optimizer_set_lr_schedule: PyTorch's schedulers, per step ("" removes it).
  void set_lr_schedule(const std::string& json) { check(dp_optimizer_set_lr_schedule(get(), json.c_str())); }
  // clip_grad_norm_ before every step (0: off; INFINITY: measure only).
  void set_clip_grad_norm(double max_norm) { check(dp_optimizer_set_clip_grad_norm(get(), max_norm)); }
  // The last step's gradient norm, before clipping.
  double grad_norm() const {
    double n = 0;
    check(dp_optimizer_grad_norm(get(), &n));
    return n;
  }
  // torch.amp.GradScaler (dp_optimizer_set_grad_scaler): "{}" for PyTorch's
  // defaults, "" turns it off.
  void set_grad_scaler(const std::string& json = "{}") { check(dp_optimizer_set_grad_scaler(get(), json.c_str())); }
  // The scale the next step's loss gradient is multiplied by (1 when off).
  double get_scale() const {
    double s = 1;
    check(dp_optimizer_grad_scaler_state(get(), &s, nullptr, nullptr));
    return s;
  }
  struct GradScalerState {
    double scale = 1;
    int64_t growth_tracker = 0, skipped_steps = 0;
  };
  GradScalerState grad_scaler_state() const {
    GradScalerState st;
    check(dp_optimizer_grad_scaler_state(get(), &st.scale, &st.growth_tracker, &st.skipped_steps));
    return st;
  }
  void set_grad_scaler_state(const GradScalerState& st) {
    check(dp_optimizer_set_grad_scaler_state(get(), st.scale, st.growth_tracker, st.skipped_steps));
  }
  // The state arrays' names ("momentum_buffer"; "exp_avg", "exp_avg_sq").
  std::vector<std::string> state_names() const {
    int n = 0;
    check(dp_optimizer_num_states(get(), &n));
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      const char* name = nullptr;
      check(dp_optimizer_state_name(get(), i, &name));
      names.emplace_back(name);
    }
    return names;
  }
  // One state array, laid out as the model's parameters.
  void copy_state(const std::string& name, Span<float> dst) const {
    check(dp_optimizer_copy_state(get(), name.c_str(), dst.data(), static_cast<int64_t>(dst.size())));
  }
  void set_state(const std::string& name, Span<const float> src) {
    check(dp_optimizer_set_state(get(), name.c_str(), src.data(), static_cast<int64_t>(src.size())));
  }
  int64_t steps() const {
    int64_t n = 0;
    check(dp_optimizer_steps(get(), &n));
    return n;
  }
  void set_steps(int64_t steps) { check(dp_optimizer_set_steps(get(), steps)); }

 private:
  static dp_optimizer* create(Group& group, const std::string& json_config) {
    dp_optimizer* o = nullptr;
    check(dp_optimizer_create(group.get(), json_config.c_str(), &o));
    return o;
  }
};

inline float Group::train_step(Optimizer& opt, const Tensor& input, const Tensor& target) {
  float loss = 0;
  check(dp_group_train_step(get(), opt.get(), input.get(), target.get(), &loss));
  return loss;
}

// ---- Dataset: samples of a float32 input and a target. ----
class Dataset : public detail::Handle<dp_dataset, dp_dataset_destroy> {
 public:
  // A C++ dataset's get_item: fills input (prod(sample_shape) floats) and
  // target (one int64_t, or prod(target_shape) floats) for a sample index.
  // Called from loader threads at once. Throwing fails the batch, with the
  // exception's what() as the message.
  using GetItem = std::function<void(int64_t index, float* input, void* target)>;

  Dataset() noexcept = default;
  explicit Dataset(dp_dataset* adopt) noexcept : Handle(adopt) {}

  // IDX files (MNIST, Fashion-MNIST), gzip or not.
  static Dataset from_idx(Context& ctx, const std::string& images_path, const std::string& labels_path) {
    dp_dataset* d = nullptr;
    check(dp_dataset_from_idx(ctx.get(), images_path.c_str(), labels_path.c_str(), &d));
    return Dataset(d);
  }
  // CIFAR-10 binary batches.
  static Dataset from_cifar10(Context& ctx, const std::vector<std::string>& paths) {
    std::vector<const char*> p;
    for (const std::string& s : paths) p.push_back(s.c_str());
    dp_dataset* d = nullptr;
    check(dp_dataset_from_cifar10(ctx.get(), p.data(), static_cast<int>(p.size()), &d));
    return Dataset(d);
  }
  // Class-index targets (one int64_t per sample), copied (borrow = false) or
  // read in place (borrow = true: the arrays must outlive the dataset).
  // inputs must hold prod(sample_shape) floats per target (DP_ERR_SHAPE).
  static Dataset from_arrays(Context& ctx, Span<const float> inputs, const Shape& sample_shape,
                             Span<const int64_t> targets, bool borrow = false) {
    check_sizes(inputs.size(), sample_shape, targets.size());
    dp_dataset* d = nullptr;
    check(dp_dataset_from_arrays(ctx.get(), inputs.data(), detail::ndim_of(sample_shape), sample_shape.data(),
                                 static_cast<int64_t>(targets.size()), DP_I64, targets.data(), 0, nullptr,
                                 borrow ? 1 : 0, &d));
    return Dataset(d);
  }
  // Float targets of target_shape per sample (regression); inputs and
  // targets must hold whole samples of the same count (DP_ERR_SHAPE).
  static Dataset from_arrays(Context& ctx, Span<const float> inputs, const Shape& sample_shape,
                             Span<const float> targets, const Shape& target_shape, bool borrow = false) {
    const int64_t per = detail::elements(target_shape);
    const int64_t count = per > 0 ? static_cast<int64_t>(targets.size()) / per : 0;
    if (per > 0 && targets.size() % static_cast<size_t>(per) != 0)
      throw Error(DP_ERR_SHAPE, "dp::Dataset::from_arrays: " + std::to_string(targets.size()) +
                                    " target values are not whole samples of " + std::to_string(per));
    check_sizes(inputs.size(), sample_shape, static_cast<size_t>(count));
    dp_dataset* d = nullptr;
    check(dp_dataset_from_arrays(ctx.get(), inputs.data(), detail::ndim_of(sample_shape), sample_shape.data(), count,
                                 DP_F32, targets.data(), detail::ndim_of(target_shape), target_shape.data(),
                                 borrow ? 1 : 0, &d));
    return Dataset(d);
  }
  // A dataset of length samples served by get_item (PyTorch's Dataset
  // __getitem__). target_dtype DP_I64 with an empty target_shape: class
  // indices; DP_F32: target_shape floats.
  static Dataset from_function(Context& ctx, int64_t length, const Shape& sample_shape, GetItem get_item,
                               dp_dtype target_dtype = DP_I64, const Shape& target_shape = Shape{}) {
    auto fn = std::make_unique<GetItem>(std::move(get_item));
    dp_dataset_callbacks cb{};
    cb.struct_size = sizeof(cb);
    cb.user = fn.get();
    cb.length = length;
    cb.get_item = &call_get_item;
    cb.release = &release_get_item;
    dp_dataset* d = nullptr;
    check(dp_dataset_from_callbacks(ctx.get(), &cb, detail::ndim_of(sample_shape), sample_shape.data(), target_dtype,
                                    detail::ndim_of(target_shape), target_shape.data(), &d));
    fn.release();  // the dataset owns it now: release_get_item deletes it
    return Dataset(d);
  }

  int64_t size() const {
    int64_t n = 0;
    check(dp_dataset_length(get(), &n));
    return n;
  }
  Shape sample_shape() const {
    int nd = 0;
    int64_t dims[DP_MAX_DIMS];
    check(dp_dataset_sample_shape(get(), &nd, dims));
    return detail::to_shape(nd, dims);
  }
  // {"random_crop": {...}, "horizontal_flip": 0.5, "normalize": {...}}
  void set_transform(const std::string& json) { check(dp_dataset_set_transform(get(), json.c_str())); }

 private:
  // The inputs are `count` whole samples (dp reads count * prod(sample_shape) floats: a shorter
  // span would be read past its end).
  static void check_sizes(size_t inputs, const Shape& sample_shape, size_t count) {
    const int64_t per = detail::elements(sample_shape);
    if (per <= 0) return;  // dp reports the shape
    if (inputs % static_cast<size_t>(per) != 0 || inputs / static_cast<size_t>(per) != count)
      throw Error(DP_ERR_SHAPE, "dp::Dataset::from_arrays: " + std::to_string(inputs) + " input values for " +
                                    std::to_string(count) + " targets; each sample takes " + std::to_string(per));
  }

  static int call_get_item(void* user, int64_t index, float* input, void* target, char* error,
                           size_t capacity) noexcept {
    auto copy_message = [&](const char* what) {
      if (capacity == 0) return;
      size_t i = 0;
      for (; what[i] != '\0' && i + 1 < capacity; ++i) error[i] = what[i];
      error[i] = '\0';
    };
    try {
      (*static_cast<GetItem*>(user))(index, input, target);
      return 0;
    } catch (const std::exception& e) {
      copy_message(e.what());
    } catch (...) {
      copy_message("unknown C++ exception");
    }
    return 1;
  }
  static void release_get_item(void* user) noexcept { delete static_cast<GetItem*>(user); }
};

// Where a loader stands.
struct LoaderPosition {
  int64_t epoch;
  int64_t batch;  // the index of the next batch
};

// ---- Loader: shuffled batches assembled by worker threads. ----
class Loader : public detail::Handle<dp_loader, dp_loader_destroy> {
 public:
  Loader() noexcept = default;
  explicit Loader(dp_loader* adopt) noexcept : Handle(adopt) {}
  // {"batch_size": 64, "shuffle": true, "num_workers": 2, "seed": 0}
  Loader(Dataset& dataset, const std::string& json_config) : Handle(create(dataset, json_config)) {}

  int64_t num_batches() const {
    int64_t n = 0;
    check(dp_loader_num_batches(get(), &n));
    return n;
  }
  // The next batch into input and target (reshaped to [rows, ...]): rows, 0
  // at the end of an epoch (the next call starts the next one).
  int64_t next(Tensor& input, Tensor& target) {
    int64_t rows = 0;
    check(dp_loader_next(get(), input.get(), target.get(), &rows));
    return rows;
  }
  LoaderPosition position() const {
    LoaderPosition p{0, 0};
    check(dp_loader_position(get(), &p.epoch, &p.batch));
    return p;
  }
  void seek(int64_t epoch, int64_t batch) { check(dp_loader_seek(get(), epoch, batch)); }
  void seek(const LoaderPosition& p) { seek(p.epoch, p.batch); }
  // A distributed sampler: from now on only this process's rows of each
  // global batch (before the first batch; collective); next() then returns
  // the global batch's rows.
  void shard(const Group& group) { check(dp_loader_shard(get(), group.get())); }

 private:
  static dp_loader* create(Dataset& dataset, const std::string& json_config) {
    dp_loader* l = nullptr;
    check(dp_loader_create(dataset.get(), json_config.c_str(), &l));
    return l;
  }
};

// ---- Checkpoints (safetensors). opt and loader may be null. ----
inline void save_checkpoint(const std::string& path, const Group& group, const Optimizer* opt = nullptr,
                            const Loader* loader = nullptr, const std::string& user_metadata_json = "") {
  check(dp_checkpoint_save(path.c_str(), group.get(), opt ? opt->get() : nullptr, loader ? loader->get() : nullptr,
                           user_metadata_json.empty() ? nullptr : user_metadata_json.c_str()));
}
inline void load_checkpoint(const std::string& path, Group& group, Optimizer* opt = nullptr, Loader* loader = nullptr) {
  check(dp_checkpoint_load(path.c_str(), group.get(), opt ? opt->get() : nullptr, loader ? loader->get() : nullptr));
}
// The checkpoint's __metadata__ as one JSON object.
inline std::string checkpoint_metadata(const std::string& path) {
  char* json = nullptr;
  check(dp_checkpoint_metadata(path.c_str(), &json));
  std::unique_ptr<char, void (*)(void*)> owned(json, dp_free);
  return std::string(json);
}

}  // namespace v1
}  // namespace dp

#endif  // DP_HPP
