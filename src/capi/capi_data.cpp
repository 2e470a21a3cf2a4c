// The C ABI of datasets and loaders (include/dp.h, "Datasets" and
// "Loaders"): argument checks and handle plumbing; the work is in src/data.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/memory.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "data/handles.h"

using dp::fail;

namespace {

// A per-sample shape from the caller: ndim in [0, DP_MAX_DIMS], dims >= 0,
// an element count that fits (DP_ERR_SHAPE otherwise, before anything is
// sized by it).
dp::Shape shape_arg(const char* fn, const char* what, int ndim, const int64_t* shape) {
  std::string f = std::string(fn) + ": " + what;
  if (ndim < 0 || ndim > DP_MAX_DIMS)
    fail(DP_ERR_INVALID_ARGUMENT, f + " ndim must be in [0, " + std::to_string(DP_MAX_DIMS) + "], got " + std::to_string(ndim));
  if (ndim > 0 && !shape) fail(DP_ERR_INVALID_ARGUMENT, f + " shape is NULL");
  dp::Shape s;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      fail(DP_ERR_INVALID_ARGUMENT, f + " shape[" + std::to_string(i) + "] is negative (" + std::to_string(shape[i]) + ")");
    s.push(shape[i]);
  }
  s.checked_numel(f);
  return s;
}

// Targets: int64 class indices of shape [], or float32 of any fixed shape.
dp::Shape target_arg(const char* fn, int dtype, int ndim, const int64_t* shape) {
  if (dtype != DP_F32 && dtype != DP_I64)
    fail(DP_ERR_INVALID_ARGUMENT, std::string(fn) + ": target_dtype must be DP_F32 or DP_I64");
  if (dtype == DP_I64 && ndim != 0)
    fail(DP_ERR_INVALID_ARGUMENT, std::string(fn) + ": int64 targets are class indices, target_ndim must be 0, got " +
                                      std::to_string(ndim));
  return shape_arg(fn, "target", ndim, shape);
}

dp_dataset* new_dataset(std::shared_ptr<dp::Dataset> ds) {
  auto h = std::make_unique<dp_dataset>();
  h->ds = std::move(ds);
  return h.release();
}

}  // namespace

extern "C" {

/* ---- datasets ---- */

dp_status dp_dataset_from_idx(dp_context* ctx, const char* images_path, const char* labels_path, dp_dataset** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && images_path && labels_path && out, "ctx, images_path, labels_path and out must not be NULL");
  *out = new_dataset(dp::load_idx(images_path, labels_path));
  DP_GUARD_END
}

dp_status dp_dataset_from_cifar10(dp_context* ctx, const char* const* paths, int count, dp_dataset** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && paths && out, "ctx, paths and out must not be NULL");
  DP_CHECK_ARG(count >= 1, "count must be at least 1, got " + std::to_string(count));
  std::vector<std::string> files;
  for (int i = 0; i < count; ++i) {
    DP_CHECK_ARG(paths[i], "paths[" + std::to_string(i) + "] is NULL");
    files.emplace_back(paths[i]);
  }
  *out = new_dataset(dp::load_cifar10(files));
  DP_GUARD_END
}

dp_status dp_dataset_from_arrays(dp_context* ctx, const float* inputs, int ndim, const int64_t* sample_shape,
                                 int64_t count, dp_dtype target_dtype, const void* targets, int target_ndim,
                                 const int64_t* target_shape, int borrow, dp_dataset** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && out, "ctx and out must not be NULL");
  DP_CHECK_ARG(count >= 0, "count must be >= 0, got " + std::to_string(count));
  DP_CHECK_ARG(borrow == 0 || borrow == 1, "borrow must be 0 or 1, got " + std::to_string(borrow));
  dp::Shape s = shape_arg(__func__, "sample", ndim, sample_shape);
  dp::Shape t = target_arg(__func__, dp::c_enum(target_dtype), target_ndim, target_shape);
  const int64_t input_floats = dp::checked_mul(count, s.numel(), std::string(__func__) + ": count times the sample size");
  const int64_t target_elems = dp::checked_mul(count, t.numel(), std::string(__func__) + ": count times the target size");
  DP_CHECK_ARG(inputs || input_floats == 0, "inputs is NULL");
  DP_CHECK_ARG(targets || target_elems == 0, "targets is NULL");
  *out = new_dataset(dp::make_array_dataset(inputs, s, count, target_dtype, targets, t, borrow == 1));
  DP_GUARD_END
}

