#include "backends/cuda/replica.h"

#include "backends/cuda/kernels.h"

namespace dp {

CudaExecutor::CudaExecutor(const Model& model, CudaCtx* ctx) : ctx_(ctx) {
  for (const Node& n : model.nodes) {
    ops_.push_back(make_cuda_op(*n.layer));
    if (!ops_.back())
      fail(DP_ERR_DEVICE, n.layer->path + " ('" + n.layer->name + "', type '" + n.layer->type +
                              "'): this layer type has no CUDA implementation; run the model on CPU devices");
  }
}

void CudaExecutor::add(float* dst, const float* src, int64_t n) { cuda_add(ctx_->stream, dst, src, n); }

void CudaExecutor::zero(float* dst, int64_t n) {
  if (n > 0) DP_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * sizeof(float), ctx_->stream));
}

static std::unique_ptr<CudaLoss> loss_for(const Model& model) {
  if (!model.loss) return nullptr;
  auto l = make_cuda_loss(*model.loss);
  if (!l) fail(DP_ERR_DEVICE, "/loss (type '" + model.loss->type + "'): this loss has no CUDA implementation");
  return l;
}

CudaReplica::CudaReplica(const Model& model, int dev, bool allow_tf32)
    : device(dev),
      stream(dev, allow_tf32),
      exec(model, stream.ctx()),
      graph(model, &exec, stream.ctx()->alloc),
      loss(loss_for(model)),
      input(stream.ctx()->alloc),
      target(stream.ctx()->alloc),
      grad_output(stream.ctx()->alloc),
      loss_value(stream.ctx()->alloc),
      correct(stream.ctx()->alloc) {
  loss_value.resize(DP_F32, Shape{1});
  correct.resize(DP_I64, Shape{1});
  DP_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
}

CudaReplica::~CudaReplica() {
  cudaSetDevice(device);
  cudaStreamSynchronize(stream.ctx()->stream);  // nothing may still use the tensors that go back to the allocator
  if (done) cudaEventDestroy(done);
}

}  // namespace dp
