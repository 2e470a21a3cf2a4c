// torch.flatten(x, start_dim, end_dim) with dims counted over the batched
// tensor, negative ones from the end (as torch's); neither may be the batch
// dim.
#include <cstring>
#include <utility>

#include "layers/builtin.h"
#include "layers/flatten.h"
#include "layers/util.h"

namespace dp {

namespace {
class Flatten final : public Layer, public FlattenAttrs {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    const int rank = s.ndim + 1;  // with the batch dim
    int st = resolve_dim(start_, rank), en = resolve_dim(end_, rank);
    if (st < 1 || st >= rank || en < 1 || en >= rank || st > en)
      fail(DP_ERR_SHAPE, "flatten with start_dim " + std::to_string(start_) + " and end_dim " + std::to_string(end_) +
                             " does not fit input of shape [N] + " + s.str() + " (" + std::to_string(rank) +
                             " dims with the batch)");
    Shape o;
    for (int i = 1; i < st; ++i) o.push(s[i - 1]);
    int64_t m = 1;
    for (int i = st; i <= en; ++i) m *= s[i - 1];
    o.push(m);
    for (int i = en + 1; i < rank; ++i) o.push(s[i - 1]);
    out_ = o;
    return o;
  }

  void forward(const RunCtx&, LayerIO& io) const override {
    const Tensor& x = *io.in[0];
    io.out->resize(DP_F32, Shape::batched(x.shape()[0], out_));
    std::memcpy(io.out->f32(), x.f32(), x.bytes());
  }
  void backward(const RunCtx&, LayerIO& io) const override {
    if (!io.gin[0]) return;
    io.gin[0]->resize(DP_F32, io.in[0]->shape());
    std::memcpy(io.gin[0]->f32(), io.gout->f32(), io.gin[0]->bytes());
  }
};
}  // namespace

std::unique_ptr<Layer> make_flatten(Args& a) {
  auto l = std::make_unique<Flatten>();
  const int64_t most = DP_MAX_DIMS + 1;  // dims of the batched tensor
  l->start_ = a.integer("start_dim", 1, -most, most);
  l->end_ = a.integer("end_dim", -1, -most, most);
  for (const auto& [key, dim] : {std::pair{"start_dim", l->start_}, std::pair{"end_dim", l->end_}})
    if (dim == 0) fail(DP_ERR_MODEL, a.path_of(key) + ": expected a dim other than 0 (the batch), got 0");
  return l;
}

}  // namespace dp
