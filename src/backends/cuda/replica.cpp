#include "backends/cuda/replica.h"

#include <cstring>

#include "backends/cuda/kernels.h"

namespace dp {

CudaExecutor::CudaExecutor(const Model& model, CudaCtx* ctx) : ctx_(ctx) {
  for (const Node& n : model.nodes) {
    ops_.push_back(make_cuda_op(*n.layer));
    if (!ops_.back())
      fail(DP_ERR_DEVICE, n.layer->path + " ('" + n.layer->name + "', type '" + n.layer->type + "'): " +
                              (cpu_only_builtin(n.layer->type)
                                   ? "this layer type runs on CPU devices only so far: train this model on cpu:N"
                                   : "this layer type has no CUDA implementation; run the model on CPU devices (a "
                                     "plugin's type needs CUDA code, dp_plugin_device_impls of plugin host API "
                                     "version 2, docs/plugins.md)"));
  }
}

void CudaExecutor::add(float* dst, const float* src, int64_t n) { cuda_add(ctx_->stream, dst, src, n); }

void CudaExecutor::zero(float* dst, int64_t n) {
  if (n > 0) DP_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * sizeof(float), ctx_->stream));
}

static std::unique_ptr<CudaLoss> loss_for(const Model& model) {
  if (!model.loss) return nullptr;
  if (model.loss->sum_)
    fail(DP_ERR_MODEL, "/loss/reduction: \"sum\" runs on CPU devices only so far (cuda's losses take the mean): train "
                       "this model on cpu:N");
  auto l = make_cuda_loss(*model.loss);
  if (!l) fail(DP_ERR_DEVICE, "/loss (type '" + model.loss->type +
                            "'): this loss runs on CPU devices only so far (cuda runs cross_entropy and mse): train "
                            "this model on cpu:N");
  return l;
}

CudaReplica::CudaReplica(const Model& model, int device, int index, CudaStaging* staging, const cudaEvent_t* updated)
    : model_(model),
      device_(device),
      index_(index),
      staging_(staging),
      updated_(updated),
      stream_(device, false),
      exec_(model, stream_.ctx()),
      graph_(model, &exec_, stream_.ctx()->alloc),
      loss_(loss_for(model)),
      rows_{Tensor(stream_.ctx()->alloc), Tensor(stream_.ctx()->alloc), Tensor(stream_.ctx()->alloc)},
      loss_value_(stream_.ctx()->alloc),
      correct_(stream_.ctx()->alloc) {
  loss_value_.resize(DP_F32, Shape{1});
  correct_.resize(DP_I64, Shape{1});
  DP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

CudaReplica::~CudaReplica() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_.ctx()->stream);  // nothing may still use the tensors that go back to the allocator
  if (done_) cudaEventDestroy(done_);
}

void CudaReplica::begin(RunCtx& ctx) {
  DP_CUDA_CHECK(cudaSetDevice(device_));
  DP_CUDA_CHECK(cudaStreamWaitEvent(stream_.ctx()->stream, *updated_, 0));  // its GPU's last update or upload
  ctx.cuda = stream_.ctx();
  ctx.cuda_device = device_;
  ctx.cuda_stream = stream_.ctx()->stream;
}

// Straight from a pinned tensor, else through pinned staging (a copy on this
// replica's host thread, so the replicas stage in parallel).
const Tensor& CudaReplica::load(Rows which, const Tensor& host, int64_t off, int64_t rows) {
  Tensor& dst = rows_[which];
  Shape s = host.shape();
  s.d[0] = rows;
  dst.resize(host.dtype(), s);
  const size_t row_bytes = static_cast<size_t>(host.shape().inner()) * dtype_size(host.dtype());
  const char* src = static_cast<const char*>(host.data()) + off * row_bytes;
  if (host.allocator() != staging_->pinned) {
    char* pin = staging_->rows[which].data() + off * row_bytes;
    std::memcpy(pin, src, rows * row_bytes);
    src = pin;
  }
  DP_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, rows * row_bytes, cudaMemcpyHostToDevice, stream_.ctx()->stream));
  return dst;
}

// Into the pinned output staging; the engine copies it to `host` once every
// replica is done.
void CudaReplica::store_output(Tensor& host, int64_t off) {
  const Tensor& out = graph_.output();
  const size_t row_bytes = static_cast<size_t>(host.shape().inner()) * sizeof(float);
  DP_CUDA_CHECK(cudaMemcpyAsync(staging_->output.data() + off * row_bytes, out.data(), out.bytes(), cudaMemcpyDeviceToHost,
                                stream_.ctx()->stream));
}

void CudaReplica::loss(const RunCtx& ctx, const Tensor& target, bool count_correct) {
  cudaStream_t st = stream_.ctx()->stream;
  loss_->forward_backward(ctx, graph_.output(), target, &graph_.loss_grad(), loss_value_.f32());
  DP_CUDA_CHECK(cudaMemcpyAsync(results() + CudaStaging::kLossAt, loss_value_.data(), sizeof(float), cudaMemcpyDeviceToHost, st));
  if (!count_correct) return;
  cuda_count_correct(ctx, graph_.output(), target, correct_.i64());
  DP_CUDA_CHECK(cudaMemcpyAsync(results() + CudaStaging::kCorrectAt, correct_.data(), sizeof(int64_t), cudaMemcpyDeviceToHost, st));
}

void CudaReplica::keep_stats() {
  DP_CUDA_CHECK(cudaMemcpyAsync(results() + CudaStaging::kStatsAt, graph_.all_stats(),
                                static_cast<size_t>(model_.stats_total) * sizeof(float), cudaMemcpyDeviceToHost,
                                stream_.ctx()->stream));
}

double CudaReplica::loss_value() { return *reinterpret_cast<const float*>(results() + CudaStaging::kLossAt); }

int64_t CudaReplica::correct_value() { return *reinterpret_cast<const int64_t*>(results() + CudaStaging::kCorrectAt); }

const float* CudaReplica::stats() { return reinterpret_cast<const float*>(results() + CudaStaging::kStatsAt); }

}  // namespace dp
