// The C ABI (include/dp.h): argument checks, handle plumbing and error
// translation only; the work is done by the C++ runtime.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include <thread>

#include <nlohmann/json.hpp>

#include "core/blas.h"
#include "engine/devices.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "io/checkpoint.h"

namespace dp {

static thread_local std::string g_last_error;

dp_status set_error(dp_status status, const char* message) {
  try {
    g_last_error = message;
  } catch (...) {
    // Keep the status even when the message cannot be stored.
  }
  return status;
}

}  // namespace dp

using dp::fail;

static void check_count(const dp_model* m, int64_t have, size_t need, const char* what) {
  if (have < static_cast<int64_t>(need))
    fail(DP_ERR_INVALID_ARGUMENT, std::string(what) + ": the buffer holds " + std::to_string(have) + " floats, the model has " +
                                      std::to_string(need));
  (void)m;
}

// Every number of j as a double (0, 0.0 and 0e0 compare alike).
static void numbers_as_doubles(nlohmann::json& j) {
  if (j.is_number()) j = j.get<double>();
  if (j.is_structured())  // (a scalar would iterate over itself)
    for (auto& v : j) numbers_as_doubles(v);
}

static void copy_shape(const dp::Shape& s, int* ndim, int64_t shape[DP_MAX_DIMS]) {
  *ndim = s.ndim;
  for (int i = 0; i < s.ndim; ++i) shape[i] = s[i];
}

// Checks a (dtype, ndim, shape) triple from the caller.
static dp::Shape tensor_shape_arg(const char* fn, int dtype, int ndim, const int64_t* shape) {
  std::string f = fn;
  if (dtype != DP_F32 && dtype != DP_I64) fail(DP_ERR_INVALID_ARGUMENT, f + ": dtype must be DP_F32 or DP_I64");
  if (ndim < 0 || ndim > DP_MAX_DIMS)
    fail(DP_ERR_INVALID_ARGUMENT, f + ": ndim must be in [0, " + std::to_string(DP_MAX_DIMS) + "], got " + std::to_string(ndim));
  if (ndim > 0 && !shape) fail(DP_ERR_INVALID_ARGUMENT, f + ": shape is NULL");
  dp::Shape s;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0) fail(DP_ERR_INVALID_ARGUMENT, f + ": shape[" + std::to_string(i) + "] is negative");
    s.push(shape[i]);
  }
  s.checked_numel(f);  // before anything is sized or viewed by it
  return s;
}

// The most bytes a model file may have (its JSON; weights go in safetensors).
constexpr int64_t kMaxModelFileBytes = int64_t{64} << 20;

