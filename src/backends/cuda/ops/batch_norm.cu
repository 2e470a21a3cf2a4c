// batch_norm, batch_norm1d and batch_norm2d on CUDA: the CPU layer's semantics
// (layers/batch_norm.cpp) with own kernels — deterministic reductions in
// double, no atomics. (cuDNN's batch norm was not used: its backward knows
// only batch statistics, the evaluation-mode backward and the count == 1
// variance rule would need kernels anyway, and its running-average outputs
// would have to be pre-filled to give the raw batch statistics.)
//
// Input [N, C, S...] is read as N x C planes of S elements; channel c's M = N*S
// values are split into B chunks of consecutive (sample, element) positions,
// one block per (channel, chunk), each writing its partial sums (double) to
// scratch; a per-channel pass adds the B partials in order and derives the
// statistics; an element-wise pass applies them.
//
// Forward, batch statistics (training, or track_running_stats false): the
// sums are of d = x - x[first of the channel] (a shift that keeps the
// one-pass variance exact), mean = K + sum d / M, biased variance for the
// normalisation, and with training and tracking, io.stats[c] = mean,
// io.stats[C + c] = unbiased variance (the biased one when M <= 1, as on the
// CPU). Otherwise the running statistics (io.buffers) are used.
//
// Scratch: tmp(0) = the mean and 1/sqrt(var + eps) the forward used ([2C]),
// which the backward differentiates (with the batch terms only when the
// forward used batch statistics: batch_stats_, per replica like the op);
// tmp(1) = per-channel coefficients; tmp(2) = partial sums.
#include <cstdint>
#include <string>

#include "backends/cuda/ops/ops.h"
#include "layers/batch_norm.h"

namespace dp {

namespace {

constexpr int kThreads = 256;  // every kernel here; the reductions assume it
constexpr size_t kScratch = 3;  // io.tmp(0..2)

// Sums a and b over the block; the result is valid in thread 0.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kThreads / 32], sb[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, off);
    b += __shfl_down_sync(0xffffffffu, b, off);
  }
  if (lane == 0) sa[warp] = a, sb[warp] = b;
  __syncthreads();
  if (warp == 0) {
    a = lane < kThreads / 32 ? sa[lane] : 0.0;
    b = lane < kThreads / 32 ? sb[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, off);
      b += __shfl_down_sync(0xffffffffu, b, off);
    }
  }
}

// Position k in [0, M) of channel c is sample i = k / S, element j = k % S, at
// x[(i * C + c) * S + j]. A thread steps k by kThreads; the host passes
// qs = kThreads / S and rs = kThreads % S so the step needs no division.
struct ChanWalk {
  int64_t C, S, M, chunk, qs, rs;
  int B;
};

// part[(c * B + b) * 2 + {0, 1}] = sum over chunk b of channel c of d and d*d,
// d = x - K with K = the channel's first value.
__global__ void __launch_bounds__(kThreads) bn_stats_partial(const float* __restrict__ x, ChanWalk w,
                                                             double* __restrict__ part) {
  const int64_t c = blockIdx.x;
  const int b = blockIdx.y;
  const int64_t k0 = b * w.chunk, k1 = min(w.M, k0 + w.chunk);
  const double K = x[c * w.S];
  double s = 0, q = 0;
  int64_t k = k0 + threadIdx.x;
  int64_t i = k / w.S, j = k - i * w.S;
  for (; k < k1; k += kThreads) {
    const double d = static_cast<double>(x[(i * w.C + c) * w.S + j]) - K;
    s += d;
    q += d * d;
    j += w.rs, i += w.qs;
    if (j >= w.S) j -= w.S, ++i;
  }
  block_sum2(s, q);
  if (threadIdx.x == 0) {
    part[(c * w.B + b) * 2] = s;
    part[(c * w.B + b) * 2 + 1] = q;
  }
}

// part[(c * B + b) * 2 + {0, 1}] = sum over chunk b of channel c of g and
// g * xhat, xhat = (x - mean) * invstd as the forward computed it.
__global__ void __launch_bounds__(kThreads) bn_grad_partial(const float* __restrict__ g, const float* __restrict__ x,
                                                            const float* __restrict__ mean,
                                                            const float* __restrict__ invstd, ChanWalk w,
                                                            double* __restrict__ part) {
  const int64_t c = blockIdx.x;
  const int b = blockIdx.y;
  const int64_t k0 = b * w.chunk, k1 = min(w.M, k0 + w.chunk);
  const float m = mean[c], is = invstd[c];
  double sg = 0, sgx = 0;
  int64_t k = k0 + threadIdx.x;
  int64_t i = k / w.S, j = k - i * w.S;
  for (; k < k1; k += kThreads) {
    const int64_t o = (i * w.C + c) * w.S + j;
    const float gv = g[o];
    const float xh = __fmul_rn(__fsub_rn(x[o], m), is);
    sg += gv;
    sgx += static_cast<double>(gv) * xh;
    j += w.rs, i += w.qs;
    if (j >= w.S) j -= w.S, ++i;
  }
  block_sum2(sg, sgx);
  if (threadIdx.x == 0) {
    part[(c * w.B + b) * 2] = sg;
    part[(c * w.B + b) * 2 + 1] = sgx;
  }
}

