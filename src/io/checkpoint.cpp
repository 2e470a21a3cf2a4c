#include "io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "core/args.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace dp::io {

using nlohmann::json;

namespace {

const char* const kFormat = "dp-checkpoint-1";
const char* const kReserved[] = {"format",       "model",        "model_canonical", "group_step",
                                 "optimizer_type", "optimizer_steps", "loader_epoch", "loader_batch",
                                 "grad_scaler",  "loader_order", kDataCrc32,       kHeaderCrc32,
                                 "optimizer_config"};

std::vector<int64_t> dims(const Shape& s) { return std::vector<int64_t>(s.d, s.d + s.ndim); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string list(const std::vector<std::string>& names) {
  std::string r;
  const size_t show = 8;
  for (size_t i = 0; i < names.size() && i < show; ++i) r += (i ? ", " : "") + names[i];
  if (names.size() > show) r += " and " + std::to_string(names.size() - show) + " more";
  return r;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

void add_model_tensors(const Model& m, std::vector<StOut>& out) {
  const float* params = m.params().data();  // the newest values
  const float* buffers = m.buffers().data();
  for (const NamedTensor& p : m.param_info) out.push_back({p.name, "F32", dims(p.shape), params + p.offset});
  for (const NamedTensor& b : m.buffer_info) out.push_back({b.name, "F32", dims(b.shape), buffers + b.offset});
}

// The first element of v[0, n) training cannot continue from, or -1.
int64_t first_bad(const float* v, int64_t n, bool non_negative) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i]) || (non_negative && v[i] < 0)) return i;
  return -1;
}

std::string bad_text(float x) {
  return (std::isnan(x) ? std::string("NaN") : std::isinf(x) ? std::string(x < 0 ? "-inf" : "inf") : json(x).dump()) +
         (std::isfinite(x) ? " (must be >= 0)" : " (must be finite)");
}

// Copies tensor e of f into dst + nt.offset after checking it is nt's dtype
// and shape, and that training can continue from its values: each finite
// and, with non_negative (Adam's exp_avg_sq, a sum of squares), >= 0. A NaN
// or a negative second moment would load and turn the parameters into NaN at
// the next step.
void copy_tensor(const StFile& f, const StEntry& e, const NamedTensor& nt, const char* kind, float* dst,
                 bool non_negative = false) {
  std::string where = f.path + ": tensor '" + e.name + "'";
  if (e.dtype != "F32") fail(DP_ERR_MODEL, where + " has dtype " + e.dtype + ", the model's " + kind + " is F32");
  if (e.shape != dims(nt.shape))
    fail(DP_ERR_MODEL, where + " has shape " + shape_str(e.shape) + " in the file, the model's " + kind + " '" + nt.name +
                           "' has " + nt.shape.str());
  float* to = dst + nt.offset;
  std::memcpy(to, f.bytes(e), static_cast<size_t>(e.end - e.begin));
  const int64_t i = first_bad(to, static_cast<int64_t>((e.end - e.begin) / sizeof(float)), non_negative);
  if (i >= 0) fail(DP_ERR_IO, where + " element " + std::to_string(i) + " is " + bad_text(to[i]) + ": a damaged file");
}

// What a load will write, staged so that nothing changes until all of it fits.
struct Staged {
  std::vector<float> params, buffers;
  std::vector<std::vector<float>> opt_state;  // in Optimizer::state() order
  std::set<std::string> used;                 // names of the tensors read
};

void stage_model(const StFile& f, const Model& m, bool require_buffers, Staged& s) {
  s.params = m.params();  // entries a file lacks keep the newest values
  s.buffers = m.buffers();
  std::vector<std::string> missing;
  for (const NamedTensor& p : m.param_info) {
    const StEntry* e = f.find(p.name);
    if (!e) {
      missing.push_back(p.name);
      continue;
    }
    copy_tensor(f, *e, p, "parameter", s.params.data());
    s.used.insert(p.name);
  }
  if (!missing.empty())
    fail(DP_ERR_MODEL, f.path + ": missing parameter" + (missing.size() > 1 ? "s " : " ") + list(missing) +
                           " (the file has no tensor of that name)");
  for (const NamedTensor& b : m.buffer_info) {
    const StEntry* e = f.find(b.name);
    if (!e) {
      if (require_buffers) missing.push_back(b.name);
      continue;
    }
    copy_tensor(f, *e, b, "buffer", s.buffers.data());
    s.used.insert(b.name);
  }
  if (!missing.empty())
    fail(DP_ERR_MODEL, f.path + ": missing buffer" + (missing.size() > 1 ? "s " : " ") + list(missing));
}