// A model file's text, in bounded time and memory: a regular file (not a
// directory, a device such as /dev/zero, or a FIFO, which O_NONBLOCK keeps
// from blocking the open) of at most kMaxModelFileBytes. DP_ERR_IO otherwise.
static std::string read_model_file(const char* path) {
  const std::string p = path;
  int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(DP_ERR_IO, "cannot open model file '" + p + "': " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { ::close(*f); });
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(DP_ERR_IO, "cannot stat model file '" + p + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(DP_ERR_IO, "model file '" + p + "' is not a regular file" + (S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  if (st.st_size > kMaxModelFileBytes)
    fail(DP_ERR_IO, "model file '" + p + "' has " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                        std::to_string(kMaxModelFileBytes) + " (64 MiB)");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(DP_ERR_IO, "cannot read model file '" + p + "': " + std::strerror(errno));
    if (n == 0) break;  // shrank while read: parse what is there
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

extern "C" {

const char* dp_last_error(void) { return dp::g_last_error.c_str(); }

const char* dp_version(void) { return "0.1.0"; }

const char* dp_status_name(dp_status s) {
  switch (dp::c_enum(s)) {
    case DP_OK: return "DP_OK";
    case DP_ERR_INVALID_ARGUMENT: return "DP_ERR_INVALID_ARGUMENT";
    case DP_ERR_JSON: return "DP_ERR_JSON";
    case DP_ERR_MODEL: return "DP_ERR_MODEL";
    case DP_ERR_SHAPE: return "DP_ERR_SHAPE";
    case DP_ERR_IO: return "DP_ERR_IO";
    case DP_ERR_DEVICE: return "DP_ERR_DEVICE";
    case DP_ERR_NUMERIC: return "DP_ERR_NUMERIC";
    case DP_ERR_OUT_OF_MEMORY: return "DP_ERR_OUT_OF_MEMORY";
    case DP_ERR_PLUGIN: return "DP_ERR_PLUGIN";
    case DP_ERR_INTERNAL: return "DP_ERR_INTERNAL";
    case DP_ERR_COMM: return "DP_ERR_COMM";
  }
  return "DP_ERR_UNKNOWN";
}

/* ---- context ---- */

dp_status dp_context_create(dp_context** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(out, "out is NULL");
  *out = new dp_context();
  DP_GUARD_END
}

void dp_context_destroy(dp_context* ctx) { delete ctx; }

dp_status dp_context_set_option(dp_context* ctx, dp_context_option option, int64_t value) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx, "ctx is NULL");
  const int opt = dp::c_enum(option);
  switch (opt) {
    case DP_CONTEXT_MEMORY_LIMIT:
      DP_CHECK_ARG(value >= 0, "DP_CONTEXT_MEMORY_LIMIT takes bytes >= 0 (0: the machine's available memory), got " +
                                   std::to_string(value));
      ctx->memory_limit = static_cast<uint64_t>(value);
      break;
    case DP_CONTEXT_ALLOW_MODEL_PLUGINS:
      DP_CHECK_ARG(value == 0 || value == 1, "DP_CONTEXT_ALLOW_MODEL_PLUGINS takes 0 or 1, got " + std::to_string(value));
      ctx->allow_model_plugins = value == 1;
      break;
    default:
      fail(DP_ERR_INVALID_ARGUMENT, "dp_context_set_option: unknown option " + std::to_string(opt));
  }
  DP_GUARD_END
}

/* ---- model ---- */

dp_status dp_model_from_json(dp_context* ctx, const char* json, dp_model** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && json && out, "ctx, json and out must not be NULL");
  auto m = std::make_unique<dp_model>();
  m->ctx = ctx;
  m->model = dp::Model::from_json(
      ctx->registry, json,
      [ctx](const std::string& entry, const std::string&) {
        ctx->plugins.load(ctx->registry, entry, "", ctx->model_trust());  // relative paths: the current directory
      },
      ctx->memory_limit);
  *out = m.release();
  DP_GUARD_END
}

dp_status dp_model_from_file(dp_context* ctx, const char* path, dp_model** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && path && out, "ctx, path and out must not be NULL");
  const std::string text = read_model_file(path);
  auto m = std::make_unique<dp_model>();
  m->ctx = ctx;
  try {
    // A model file's relative plugin paths are relative to the file.
    std::string file = path, dir = file.find('/') == std::string::npos ? "" : file.substr(0, file.rfind('/') + 1);
    m->model = dp::Model::from_json(
        ctx->registry, text,
        [ctx, dir](const std::string& entry, const std::string&) { ctx->plugins.load(ctx->registry, entry, dir, ctx->model_trust()); },
        ctx->memory_limit);
  } catch (const dp::Error& e) {
    fail(e.status(), std::string(path) + ": " + e.what());
  }
  *out = m.release();
  DP_GUARD_END
}

void dp_model_destroy(dp_model* m) { delete m; }

dp_status dp_model_num_parameters(const dp_model* m, int64_t* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && count, "m and count must not be NULL");
  *count = m->model->num_params();
  DP_GUARD_END
}

dp_status dp_model_copy_parameters(const dp_model* m, float* dst, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && dst, "m and dst must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  const std::vector<float>& params = m->model->params();
  check_count(m, count, params.size(), "dp_model_copy_parameters");
  std::memcpy(dst, params.data(), params.size() * sizeof(float));
  DP_GUARD_END
}