// Per channel, from the partials: the batch statistics, io.stats (when
// non-null), the saved mean / invstd, and y = a * x + b's coefficients.
__global__ void bn_finalize_batch(const double* __restrict__ part, const float* __restrict__ x, ChanWalk w, double eps,
                                  const float* __restrict__ gamma, const float* __restrict__ beta, float* __restrict__ stats,
                                  float* __restrict__ mean, float* __restrict__ invstd, float* __restrict__ ca,
                                  float* __restrict__ cb) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < w.C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double mu = 0, var = 0, unbiased = 0;
    if (w.M > 0) {
      double s = 0, q = 0;
      for (int b = 0; b < w.B; ++b) s += part[(c * w.B + b) * 2], q += part[(c * w.B + b) * 2 + 1];
      const double M = static_cast<double>(w.M);
      const double K = x[c * w.S];
      mu = K + s / M;
      double dev = q - s * (s / M);  // sum of (x - mu)^2
      if (dev < 0) dev = 0;
      var = dev / M;
      unbiased = w.M > 1 ? dev / (M - 1) : var;
    }
    if (stats) {
      stats[c] = static_cast<float>(mu);
      stats[w.C + c] = static_cast<float>(unbiased);
    }
    const float m = static_cast<float>(mu);
    const float is = static_cast<float>(1.0 / sqrt(var + eps));
    mean[c] = m, invstd[c] = is;
    const float a = gamma ? __fmul_rn(gamma[c], is) : is;
    ca[c] = a;
    cb[c] = __fsub_rn(beta ? beta[c] : 0.f, __fmul_rn(a, m));
  }
}

// The same from the running statistics (evaluation with tracking).
__global__ void bn_finalize_running(const float* __restrict__ running, int64_t C, double eps,
                                    const float* __restrict__ gamma, const float* __restrict__ beta,
                                    float* __restrict__ mean, float* __restrict__ invstd, float* __restrict__ ca,
                                    float* __restrict__ cb) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float m = running[c];
    const float is = static_cast<float>(1.0 / sqrt(static_cast<double>(running[C + c]) + eps));
    mean[c] = m, invstd[c] = is;
    const float a = gamma ? __fmul_rn(gamma[c], is) : is;
    ca[c] = a;
    cb[c] = __fsub_rn(beta ? beta[c] : 0.f, __fmul_rn(a, m));
  }
}

// Per channel, from the gradient partials: dgamma/dbeta += (when non-null),
// and the input gradient's coefficients a = gamma * invstd, mg = mean g,
// mgx = mean g * xhat (zero unless the forward used batch statistics).
__global__ void bn_finalize_grad(const double* __restrict__ part, ChanWalk w, bool have_sums, bool batch_stats,
                                 const float* __restrict__ gamma, const float* __restrict__ invstd,
                                 float* __restrict__ dgamma, float* __restrict__ dbeta, float* __restrict__ ca,
                                 float* __restrict__ cmg, float* __restrict__ cmgx) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < w.C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sg = 0, sgx = 0;
    if (have_sums)
      for (int b = 0; b < w.B; ++b) sg += part[(c * w.B + b) * 2], sgx += part[(c * w.B + b) * 2 + 1];
    if (dgamma) {
      dgamma[c] += static_cast<float>(sgx);
      dbeta[c] += static_cast<float>(sg);
    }
    ca[c] = __fmul_rn(gamma ? gamma[c] : 1.f, invstd[c]);
    float mg = 0.f, mgx = 0.f;
    if (batch_stats && w.M > 0) {
      mg = static_cast<float>(sg / static_cast<double>(w.M));
      mgx = static_cast<float>(sgx / static_cast<double>(w.M));
    }
    cmg[c] = mg, cmgx[c] = mgx;
  }
}