// Every tensor of f must have been read, except num_batches_tracked (dp keeps
// none) and, with skip_optimizer, a checkpoint's optimizer state.
void check_all_used(const StFile& f, const Staged& s, bool skip_optimizer) {
  std::vector<std::string> extra;
  for (const StEntry& e : f.entries) {
    if (s.used.count(e.name)) continue;
    if (e.name == "num_batches_tracked" || ends_with(e.name, ".num_batches_tracked")) continue;
    if (skip_optimizer && starts_with(e.name, "optimizer.")) continue;
    extra.push_back(e.name);
  }
  if (!extra.empty())
    fail(DP_ERR_MODEL, f.path + ": tensor" + (extra.size() > 1 ? "s " : " ") + list(extra) +
                           (extra.size() > 1 ? " are" : " is") + " not in the model (no parameter or buffer of that name)");
}

const std::string* meta(const StFile& f, const char* key) {
  auto it = f.metadata.find(key);
  return it == f.metadata.end() ? nullptr : &it->second;
}

int64_t meta_int(const StFile& f, const char* key) {
  const std::string* v = meta(f, key);
  if (!v) fail(DP_ERR_IO, f.path + ": __metadata__ has no '" + key + "' (a damaged checkpoint)");
  bool ok = !v->empty() && v->size() <= 18 && std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!ok) fail(DP_ERR_IO, f.path + ": __metadata__ '" + key + "' must be a non-negative integer, got '" + *v + "'");
  return std::stoll(*v);
}

json parse_model_json(const std::string& text) { return json::parse(text, nullptr, true, true); }

// Where two models' canonical JSON (Model::canonical) first differ, as
// "/layers/3/p is 0.3 in the checkpoint, 0.5 here"; "" when they do not.
std::string first_difference(const json& saved, const json& ours, const std::string& at) {
  if (saved == ours) return "";
  if (saved.is_object() && ours.is_object()) {
    for (const char* key : {"type", "name"})  // a layer's: what it is before how it is set
      if (saved.contains(key) && ours.contains(key) && saved[key] != ours[key])
        return at + "/" + key + " is " + json_brief(saved[key]) + " in the checkpoint, " + json_brief(ours[key]) + " here";
    for (auto it = saved.begin(); it != saved.end(); ++it) {
      if (!ours.contains(it.key())) return at + "/" + it.key() + " is " + json_brief(*it) + " in the checkpoint, absent here";
      std::string d = first_difference(*it, ours[it.key()], at + "/" + it.key());
      if (!d.empty()) return d;
    }
    for (auto it = ours.begin(); it != ours.end(); ++it)
      if (!saved.contains(it.key())) return at + "/" + it.key() + " is absent in the checkpoint, " + json_brief(*it) + " here";
  }
  if (saved.is_array() && ours.is_array() && at == "/layers" && saved.size() != ours.size())
    return "the checkpoint's model has " + std::to_string(saved.size()) + " layers, this one " + std::to_string(ours.size());
  if (saved.is_array() && ours.is_array() && saved.size() == ours.size())
    for (size_t i = 0; i < saved.size(); ++i) {
      std::string d = first_difference(saved[i], ours[i], at + "/" + std::to_string(i));
      if (!d.empty()) return d;
    }
  return (at.empty() ? "/" : at) + " is " + json_brief(saved) + " in the checkpoint, " + json_brief(ours) + " here";
}

// The grad scaler's state (optim/grad_scaler.h), in PyTorch's
// GradScaler.state_dict() names, and the steps it skipped: written while a
// scaler is on (or has skipped steps), so that a resumed run scales exactly
// as the uninterrupted one. The scale is a float32, exact in JSON's double.
std::string scaler_record(const Optimizer& opt) {
  const GradScaler& s = opt.scaler;
  return json{{"enabled", s.enabled},
              {"scale", static_cast<double>(s.scale)},
              {"_growth_tracker", s.growth_tracker},
              {"skipped_steps", opt.skipped_steps},
              {"init_scale", static_cast<double>(s.init_scale)},
              {"growth_factor", s.growth_factor},
              {"backoff_factor", s.backoff_factor},
              {"growth_interval", s.growth_interval}}
      .dump();
}

struct ScalerState {
  float scale = 0;
  int64_t growth_tracker = 0, skipped_steps = 0;
};

