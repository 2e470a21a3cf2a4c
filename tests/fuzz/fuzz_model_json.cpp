// Fuzz target: a model's JSON (Model::from_json), with every built-in type
// and the repository's plugins (swish, rms_norm, shape_probe) registered.
// A "plugins" list in the input is refused by the hook: the fuzzer never
// loads a library the input names. Sizes are capped by the model's memory
// limit (64 MB), so an input asking for petabytes is an ordinary refusal.
// Input: the JSON text.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "model/model.h"
#include "plugin/plugin.h"

namespace {

const uint64_t kMemoryLimit = uint64_t(64) << 20;

const dp::Registry& registry() {
  static dp::Registry r;
  static dp::Plugins plugins;
  static bool loaded = [] {
    for (const char* p : {DP_FUZZ_PLUGIN_SWISH, DP_FUZZ_PLUGIN_RMS_NORM, DP_FUZZ_PLUGIN_SHAPE_PROBE}) plugins.load(r, p, "");
    return true;
  }();
  (void)loaded;
  return r;
}

void refuse_plugin(const std::string& entry, const std::string& json_path) {
  (void)json_path;  // Model::from_json prefixes it
  dp::fail(DP_ERR_PLUGIN, "the fuzzer loads no plugin a model names ('" + entry + "')");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const dp::Registry& reg = registry();
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto m = dp::Model::from_json(reg, text, refuse_plugin, kMemoryLimit);
    // What the rest of dp relies on: the named tensors tile the flat arrays.
    int64_t at = 0;
    for (const auto& p : m->param_info) {
      DP_FUZZ_CHECK(p.offset == at);
      at += p.shape.numel();
    }
    DP_FUZZ_CHECK(at == m->num_params());
    DP_FUZZ_CHECK(static_cast<int64_t>(m->grads().size()) == m->num_params());
    at = 0;
    for (const auto& b : m->buffer_info) {
      DP_FUZZ_CHECK(b.offset == at);
      at += b.shape.numel();
    }
    DP_FUZZ_CHECK(at == m->num_buffers());
    DP_FUZZ_CHECK(!m->nodes.empty());
    for (const auto& n : m->nodes) {
      DP_FUZZ_CHECK(n.out_shape.ndim >= 0 && n.out_shape.ndim < DP_MAX_DIMS);
      for (int i = 0; i < n.out_shape.ndim; ++i) DP_FUZZ_CHECK(n.out_shape[i] >= 1);
    }
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
  }
  return 0;
}