dp_status dp_model_set_parameters(dp_model* m, const float* src, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && src, "m and src must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  if (count != m->model->num_params())
    fail(DP_ERR_INVALID_ARGUMENT, "dp_model_set_parameters: got " + std::to_string(count) + " floats, the model has " +
                                      std::to_string(m->model->num_params()));
  dp::io::check_values(src, m->model->param_info, false, DP_ERR_NUMERIC, "dp_model_set_parameters",
                       ": nothing was set (dp holds only values training can continue from, as its loads)");
  std::vector<float>& params = m->model->mutable_params();
  std::memcpy(params.data(), src, params.size() * sizeof(float));
  DP_GUARD_END
}

dp_status dp_model_copy_gradients(const dp_model* m, float* dst, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && dst, "m and dst must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  const std::vector<float>& grads = m->model->grads();
  check_count(m, count, grads.size(), "dp_model_copy_gradients");
  std::memcpy(dst, grads.data(), grads.size() * sizeof(float));
  DP_GUARD_END
}

dp_status dp_model_num_parameter_tensors(const dp_model* m, int* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && count, "m and count must not be NULL");
  *count = static_cast<int>(m->model->param_info.size());
  DP_GUARD_END
}

// Tensor `index` of a model's parameters or buffers: its name and shape.
static void tensor_info(const std::vector<dp::NamedTensor>& info, const char* kind, int index, const char** name, int* ndim,
                        int64_t shape[DP_MAX_DIMS]) {
  if (index < 0 || index >= static_cast<int>(info.size()))
    fail(DP_ERR_INVALID_ARGUMENT, std::string(kind) + " index " + std::to_string(index) + " is outside [0, " +
                                      std::to_string(info.size()) + ")");
  *name = info[static_cast<size_t>(index)].name.c_str();
  copy_shape(info[static_cast<size_t>(index)].shape, ndim, shape);
}

dp_status dp_model_parameter_info(const dp_model* m, int index, const char** name, int* ndim,
                                  int64_t shape[DP_MAX_DIMS]) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && name && ndim && shape, "m, name, ndim and shape must not be NULL");
  tensor_info(m->model->param_info, "parameter", index, name, ndim, shape);
  DP_GUARD_END
}

dp_status dp_model_num_buffer_tensors(const dp_model* m, int* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && count, "m and count must not be NULL");
  *count = static_cast<int>(m->model->buffer_info.size());
  DP_GUARD_END
}

dp_status dp_model_buffer_info(const dp_model* m, int index, const char** name, int* ndim, int64_t shape[DP_MAX_DIMS]) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && name && ndim && shape, "m, name, ndim and shape must not be NULL");
  tensor_info(m->model->buffer_info, "buffer", index, name, ndim, shape);
  DP_GUARD_END
}

dp_status dp_model_set_buffers(dp_model* m, const float* src, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && (src || m->model->num_buffers() == 0), "m and src must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  if (count != m->model->num_buffers())
    fail(DP_ERR_INVALID_ARGUMENT, "dp_model_set_buffers: got " + std::to_string(count) + " floats, the model has " +
                                      std::to_string(m->model->num_buffers()));
  dp::io::check_values(src, m->model->buffer_info, false, DP_ERR_NUMERIC, "dp_model_set_buffers",
                       ": nothing was set (dp holds only values training can continue from, as its loads)");
  if (count > 0) {
    std::vector<float>& buffers = m->model->mutable_buffers();
    std::memcpy(buffers.data(), src, buffers.size() * sizeof(float));
  }
  DP_GUARD_END
}

dp_status dp_model_num_buffers(const dp_model* m, int64_t* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && count, "m and count must not be NULL");
  *count = m->model->num_buffers();
  DP_GUARD_END
}

dp_status dp_model_copy_buffers(const dp_model* m, float* dst, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && (dst || m->model->num_buffers() == 0), "m and dst must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  const std::vector<float>& buffers = m->model->buffers();
  check_count(m, count, buffers.size(), "dp_model_copy_buffers");
  if (!buffers.empty()) std::memcpy(dst, buffers.data(), buffers.size() * sizeof(float));
  DP_GUARD_END
}

dp_status dp_model_input_shape(const dp_model* m, int* ndim, int64_t shape[DP_MAX_DIMS]) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && ndim && shape, "m, ndim and shape must not be NULL");
  copy_shape(m->model->input_shape, ndim, shape);
  DP_GUARD_END
}