dp_status dp_dataset_from_callbacks(dp_context* ctx, const dp_dataset_callbacks* callbacks, int ndim,
                                    const int64_t* sample_shape, dp_dtype target_dtype, int target_ndim,
                                    const int64_t* target_shape, dp_dataset** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && callbacks && out, "ctx, callbacks and out must not be NULL");
  // Versioned by struct_size: a newer caller's larger struct is read up to
  // the fields this library knows.
  DP_CHECK_ARG(callbacks->struct_size >= sizeof(dp_dataset_callbacks),
               "callbacks->struct_size is " + std::to_string(callbacks->struct_size) + ", expected sizeof(dp_dataset_callbacks) = " +
                   std::to_string(sizeof(dp_dataset_callbacks)));
  dp_dataset_callbacks cb;
  std::memcpy(&cb, callbacks, sizeof cb);
  DP_CHECK_ARG(cb.get_item, "callbacks->get_item is NULL");
  DP_CHECK_ARG(cb.length >= 0, "callbacks->length must be >= 0, got " + std::to_string(cb.length));
  dp::Shape s = shape_arg(__func__, "sample", ndim, sample_shape);
  dp::Shape t = target_arg(__func__, dp::c_enum(target_dtype), target_ndim, target_shape);
  // From here the dataset owns cb.user (release runs when it is destroyed).
  *out = new_dataset(dp::make_callback_dataset(cb, s, target_dtype, t));
  DP_GUARD_END
}

dp_status dp_dataset_length(const dp_dataset* ds, int64_t* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ds && count, "ds and count must not be NULL");
  *count = ds->ds->length();
  DP_GUARD_END
}

dp_status dp_dataset_sample_shape(const dp_dataset* ds, int* ndim, int64_t shape[DP_MAX_DIMS]) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ds && ndim && shape, "ds, ndim and shape must not be NULL");
  // What a loader produces: the transform's output (a crop may resize).
  const dp::Shape& s = ds->transform ? ds->transform->output_shape() : ds->ds->sample_shape();
  *ndim = s.ndim;
  for (int i = 0; i < s.ndim; ++i) shape[i] = s[i];
  DP_GUARD_END
}

dp_status dp_dataset_set_transform(dp_dataset* ds, const char* json) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ds && json, "ds and json must not be NULL");
  ds->transform = dp::Transform::from_json(json, ds->ds->sample_shape());
  DP_GUARD_END
}

void dp_dataset_destroy(dp_dataset* ds) { delete ds; }

/* ---- loaders ---- */

dp_status dp_loader_create(dp_dataset* ds, const char* json_config, dp_loader** out) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ds && json_config && out, "ds, json_config and out must not be NULL");
  dp::LoaderConfig cfg = dp::LoaderConfig::from_json(json_config);
  auto h = std::make_unique<dp_loader>();
  h->loader = std::make_unique<dp::Loader>(ds->ds, ds->transform, cfg);
  *out = h.release();
  DP_GUARD_END
}

namespace {
// dp_loader_destroy's work (noexcept: nothing crosses the ABI).
void destroy_loader(dp_loader* loader) noexcept {
  if (loader && loader->loader && loader->loader->on_worker_thread()) {
    // From the loader's own dataset callback (a garbage collector ran there):
    // a thread cannot join itself. Another thread destroys the loader once
    // this callback has returned; without one, the loader is left (a leak,
    // not an abort).
    try {
      std::thread([loader] { delete loader; }).detach();
    } catch (...) {
    }
    return;
  }
  delete loader;
}
}  // namespace

void dp_loader_destroy(dp_loader* loader) { destroy_loader(loader); }

dp_status dp_loader_num_batches(const dp_loader* loader, int64_t* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(loader && count, "loader and count must not be NULL");
  *count = loader->loader->num_batches();
  DP_GUARD_END
}

dp_status dp_loader_next(dp_loader* loader, dp_tensor* input, dp_tensor* target, int64_t* rows) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(loader && input && target && rows, "loader, input, target and rows must not be NULL");
  DP_CHECK_ARG(input != target, "input and target must be distinct tensors");
  DP_CHECK_ARG(!input->borrowed && !target->borrowed,
               std::string("cannot resize a borrowed tensor (the ") + (input->borrowed ? "input" : "target") +
                   "): dp_loader_next reshapes the tensors it fills; pass tensors from dp_tensor_create");
  *rows = loader->loader->next(input->t, target->t);
  DP_GUARD_END
}

dp_status dp_loader_position(const dp_loader* loader, int64_t* epoch, int64_t* batch) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(loader && epoch && batch, "loader, epoch and batch must not be NULL");
  *epoch = loader->loader->epoch();
  *batch = loader->loader->batch();
  DP_GUARD_END
}

dp_status dp_loader_seek(dp_loader* loader, int64_t epoch, int64_t batch) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(loader, "loader is NULL");
  try {
    loader->loader->seek(epoch, batch);
  } catch (const dp::Error& e) {
    fail(e.status(), std::string("dp_loader_seek: ") + e.what());
  }
  DP_GUARD_END
}

}  // extern "C"
