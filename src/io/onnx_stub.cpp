// ONNX export without ONNX (io/onnx.h): dp was built without libonnx-dev,
// so every export says so and how to get it.
#include "core/error.h"
#include "io/onnx.h"

namespace dp::io {

namespace {
[[noreturn]] void unsupported() {
  fail(DP_ERR_IO,
       "cannot export to ONNX: this dp was built without ONNX support (install Debian's libonnx-dev and "
       "libprotobuf-dev, then rebuild)");
}
}  // namespace

bool onnx_supported() { return false; }

std::string onnx_model_bytes(const Model&, int) { unsupported(); }

void export_onnx(const Model&, const std::string&, int) { unsupported(); }

}  // namespace dp::io