dp_status dp_model_output_shape(const dp_model* m, int* ndim, int64_t shape[DP_MAX_DIMS]) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && ndim && shape, "m, ndim and shape must not be NULL");
  copy_shape(m->model->output_shape(), ndim, shape);
  DP_GUARD_END
}

/* ---- tensors ---- */

dp_status dp_tensor_from_host(dp_context* ctx, dp_dtype dtype, const void* data, int ndim, const int64_t* shape,
                              dp_tensor** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && out, "ctx and out must not be NULL");
  dp::Shape s = tensor_shape_arg("dp_tensor_from_host", dp::c_enum(dtype), ndim, shape);
  DP_CHECK_ARG(data || s.numel() == 0, "data is NULL");
  auto t = std::make_unique<dp_tensor>();
  t->t.resize(dtype, s);
  if (t->t.bytes()) std::memcpy(t->t.data(), data, t->t.bytes());
  *out = t.release();
  DP_GUARD_END
}

dp_status dp_tensor_create(dp_context* ctx, dp_dtype dtype, int ndim, const int64_t* shape, dp_tensor** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && out, "ctx and out must not be NULL");
  dp::Shape s = tensor_shape_arg("dp_tensor_create", dp::c_enum(dtype), ndim, shape);
  auto t = std::make_unique<dp_tensor>();
  t->t.resize(dtype, s);
  t->t.zero();
  *out = t.release();
  DP_GUARD_END
}

dp_status dp_tensor_copy_from_host(dp_tensor* t, const void* src, size_t bytes) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t && (src || bytes == 0), "t and src must not be NULL");
  if (bytes != t->t.bytes())
    fail(DP_ERR_INVALID_ARGUMENT, "dp_tensor_copy_from_host: got " + std::to_string(bytes) + " bytes, the tensor holds " +
                                      std::to_string(t->t.bytes()));
  if (bytes) std::memcpy(t->t.data(), src, bytes);
  DP_GUARD_END
}

dp_status dp_tensor_shape(const dp_tensor* t, int* ndim, int64_t shape[DP_MAX_DIMS]) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t && ndim && shape, "t, ndim and shape must not be NULL");
  copy_shape(t->t.shape(), ndim, shape);
  DP_GUARD_END
}

dp_status dp_tensor_dtype(const dp_tensor* t, dp_dtype* dtype) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t && dtype, "t and dtype must not be NULL");
  *dtype = t->t.dtype();
  DP_GUARD_END
}

dp_status dp_tensor_copy_to_host(const dp_tensor* t, void* dst, size_t bytes) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t && (dst || t->t.bytes() == 0), "t and dst must not be NULL");
  if (bytes < t->t.bytes())
    fail(DP_ERR_INVALID_ARGUMENT, "dp_tensor_copy_to_host: the buffer holds " + std::to_string(bytes) + " bytes, the tensor " +
                                      std::to_string(t->t.bytes()));
  if (t->t.bytes()) std::memcpy(dst, t->t.data(), t->t.bytes());
  DP_GUARD_END
}

void dp_tensor_destroy(dp_tensor* t) { delete t; }

dp_status dp_tensor_from_host_borrowed(dp_context* ctx, dp_dtype dtype, void* data, int ndim, const int64_t* shape,
                                       dp_release_fn release, void* user, dp_tensor** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && out, "ctx and out must not be NULL");
  dp::Shape s = tensor_shape_arg("dp_tensor_from_host_borrowed", dp::c_enum(dtype), ndim, shape);
  DP_CHECK_ARG(data, "data is NULL (a borrowed tensor needs an address, even with no elements)");
  DP_CHECK_ARG(reinterpret_cast<uintptr_t>(data) % dp::dtype_size(dtype) == 0,
               std::string("data is not aligned to the size of ") + dp::dtype_name(dtype) + " (" +
                   std::to_string(dp::dtype_size(dtype)) + " bytes)");
  auto t = std::make_unique<dp_tensor>();
  t->t = dp::Tensor::view(data, dtype, s);
  t->borrowed = true;
  // Set last: from here nothing throws, so a failed call never releases.
  t->release = release;
  t->user = user;
  *out = t.release();
  DP_GUARD_END
}