// Reads what scaler_record() wrote: the state; the settings are the
// optimizer's own (as its learning rate is), so they are not read back.
ScalerState read_scaler_record(const StFile& f, const std::string& text) {
  const std::string where = f.path + ": __metadata__ 'grad_scaler'";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(DP_ERR_IO, where + " is not JSON: " + e.what());
  }
  auto number = [&](const char* key) -> const json& {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number())
      fail(DP_ERR_IO, where + " has no number '" + key + "' (a damaged checkpoint)");
    return j[key];
  };
  auto count = [&](const char* key) {
    const json& v = number(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(DP_ERR_IO, where + ": '" + key + "' must be a non-negative integer, got " + json_brief(v));
    return v.get<int64_t>();
  };
  ScalerState st;
  const double scale = number("scale").get<double>();
  st.scale = static_cast<float>(scale);
  if (!(scale > 0) || !std::isfinite(st.scale) || static_cast<double>(st.scale) != scale)
    fail(DP_ERR_IO, where + ": 'scale' must be a float32 number > 0, got " + json_brief(j["scale"]));
  st.growth_tracker = count("_growth_tracker");
  st.skipped_steps = count("skipped_steps");
  return st;
}

}  // namespace

void check_values(const float* v, const std::vector<NamedTensor>& info, bool non_negative, dp_status status,
                  const std::string& what, const std::string& why) {
  for (const NamedTensor& t : info) {
    const int64_t i = first_bad(v + t.offset, t.shape.numel(), non_negative);
    if (i >= 0)
      fail(status, what + ": tensor '" + t.name + "' element " + std::to_string(i) + " is " + bad_text(v[t.offset + i]) + why);
  }
}

void check_state_values(const float* v, const std::vector<NamedTensor>& info, const std::string& state, dp_status status,
                        const std::string& what, const std::string& why) {
  check_values(v, info, ends_with(state, "exp_avg_sq"), status, what, why);
}

// What a save writes must load: refused before anything is written.
static void check_saved(const Model& m, Optimizer* opt, const std::string& path) {
  const std::string why = ": it would not load (dp loads only values training can continue from); nothing was written";
  check_values(m.params().data(), m.param_info, false, DP_ERR_NUMERIC, path + ": parameter", why);
  check_values(m.buffers().data(), m.buffer_info, false, DP_ERR_NUMERIC, path + ": buffer", why);
  if (opt)
    for (const auto& st : opt->state())
      check_state_values(st.second->data(), m.param_info, st.first, DP_ERR_NUMERIC, path + ": optimizer state '" + st.first + "'",
                         why);
}

void save_weights(const Model& model, const std::string& path, bool with_batch_counts) {
  check_saved(model, nullptr, path);
  std::vector<StOut> tensors;
  add_model_tensors(model, tensors);
  static const int64_t kNoCount = 0;  // PyTorch's count; dp keeps none (momentum=None would use it)
  std::vector<std::string> counts;    // the names, kept alive until written
  if (with_batch_counts)
    for (const NamedTensor& b : model.buffer_info)
      if (b.name == "running_var" || ends_with(b.name, ".running_var"))
        counts.push_back(b.name.substr(0, b.name.size() - 11) + "num_batches_tracked");
  for (const std::string& name : counts) tensors.push_back({name, "I64", {}, &kNoCount});
  write_safetensors(path, tensors, {});
}

void load_weights(Model& model, const std::string& path) {
  StFile f = read_safetensors(path);
  Staged s;
  stage_model(f, model, false, s);
  // A checkpoint loads as weights: its optimizer state is not the model's.
  const std::string* format = meta(f, "format");
  check_all_used(f, s, format && *format == kFormat);
  std::copy(s.params.begin(), s.params.end(), model.mutable_params().begin());
  std::copy(s.buffers.begin(), s.buffers.end(), model.mutable_buffers().begin());
}

