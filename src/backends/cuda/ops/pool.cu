// max_pool2d, avg_pool2d and global_avg_pool on CUDA, with the CPU layers'
// (PyTorch's) semantics.
//
// max_pool2d: own kernels in every configuration. The forward writes, per
// output, the flat index (in its input plane) of the maximum (ties: the first), visiting
// the taps in the CPU's order (a NaN wins, the last one); the backward gathers,
// for every input element, the gradients of the outputs whose index is that
// element, in increasing output order — the CPU's summation order, without
// atomics. (cuDNN's max pooling was not used: its backward needs the output y,
// which the backward contract does not promise, and it routes the gradient of
// tied or NaN windows its own way.)
//
// avg_pool2d: cuDNN (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING or
// _EXCLUDE_PADDING from count_include_pad) when the output size is the
// floor-mode one, so every window lies inside the padded input and cuDNN's
// divisor is the CPU's; otherwise (a ceil_mode overhang) own kernels with the
// CPU's window and divisor rules, forward and backward in the CPU's summation
// order.
//
// global_avg_pool: own kernels; the mean of each plane (a warp per plane, or a
// block for large planes), and the broadcast of g / HW back.
#include <cstdint>
#include <string>

#include "backends/cuda/ops/common.cuh"
#include "backends/cuda/ops/ops.h"
#include "layers/global_avg_pool.h"
#include "layers/pool2d.h"
#include "layers/util.h"

namespace dp {

namespace {

constexpr int kThreads = 256;

int to_int(int64_t v, const char* op, const char* what) {
  if (v < 0 || v > INT32_MAX)
    fail(DP_ERR_SHAPE, std::string(op) + " on CUDA: " + what + " = " + std::to_string(v) + " does not fit an int");
  return static_cast<int>(v);
}

// The window geometry, as ints (planes and kernels are far below 2^31).
struct Geom {
  int H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw;
};

// ---------------------------------------------------------------- max pool

// y and arg ([planes, Ho, Wo]) from x ([planes, H, W]). I: the index type
// (int32_t when every flat index fits).
template <class I>
__global__ void max_pool_fwd(const float* __restrict__ x, float* __restrict__ y, int32_t* __restrict__ arg, I total,
                             Geom g) {
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<I>(gridDim.x) * blockDim.x) {
    const int ow = static_cast<int>(idx % g.Wo);
    const I t = idx / g.Wo;
    const int oh = static_cast<int>(t % g.Ho);
    const I pl = t / g.Ho;
    const float* xp = x + pl * static_cast<I>(g.H) * g.W;
    float best = -__int_as_float(0x7f800000);  // -inf
    int bi = -1;
    const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    for (int i = 0; i < g.kh; ++i) {
      const int ih = h0 + i * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      for (int j = 0; j < g.kw; ++j) {
        const int iw = w0 + j * g.dw;
        if (iw < 0 || iw >= g.W) continue;
        const float v = xp[ih * g.W + iw];
        // As the CPU's keep_max (PyTorch's rule): the first tap, then a
        // larger value or a NaN (ties keep the first maximum, the last NaN wins).
        const bool take = (bi < 0) || (v > best) || (v != v);
        if (take) best = v, bi = ih * g.W + iw;
      }
    }
    y[idx] = best;
    arg[idx] = bi;
  }
}

// gx ([planes, H, W]) = the sum of g over the outputs whose arg is this element,
// in increasing output order.
template <class I>
__global__ void max_pool_bwd(const float* __restrict__ gy, const int32_t* __restrict__ arg, float* __restrict__ gx,
                             I total, Geom g) {
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<I>(gridDim.x) * blockDim.x) {
    const int iw = static_cast<int>(idx % g.W);
    const I t = idx / g.W;
    const int ih = static_cast<int>(t % g.H);
    const I pl = t / g.H;
    const int target = ih * g.W + iw;
    const I obase = pl * static_cast<I>(g.Ho) * g.Wo;
    float s = 0.f;
    if (g.dh == 1 && g.dw == 1) {
      // Output row oh holds row ih when oh*sh - ph <= ih < oh*sh - ph + kh: a
      // range of rows (likewise columns), without a division per tap.
      const int rh = ih + g.ph - g.kh + 1, rw = iw + g.pw - g.kw + 1;
      const int oh0 = rh <= 0 ? 0 : (rh + g.sh - 1) / g.sh, oh1 = min(g.Ho - 1, (ih + g.ph) / g.sh);
      const int ow0 = rw <= 0 ? 0 : (rw + g.sw - 1) / g.sw, ow1 = min(g.Wo - 1, (iw + g.pw) / g.sw);
      for (int oh = oh0; oh <= oh1; ++oh)
        for (int ow = ow0; ow <= ow1; ++ow) {
          const I o = obase + static_cast<I>(oh) * g.Wo + ow;
          if (arg[o] == target) s += gy[o];
        }
      gx[idx] = s;
      continue;
    }
    // Tap i of output row oh reads row oh*sh - ph + i*dh: a larger i means a
    // smaller oh, so i descending visits the rows in increasing order.
    for (int i = g.kh - 1; i >= 0; --i) {
      const int r = ih + g.ph - i * g.dh;
      if (r < 0 || r % g.sh != 0) continue;
      const int oh = r / g.sh;
      if (oh >= g.Ho) continue;
      for (int j = g.kw - 1; j >= 0; --j) {
        const int c = iw + g.pw - j * g.dw;
        if (c < 0 || c % g.sw != 0) continue;
        const int ow = c / g.sw;
        if (ow >= g.Wo) continue;
        const I o = obase + static_cast<I>(oh) * g.Wo + ow;
        if (arg[o] == target) s += gy[o];
      }
    }
    gx[idx] = s;
  }
}

