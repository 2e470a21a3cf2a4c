// The C ABI of plugins (include/dp.h, "Plugins"); the work is in src/plugin.
#include "capi/guard.h"
#include "capi/handles.h"

using dp::fail;

extern "C" {

dp_status dp_context_load_plugin(dp_context* ctx, const char* path) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && path, "ctx and path must not be NULL");
  DP_CHECK_ARG(*path, "path is empty");
  ctx->plugins.load(ctx->registry, path, "");
  DP_GUARD_END
}

dp_status dp_context_num_plugins(const dp_context* ctx, int* count) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && count, "ctx and count must not be NULL");
  *count = static_cast<int>(ctx->plugins.info().size());
  DP_GUARD_END
}

dp_status dp_context_plugin_info(const dp_context* ctx, int index, const char** path, const char** layer_types) {
  DP_GUARD_BEGIN
  DP_CHECK_ARG(ctx && path && layer_types, "ctx, path and layer_types must not be NULL");
  const auto& info = ctx->plugins.info();
  if (index < 0 || index >= static_cast<int>(info.size()))
    fail(DP_ERR_INVALID_ARGUMENT, "plugin index " + std::to_string(index) + " is outside [0, " + std::to_string(info.size()) + ")");
  *path = info[index].path.c_str();
  *layer_types = info[index].types.c_str();
  DP_GUARD_END
}

}  // extern "C"
