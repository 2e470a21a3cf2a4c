// conv2d on cuDNN (the legacy convolution API): forward, backward data and
// backward filter, with groups, stride, padding, dilation and bias.
//
// Per op (one per replica): the filter, convolution and bias descriptors are
// made once; the input/output descriptors are re-set when the batch size
// changes. The algorithms are chosen once per (batch size, allow_tf32) from
// cuDNN's heuristics (cudnnGet...Algorithm_v7, which neither runs kernels nor
// synchronises) and cached: the first candidate, in cuDNN's order, that is
// deterministic and needs at most kWorkspaceCap bytes; else the first that
// fits the cap; else the one with the smallest workspace. With
// ctx.cuda->cudnn_benchmark (DP_GROUP_CUDNN_BENCHMARK, PyTorch's
// cudnn.benchmark) cuDNN times the candidates instead (cudnnFind...: kernels
// run and the stream synchronises, once per shape) and the fastest that fits
// the cap is taken, deterministic or not. One workspace,
// io.tmp(0), sized for the largest of the three, persists across steps.
//
// Math: CUDNN_FMA_MATH (plain FP32) unless ctx.cuda->allow_tf32, in which case
// the heuristics run with CUDNN_DEFAULT_MATH and each algorithm runs with the
// math type cuDNN reported for it (TF32 tensor ops allowed; FP16 conversion is
// never accepted).
//
// Mixed precision (ctx.cuda->precision bf16 or fp16, ops/lowp.h): x, W and dy
// are rounded to 16 bits (x's and W's in forward, kept for backward), the
// three convolutions run on 16-bit tensors with float32 accumulation
// (cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations, tensor-core
// algorithms allowed), and their 16-bit results are widened into the float32
// output, input gradient and (added) weight gradient; the bias and its
// gradient stay float32. Scratch: 0 the workspace, 1 x, 2 W, 3 y, 4 dy, 5 dW,
// 6 dx (16-bit).
//
// With DP_CUDNN_GRAPH=nchw or nhwc (experimental, ops/cudnn_graph.h) the
// three 16-bit convolutions go through cuDNN's graph API instead, on
// 16-bit tensors in that layout (nhwc: the casts change the layout too).
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/ops/common.cuh"
#include "backends/cuda/ops/cudnn_graph.h"
#include "backends/cuda/ops/lowp.h"
#include "backends/cuda/ops/ops.h"
#include "layers/conv2d.h"

namespace dp {

namespace {

// Workspace above which a faster-looking algorithm is passed over for one
// that needs less (as long as some candidate fits).
constexpr size_t kWorkspaceCap = size_t(1) << 30;

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT32_MAX)
    fail(DP_ERR_SHAPE, std::string("conv2d on CUDA: ") + what + " = " + std::to_string(v) + " does not fit cuDNN's int");
  return static_cast<int>(v);
}

// One direction's choice.
template <class Algo>
struct Choice {
  Algo algo{};
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t ws = 0;
};

struct Plan {
  Choice<cudnnConvolutionFwdAlgo_t> fwd;
  Choice<cudnnConvolutionBwdDataAlgo_t> bwd_data;
  Choice<cudnnConvolutionBwdFilterAlgo_t> bwd_filter;
  size_t ws() const {
    size_t m = fwd.ws;
    if (bwd_data.ws > m) m = bwd_data.ws;
    if (bwd_filter.ws > m) m = bwd_filter.ws;
    return m;
  }
};

// The 16-bit convolutions of one (batch size, precision, timed) through the
// graph API.
struct Graphs {
  std::unique_ptr<ConvGraph> fwd, bwd_data, bwd_filter;
  std::string bwd_data_error;  // why bwd_data is null: cuDNN built no plan for it
  size_t ws() const {
    size_t m = fwd->workspace();
    if (bwd_data && bwd_data->workspace() > m) m = bwd_data->workspace();
    if (bwd_filter->workspace() > m) m = bwd_filter->workspace();
    return m;
  }
};