class CudaMaxPool2d final : public CudaOp {
 public:
  explicit CudaMaxPool2d(const MaxPool2dAttrs& a) : a_(a) {
    const char* op = "max_pool2d";
    g_ = Geom{to_int(a.H_, op, "input height"), to_int(a.W_, op, "input width"), to_int(a.Ho_, op, "output height"),
              to_int(a.Wo_, op, "output width"), to_int(a.kh_, op, "kernel height"), to_int(a.kw_, op, "kernel width"),
              to_int(a.sh_, op, "stride"), to_int(a.sw_, op, "stride"), to_int(a.ph_, op, "padding"),
              to_int(a.pw_, op, "padding"), to_int(a.dh_, op, "dilation"), to_int(a.dw_, op, "dilation")};
    to_int(a.H_ * a.W_, op, "input plane");
  }

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0];
    io.out->resize(DP_F32, Shape{n, a_.C_, a_.Ho_, a_.Wo_});
    Tensor& arg = io.tmp(0);  // int32 flat indices, stored as 4-byte elements
    arg.resize(DP_F32, Shape{n, a_.C_, a_.Ho_, a_.Wo_});
    const int64_t total = io.out->numel();
    if (total == 0) return;
    int32_t* am = static_cast<int32_t*>(arg.data());
    cudaStream_t s = ctx.cuda->stream;
    if (fits32(x.numel(), total))
      max_pool_fwd<int32_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(x.f32(), io.out->f32(), am,
                                                                               static_cast<int32_t>(total), g_);
    else
      max_pool_fwd<int64_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(x.f32(), io.out->f32(), am, total, g_);
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    Tensor* gin = input_grad(io);
    if (!gin) return;
    const int64_t total = gin->numel();
    const int32_t* am = static_cast<const int32_t*>(io.tmp(0).data());
    cudaStream_t s = ctx.cuda->stream;
    if (fits32(total, io.gout->numel()))
      max_pool_bwd<int32_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(io.gout->f32(), am, gin->f32(),
                                                                              static_cast<int32_t>(total), g_);
    else
      max_pool_bwd<int64_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(io.gout->f32(), am, gin->f32(), total, g_);
    DP_CUDA_LAUNCHED();
  }

 private:
  // Every flat index, and the grid-stride step past the end, fits int32.
  static bool fits32(int64_t a, int64_t b) {
    const int64_t lim = INT32_MAX - int64_t(65535) * 8 * kThreads;
    return a < lim && b < lim;
  }

  MaxPool2dAttrs a_;
  Geom g_;
};

