// add, concat and flatten on the GPU: sums and copies, on the replica's stream.
#include "backends/cuda/ops/ops.h"
#include "layers/concat.h"
#include "layers/flatten.h"

namespace dp {

namespace {

// Inputs per add kernel; more are folded in by further launches.
constexpr int kAddFanIn = 8;
struct AddInputs {
  const float* p[kAddFanIn];
};

// y = (first ? 0 : y) + in[0] + in[1] + ...: the CPU's order of additions.
__global__ void add_inputs(AddInputs in, int count, bool first, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = first ? in.p[0][i] : y[i] + in.p[0][i];
    // Unrolled, the indices are constants: in.p stays in parameter space.
#pragma unroll
    for (int k = 1; k < kAddFanIn; ++k)
      if (k < count) s += in.p[k][i];
    y[i] = s;
  }
}

class CudaAdd final : public CudaOp {
 public:
  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x0 = *io.in[0];
    io.out->resize(DP_F32, x0.shape());
    const int64_t n = x0.numel();
    if (n == 0) return;
    for (size_t b = 0; b < io.in.size(); b += kAddFanIn) {
      AddInputs in{};
      int count = 0;
      for (size_t k = b; k < io.in.size() && count < kAddFanIn; ++k) in.p[count++] = io.in[k]->f32();
      add_inputs<<<cuda_blocks(n), 256, 0, ctx.cuda->stream>>>(in, count, b == 0, io.out->f32(), n);
      DP_CUDA_LAUNCHED();
    }
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    for (Tensor* g : io.gin) {
      if (!g) continue;
      g->resize(DP_F32, io.gout->shape());
      if (g->numel() > 0)
        DP_CUDA_CHECK(cudaMemcpyAsync(g->f32(), io.gout->f32(), io.gout->bytes(), cudaMemcpyDeviceToDevice,
                                      ctx.cuda->stream));
    }
  }
};

// Line l of the output is every input's line l ([chunk_k] floats) in turn:
// part k sits at [offset, offset + chunk) of each [total] line.
__global__ void concat_in(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t chunk,
                          int64_t offset, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < lines * chunk;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[(i / chunk) * total + offset + i % chunk] = x[i];
}
__global__ void concat_out(const float* __restrict__ g, float* __restrict__ gx, int64_t lines, int64_t chunk,
                           int64_t offset, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < lines * chunk;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    gx[i] = g[(i / chunk) * total + offset + i % chunk];
}

class CudaConcat final : public CudaOp {
 public:
  explicit CudaConcat(const ConcatAttrs& a) : a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    Shape os = io.in[0]->shape();
    const int d = static_cast<int>(a_.dim_ < 0 ? a_.dim_ + os.ndim : a_.dim_);
    os[d] = 0;
    for (const Tensor* t : io.in) os[d] += t->shape()[d];
    io.out->resize(DP_F32, os);
    const int64_t lines = os[0] * a_.outer_;
    int64_t offset = 0;
    for (size_t k = 0; k < io.in.size(); ++k) {
      const int64_t chunk = a_.chunk_[k];
      if (lines * chunk > 0) {
        concat_in<<<cuda_blocks(lines * chunk), 256, 0, ctx.cuda->stream>>>(io.in[k]->f32(), io.out->f32(), lines,
                                                                            chunk, offset, a_.total_);
        DP_CUDA_LAUNCHED();
      }
      offset += chunk;
    }
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    const int64_t lines = io.gout->shape()[0] * a_.outer_;
    int64_t offset = 0;
    for (size_t k = 0; k < io.gin.size(); ++k) {
      const int64_t chunk = a_.chunk_[k];
      if (Tensor* gx = io.gin[k]) {
        gx->resize(DP_F32, io.in[k]->shape());
        if (lines * chunk > 0) {
          concat_out<<<cuda_blocks(lines * chunk), 256, 0, ctx.cuda->stream>>>(io.gout->f32(), gx->f32(), lines,
                                                                               chunk, offset, a_.total_);
          DP_CUDA_LAUNCHED();
        }
      }
      offset += chunk;
    }
  }

 private:
  const ConcatAttrs& a_;  // the model's layer, which outlives its replicas' ops
};

// Flatten only renames the shape: the data is copied as is.
class CudaFlatten final : public CudaOp {
 public:
  explicit CudaFlatten(const FlattenAttrs& a) : a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, Shape::batched(x.shape()[0], a_.out_));
    if (x.numel() > 0)
      DP_CUDA_CHECK(cudaMemcpyAsync(io.out->f32(), x.f32(), x.bytes(), cudaMemcpyDeviceToDevice, ctx.cuda->stream));
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    if (!io.gin[0]) return;
    io.gin[0]->resize(DP_F32, io.in[0]->shape());
    if (io.gin[0]->numel() > 0)
      DP_CUDA_CHECK(cudaMemcpyAsync(io.gin[0]->f32(), io.gout->f32(), io.gin[0]->bytes(), cudaMemcpyDeviceToDevice,
                                    ctx.cuda->stream));
  }

 private:
  const FlattenAttrs& a_;  // the model's layer, which outlives its replicas' ops
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_add(const Layer& layer) {
  (void)layer;  // nothing to read: the inputs' shapes say everything
  return std::make_unique<CudaAdd>();
}

std::unique_ptr<CudaOp> make_cuda_concat(const Layer& layer) {
  const auto* a = dynamic_cast<const ConcatAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaConcat>(*a);
}

std::unique_ptr<CudaOp> make_cuda_flatten(const Layer& layer) {
  const auto* a = dynamic_cast<const FlattenAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaFlatten>(*a);
}

}  // namespace dp