class CudaConv2d final : public CudaOp {
 public:
  explicit CudaConv2d(const Conv2dAttrs& a) : a_(a), graph_mode_(cudnn_graph_mode()) {
    DP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_.d, to_int(a_.ph_, "padding"), to_int(a_.pw_, "padding"),
                                                   to_int(a_.sh_, "stride"), to_int(a_.sw_, "stride"),
                                                   to_int(a_.dh_, "dilation"), to_int(a_.dw_, "dilation"),
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DP_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.d, to_int(a_.groups_, "groups")));
    DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, CUDNN_FMA_MATH));
    DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(b_.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, to_int(a_.cout_, "out_channels"),
                                              1, 1));
  }

  void forward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0];
    io.out->resize(DP_F32, Shape{n, a_.cout_, a_.Ho_, a_.Wo_});
    if (n == 0) return;
    cudnnHandle_t h = ctx.cuda->cudnn;
    prepare(h, ctx.cuda->allow_tf32, ctx.cuda->cudnn_benchmark, ctx.cuda->precision, n);
    void* ws = workspace(io);
    const float one = 1.f, zero = 0.f;
    DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, plan_.fwd.math));
    if (low_precision(prec_)) {
      cudaStream_t s = ctx.cuda->stream;
      void* x16 = lowp_buffer(io.tmp(1), x.numel());
      void* w16 = lowp_buffer(io.tmp(2), a_.wsize());
      void* y16 = lowp_buffer(io.tmp(3), io.out->numel());
      to16(s, x.f32(), x16, n, a_.cin_, a_.H_ * a_.W_);
      to16(s, io.params, w16, a_.cout_, a_.cin_ / a_.groups_, a_.kh_ * a_.kw_);
      if (graph_)
        graph_->fwd->run(h, x16, w16, y16, ws);
      else
        DP_CUDNN_CHECK(cudnnConvolutionForward(h, &one, x_.d, x16, w_.d, w16, conv_.d, plan_.fwd.algo, ws, plan_.fwd.ws,
                                               &zero, y_.d, y16));
      from16(s, y16, io.out->f32(), n, a_.cout_, a_.Ho_ * a_.Wo_, false);
    } else {
      DP_CUDNN_CHECK(cudnnConvolutionForward(h, &one, x_.d, x.f32(), w_.d, io.params, conv_.d, plan_.fwd.algo, ws,
                                             plan_.fwd.ws, &zero, y_.d, io.out->f32()));
    }
    fwd_precision_ = prec_;
    if (a_.bias_)
      DP_CUDNN_CHECK(cudnnAddTensor(h, &one, b_.d, io.params + a_.wsize(), &one, yf_.d, io.out->f32()));
  }

  void backward(const RunCtx& ctx, LayerIO& io) override {
    const Tensor& x = *io.in[0];
    const int64_t n = x.shape()[0];
    Tensor* gin = io.gin.empty() ? nullptr : io.gin[0];
    if (gin) gin->resize(DP_F32, x.shape());
    if (n == 0) return;  // nothing to add to the gradients; gin is empty
    cudnnHandle_t h = ctx.cuda->cudnn;
    // Backward in the precision of the forward whose 16-bit x and W it reads.
    prepare(h, ctx.cuda->allow_tf32, ctx.cuda->cudnn_benchmark, fwd_precision_, n);
    void* ws = workspace(io);
    const float one = 1.f, zero = 0.f;
    const float* dy = io.gout->f32();
    if (low_precision(prec_)) {
      backward_lowp(ctx, io, gin, ws);
      return;
    }
    // dW += conv_bwd_filter(x, dy): beta = 1 accumulates into io.grads.
    DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, plan_.bwd_filter.math));
    DP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, x_.d, x.f32(), y_.d, dy, conv_.d, plan_.bwd_filter.algo, ws,
                                                  plan_.bwd_filter.ws, &one, w_.d, io.grads));
    if (a_.bias_)
      DP_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, y_.d, dy, &one, b_.d, io.grads + a_.wsize()));
    if (gin) {
      DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, plan_.bwd_data.math));
      DP_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, w_.d, io.params, y_.d, dy, conv_.d, plan_.bwd_data.algo, ws,
                                                  plan_.bwd_data.ws, &zero, x_.d, gin->f32()));
    }
  }

 private:
  // Backward in 16 bits: dy rounded, the 16-bit x and W forward left, each
  // result widened into float32 (dW added); the bias's gradient from the
  // float32 dy.
  void backward_lowp(const RunCtx& ctx, LayerIO& io, Tensor* gin, void* ws) {
    cudnnHandle_t h = ctx.cuda->cudnn;
    cudaStream_t s = ctx.cuda->stream;
    const float one = 1.f, zero = 0.f;
    const Tensor& x = *io.in[0];
    const float* dy = io.gout->f32();
    void* x16 = lowp_buffer(io.tmp(1), x.numel());
    void* w16 = lowp_buffer(io.tmp(2), a_.wsize());
    void* dy16 = lowp_buffer(io.tmp(4), io.gout->numel());
    void* dw16 = lowp_buffer(io.tmp(5), a_.wsize());
    const int64_t n = x.shape()[0];
    to16(s, dy, dy16, n, a_.cout_, a_.Ho_ * a_.Wo_);
    if (graph_) {
      graph_->bwd_filter->run(h, x16, dw16, dy16, ws);
    } else {
      DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, plan_.bwd_filter.math));
      DP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, x_.d, x16, y_.d, dy16, conv_.d, plan_.bwd_filter.algo, ws,
                                                    plan_.bwd_filter.ws, &zero, w_.d, dw16));
    }
    from16(s, dw16, io.grads, a_.cout_, a_.cin_ / a_.groups_, a_.kh_ * a_.kw_, true);
    if (a_.bias_)
      DP_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, yf_.d, dy, &one, b_.d, io.grads + a_.wsize()));
    if (gin) {
      void* dx16 = lowp_buffer(io.tmp(6), gin->numel());
      if (graph_) {
        if (!graph_->bwd_data) fail(DP_ERR_DEVICE, graph_->bwd_data_error);
        graph_->bwd_data->run(h, dx16, w16, dy16, ws);
      } else {
        DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, plan_.bwd_data.math));
        DP_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, w_.d, w16, y_.d, dy16, conv_.d, plan_.bwd_data.algo, ws,
                                                    plan_.bwd_data.ws, &zero, x_.d, dx16));
      }
      from16(s, dx16, gin->f32(), n, a_.cin_, a_.H_ * a_.W_, false);
    }
  }

  // The 16-bit copies the convolutions read, b blocks of [c, p] floats: in
  // place order, or channels last (DP_CUDNN_GRAPH=nhwc); and back.
  bool channels_last() const { return graph_ != nullptr && graph_mode_ == 2; }
  void to16(cudaStream_t s, const float* src, void* dst, int64_t b, int64_t c, int64_t p) const {
    if (channels_last())
      cuda_to_lowp_channels_last(s, prec_, src, dst, b, c, p);
    else
      cuda_to_lowp(s, prec_, src, dst, b * c * p);
  }
  void from16(cudaStream_t s, const void* src, float* dst, int64_t b, int64_t c, int64_t p, bool add) const {
    if (channels_last())
      cuda_from_lowp_channels_last(s, prec_, src, dst, b, c, p, add);
    else
      cuda_from_lowp(s, prec_, src, dst, b * c * p, add);
  }

  // The graph API's three convolutions for batch size n in 16-bit precision prec.
  Graphs make_graphs(cudnnHandle_t h, int64_t n, bool bench, int prec) const {
    ConvGraphShape sh;
    sh.n = n, sh.c = a_.cin_, sh.h = a_.H_, sh.w = a_.W_;
    sh.k = a_.cout_, sh.r = a_.kh_, sh.s = a_.kw_, sh.groups = a_.groups_;
    sh.oh = a_.Ho_, sh.ow = a_.Wo_;
    sh.pad[0] = a_.ph_, sh.pad[1] = a_.pw_;
    sh.stride[0] = a_.sh_, sh.stride[1] = a_.sw_;
    sh.dilation[0] = a_.dh_, sh.dilation[1] = a_.dw_;
    sh.nhwc = graph_mode_ == 2;
    sh.type = cudnn_lowp_type(prec);
    Graphs g;  // timed (DP_GROUP_CUDNN_BENCHMARK) allows nondeterministic engines, as the legacy path
    g.fwd = std::make_unique<ConvGraph>(h, ConvDir::kForward, sh, bench);
    g.bwd_filter = std::make_unique<ConvGraph>(h, ConvDir::kBackwardFilter, sh, bench);
    try {  // a first layer never needs it: its failure is said only where it is needed
      g.bwd_data = std::make_unique<ConvGraph>(h, ConvDir::kBackwardData, sh, bench);
    } catch (const Error& e) {
      g.bwd_data_error = e.what();
    }
    return g;
  }

  // Descriptors and algorithms for batch size n and a precision (host work
  // only): x_, y_ and w_ in the type the convolutions read (float32, or the
  // 16-bit one), yf_ the float32 output the bias is added to.
  void prepare(cudnnHandle_t h, bool tf32, bool bench, int prec, int64_t n) {
    if (n == n_ && tf32 == tf32_ && bench == bench_ && prec == prec_) return;
    const int ni = to_int(n, "batch size");
    if (n != n_ || prec != prec_) {
      n_ = -1;  // the descriptors change now: until a choice is kept below, nothing is prepared
      const cudnnDataType_t t = low_precision(prec) ? cudnn_lowp_type(prec) : CUDNN_DATA_FLOAT;
      DP_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_.d, t, CUDNN_TENSOR_NCHW, to_int(a_.cout_, "out_channels"),
                                                to_int(a_.cin_ / a_.groups_, "in_channels / groups"),
                                                to_int(a_.kh_, "kernel height"), to_int(a_.kw_, "kernel width")));
      DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_.d, CUDNN_TENSOR_NCHW, t, ni, to_int(a_.cin_, "in_channels"),
                                                to_int(a_.H_, "input height"), to_int(a_.W_, "input width")));
      DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_.d, CUDNN_TENSOR_NCHW, t, ni, to_int(a_.cout_, "out_channels"),
                                                to_int(a_.Ho_, "output height"), to_int(a_.Wo_, "output width")));
      DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(yf_.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, ni,
                                                to_int(a_.cout_, "out_channels"), to_int(a_.Ho_, "output height"),
                                                to_int(a_.Wo_, "output width")));
      int on = 0, oc = 0, oh = 0, ow = 0;
      DP_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.d, x_.d, w_.d, &on, &oc, &oh, &ow));
      if (on != ni || oc != a_.cout_ || oh != a_.Ho_ || ow != a_.Wo_)
        fail(DP_ERR_INTERNAL, "conv2d on CUDA: cuDNN's output shape [" + std::to_string(on) + ", " + std::to_string(oc) +
                                  ", " + std::to_string(oh) + ", " + std::to_string(ow) + "] differs from the layer's [" +
                                  std::to_string(n) + ", " + std::to_string(a_.cout_) + ", " + std::to_string(a_.Ho_) +
                                  ", " + std::to_string(a_.Wo_) + "]");
    }
    // Chosen first, kept after: a choice that fails leaves the op as it was,
    // so the next call chooses again rather than running on another's plan.
    Graphs* graph = nullptr;
    if (graph_mode_ && low_precision(prec)) {
      auto key = std::make_tuple(n, bench, prec);
      auto g = graphs_.find(key);
      if (g == graphs_.end()) g = graphs_.emplace(key, make_graphs(h, n, bench, prec)).first;
      graph = &g->second;
    } else {
      auto key = std::make_tuple(n, tf32, bench, prec);
      auto it = plans_.find(key);
      if (it == plans_.end()) it = plans_.emplace(key, choose(h, tf32 || low_precision(prec), bench)).first;
      plan_ = it->second;
    }
    graph_ = graph;
    n_ = n;
    tf32_ = tf32;
    bench_ = bench;
    prec_ = prec;
  }

  void* workspace(LayerIO& io) {
    const size_t bytes = graph_ ? graph_->ws() : plan_.ws();
    if (bytes == 0) return nullptr;
    Tensor& ws = io.tmp(0);
    const int64_t floats = static_cast<int64_t>(bytes / sizeof(float) + (bytes % sizeof(float) != 0));
    if (ws.numel() < floats || ws.data() == nullptr) ws.resize(DP_F32, Shape{floats});
    return ws.data();
  }

  // Picks among cuDNN's heuristic candidates (see the file comment); `tf32`:
  // tensor-core math allowed (TF32 on float32 data, or 16-bit data). `ws_of`
  // sets the math type it is given and returns false when the algorithm is
  // not supported for this configuration, else its workspace.
  template <class Perf, class Algo, class WsOf>
  static Choice<Algo> pick(const std::vector<Perf>& perf, int got, bool tf32, bool timed, WsOf ws_of, Algo fallback,
                           const char* what) {
    struct Cand {
      Choice<Algo> c;
      bool det;
    };
    std::vector<Cand> cands;
    for (int i = 0; i < got; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;  // would round FP32 to FP16
      if (!tf32 && p.mathType == CUDNN_TENSOR_OP_MATH) continue;
      Choice<Algo> c;
      c.algo = p.algo;
      c.math = tf32 ? p.mathType : CUDNN_FMA_MATH;
      if (!ws_of(c.algo, c.math, &c.ws)) continue;
      cands.push_back({c, p.determinism == CUDNN_DETERMINISTIC});
    }
    for (const Cand& k : cands)  // timed: cuDNN's order is fastest first
      if ((k.det || timed) && k.c.ws <= kWorkspaceCap) return k.c;
    for (const Cand& k : cands)
      if (k.c.ws <= kWorkspaceCap) return k.c;
    if (!cands.empty()) {
      const Cand* best = &cands[0];
      for (const Cand& k : cands)
        if (k.c.ws < best->c.ws) best = &k;
      return best->c;
    }
    Choice<Algo> c;
    c.algo = fallback;
    c.math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    if (!ws_of(c.algo, c.math, &c.ws))
      fail(DP_ERR_DEVICE, std::string("conv2d on CUDA: cuDNN offers no usable ") + what + " algorithm");
    return c;
  }

  Plan choose(cudnnHandle_t h, bool tf32, bool bench) {
    const cudnnMathType_t query_math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    Plan plan;
    int max = 0, got = 0;

    DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, query_math));
    DP_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fperf(static_cast<size_t>(max > 0 ? max : 1));
    if (bench)
      DP_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, x_.d, w_.d, conv_.d, y_.d, max, &got, fperf.data()));
    else
      DP_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x_.d, w_.d, conv_.d, y_.d, max, &got, fperf.data()));
    plan.fwd = pick(
        fperf, got, tf32, bench,
        [&](cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math, size_t* ws) {
          if (cudnnSetConvolutionMathType(conv_.d, math) != CUDNN_STATUS_SUCCESS) return false;
          return cudnnGetConvolutionForwardWorkspaceSize(h, x_.d, w_.d, conv_.d, y_.d, algo, ws) == CUDNN_STATUS_SUCCESS;
        },
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, "forward");

    DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, query_math));
    max = got = 0;
    DP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> dperf(static_cast<size_t>(max > 0 ? max : 1));
    if (bench)
      DP_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, w_.d, y_.d, conv_.d, x_.d, max, &got, dperf.data()));
    else
      DP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_.d, y_.d, conv_.d, x_.d, max, &got, dperf.data()));
    plan.bwd_data = pick(
        dperf, got, tf32, bench,
        [&](cudnnConvolutionBwdDataAlgo_t algo, cudnnMathType_t math, size_t* ws) {
          if (cudnnSetConvolutionMathType(conv_.d, math) != CUDNN_STATUS_SUCCESS) return false;
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_.d, y_.d, conv_.d, x_.d, algo, ws) ==
                 CUDNN_STATUS_SUCCESS;
        },
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, "backward-data");

    DP_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.d, query_math));
    max = got = 0;
    DP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> wperf(static_cast<size_t>(max > 0 ? max : 1));
    if (bench)
      DP_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, x_.d, y_.d, conv_.d, w_.d, max, &got, wperf.data()));
    else
      DP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_.d, y_.d, conv_.d, w_.d, max, &got, wperf.data()));
    plan.bwd_filter = pick(
        wperf, got, tf32, bench,
        [&](cudnnConvolutionBwdFilterAlgo_t algo, cudnnMathType_t math, size_t* ws) {
          if (cudnnSetConvolutionMathType(conv_.d, math) != CUDNN_STATUS_SUCCESS) return false;
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_.d, y_.d, conv_.d, w_.d, algo, ws) ==
                 CUDNN_STATUS_SUCCESS;
        },
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, "backward-filter");
    return plan;
  }

  Conv2dAttrs a_;  // a copy: the layer's hyperparameters and inferred shapes
  TensorDesc x_, y_, yf_, b_;
  FilterDesc w_;
  ConvDesc conv_;
  int64_t n_ = -1;  // batch size x_/y_/plan_ are set for
  bool tf32_ = false, bench_ = false;
  int prec_ = -1;                          // precision x_/y_/w_/plan_ are set for
  int fwd_precision_ = DP_PRECISION_FP32;  // the last forward's: backward reads its 16-bit x and W
  Plan plan_;
  std::map<std::tuple<int64_t, bool, bool, int>, Plan> plans_;
  int graph_mode_ = 0;                                   // cudnn_graph_mode(): 0 legacy, 1 NCHW, 2 NHWC
  std::map<std::tuple<int64_t, bool, int>, Graphs> graphs_;  // (n, timed, precision)
  Graphs* graph_ = nullptr;                        // for n_, prec_ in 16 bits; null on the legacy path
};

}  // namespace

std::unique_ptr<CudaOp> make_cuda_conv2d(const Layer& layer) {
  const auto* a = dynamic_cast<const Conv2dAttrs*>(&layer);
  if (!a) return nullptr;
  return std::make_unique<CudaConv2d>(*a);
}

}  // namespace dp