// Element-wise passes over [N, C, S] by a grid-stride loop of T threads in
// all; the channel of element e is (e / S) % C. Each thread divides once, then
// steps with rs = T % S and cq0 / cq1 = (T / S) % C, (T / S + 1) % C.
struct ElemWalk {
  int64_t total, C, S, rs, cq0, cq1;
};

struct ElemPos {
  int64_t e, j, c;
  __device__ explicit ElemPos(const ElemWalk& w) {
    e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t plane = e / w.S;
    j = e - plane * w.S;
    c = plane % w.C;
  }
  __device__ void next(const ElemWalk& w, int64_t T) {
    e += T;
    j += w.rs;
    if (j >= w.S) {
      j -= w.S;
      c += w.cq1;
    } else {
      c += w.cq0;
    }
    if (c >= w.C) c -= w.C;
  }
};

// y = a[c] * x + b[c]
__global__ void __launch_bounds__(kThreads) bn_apply(const float* __restrict__ x, float* __restrict__ y,
                                                     const float* __restrict__ ca, const float* __restrict__ cb,
                                                     ElemWalk w) {
  const int64_t T = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (ElemPos p(w); p.e < w.total; p.next(w, T)) y[p.e] = __fadd_rn(__fmul_rn(ca[p.c], x[p.e]), cb[p.c]);
}

// gx = a * (g - mg - (x - m) * is * mgx)
__global__ void __launch_bounds__(kThreads) bn_grad_input(const float* __restrict__ g, const float* __restrict__ x,
                                                          float* __restrict__ gx, const float* __restrict__ mean,
                                                          const float* __restrict__ invstd, const float* __restrict__ ca,
                                                          const float* __restrict__ cmg, const float* __restrict__ cmgx,
                                                          ElemWalk w) {
  const int64_t T = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (ElemPos p(w); p.e < w.total; p.next(w, T)) {
    const int64_t c = p.c;
    const float xt = __fmul_rn(__fmul_rn(__fsub_rn(x[p.e], mean[c]), invstd[c]), cmgx[c]);
    gx[p.e] = __fmul_rn(ca[c], __fsub_rn(__fsub_rn(g[p.e], cmg[c]), xt));
  }
}