// ---------------------------------------------------------------- avg pool

struct AvgGeom {
  Geom g;
  bool include_pad;
};

// The window of output (oh, ow) clipped to the input, and its divisor: the
// CPU's AvgPool2d::window.
__device__ __forceinline__ void avg_window(const AvgGeom& a, int oh, int ow, int* h0, int* h1, int* w0, int* w1,
                                           float* inv) {
  const Geom& g = a.g;
  int hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int he = min(hs + g.kh, g.H + g.ph), we = min(ws + g.kw, g.W + g.pw);
  const long long pool = static_cast<long long>(he - hs) * (we - ws);
  hs = max(hs, 0), ws = max(ws, 0);
  he = min(he, g.H), we = min(we, g.W);
  const long long div = a.include_pad ? pool : static_cast<long long>(he - hs) * (we - ws);
  *h0 = hs, *h1 = he, *w0 = ws, *w1 = we;
  *inv = div > 0 ? 1.f / static_cast<float>(div) : 0.f;
}

template <class I>
__global__ void avg_pool_fwd(const float* __restrict__ x, float* __restrict__ y, I total, AvgGeom a) {
  const Geom& g = a.g;
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<I>(gridDim.x) * blockDim.x) {
    const int ow = static_cast<int>(idx % g.Wo);
    const I t = idx / g.Wo;
    const int oh = static_cast<int>(t % g.Ho);
    const I pl = t / g.Ho;
    const float* xp = x + pl * static_cast<I>(g.H) * g.W;
    int h0, h1, w0, w1;
    float inv;
    avg_window(a, oh, ow, &h0, &h1, &w0, &w1, &inv);
    float s = 0.f;
    for (int i = h0; i < h1; ++i)
      for (int j = w0; j < w1; ++j) s += xp[i * g.W + j];
    y[idx] = s * inv;
  }
}

// gx = the sum over the outputs whose window holds this element of g * inv,
// in increasing output order (the CPU's order of accumulation).
template <class I>
__global__ void avg_pool_bwd(const float* __restrict__ gy, float* __restrict__ gx, I total, AvgGeom a) {
  const Geom& g = a.g;
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<I>(gridDim.x) * blockDim.x) {
    const int iw = static_cast<int>(idx % g.W);
    const I t = idx / g.W;
    const int ih = static_cast<int>(t % g.H);
    const I pl = t / g.H;
    const float* gp = gy + pl * static_cast<I>(g.Ho) * g.Wo;
    // Output row oh holds row ih when oh*sh - ph <= ih < oh*sh - ph + kh (the
    // clipping to H + ph and to H never excludes a row inside the input).
    const int rh = ih + g.ph - g.kh + 1, rw = iw + g.pw - g.kw + 1;
    const int oh0 = rh <= 0 ? 0 : (rh + g.sh - 1) / g.sh, oh1 = min(g.Ho - 1, (ih + g.ph) / g.sh);
    const int ow0 = rw <= 0 ? 0 : (rw + g.sw - 1) / g.sw, ow1 = min(g.Wo - 1, (iw + g.pw) / g.sw);
    float s = 0.f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        int h0, h1, w0, w1;
        float inv;
        avg_window(a, oh, ow, &h0, &h1, &w0, &w1, &inv);
        const float v = gp[oh * g.Wo + ow] * inv;
        s += v;
      }
    gx[idx] = s;
  }
}

