// The C ABI of weights and checkpoints (include/dp.h, "Weights and
// checkpoints"): argument checks and handle plumbing; the work is in src/io.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "capi/guard.h"
#include "capi/handles.h"
#include "io/checkpoint.h"

#include "data/handles.h"
#include "io/onnx.h"

// The loader's position goes through the loader's own C entry points
// (dp_loader_position / dp_loader_seek), and what it means through
// Loader::order(): its internals belong to src/data.

using dp::fail;

namespace {

void loader_call(dp_status s) {
  if (s != DP_OK) fail(s, std::string("loader: ") + dp_last_error());
}

// Runs f; with processes, every process then learns whether it failed on
// any of them, and fails too, naming the first rank that did.
void all_agree(const dp_group* g, const std::string& what, const std::function<void()>& f) {
  dp::ProcessGroup* pg = g->group->process_group();
  if (!pg) return f();
  dp_status mine = DP_OK;
  std::string message;
  try {
    f();
  } catch (const dp::Error& e) {
    mine = e.status();
    message = e.what();
  } catch (const std::bad_alloc&) {
    mine = DP_ERR_OUT_OF_MEMORY;
    message = "out of memory";
  }
  std::vector<double> status(static_cast<size_t>(pg->world_size()), 0.0);
  status[static_cast<size_t>(pg->rank())] = mine;
  pg->comm()->all_reduce_f64(pg->rank(), status.data(), static_cast<int64_t>(status.size()));
  if (mine != DP_OK) fail(mine, message);
  for (int r = 0; r < pg->world_size(); ++r)
    if (status[static_cast<size_t>(r)] != 0)
      fail(static_cast<dp_status>(static_cast<int>(status[static_cast<size_t>(r)])),
           "rank " + std::to_string(r) + " could not " + what + " (its error says why)");
}

}  // namespace

extern "C" {

dp_status dp_model_load_safetensors(dp_model* m, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && path, "m and path must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  dp::io::load_weights(*m->model, path);
  DP_GUARD_END
}

dp_status dp_model_save_safetensors(const dp_model* m, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && path, "m and path must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  dp::io::save_weights(*m->model, path);
  DP_GUARD_END
}

dp_status dp_model_save_weights(const dp_model* m, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && path, "m and path must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  dp::io::save_weights(*m->model, path, /*with_batch_counts=*/true);
  DP_GUARD_END
}

dp_status dp_model_export_onnx(const dp_model* m, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && path, "m and path must not be NULL");
  dp::ModelInUse in_use(m, m, __func__);
  dp::io::export_onnx(*m->model, path);
  DP_GUARD_END
}

dp_status dp_checkpoint_save(const char* path, const dp_group* g, const dp_optimizer* opt, const dp_loader* loader,
                             const char* user_metadata_json) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(path && g, "path and g must not be NULL");
  DP_CHECK_ARG(!opt || opt->group == g, "the optimizer was created for another group");
  dp::GroupInUse in_use(g, __func__);
  dp::io::LoaderPosition pos;
  if (loader) {
    loader_call(dp_loader_position(loader, &pos.epoch, &pos.batch));
    pos.order = loader->loader->order();
  }
  // With processes, rank 0 writes (every process holds the same state), and
  // every process learns whether it did.
  all_agree(g, "write the checkpoint " + std::string(path), [&] {
    if (!g->group->process_group() || g->group->process_group()->rank() == 0)
      dp::io::save_checkpoint(path, *g->group, opt ? opt->opt.get() : nullptr, loader ? &pos : nullptr, user_metadata_json);
  });
  DP_GUARD_END
}

dp_status dp_checkpoint_load(const char* path, dp_group* g, dp_optimizer* opt, dp_loader* loader) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(path && g, "path and g must not be NULL");
  DP_CHECK_ARG(!opt || opt->group == g, "the optimizer was created for another group");
  dp::GroupInUse in_use(g, __func__);
  std::function<void(const dp::io::LoaderPosition&)> seek = [loader, path](const dp::io::LoaderPosition& p) {
    // Inside an epoch the position counts batches of the saved loader's order: another batch
    // size, shuffle or seed would resume at other samples. At an epoch's end (or start) any
    // may go on: an ended epoch is this loader's end of that epoch.
    const std::string mine = loader->loader->order();
    int64_t batch = p.batch;
    if (!p.order.empty() && p.order != mine) {
      int64_t saved_batches = 0;
      if (!dp::Loader::order_batches(p.order, &saved_batches))
        fail(DP_ERR_IO, std::string(path) + ": __metadata__ 'loader_order' is not dp's: " + p.order);
      if (p.batch >= saved_batches)
        batch = loader->loader->num_batches();
      else if (p.batch > 0)
        fail(DP_ERR_INVALID_ARGUMENT, std::string(path) + ": the checkpoint's loader stopped inside epoch " +
                                          std::to_string(p.epoch) + " (after batch " + std::to_string(p.batch) +
                                          " of " + std::to_string(saved_batches) + ") as " + p.order +
                                          "; this loader is " + mine +
                                          ": resume with the saved settings (at an epoch's end others may go on)");
    }
    try {
      loader->loader->seek(p.epoch, batch);
    } catch (const dp::Error& e) {
      fail(e.status(), std::string("loader: ") + e.what());
    }
  };
  all_agree(g, "read the checkpoint " + std::string(path), [&] {
    dp::io::load_checkpoint(path, *g->group, opt ? opt->opt.get() : nullptr, loader ? &seek : nullptr,
                            &g->model->ctx->registry);
  });
  DP_GUARD_END
}

dp_status dp_checkpoint_metadata(const char* path, char** json) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(path && json, "path and json must not be NULL");
  std::string text = dp::io::read_metadata(path);
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, text.c_str(), text.size() + 1);
  *json = out;
  DP_GUARD_END
}

void dp_free(void* p) { std::free(p); }

}  // extern "C"