void save_checkpoint(const std::string& path, Group& group, Optimizer* opt, const LoaderPosition* loader,
                     const char* user_metadata) {
  const Model& m = group.model();
  if (opt) group.optimizer_to_host(*opt);
  std::vector<std::pair<std::string, std::string>> metadata = {
      {"format", kFormat},
      {"model", m.description},
      {"model_canonical", m.canonical},
      {"group_step", std::to_string(group.step())}};
  if (opt) {
    metadata.push_back({"optimizer_type", opt->type()});
    metadata.push_back({"optimizer_steps", std::to_string(opt->steps)});
    metadata.push_back({"optimizer_config", opt->config});
    if (opt->scaler.enabled || opt->skipped_steps > 0) metadata.push_back({"grad_scaler", scaler_record(*opt)});
  }
  if (loader) {
    metadata.push_back({"loader_epoch", std::to_string(loader->epoch)});
    metadata.push_back({"loader_batch", std::to_string(loader->batch)});
    if (!loader->order.empty()) metadata.push_back({"loader_order", loader->order});
  }
  if (user_metadata) {
    // As every JSON dp reads: a key given twice is an error, not the last one kept.
    const json user = parse_config(user_metadata, "user_metadata_json");
    if (!user.is_object()) fail(DP_ERR_INVALID_ARGUMENT, "user_metadata_json must be a JSON object, got " + json_brief(user));
    for (auto it = user.begin(); it != user.end(); ++it) {
      for (const char* r : kReserved)
        if (it.key() == r)
          fail(DP_ERR_INVALID_ARGUMENT, "user_metadata_json: key '" + it.key() + "' is reserved for dp's own metadata");
      metadata.push_back({it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump()});
    }
  }

  std::vector<StOut> tensors;
  add_model_tensors(m, tensors);
  if (opt) {
    for (const auto& st : opt->state()) {
      if (static_cast<int64_t>(st.second->size()) != m.num_params())
        fail(DP_ERR_INTERNAL, "optimizer state '" + st.first + "' has " + std::to_string(st.second->size()) +
                                  " floats, the model " + std::to_string(m.num_params()) + " parameters");
      for (const NamedTensor& p : m.param_info)
        tensors.push_back({"optimizer." + st.first + "." + p.name, "F32", dims(p.shape), st.second->data() + p.offset});
    }
  }
  check_saved(m, opt, path);  // after the sizes are known to match
  metadata.push_back({kDataCrc32, st_data_crc32(tensors)});  // verified by read_safetensors
  metadata.push_back({kHeaderCrc32, st_header_crc32(tensors, metadata)});  // last: it covers the rest
  write_safetensors(path, tensors, metadata);
}