dp_status dp_tensor_data(const dp_tensor* t, void** data) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t && data, "t and data must not be NULL");
  *data = const_cast<void*>(t->t.data());
  DP_GUARD_END
}

dp_status dp_tensor_is_borrowed(const dp_tensor* t, int* borrowed) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t && borrowed, "t and borrowed must not be NULL");
  *borrowed = t->borrowed ? 1 : 0;
  DP_GUARD_END
}

dp_status dp_tensor_pin_memory(dp_tensor* t) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(t, "t is NULL");
  DP_CHECK_ARG(!t->borrowed, "cannot pin a borrowed tensor: its memory is the caller's (cudaHostRegister it instead)");
  t->t.set_allocator(dp::cuda_pinned_allocator());
  DP_GUARD_END
}

/* ---- groups ---- */

dp_status dp_device_count(const char* kind, int* count, const char** why) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(kind && count, "kind and count must not be NULL");
  static thread_local std::string reason;
  reason.clear();
  std::string k = kind;
  if (k == "cpu") {
    unsigned n = std::thread::hardware_concurrency();
    *count = n ? static_cast<int>(n) : 1;
  } else if (k == "cuda") {
    *count = dp::cuda_device_count(&reason);
    if (*count > 0) reason.clear();
  } else {
    fail(DP_ERR_INVALID_ARGUMENT, "dp_device_count: unknown kind \"" + k + "\" (known: cpu, cuda)");
  }
  if (why) *why = reason.c_str();
  DP_GUARD_END
}

dp_status dp_device_name(const char* kind, int index, const char** name) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(kind && name, "kind and name must not be NULL");
  static thread_local std::string text;
  std::string k = kind;
  int n = 0;
  DP_CHECK_ARG(dp_device_count(kind, &n, nullptr) == DP_OK, "dp_device_name: unknown kind \"" + k + "\" (known: cpu, cuda)");
  if (index < 0 || index >= n)
    fail(DP_ERR_DEVICE, "no device " + k + ":" + std::to_string(index) + " (" + std::to_string(n) + " " + k + " device(s))");
  text = k == "cpu" ? "CPU core " + std::to_string(index) + " of " + dp::cpu_description() : dp::cuda_device_name(index);
  *name = text.c_str();
  DP_GUARD_END
}

dp_status dp_group_create(dp_model* m, const char* devices, dp_group** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && devices && out, "m, devices and out must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  auto g = std::make_unique<dp_group>();
  g->model = m;
  g->group = std::make_unique<dp::Group>(*m->model, devices);
  *out = g.release();
  DP_GUARD_END
}

void dp_group_destroy(dp_group* g) { delete g; }

dp_status dp_group_num_devices(const dp_group* g, int* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && count, "g and count must not be NULL");
  *count = g->group->size();
  DP_GUARD_END
}

dp_status dp_group_set_option(dp_group* g, dp_group_option option, int64_t value) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g, "g is NULL");
  dp::GroupInUse in_use(g, __func__);
  const int opt = dp::c_enum(option);
  switch (opt) {
    case DP_GROUP_SPLIT:
      DP_CHECK_ARG(value == DP_SPLIT_CHUNK || value == DP_SPLIT_BALANCED, "DP_GROUP_SPLIT takes DP_SPLIT_CHUNK or DP_SPLIT_BALANCED");
      g->group->set_split(static_cast<dp::SplitMode>(value));
      break;
    case DP_GROUP_THREADS_PER_DEVICE:
      DP_CHECK_ARG(value >= 1 && value <= 256, "DP_GROUP_THREADS_PER_DEVICE takes 1 to 256, got " + std::to_string(value));
      g->group->set_threads_per_device(static_cast<int>(value));
      break;
    case DP_GROUP_ALLOW_TF32:
      DP_CHECK_ARG(value == 0 || value == 1, "DP_GROUP_ALLOW_TF32 takes 0 or 1, got " + std::to_string(value));
      g->group->set_allow_tf32(value == 1);
      break;
    case DP_GROUP_CUDNN_BENCHMARK:
      DP_CHECK_ARG(value == 0 || value == 1, "DP_GROUP_CUDNN_BENCHMARK takes 0 or 1, got " + std::to_string(value));
      g->group->set_cudnn_benchmark(value == 1);
      break;
    case DP_GROUP_PRECISION:
      DP_CHECK_ARG(value == DP_PRECISION_FP32 || value == DP_PRECISION_BF16 || value == DP_PRECISION_FP16,
                   "DP_GROUP_PRECISION takes DP_PRECISION_FP32, _BF16 or _FP16, got " + std::to_string(value));
      g->group->set_precision(static_cast<int>(value));
      break;
    default:
      fail(DP_ERR_INVALID_ARGUMENT, "dp_group_set_option: unknown option " + std::to_string(opt));
  }
  DP_GUARD_END
}