class CudaAvgPool2d final : public CudaOp {
 public:
  explicit CudaAvgPool2d(const AvgPool2dAttrs& a) : a_(a) {
    const char* op = "avg_pool2d";
    ag_.g = Geom{to_int(a.H_, op, "input height"), to_int(a.W_, op, "input width"), to_int(a.Ho_, op, "output height"),
                 to_int(a.Wo_, op, "output width"), to_int(a.kh_, op, "kernel height"), to_int(a.kw_, op, "kernel width"),
                 to_int(a.sh_, op, "stride"), to_int(a.sw_, op, "stride"), to_int(a.ph_, op, "padding"),
                 to_int(a.pw_, op, "padding"), 1, 1};
    ag_.include_pad = a.include_pad_;
    to_int(a.H_ * a.W_, op, "input plane");
    // cuDNN computes floor-mode sizes; with those, every window lies inside
    // the padded input, where cuDNN's divisors are the CPU's.
    use_cudnn_ = window_out(a.H_, a.kh_, a.sh_, a.ph_, 1, false) == a.Ho_ &&
                 window_out(a.W_, a.kw_, a.sw_, a.pw_, 1, false) == a.Wo_;
    if (use_cudnn_)
      DP_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
          pool_.d, a.include_pad_ ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
          CUDNN_PROPAGATE_NAN, ag_.g.kh, ag_.g.kw, ag_.g.ph, ag_.g.pw, ag_.g.sh, ag_.g.sw));
  }

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0];
    io.out->resize(DP_F32, Shape{n, a_.C_, a_.Ho_, a_.Wo_});
    const int64_t total = io.out->numel();
    if (total == 0) return;
    if (prepare(n)) {
      const float one = 1.f, zero = 0.f;
      DP_CUDNN_CHECK(cudnnPoolingForward(ctx.cuda->cudnn, pool_.d, &one, x_.d, x.f32(), &zero, y_.d, io.out->f32()));
      return;
    }
    cudaStream_t s = ctx.cuda->stream;
    if (fits32(x.numel(), total))
      avg_pool_fwd<int32_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(x.f32(), io.out->f32(),
                                                                              static_cast<int32_t>(total), ag_);
    else
      avg_pool_fwd<int64_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(x.f32(), io.out->f32(), total, ag_);
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    Tensor* gin = input_grad(io);
    if (!gin) return;
    const Tensor& x = *io.in[0];
    const int64_t n = gin->shape()[0], total = gin->numel();
    if (prepare(n)) {
      // Average pooling's gradient depends on dy alone; cuDNN's interface
      // still takes y, for which dy (same shape) stands in.
      const float one = 1.f, zero = 0.f;
      const float* dy = io.gout->f32();
      DP_CUDNN_CHECK(cudnnPoolingBackward(ctx.cuda->cudnn, pool_.d, &one, y_.d, dy, y_.d, dy, x_.d, x.f32(), &zero, x_.d,
                                          gin->f32()));
      return;
    }
    cudaStream_t s = ctx.cuda->stream;
    if (fits32(total, io.gout->numel()))
      avg_pool_bwd<int32_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(io.gout->f32(), gin->f32(),
                                                                              static_cast<int32_t>(total), ag_);
    else
      avg_pool_bwd<int64_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(io.gout->f32(), gin->f32(), total, ag_);
    DP_CUDA_LAUNCHED();
  }

 private:
  static bool fits32(int64_t a, int64_t b) {
    const int64_t lim = INT32_MAX - int64_t(65535) * 8 * kThreads;
    return a < lim && b < lim;
  }

  // True when cuDNN runs this batch size (descriptors set for n).
  bool prepare(int64_t n) {
    if (!use_cudnn_) return false;
    if (n == n_) return true;
    const char* op = "avg_pool2d";
    const int ni = to_int(n, op, "batch size"), c = to_int(a_.C_, op, "channels");
    DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, ni, c, ag_.g.H, ag_.g.W));
    DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, ni, c, ag_.g.Ho, ag_.g.Wo));
    int on = 0, oc = 0, oh = 0, ow = 0;
    DP_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_.d, x_.d, &on, &oc, &oh, &ow));
    if (on != ni || oc != c || oh != ag_.g.Ho || ow != ag_.g.Wo) {
      use_cudnn_ = false;  // sizes disagree: the own kernels, which follow the CPU
      return false;
    }
    n_ = n;
    return true;
  }

  AvgPool2dAttrs a_;
  AvgGeom ag_;
  bool use_cudnn_ = false;
  PoolDesc pool_;
  TensorDesc x_, y_;
  int64_t n_ = -1;  // batch size x_ and y_ are set for
};

