// This build of dp has no CUDA backend (meson option cuda, or no toolkit).
#include "core/error.h"
#include "engine/devices.h"
#include "engine/engine.h"

namespace dp {

static const char kWhy[] =
    "this build of dp has no CUDA backend (configure with -Dcuda=enabled and the CUDA toolkit; docs/install.md)";

int cuda_device_count(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}

std::string cuda_device_name(int) { fail(DP_ERR_DEVICE, kWhy); }

Allocator* cuda_pinned_allocator() { fail(DP_ERR_DEVICE, std::string("pinned memory: ") + kWhy); }

std::unique_ptr<Engine> make_cuda_engine(Model&, const std::vector<int>& ordinals) {
  fail(DP_ERR_DEVICE, "device 'cuda:" + std::to_string(ordinals.at(0)) + "': " + kWhy);
}

}  // namespace dp