dp_status dp_group_set_training(dp_group* g, int training) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g, "g is NULL");
  DP_CHECK_ARG(training == 0 || training == 1, "training must be 0 or 1, got " + std::to_string(training));
  dp::GroupInUse in_use(g, __func__);
  g->group->set_training(training == 1);
  DP_GUARD_END
}

dp_status dp_group_forward(dp_group* g, const dp_tensor* input, dp_tensor** output) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && input && output, "g, input and output must not be NULL");
  dp::GroupInUse in_use(g, __func__);
  auto out = std::make_unique<dp_tensor>();
  g->group->forward(input->t, out->t);
  *output = out.release();
  DP_GUARD_END
}

dp_status dp_group_backward(dp_group* g, const dp_tensor* grad_output) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && grad_output, "g and grad_output must not be NULL");
  dp::GroupInUse in_use(g, __func__);
  g->group->backward(grad_output->t);
  DP_GUARD_END
}

dp_status dp_group_zero_grad(dp_group* g) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g, "g is NULL");
  dp::GroupInUse in_use(g, __func__);
  g->group->zero_grad();
  DP_GUARD_END
}

dp_status dp_group_last_split(const dp_group* g, int64_t* sizes, int capacity, int* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && count, "g and count must not be NULL");
  dp::GroupInUse in_use(g, __func__);
  const auto& split = g->group->last_split();
  int n = static_cast<int>(split.size());
  DP_CHECK_ARG(capacity >= n && (sizes || n == 0),
               "sizes holds " + std::to_string(capacity) + " entries, the split has " + std::to_string(n));
  for (int i = 0; i < n; ++i) sizes[i] = split[i];
  *count = n;
  DP_GUARD_END
}

/* ---- optimizers and training ---- */

dp_status dp_optimizer_create(dp_group* g, const char* json_config, dp_optimizer** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && json_config && out, "g, json_config and out must not be NULL");
  dp::GroupInUse in_use(g, __func__);
  auto o = std::make_unique<dp_optimizer>();
  o->group = g;
  dp::Model& model = g->group->model();
  o->opt = dp::Optimizer::from_json(json_config, model.num_params(), model.memory_limit, model.held_total());
  o->hold_state();
  // Every process must update alike: the same config, however spelt
  // (compared as parsed, every number as a double: 0, 0.0 and 0e0 alike).
  if (dp::ProcessGroup* pg = g->group->process_group()) {
    nlohmann::json parsed = nlohmann::json::parse(json_config, nullptr, false, /*ignore_comments=*/true);
    if (!parsed.is_discarded()) numbers_as_doubles(parsed);
    pg->check_same("optimizer config", parsed.is_discarded() ? std::string(json_config) : parsed.dump());
  }
  for (const auto& st : o->opt->state()) o->state_names.push_back(st.first);
  *out = o.release();
  DP_GUARD_END
}

dp_status dp_optimizer_step(dp_optimizer* opt) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  dp::GroupInUse in_use(opt->group, __func__);
  opt->group->group->optimizer_step(*opt->opt);
  DP_GUARD_END
}

dp_status dp_optimizer_lr(const dp_optimizer* opt, double* lr) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && lr, "opt and lr must not be NULL");
  *lr = opt->opt->lr;
  DP_GUARD_END
}