// ---------------------------------------------------------------- global avg pool

// y[pl] = mean of plane pl: one warp per plane.
__global__ void gap_fwd_warp(const float* __restrict__ x, float* __restrict__ y, int64_t planes, int64_t hw,
                             float inv) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t pl = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; pl < planes; pl += warps) {
    const float* p = x + pl * hw;
    float s = 0.f;
    for (int64_t j = lane; j < hw; j += 32) s += p[j];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) y[pl] = s * inv;
  }
}

// The same with one block (kThreads threads) per plane, for large planes.
__global__ void gap_fwd_block(const float* __restrict__ x, float* __restrict__ y, int64_t planes, int64_t hw,
                              float inv) {
  __shared__ float part[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
    const float* p = x + pl * hw;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < hw; j += kThreads) s += p[j];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) part[warp] = s;
    __syncthreads();
    if (warp == 0) {
      s = lane < kThreads / 32 ? part[lane] : 0.f;
      for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
      if (lane == 0) y[pl] = s * inv;
    }
    __syncthreads();  // part is reused by the next plane
  }
}

template <class I>
__global__ void gap_bwd(const float* __restrict__ gy, float* __restrict__ gx, I total, I hw, float inv) {
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<I>(gridDim.x) * blockDim.x)
    gx[idx] = gy[idx / hw] * inv;
}

class CudaGlobalAvgPool final : public CudaOp {
 public:
  explicit CudaGlobalAvgPool(const GlobalAvgPoolAttrs& a) : a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], planes = n * a_.C_, hw = a_.HW_;
    io.out->resize(DP_F32, Shape{n, a_.C_});
    if (planes == 0) return;
    const float inv = 1.f / static_cast<float>(hw);
    cudaStream_t s = ctx.cuda->stream;
    if (hw >= 4096) {
      const unsigned blocks = static_cast<unsigned>(planes < 65535 * 8 ? planes : 65535 * 8);
      gap_fwd_block<<<blocks, kThreads, 0, s>>>(x.f32(), io.out->f32(), planes, hw, inv);
    } else {
      gap_fwd_warp<<<cuda_blocks(planes * 32, kThreads), kThreads, 0, s>>>(x.f32(), io.out->f32(), planes, hw, inv);
    }
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    Tensor* gin = input_grad(io);
    if (!gin) return;
    const int64_t total = gin->numel();
    const float inv = 1.f / static_cast<float>(a_.HW_);
    cudaStream_t s = ctx.cuda->stream;
    if (total < INT32_MAX - int64_t(65535) * 8 * kThreads)
      gap_bwd<int32_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(
          io.gout->f32(), gin->f32(), static_cast<int32_t>(total), static_cast<int32_t>(a_.HW_), inv);
    else
      gap_bwd<int64_t><<<cuda_blocks(total, kThreads), kThreads, 0, s>>>(io.gout->f32(), gin->f32(), total, a_.HW_, inv);
    DP_CUDA_LAUNCHED();
  }

 private:
  GlobalAvgPoolAttrs a_;
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_max_pool2d(const Layer& layer) {
  const auto* a = dynamic_cast<const MaxPool2dAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaMaxPool2d>(*a);
}

std::unique_ptr<CudaOp> make_cuda_avg_pool2d(const Layer& layer) {
  const auto* a = dynamic_cast<const AvgPool2dAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaAvgPool2d>(*a);
}

std::unique_ptr<CudaOp> make_cuda_global_avg_pool(const Layer& layer) {
  const auto* a = dynamic_cast<const GlobalAvgPoolAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaGlobalAvgPool>(*a);
}

}  // namespace dp
