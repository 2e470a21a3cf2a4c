// Model weights and training checkpoints as safetensors files (see
// io/safetensors.h for the format).
//
// Weights: parameters and buffers by their state_dict names ("0.weight",
// "1.running_mean"), float32, as PyTorch's
// safetensors.torch.save_file(model.state_dict()) writes them.
//
// Checkpoints ("dp-checkpoint-1"): the same tensors, plus the optimizer's
// state as "optimizer.<state name>.<parameter name>" ("optimizer.exp_avg.0.weight"),
// and in __metadata__ (strings): format, model (the model's JSON text),
// group_step, optimizer_type, optimizer_steps, optimizer_config (what the
// optimizer's JSON means, defaults filled in; a load compares all of it but
// lr), loader_epoch, loader_batch (the last five when an optimizer / a loader
// was saved), grad_scaler (JSON:
// the grad scaler's scale, _growth_tracker and skipped_steps, with its
// settings; while one is on or has skipped steps), data_crc32 (the CRC-32
// of the tensor data, io/safetensors.h; verified at load when present: older
// checkpoints lack it), header_crc32 (the CRC-32 of the tensors' names,
// dtypes and shapes and of every other metadata key and value, the caller's
// too; verified when present), plus the caller's keys.
// A checkpoint without grad_scaler loads as one of a run without skipped
// steps: an optimizer's grad scaler starts afresh, at its init_scale. The
// scaler's settings are the loading optimizer's own (as its learning rate
// is); a growth tracker saved under a longer growth_interval is cut to this
// one's, less one (the scale grows at the next step without inf/NaN).
//
// Loading validates the whole file against the model first and changes
// nothing unless all of it fits. Errors: DP_ERR_IO for a file that is
// unreadable or not valid safetensors (or a checkpoint with broken metadata),
// whose data or header does not match its data_crc32 or header_crc32, or with a value no run can
// continue from (weights and checkpoints alike: a NaN or infinite parameter,
// buffer or optimizer state, a negative exp_avg_sq; the tensor and element named);
// DP_ERR_MODEL for a valid file that does not fit (a missing or extra tensor,
// a shape or dtype that differs, another model, another optimizer type).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "group/group.h"
#include "model/model.h"
#include "optim/optimizer.h"

namespace dp::io {

// Values training can continue from, the rule every load applies: each finite
// and, with non_negative (Adam's exp_avg_sq), >= 0. Checks the tensors of
// `info` laid out in v; throws `status` with "<what>: tensor '<name>' element
// <i> is NaN (must be finite)<why>" for the first value that is not.
void check_values(const float* v, const std::vector<NamedTensor>& info, bool non_negative, dp_status status,
                  const std::string& what, const std::string& why);
// The same for an optimizer state named `state` ("exp_avg_sq": non-negative).
void check_state_values(const float* v, const std::vector<NamedTensor>& info, const std::string& state, dp_status status,
                        const std::string& what, const std::string& why);

// with_batch_counts: a num_batches_tracked (int64 0) beside each
// running_var, for PyTorch's strict load (dp_model_save_weights).
void save_weights(const Model& model, const std::string& path, bool with_batch_counts = false);
void load_weights(Model& model, const std::string& path);

struct LoaderPosition {
  int64_t epoch = 0, batch = 0;
  // What fixes which samples a position means (a JSON object's text: batch size, shuffle, seed,
  // drop_last, samples); saved as __metadata__ "loader_order", empty in older checkpoints.
  std::string order;
};

// user_metadata: a JSON object's text, or null. loader: the position to
// record, or null.
void save_checkpoint(const std::string& path, Group& group, Optimizer* opt, const LoaderPosition* loader,
                     const char* user_metadata);

// Restores a checkpoint into group (its model), opt (may be null) and, when
// seek is given, a loader: seek is called with the saved position after all
// validation and before anything else changes; if it throws, nothing has
// changed. The checkpoint must be for the same model: its model JSON read
// with `registry` (the types the group's model was built with) must mean
// what the group's does (Model::canonical); without a registry, or when
// this dp cannot read that JSON, the canonical text the checkpoint recorded
// is compared, and for a checkpoint older than that record, the JSON itself.
void load_checkpoint(const std::string& path, Group& group, Optimizer* opt,
                     const std::function<void(const LoaderPosition&)>* seek, const Registry* registry = nullptr);

// The __metadata__ of any safetensors file, as a JSON object's text.
std::string read_metadata(const std::string& path);

}  // namespace dp::io