dp_status dp_optimizer_set_lr(dp_optimizer* opt, double lr) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  DP_CHECK_ARG(lr >= 0 && lr < 1e30, "lr must be a finite number >= 0");
  opt->opt->lr = lr;
  opt->opt->base_lr = lr;  // with a schedule: its base
  DP_GUARD_END
}

dp_status dp_optimizer_set_lr_schedule(dp_optimizer* opt, const char* json) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  std::unique_ptr<dp::LrSchedule> s;
  if (json && *json) s = dp::LrSchedule::from_json(json);
  opt->opt->schedule = std::move(s);
  if (!opt->opt->schedule) opt->opt->lr = opt->opt->base_lr;  // none: the caller's lr again
  DP_GUARD_END
}

dp_status dp_optimizer_set_clip_grad_norm(dp_optimizer* opt, double max_norm) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  DP_CHECK_ARG(max_norm >= 0 && !std::isnan(max_norm), "max_norm must be >= 0 (0: off; infinity: measure only), got " +
                                                            std::to_string(max_norm));
  // Every process must clip alike: each step compares (Group::check_settings).
  opt->opt->max_grad_norm = max_norm;
  DP_GUARD_END
}

dp_status dp_optimizer_grad_norm(const dp_optimizer* opt, double* norm) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && norm, "opt and norm must not be NULL");
  DP_CHECK_ARG(opt->opt->clips(), "no gradient norm is measured: set one with dp_optimizer_set_clip_grad_norm "
                                  "(infinity measures without clipping)");
  *norm = opt->opt->grad_norm;
  DP_GUARD_END
}

dp_status dp_optimizer_set_grad_scaler(dp_optimizer* opt, const char* json) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  dp::GradScaler s = dp::GradScaler::from_json(json);  // throws before anything changes
  // Every process must scale alike: each step compares (Group::check_settings).
  opt->opt->scaler = s;
  DP_GUARD_END
}

dp_status dp_optimizer_grad_scaler_state(const dp_optimizer* opt, double* scale, int64_t* growth_tracker,
                                         int64_t* skipped_steps) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  const dp::Optimizer& o = *opt->opt;
  if (scale) *scale = o.scaler.loss_factor();
  if (growth_tracker) *growth_tracker = o.scaler.enabled ? o.scaler.growth_tracker : 0;
  if (skipped_steps) *skipped_steps = o.skipped_steps;
  DP_GUARD_END
}

dp_status dp_optimizer_set_grad_scaler_state(dp_optimizer* opt, double scale, int64_t growth_tracker,
                                             int64_t skipped_steps) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  const float s = static_cast<float>(scale);
  DP_CHECK_ARG(std::isfinite(s) && s > 0 && static_cast<double>(s) == scale,
               "scale must be a finite float32 > 0, got " + std::to_string(scale));
  DP_CHECK_ARG(growth_tracker >= 0, "growth_tracker must be >= 0, got " + std::to_string(growth_tracker));
  DP_CHECK_ARG(skipped_steps >= 0, "skipped_steps must be >= 0, got " + std::to_string(skipped_steps));
  dp::Optimizer& o = *opt->opt;
  o.scaler.scale = s;
  o.scaler.growth_tracker = std::min(growth_tracker, o.scaler.growth_interval - 1);  // as dp_checkpoint_load
  o.skipped_steps = skipped_steps;
  DP_GUARD_END
}

// The optimizer's state array `name`, or DP_ERR_INVALID_ARGUMENT listing the
// names it has. Its newest values first (a GPU group may hold newer ones).
static std::vector<float>& optimizer_state(const dp_optimizer* opt, const char* name, const char* what) {
  opt->group->group->optimizer_to_host(*opt->opt);
  std::string names;
  for (const auto& st : opt->opt->state()) {
    if (st.first == name) return *st.second;
    names += (names.empty() ? "" : ", ") + st.first;
  }
  fail(DP_ERR_INVALID_ARGUMENT, std::string(what) + ": no state '" + name + "' in a " + opt->opt->type() +
                                    " optimizer (it keeps " + (names.empty() ? "none" : names) + ")");
}