class CudaBatchNorm final : public CudaOp {
 public:
  explicit CudaBatchNorm(const BatchNormAttrs& a) : a_(a) {}

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], C = a_.C_, M = n * a_.S_;
    io.out->resize(DP_F32, x.shape());
    if (C == 0) return;
    init(ctx);
    cudaStream_t s = ctx.cuda->stream;
    io.tmp(kScratch - 1);  // all scratch first: tmp(k) may grow the vector, moving the tensors
    Tensor& st = io.tmp(0);
    st.resize(DP_F32, Shape{2 * C});
    Tensor& coef = io.tmp(1);
    coef.resize(DP_F32, Shape{3 * C});
    float* mean = st.f32();
    float* invstd = mean + C;
    float* ca = coef.f32();
    float* cb = ca + C;
    const float* gamma = a_.affine_ ? io.params : nullptr;
    const float* beta = a_.affine_ ? io.params + C : nullptr;
    batch_stats_ = ctx.training || !a_.track_;
    if (batch_stats_) {
      const ChanWalk w = chan_walk(M);
      double* part = partials(io, w);
      if (M > 0) {
        bn_stats_partial<<<dim3(static_cast<unsigned>(C), static_cast<unsigned>(w.B)), kThreads, 0, s>>>(x.f32(), w,
                                                                                                          part);
        DP_CUDA_LAUNCHED();
      }
      float* stats = (ctx.training && a_.track_) ? io.stats : nullptr;
      bn_finalize_batch<<<cuda_blocks(C, kThreads), kThreads, 0, s>>>(part, x.f32(), w, a_.eps_, gamma, beta, stats,
                                                                       mean, invstd, ca, cb);
      DP_CUDA_LAUNCHED();
    } else {
      bn_finalize_running<<<cuda_blocks(C, kThreads), kThreads, 0, s>>>(io.buffers, C, a_.eps_, gamma, beta, mean,
                                                                         invstd, ca, cb);
      DP_CUDA_LAUNCHED();
    }
    if (M == 0) return;
    const ElemWalk ew = elem_walk(x.numel());
    bn_apply<<<ew_blocks_, kThreads, 0, s>>>(x.f32(), io.out->f32(), ca, cb, ew);
    DP_CUDA_LAUNCHED();
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0], C = a_.C_, M = n * a_.S_;
    Tensor* gin = io.gin.empty() ? nullptr : io.gin[0];
    if (gin) gin->resize(DP_F32, x.shape());
    if (M == 0 || C == 0 || (!gin && !a_.affine_)) return;  // nothing to add, nothing to write
    init(ctx);
    cudaStream_t s = ctx.cuda->stream;
    io.tmp(kScratch - 1);  // as in forward
    const float* mean = io.tmp(0).f32();
    const float* invstd = mean + C;
    Tensor& coef = io.tmp(1);
    coef.resize(DP_F32, Shape{3 * C});
    float* ca = coef.f32();
    float* cmg = ca + C;
    float* cmgx = cmg + C;
    const float* gamma = a_.affine_ ? io.params : nullptr;
    float* dgamma = a_.affine_ ? io.grads : nullptr;
    float* dbeta = a_.affine_ ? io.grads + C : nullptr;
    const float* g = io.gout->f32();
    // The sums feed dgamma / dbeta, and the input gradient's batch terms.
    const bool have_sums = a_.affine_ || batch_stats_;
    const ChanWalk w = chan_walk(M);
    double* part = nullptr;
    if (have_sums) {
      part = partials(io, w);
      bn_grad_partial<<<dim3(static_cast<unsigned>(C), static_cast<unsigned>(w.B)), kThreads, 0, s>>>(
          g, x.f32(), mean, invstd, w, part);
      DP_CUDA_LAUNCHED();
    }
    bn_finalize_grad<<<cuda_blocks(C, kThreads), kThreads, 0, s>>>(part, w, have_sums, batch_stats_, gamma, invstd,
                                                                    dgamma, dbeta, ca, cmg, cmgx);
    DP_CUDA_LAUNCHED();
    if (!gin) return;
    const ElemWalk ew = elem_walk(x.numel());
    bn_grad_input<<<ew_blocks_, kThreads, 0, s>>>(g, x.f32(), gin->f32(), mean, invstd, ca, cmg, cmgx, ew);
    DP_CUDA_LAUNCHED();
  }

 private:
  void init(const RunCtx& ctx) {
    if (sms_ > 0) return;
    int sms = 0;
    DP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx.cuda->device));
    sms_ = sms > 0 ? sms : 1;
    if (a_.C_ > INT32_MAX)
      fail(DP_ERR_SHAPE, a_.kind_ + " on CUDA: " + std::to_string(a_.C_) + " channels are more than a grid holds");
  }

  // Chunks per channel: about one wave of blocks (8 per SM) in all, with at
  // least 8 values per thread in a chunk.
  ChanWalk chan_walk(int64_t M) const {
    ChanWalk w;
    w.C = a_.C_, w.S = a_.S_, w.M = M;
    const int64_t C = a_.C_ > 0 ? a_.C_ : 1;
    int64_t B = (int64_t(sms_) * 8 + C - 1) / C;
    const int64_t by_size = (M + kThreads * 8 - 1) / (kThreads * 8);
    if (B > by_size) B = by_size;
    if (B > 65535) B = 65535;
    if (B < 1) B = 1;
    w.chunk = M > 0 ? (M + B - 1) / B : 1;
    B = M > 0 ? (M + w.chunk - 1) / w.chunk : 1;
    w.B = static_cast<int>(B);
    const int64_t S = a_.S_ > 0 ? a_.S_ : 1;
    w.qs = kThreads / S, w.rs = kThreads % S;
    return w;
  }

  double* partials(LayerIO& io, const ChanWalk& w) {
    Tensor& p = io.tmp(2);
    p.resize(DP_F32, Shape{a_.C_ * w.B * 4});  // two doubles per (channel, chunk)
    return static_cast<double*>(p.data());
  }

  ElemWalk elem_walk(int64_t total) {
    ElemWalk w;
    w.total = total, w.C = a_.C_, w.S = a_.S_ > 0 ? a_.S_ : 1;
    unsigned blocks = cuda_blocks(total, kThreads);
    const unsigned wave = static_cast<unsigned>(sms_) * 8;
    if (blocks > wave) blocks = wave;
    ew_blocks_ = blocks;
    const int64_t T = static_cast<int64_t>(blocks) * kThreads;
    const int64_t qs = T / w.S;
    w.rs = T % w.S;
    w.cq0 = qs % w.C;
    w.cq1 = (qs + 1) % w.C;
    return w;
  }

  BatchNormAttrs a_;
  int sms_ = 0;                // multiprocessors of the replica's device
  unsigned ew_blocks_ = 1;     // grid of the last elem_walk
  bool batch_stats_ = true;    // the last forward used batch statistics
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_batch_norm(const Layer& layer) {
  const auto* a = dynamic_cast<const BatchNormAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaBatchNorm>(*a);
}

}  // namespace dp
