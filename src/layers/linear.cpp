// y = x W^T + b over the last dim of the input.
#include <algorithm>
#include <cmath>

#include "core/blas.h"
#include "layers/builtin.h"
#include "layers/linear.h"
#include "layers/util.h"

namespace dp {

namespace {
class Linear final : public Layer, public LinearAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    if (s.ndim < 1) fail(DP_ERR_SHAPE, "linear expects input of shape [..., in_features], got " + s.str());
    int64_t f = s[s.ndim - 1];
    if (in_ > 0 && f != in_)
      fail(DP_ERR_SHAPE, "linear expects input of shape [..., " + std::to_string(in_) + "] (in_features), got " + s.str());
    in_ = f;
    rows_per_sample_ = s.numel() / (f > 0 ? f : 1);
    Shape o = s;
    o[o.ndim - 1] = out_;
    return o;
  }
  std::vector<TensorSpec> params() const override {
    float bound = in_ > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_))) : 0.f;
    std::vector<TensorSpec> p{{"weight", Shape{out_, in_}, {Init::kUniform, bound}}};
    if (bias_) p.push_back({"bias", Shape{out_}, {Init::kUniform, bound}});
    return p;
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    int64_t n = x.shape()[0], R = n * rows_per_sample_;
    Shape os = x.shape();
    os[os.ndim - 1] = out_;
    io.out->resize(DP_F32, os);
    float* y = io.out->f32();
    const float* W = io.params;
    // y starts as the bias and the product is added to it (beta = 1), as
    // PyTorch's addmm: one pass over y, where a product into zeros (the
    // BLAS's own zeroing pass for beta = 0) then a bias pass were two.
    if (bias_) {
      const float* b = W + out_ * in_;
      parallel_for(ctx.pool, R, 1 + kElemGrain / (out_ + 1), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) std::copy(b, b + out_, y + r * out_);
      });
    }
    gemm(ctx.pool, false, true, R, out_, in_, 1.f, x.f32(), in_, W, in_, bias_ ? 1.f : 0.f, y, out_);
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    const float* g = io.gout->f32();
    int64_t n = x.shape()[0], R = n * rows_per_sample_;
    const float* W = io.params;
    float* dW = io.grads;
    if (io.gin[0]) {
      io.gin[0]->resize(DP_F32, x.shape());
      gemm(ctx.pool, false, false, R, in_, out_, 1.f, g, out_, W, in_, 0.f, io.gin[0]->f32(), in_);
    }
    // Added to the gradients, or with io.assign_grads written over them
    // (beta = 0, and the bias's sum starts from its first row).
    const bool assign = io.assign_grads;
    if (bias_) {  // first: it ends the parameters, the first piece reported final
      float* db = dW + out_ * in_;
      parallel_for(ctx.pool, out_, 64, [&](int64_t lo, int64_t hi) {
        if (assign) std::fill(db + lo, db + hi, 0.f);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t j = lo; j < hi; ++j) db[j] += g[r * out_ + j];
      });
    }
    // dW in blocks of rows, the last first, each reported final as it ends
    // (grad_splits), when someone listens: a large layer's reduction starts
    // while it computes. (The blocks are the same whatever the buckets, so any
    // bucket size sums the same numbers.)
    const int64_t block = io.grads_final ? split_rows() : out_;
    for (int64_t o0 = (out_ - 1) / block * block; o0 >= 0; o0 -= block) {
      const int64_t rows = std::min(block, out_ - o0);
      gemm(ctx.pool, true, false, rows, in_, R, 1.f, g + o0, out_, x.f32(), in_, assign ? 0.f : 1.f, dW + o0 * in_, in_);
      if (o0 > 0 && io.grads_final) io.grads_final(io.final_user, o0 * in_);
    }
  }

  bool assigns_grads() const override { return true; }

  std::vector<int64_t> grad_splits() const override {
    std::vector<int64_t> s;
    for (int64_t o = split_rows(); o < out_; o += split_rows()) s.push_back(o * in_);
    return s;
  }

 private:
  // Rows of W per block of the weight gradient: about 64 Ki floats (256 KB),
  // and at least 64 rows (each block is a product that reads all of x: thin
  // ones cost more than they overlap); all of W in one when that leaves fewer
  // than two blocks.
  int64_t split_rows() const {
    constexpr int64_t kBlockFloats = 64 * 1024, kMinRows = 64;
    const int64_t rows = std::max(kMinRows, (kBlockFloats + in_ - 1) / in_);
    return out_ < 2 * rows ? out_ : rows;
  }
};
}  // namespace

std::unique_ptr<Layer> make_linear(Args& a) {
  auto l = std::make_unique<Linear>();
  l->in_ = a.integer("in_features", 0, 1);
  l->out_ = a.required_integer("out_features", 1);
  l->bias_ = a.boolean("bias", true);
  return l;
}

}  // namespace dp
