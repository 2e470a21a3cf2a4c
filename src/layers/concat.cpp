// torch.cat along `dim` (over the batched tensor; not the batch).
#include <cstring>

#include "layers/builtin.h"
#include "layers/concat.h"
#include "layers/util.h"

namespace dp {

namespace {
class Concat final : public Layer, public ConcatAttrs {
 public:
  std::pair<int, int> arity() const override { return {2, -1}; }

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s0 = in[0];
    const int rank = s0.ndim + 1;
    int d = resolve_dim(dim_, rank);
    if (d < 1 || d >= rank)
      fail(DP_ERR_SHAPE, "concat dim " + std::to_string(dim_) + " does not fit inputs of shapes [N] + " +
                             shapes_str(in) + (d == 0 ? " (dim 0 is the batch)" : ""));
    Shape o = s0;
    o[d - 1] = 0;
    for (const Shape& s : in) {
      bool ok = s.ndim == s0.ndim;
      for (int i = 0; ok && i < s.ndim; ++i)
        if (i != d - 1 && s[i] != s0[i]) ok = false;
      if (!ok)
        fail(DP_ERR_SHAPE, "inputs have shapes " + shapes_str(in) + "; concat along dim " + std::to_string(dim_) +
                               " needs all other dims equal");
      o[d - 1] += s[d - 1];
    }
    outer_ = 1;
    for (int i = 1; i < d; ++i) outer_ *= s0[i - 1];
    chunk_.clear();
    total_ = 0;
    for (const Shape& s : in) {
      int64_t c = 1;
      for (int i = d; i <= s.ndim; ++i) c *= s[i - 1];
      chunk_.push_back(c);
      total_ += c;
    }
    return o;
  }

  void forward(const RunCtx& ctx, LayerIO& io) const override {
    const int64_t n = io.in[0]->shape()[0];
    Shape os = io.in[0]->shape();
    int d = resolve_dim(dim_, os.ndim);
    os[d] = 0;
    for (const Tensor* t : io.in) os[d] += t->shape()[d];
    io.out->resize(DP_F32, os);
    float* y = io.out->f32();
    parallel_for(ctx.pool, n * outer_, 1 + kElemGrain / (total_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l) {
        float* dst = y + l * total_;
        for (size_t k = 0; k < io.in.size(); ++k) {
          std::memcpy(dst, io.in[k]->f32() + l * chunk_[k], sizeof(float) * chunk_[k]);
          dst += chunk_[k];
        }
      }
    });
  }

  void backward(const RunCtx& ctx, LayerIO& io) const override {
    const int64_t n = io.gout->shape()[0];
    for (size_t k = 0; k < io.gin.size(); ++k)
      if (io.gin[k]) io.gin[k]->resize(DP_F32, io.in[k]->shape());
    const float* g = io.gout->f32();
    parallel_for(ctx.pool, n * outer_, 1 + kElemGrain / (total_ + 1), [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l) {
        const float* src = g + l * total_;
        for (size_t k = 0; k < io.gin.size(); ++k) {
          if (io.gin[k]) std::memcpy(io.gin[k]->f32() + l * chunk_[k], src, sizeof(float) * chunk_[k]);
          src += chunk_[k];
        }
      }
    });
  }
};
}  // namespace

std::unique_ptr<Layer> make_concat(Args& a) {
  auto l = std::make_unique<Concat>();
  l->dim_ = a.integer("dim", 1, -static_cast<int64_t>(DP_MAX_DIMS) - 1);
  if (l->dim_ == 0) fail(DP_ERR_MODEL, a.path_of("dim") + ": expected a dim other than 0 (the batch), got 0");
  return l;
}

}  // namespace dp
