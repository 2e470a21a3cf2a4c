// MSE has no hyperparameters; this empty base marks the built-in loss, so the
// CUDA factory can tell it from a plugin's loss of the same name
// (dynamic_cast<const MseAttrs*>).
#pragma once

namespace dp {

struct MseAttrs {};

}  // namespace dp
