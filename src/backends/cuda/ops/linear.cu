// linear on the GPU: y = x W^T + b over the last dim, the products by cuBLAS.
// cuBLAS is column-major: a row-major [r, c] matrix is, to it, the [c, r]
// matrix of its transpose, so each product below is the CPU's transposed:
//   y^T = W x^T,   gx^T = W^T g^T,   dW^T += x^T g.
// The handle's math mode (TF32 or not) and stream are the replica's.
//
// Mixed precision (ctx.cuda->precision bf16 or fp16, ops/lowp.h): forward
// rounds x and W to 16 bits (scratch 0 and 1, kept for backward, as autograd
// keeps autocast's copies), backward rounds g (scratch 2); each product reads
// 16-bit operands and accumulates and writes float32 (cublasGemmEx with
// CUBLAS_COMPUTE_32F: tensor cores), so y, gx and dW stay float32. The bias
// and its gradient are float32 throughout.
#include "backends/cuda/ops/lowp.h"
#include "backends/cuda/ops/ops.h"
#include "layers/linear.h"

namespace dp {

namespace {

// y[r, j] += b[j], after the product as on the CPU (same rounding).
__global__ void add_bias(float* __restrict__ y, const float* __restrict__ b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += b[i % cols];
}

// db[j] += sum_r g[r, j]. A block owns 32 columns; its threadIdx.y lanes sum
// every kRowLanes-th row, then one thread adds the lanes in a fixed order:
// deterministic, and coalesced (a warp reads 32 adjacent columns).
constexpr int kRowLanes = 32;
__global__ void bias_grad(float* __restrict__ db, const float* __restrict__ g, int64_t rows, int64_t cols) {
  __shared__ float part[kRowLanes][33];  // 33: no bank conflicts on the column read
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (j < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) s += g[r * cols + j];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float t = 0.f;
    for (int k = 0; k < kRowLanes; ++k) t += part[k][threadIdx.x];
    db[j] += t;
  }
}

class CudaLinear final : public CudaOp {
 public:
  explicit CudaLinear(const LinearAttrs& a) : a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t in = a_.in_, out = a_.out_, R = x.shape()[0] * a_.rows_per_sample_;
    Shape os = x.shape();
    os[os.ndim - 1] = out;
    io.out->resize(DP_F32, os);
    if (R == 0) return;
    float* y = io.out->f32();
    const float* W = io.params;
    const float one = 1.f, zero = 0.f;
    fwd_precision_ = ctx.cuda->precision;
    if (low_precision(fwd_precision_)) {
      const cudaDataType_t t = cublas_lowp_type(fwd_precision_);
      void* x16 = lowp_buffer(io.tmp(0), R * in);
      void* w16 = lowp_buffer(io.tmp(1), out * in);
      cuda_to_lowp(ctx.cuda->stream, fwd_precision_, x.f32(), x16, R * in);
      cuda_to_lowp(ctx.cuda->stream, fwd_precision_, W, w16, out * in);
      DP_CUBLAS_CHECK(cublasGemmEx(ctx.cuda->cublas, CUBLAS_OP_T, CUBLAS_OP_N, dim(out), dim(R), dim(in), &one, w16, t,
                                   ld(in), x16, t, ld(in), &zero, y, CUDA_R_32F, ld(out), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
    } else {
      DP_CUBLAS_CHECK(cublasSgemm(ctx.cuda->cublas, CUBLAS_OP_T, CUBLAS_OP_N, dim(out), dim(R), dim(in), &one, W,
                                  ld(in), x.f32(), ld(in), &zero, y, ld(out)));
    }
    if (a_.bias_) {
      add_bias<<<cuda_blocks(R * out), 256, 0, ctx.cuda->stream>>>(y, W + out * in, R, out);
      DP_CUDA_LAUNCHED();
    }
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t in = a_.in_, out = a_.out_, R = x.shape()[0] * a_.rows_per_sample_;
    const float* g = io.gout->f32();
    const float* W = io.params;
    float* dW = io.grads;
    if (io.gin[0]) io.gin[0]->resize(DP_F32, x.shape());
    if (R == 0) return;  // no rows: nothing to add, and gx is empty
    const float one = 1.f, zero = 0.f;
    if (low_precision(fwd_precision_)) {  // the operands forward rounded, and g rounded here
      const cudaDataType_t t = cublas_lowp_type(fwd_precision_);
      void* x16 = lowp_buffer(io.tmp(0), R * in);
      void* w16 = lowp_buffer(io.tmp(1), out * in);
      void* g16 = lowp_buffer(io.tmp(2), R * out);
      cuda_to_lowp(ctx.cuda->stream, fwd_precision_, g, g16, R * out);
      if (io.gin[0])
        DP_CUBLAS_CHECK(cublasGemmEx(ctx.cuda->cublas, CUBLAS_OP_N, CUBLAS_OP_N, dim(in), dim(R), dim(out), &one, w16, t,
                                     ld(in), g16, t, ld(out), &zero, io.gin[0]->f32(), CUDA_R_32F, ld(in),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      DP_CUBLAS_CHECK(cublasGemmEx(ctx.cuda->cublas, CUBLAS_OP_N, CUBLAS_OP_T, dim(in), dim(out), dim(R), &one, x16, t,
                                   ld(in), g16, t, ld(out), &one, dW, CUDA_R_32F, ld(in), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
    } else {
      if (io.gin[0])
        DP_CUBLAS_CHECK(cublasSgemm(ctx.cuda->cublas, CUBLAS_OP_N, CUBLAS_OP_N, dim(in), dim(R), dim(out), &one, W,
                                    ld(in), g, ld(out), &zero, io.gin[0]->f32(), ld(in)));
      DP_CUBLAS_CHECK(cublasSgemm(ctx.cuda->cublas, CUBLAS_OP_N, CUBLAS_OP_T, dim(in), dim(out), dim(R), &one, x.f32(),
                                  ld(in), g, ld(out), &one, dW, ld(in)));
    }
    if (a_.bias_) {
      const unsigned blocks = static_cast<unsigned>((out + 31) / 32);
      bias_grad<<<blocks, dim3(32, kRowLanes), 0, ctx.cuda->stream>>>(dW + out * in, g, R, out);
      DP_CUDA_LAUNCHED();
    }
  }

 private:
  // cuBLAS takes int sizes.
  static int dim(int64_t v) {
    if (v > INT32_MAX) fail(DP_ERR_SHAPE, "linear: a dimension of " + std::to_string(v) + " exceeds cuBLAS's int");
    return static_cast<int>(v);
  }
  // A leading dimension: at least 1, even for an empty matrix.
  static int ld(int64_t v) { return dim(v > 1 ? v : 1); }

  const LinearAttrs& a_;  // the model's layer, which outlives its replicas' ops
  int fwd_precision_ = DP_PRECISION_FP32;  // the last forward's: backward uses its 16-bit copies
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_linear(const Layer& layer) {
  const auto* a = dynamic_cast<const LinearAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaLinear>(*a);
}

}  // namespace dp
