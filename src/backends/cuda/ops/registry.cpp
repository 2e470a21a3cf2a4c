#include <cstring>

#include "backends/cuda/ops/ops.h"

namespace dp {

namespace {
struct Entry {
  const char* type;
  CudaOpFactory make;
};
// The same names as layers/registry.cpp's list of built-ins.
const Entry kOps[] = {
    {"add", make_cuda_add},
    {"avg_pool2d", make_cuda_avg_pool2d},
    {"batch_norm", make_cuda_batch_norm},
    {"batch_norm1d", make_cuda_batch_norm},
    {"batch_norm2d", make_cuda_batch_norm},
    {"concat", make_cuda_concat},
    {"conv2d", make_cuda_conv2d},
    {"dropout", make_cuda_dropout},
    {"flatten", make_cuda_flatten},
    {"gelu", make_cuda_activation},
    {"global_avg_pool", make_cuda_global_avg_pool},
    {"leaky_relu", make_cuda_activation},
    {"linear", make_cuda_linear},
    {"log_softmax", make_cuda_softmax},
    {"max_pool2d", make_cuda_max_pool2d},
    {"relu", make_cuda_activation},
    {"sigmoid", make_cuda_activation},
    {"softmax", make_cuda_softmax},
    {"tanh", make_cuda_activation},
};

// A layer whose own forward and backward run on a CUDA replica (a plugin
// type with CUDA code, dp_plugin.h's dp_plugin_device_impls).
class OwnCudaOp final : public CudaOp {
 public:
  explicit OwnCudaOp(const Layer& layer) : layer_(layer) {}
  void forward(const RunCtx& ctx, LayerIO& io) override {
    layer_.forward(ctx, io);
    check_launches("forward");
  }
  void backward(const RunCtx& ctx, LayerIO& io) override {
    layer_.backward(ctx, io);
    check_launches("backward");
  }

 private:
  // A launch error the plugin returned 0 after (without cudaGetLastError) is
  // its own, not the next built-in kernel's: named here with the layer.
  void check_launches(const char* what) const {
    const cudaError_t e = cudaPeekAtLastError();
    if (e == cudaSuccess) return;
    cudaGetLastError();  // cleared, unless sticky: the group then reports the device unusable
    fail(DP_ERR_PLUGIN, layer_.path + " ('" + layer_.name + "', plugin type '" + layer_.type + "'): after its CUDA " +
                            what + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
  }

  const Layer& layer_;
};
}  // namespace

bool cpu_only_builtin(const std::string& type) { return type == "layer_norm"; }

std::unique_ptr<CudaOp> make_cuda_op(const Layer& layer) {
  for (const Entry& e : kOps)
    if (layer.type == e.type) return e.make(layer);
  if (layer.runs_on_cuda()) return std::make_unique<OwnCudaOp>(layer);
  return nullptr;
}

std::unique_ptr<CudaLoss> make_cuda_loss(const Loss& loss) {
  if (loss.type == "cross_entropy") return make_cuda_cross_entropy(loss);
  if (loss.type == "mse") return make_cuda_mse(loss);
  return nullptr;
}

}  // namespace dp