void load_checkpoint(const std::string& path, Group& group, Optimizer* opt,
                     const std::function<void(const LoaderPosition&)>* seek, const Registry* registry) {
  Model& m = group.model();
  StFile f = read_safetensors(path);

  const std::string* format = meta(f, "format");
  if (!format || *format != kFormat)
    fail(DP_ERR_IO, path + ": not a dp checkpoint (__metadata__ format is " + (format ? "'" + *format + "'" : std::string("missing")) +
                        ", expected '" + kFormat + "'); model weights load with dp_model_load_safetensors");
  // The same model: what the JSONs mean (Model::canonical: free text,
  // spacing and defaults written out or left out may differ), as this dp
  // reads them; else as the checkpoint recorded it; for a checkpoint older
  // than that record whose JSON this dp cannot read, the JSON itself.
  const std::string* saved_model = meta(f, "model");
  if (!saved_model) fail(DP_ERR_IO, path + ": __metadata__ has no 'model' (a damaged checkpoint)");
  json saved, ours;
  try {
    saved = parse_model_json(*saved_model);
  } catch (const json::exception& e) {
    fail(DP_ERR_IO, path + ": __metadata__ 'model' is not JSON: " + e.what());
  }
  std::string saved_canonical;
  bool canonical = false;
  if (registry) {
    try {
      saved_canonical = Model::canonical_of(*registry, *saved_model);
      canonical = true;
    } catch (const Error&) {  // a type this context lacks, a key this dp refuses: the record below
    }
  }
  if (!canonical) {
    if (const std::string* recorded = meta(f, "model_canonical")) {
      saved_canonical = *recorded;
      canonical = true;
    }
  }
  if (canonical) {
    try {
      saved = parse_model_json(saved_canonical);
    } catch (const json::exception& e) {
      fail(DP_ERR_IO, path + ": __metadata__ 'model_canonical' is not JSON: " + e.what());
    }
  }
  try {
    ours = parse_model_json(canonical ? m.canonical : m.description);
  } catch (const json::exception& e) {
    fail(DP_ERR_INTERNAL, std::string("the group's model JSON does not parse: ") + e.what());
  }
  if (saved != ours)
    fail(DP_ERR_MODEL, path + ": checkpoint was written for another model (" +
                           (canonical ? first_difference(saved, ours, "")
                                      : "its __metadata__ 'model' differs from this group's model JSON") +
                           ")");
  const int64_t group_step = meta_int(f, "group_step");

  int64_t opt_steps = 0;
  // A checkpoint without a scaler's record: no step was skipped, and a
  // scaler (if this optimizer has one) starts afresh, at its init_scale.
  ScalerState scaler;
  if (opt) {
    scaler.scale = opt->scaler.init_scale;
    const std::string* type = meta(f, "optimizer_type");
    if (!type) fail(DP_ERR_MODEL, path + ": the checkpoint holds no optimizer state (it was saved without an optimizer)");
    if (*type != opt->type())
      fail(DP_ERR_MODEL, path + ": checkpoint was written for a '" + *type + "' optimizer, this one is '" + opt->type() + "'");
    if (const std::string* rec = meta(f, "optimizer_config")) {  // older checkpoints lack it
      // As this dp reads it (defaults it has and the writer lacked filled in), else as recorded.
      std::string saved_text = *rec;
      try {
        saved_text = Optimizer::from_json(*rec, 0)->config;
      } catch (const Error&) {
      }
      json saved_config = json::parse(saved_text, nullptr, false), our_config = json::parse(opt->config, nullptr, false);
      if (!saved_config.is_object()) fail(DP_ERR_IO, path + ": __metadata__ 'optimizer_config' is not a JSON object: " + *rec);
      saved_config.erase("lr"), our_config.erase("lr");  // the learning rate is the loading optimizer's
      if (saved_config != our_config)
        fail(DP_ERR_MODEL, path + ": checkpoint was written for an optimizer set otherwise (" +
                               first_difference(saved_config, our_config, "") +
                               "); its state means something else under other settings: make the optimizer as saved "
                               "(the learning rate may differ)");
    }
    opt_steps = meta_int(f, "optimizer_steps");
    if (const std::string* rec = meta(f, "grad_scaler")) scaler = read_scaler_record(f, *rec);
  }
  LoaderPosition pos;
  if (seek) {
    if (!meta(f, "loader_epoch") || !meta(f, "loader_batch"))
      fail(DP_ERR_MODEL, path + ": the checkpoint holds no loader position (it was saved without a loader)");
    pos.epoch = meta_int(f, "loader_epoch");
    pos.batch = meta_int(f, "loader_batch");
    if (const std::string* order = meta(f, "loader_order")) pos.order = *order;
  }

  Staged s;
  stage_model(f, m, true, s);
  std::vector<std::pair<std::string, std::vector<float>*>> state;
  if (opt) {
    state = opt->state();
    std::vector<std::string> missing;
    for (const auto& st : state) {
      s.opt_state.emplace_back(st.second->size());
      if (static_cast<int64_t>(st.second->size()) != m.num_params())
        fail(DP_ERR_INTERNAL, "optimizer state '" + st.first + "' does not match the model's parameters");
      for (const NamedTensor& p : m.param_info) {
        std::string name = "optimizer." + st.first + "." + p.name;
        const StEntry* e = f.find(name);
        if (!e) {
          missing.push_back(name);
          continue;
        }
        copy_tensor(f, *e, p, "optimizer state", s.opt_state.back().data(), ends_with(st.first, "exp_avg_sq"));
        s.used.insert(name);
      }
    }
    if (!missing.empty())
      fail(DP_ERR_MODEL, path + ": missing optimizer state " + list(missing) + " (saved with other optimizer settings?)");
  }
  check_all_used(f, s, opt == nullptr);

  // All checked: the loader first (the one step that can still fail), then
  // copies that cannot.
  if (seek) (*seek)(pos);
  std::copy(s.params.begin(), s.params.end(), m.mutable_params().begin());
  std::copy(s.buffers.begin(), s.buffers.end(), m.mutable_buffers().begin());
  for (size_t i = 0; i < state.size(); ++i) std::copy(s.opt_state[i].begin(), s.opt_state[i].end(), state[i].second->begin());
  if (opt) {
    opt->steps = opt_steps;
    opt->scaler.scale = scaler.scale;
    // Steps in a row without inf/NaN, counted against the saving run's
    // growth_interval: against a shorter one here, the scale grows at the
    // next such step (a tracker at or past the interval would never reach it).
    opt->scaler.growth_tracker = std::min(scaler.growth_tracker, opt->scaler.growth_interval - 1);
    opt->skipped_steps = scaler.skipped_steps;
    ++opt->host_version;
  }
  group.set_step(group_step);
}

std::string read_metadata(const std::string& path) {
  StFile f = read_safetensors(path, false);
  json out = json::object();
  for (const auto& kv : f.metadata) out[kv.first] = kv.second;
  return out.dump();
}

}  // namespace dp::io