dp_status dp_optimizer_num_states(const dp_optimizer* opt, int* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && count, "opt and count must not be NULL");
  *count = static_cast<int>(opt->state_names.size());
  DP_GUARD_END
}

dp_status dp_optimizer_state_name(const dp_optimizer* opt, int index, const char** name) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && name, "opt and name must not be NULL");
  DP_CHECK_ARG(index >= 0 && index < static_cast<int>(opt->state_names.size()),
               "index " + std::to_string(index) + " is out of range: the optimizer keeps " +
                   std::to_string(opt->state_names.size()) + " state arrays");
  *name = opt->state_names[static_cast<size_t>(index)].c_str();
  DP_GUARD_END
}

dp_status dp_optimizer_copy_state(const dp_optimizer* opt, const char* name, float* dst, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && name && dst, "opt, name and dst must not be NULL");
  dp::GroupInUse in_use(opt->group, __func__);
  const std::vector<float>& st = optimizer_state(opt, name, "dp_optimizer_copy_state");
  check_count(opt->group->model, count, st.size(), "dp_optimizer_copy_state");
  std::memcpy(dst, st.data(), st.size() * sizeof(float));
  DP_GUARD_END
}

dp_status dp_optimizer_set_state(dp_optimizer* opt, const char* name, const float* src, int64_t count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && name && src, "opt, name and src must not be NULL");
  dp::GroupInUse in_use(opt->group, __func__);
  std::vector<float>& st = optimizer_state(opt, name, "dp_optimizer_set_state");
  if (count != static_cast<int64_t>(st.size()))
    fail(DP_ERR_INVALID_ARGUMENT, "dp_optimizer_set_state: got " + std::to_string(count) + " floats, the model has " +
                                      std::to_string(st.size()));
  dp::io::check_state_values(src, opt->group->model->model->param_info, name, DP_ERR_NUMERIC,
                             std::string("dp_optimizer_set_state '") + name + "'",
                             ": nothing was set (dp holds only values training can continue from, as its loads)");
  std::memcpy(st.data(), src, st.size() * sizeof(float));
  ++opt->opt->host_version;  // a GPU group uploads it before its next step
  DP_GUARD_END
}

dp_status dp_optimizer_steps(const dp_optimizer* opt, int64_t* steps) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt && steps, "opt and steps must not be NULL");
  *steps = opt->opt->steps;
  DP_GUARD_END
}

dp_status dp_optimizer_set_steps(dp_optimizer* opt, int64_t steps) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(opt, "opt is NULL");
  DP_CHECK_ARG(steps >= 0, "steps must be >= 0, got " + std::to_string(steps));
  opt->opt->steps = steps;
  DP_GUARD_END
}

void dp_optimizer_destroy(dp_optimizer* opt) { delete opt; }

dp_status dp_group_train_step(dp_group* g, dp_optimizer* opt, const dp_tensor* input, const dp_tensor* target,
                              float* loss) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && opt && input && target, "g, opt, input and target must not be NULL");
  DP_CHECK_ARG(opt->group == g, "the optimizer was created for another group");
  dp::GroupInUse in_use(g, __func__);
  double l = g->group->train_step(*opt->opt, input->t, target->t);
  if (loss) *loss = static_cast<float>(l);
  DP_GUARD_END
}

dp_status dp_group_forward_backward(dp_group* g, const dp_tensor* input, const dp_tensor* target, double loss_scale,
                                   float* loss) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && input && target, "g, input and target must not be NULL");
  dp::GroupInUse in_use(g, __func__);
  double l = g->group->forward_backward(input->t, target->t, loss_scale);
  if (loss) *loss = static_cast<float>(l);
  DP_GUARD_END
}

dp_status dp_group_evaluate(dp_group* g, const dp_tensor* input, const dp_tensor* target, float* loss,
                            int64_t* correct) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(g && input && target && loss, "g, input, target and loss must not be NULL");
  dp::GroupInUse in_use(g, __func__);
  int64_t hits = 0;
  double l = g->group->evaluate(input->t, target->t, &hits);
  *loss = static_cast<float>(l);
  if (correct) *correct = hits;
  DP_GUARD_END
}

}  // extern "C"
