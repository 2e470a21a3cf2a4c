// The C ABI of weights and checkpoints (include/dp.h, "Weights and
// checkpoints"): argument checks and handle plumbing; the work is in src/io.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "capi/guard.h"
#include "capi/handles.h"
#include "io/checkpoint.h"

// The loader's position goes through the loader's own C entry points
// (dp_loader_position / dp_loader_seek): its internals belong to src/data.

using dp::fail;

namespace {

void loader_call(dp_status s) {
  if (s != DP_OK) fail(s, std::string("loader: ") + dp_last_error());
}

}  // namespace

extern "C" {

dp_status dp_model_load_safetensors(dp_model* m, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && path, "m and path must not be NULL");
  dp::io::load_weights(*m->model, path);
  DP_GUARD_END
}

dp_status dp_model_save_safetensors(const dp_model* m, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(m && path, "m and path must not be NULL");
  dp::io::save_weights(*m->model, path);
  DP_GUARD_END
}

dp_status dp_checkpoint_save(const char* path, const dp_group* g, const dp_optimizer* opt, const dp_loader* loader,
                             const char* user_metadata_json) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(path && g, "path and g must not be NULL");
  DP_CHECK_ARG(!opt || opt->group == g, "the optimizer was created for another group");
  dp::io::LoaderPosition pos;
  if (loader) loader_call(dp_loader_position(loader, &pos.epoch, &pos.batch));
  dp::io::save_checkpoint(path, *g->group, opt ? opt->opt.get() : nullptr, loader ? &pos : nullptr, user_metadata_json);
  DP_GUARD_END
}

dp_status dp_checkpoint_load(const char* path, dp_group* g, dp_optimizer* opt, dp_loader* loader) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(path && g, "path and g must not be NULL");
  DP_CHECK_ARG(!opt || opt->group == g, "the optimizer was created for another group");
  std::function<void(const dp::io::LoaderPosition&)> seek = [loader](const dp::io::LoaderPosition& p) {
    loader_call(dp_loader_seek(loader, p.epoch, p.batch));
  };
  dp::io::load_checkpoint(path, *g->group, opt ? opt->opt.get() : nullptr, loader ? &seek : nullptr);
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
