// Weights and checkpoints through the C ABI: the safetensors format (written
// exactly, read strictly), round trips, exact resume of training, every kind
// of damaged or mismatched file (a clear error, nothing changed), atomic
// writes, and a file written by PyTorch.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zlib.h>

#include "../api_util.h"

#ifndef DP_IO_DIR
#error "DP_IO_DIR must name tests/io"
#endif

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// linear, batch norm, relu, dropout, linear: parameters, running statistics
// and dropout masks all take part.
const char* kNet = R"({"seed": 3, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 8}, {"type": "batch_norm"}, {"type": "relu"},
             {"type": "dropout", "p": 0.3}, {"type": "linear", "out_features": 3}],
  "loss": {"type": "cross_entropy"}})";
// The same architecture from another seed: another model for checkpoints.
const char* kNetSeed4 = R"({"seed": 4, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 8}, {"type": "batch_norm"}, {"type": "relu"},
             {"type": "dropout", "p": 0.3}, {"type": "linear", "out_features": 3}],
  "loss": {"type": "cross_entropy"}})";
const char* kWide = R"({"seed": 3, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 9}, {"type": "linear", "out_features": 3}],
  "loss": {"type": "cross_entropy"}})";

const char* kAdam = R"({"type": "adam", "lr": 0.01})";
const char* kSgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";

// A fresh directory under /tmp, removed with everything in it.
struct TmpDir {
  std::string path;
  TmpDir() {
    char tmpl[] = "/tmp/dp_test_io_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

uint64_t le64(const std::string& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  return n;
}

std::string le64_bytes(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file split into its header JSON and data buffer, to damage
// and reassemble.
struct StParts {
  ojson header;
  std::string data;
};

StParts split(const std::string& bytes) {
  uint64_t n = le64(bytes);
  StParts p;
  p.header = ojson::parse(bytes.substr(8, n));
  p.data = bytes.substr(8 + n);
  return p;
}

// __metadata__ "header_crc32" as dp computes it (io/safetensors.h), written
// here from its description: zlib's CRC-32 over, for each tensor in name
// order, the fields T, name, dtype, shape (dims joined by ','), begin, end;
// then for each metadata key but header_crc32 in key order, M, key, value;
// each field as <decimal length>:<bytes>; 8 lowercase hex digits.
std::string header_crc32(const ojson& header) {
  std::map<std::string, std::vector<std::string>> tensors;
  std::map<std::string, std::string> meta;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it.value().begin(); m != it.value().end(); ++m)
        if (m.key() != "header_crc32") meta[m.key()] = m.value().get<std::string>();
      continue;
    }
    std::string dims;
    for (const auto& d : it.value()["shape"]) dims += (dims.empty() ? "" : ",") + std::to_string(d.get<int64_t>());
    const auto& off = it.value()["data_offsets"];
    tensors[it.key()] = {it.value()["dtype"].get<std::string>(), dims, std::to_string(off[0].get<uint64_t>()),
                         std::to_string(off[1].get<uint64_t>())};
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  auto field = [&crc](const std::string& f) {
    const std::string bytes = std::to_string(f.size()) + ":" + f;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
  };
  for (const auto& t : tensors) {
    field("T");
    field(t.first);
    for (const auto& f : t.second) field(f);
  }
  for (const auto& m : meta) field("M"), field(m.first), field(m.second);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

// The bytes of a file with this header and data, as written (header_crc32
// not recomputed: an edit is a corruption).
std::string join_raw(const ojson& header, const std::string& data) {
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  return le64_bytes(h.size()) + h + data;
}

// The same, as dp would write an edited header: a header_crc32 it holds is
// recomputed, so that the checks behind the checksum are what a test meets.
std::string join(ojson header, const std::string& data) {
  if (header.contains("__metadata__") && header["__metadata__"].contains("header_crc32"))
    header["__metadata__"]["header_crc32"] = header_crc32(header);
  return join_raw(header, data);
}

// Builds a file tensor by tensor, contiguous, from raw bytes.
struct StBuilder {
  ojson header = ojson::object();
  std::string data;
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const void* p, size_t bytes) {
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + bytes}}};
    data.append(static_cast<const char*>(p), bytes);
  }
  std::string bytes() const { return join(header, data); }
};

std::vector<float> buffers_of(const dp_model* m) {
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_buffers(m, &n));
  std::vector<float> b(static_cast<size_t>(n));
  if (n) DP_REQUIRE_OK(dp_model_copy_buffers(m, b.data(), n));
  return b;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

json metadata_of(const std::string& path) {
  char* text = nullptr;
  DP_REQUIRE_OK(dp_checkpoint_metadata(path.c_str(), &text));
  REQUIRE(text != nullptr);
  json j = json::parse(text);
  dp_free(text);
  return j;
}

// A model, its group over two devices and an optimizer.
struct Trainer {
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  dp_group* g = nullptr;
  dp_optimizer* opt = nullptr;
  Trainer(const char* model_json, const char* opt_json, const char* devices = "cpu:0,cpu:1") {
    DP_REQUIRE_OK(dp_context_create(&ctx));
    DP_REQUIRE_OK(dp_model_from_json(ctx, model_json, &m));
    DP_REQUIRE_OK(dp_group_create(m, devices, &g));
    if (opt_json) DP_REQUIRE_OK(dp_optimizer_create(g, opt_json, &opt));
  }
  ~Trainer() {
    dp_optimizer_destroy(opt);
    dp_group_destroy(g);
    dp_model_destroy(m);
    dp_context_destroy(ctx);
  }
  // Training step `step` on its own deterministic batch of 10 rows.
  void train(int step) {
    TestRng rng(100 + step);
    std::vector<float> x(10 * 6);
    for (float& v : x) v = rng.uniform(-2, 2);
    std::vector<int64_t> t(10);
    for (auto& v : t) v = rng.next() % 3;
    dp_tensor* xt = make_f32(ctx, x, {10, 6});
    dp_tensor* tt = make_i64(ctx, t, {10});
    float loss = 0;
    DP_REQUIRE_OK(dp_group_train_step(g, opt, xt, tt, &loss));
    dp_tensor_destroy(xt);
    dp_tensor_destroy(tt);
  }
  std::vector<float> params() const { return params_of(m); }
  std::vector<float> buffers() const { return buffers_of(m); }
};

// Expects `call` to fail with `status` and a message holding every part,
// leaving the trainer's parameters and buffers exactly as they were.
void rejects(Trainer& tr, const std::function<dp_status()>& call, dp_status status, std::vector<std::string> parts) {
  auto params = tr.params(), buffers = tr.buffers();
  dp_status s = call();
  std::string msg = dp_last_error();
  INFO("message: " << msg);
  CHECK(std::string(dp_status_name(s)) == dp_status_name(status));
  for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "missing '" << p << "'");
  CHECK(bitwise_equal(tr.params(), params));
  CHECK(bitwise_equal(tr.buffers(), buffers));
}

}  // namespace

TEST_CASE("weights: save writes the safetensors format exactly and loads back bitwise") {
  TmpDir dir;
  Trainer a(kNet, kSgd), b(kNetSeed4, nullptr);
  a.train(0);  // running statistics move off their initial 0 / 1
  std::string path = dir / "model.safetensors";
  DP_REQUIRE_OK(dp_model_save_safetensors(a.m, path.c_str()));
  CHECK(dir.files() == std::vector<std::string>{"model.safetensors"});

  std::string bytes = read_bytes(path);
  uint64_t n = le64(bytes);
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= bytes.size());
  json h = json::parse(bytes.substr(8, n));
  auto expect = [&](const std::string& name, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
    CAPTURE(name);
    REQUIRE(h.contains(name));
    CHECK(h[name]["dtype"] == "F32");
    CHECK(h[name]["shape"].get<std::vector<int64_t>>() == shape);
    CHECK(h[name]["data_offsets"].get<std::vector<uint64_t>>() == std::vector<uint64_t>{begin, end});
  };
  // Parameters in declaration order, then buffers, contiguous.
  expect("0.weight", {8, 6}, 0, 192);
  expect("0.bias", {8}, 192, 224);
  expect("1.weight", {8}, 224, 256);
  expect("1.bias", {8}, 256, 288);
  expect("4.weight", {3, 8}, 288, 384);
  expect("4.bias", {3}, 384, 396);
  expect("1.running_mean", {8}, 396, 428);
  expect("1.running_var", {8}, 428, 460);
  CHECK(h.size() == 8);
  CHECK(bytes.size() == 8 + n + 460);
  auto params = a.params(), buffers = a.buffers();
  CHECK(std::memcmp(bytes.data() + 8 + n, params.data(), 396) == 0);  // little-endian floats, row-major
  CHECK(std::memcmp(bytes.data() + 8 + n + 396, buffers.data(), 64) == 0);

  CHECK(!bitwise_equal(b.params(), params));
  DP_REQUIRE_OK(dp_model_load_safetensors(b.m, path.c_str()));
  CHECK(bitwise_equal(b.params(), params));
  CHECK(bitwise_equal(b.buffers(), buffers));
}

TEST_CASE("weights for PyTorch: state_dict's keys, num_batches_tracked a 0-d int64 0; dp loads them back") {
  TmpDir dir;
  Trainer a(kNet, kSgd), b(kNetSeed4, nullptr);
  a.train(0);
  const std::string path = dir / "torch.safetensors";
  CHECK(dp_model_save_weights(nullptr, path.c_str()) == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(dp_model_save_weights(a.m, path.c_str()));
  CHECK(dir.files() == std::vector<std::string>{"torch.safetensors"});
  const std::string bytes = read_bytes(path);
  const uint64_t n = le64(bytes);
  const json h = json::parse(bytes.substr(8, n));
  CHECK(h.size() == 9);  // the 8 of dp_model_save_safetensors, and the batch norm's count
  REQUIRE(h.contains("1.num_batches_tracked"));
  CHECK(h["1.num_batches_tracked"]["dtype"] == "I64");
  CHECK(h["1.num_batches_tracked"]["shape"] == json::array());
  const auto at = h["1.num_batches_tracked"]["data_offsets"].get<std::vector<uint64_t>>();
  REQUIRE(at[1] - at[0] == 8);
  CHECK(bytes.substr(8 + n + at[0], 8) == std::string(8, '\0'));
  DP_REQUIRE_OK(dp_model_load_safetensors(b.m, path.c_str()));
  CHECK(bitwise_equal(b.params(), a.params()));
  CHECK(bitwise_equal(b.buffers(), a.buffers()));
}

TEST_CASE("weights: a file written by PyTorch loads and computes PyTorch's output") {
  std::ifstream f(std::string(DP_IO_DIR) + "/pytorch_linear.json");
  REQUIRE(f.good());
  json ref = json::parse(f);
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, ref["model"].dump().c_str(), &m));
  std::string path = std::string(DP_IO_DIR) + "/pytorch_linear.safetensors";
  DP_REQUIRE_OK(dp_model_load_safetensors(m, path.c_str()));  // num_batches_tracked (int64) is ignored

  // The values themselves (written below by make_pytorch_safetensors.py).
  std::vector<float> want_params;
  for (const char* name : {"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"})
    for (float v : ref["state_dict"][name]["values"]) want_params.push_back(v);
  CHECK(params_of(m) == want_params);
  CHECK(want_params[0] == 0.5f);
  CHECK(want_params[12] == 0.1f);  // 0.bias[0]
  std::vector<float> want_buffers = {0.1f, -0.3f, 0.2f, 0.05f, 1.2f, 0.8f, 2.5f, 0.6f};
  CHECK(buffers_of(m) == want_buffers);

  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));
  DP_REQUIRE_OK(dp_group_set_training(g, 0));
  dp_tensor* x = make_f32(ctx, ref["input"].get<std::vector<float>>(), ref["input_shape"].get<std::vector<int64_t>>());
  dp_tensor* y = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, x, &y));
  auto got = tensor_data(y);
  auto want = ref["output"].get<std::vector<float>>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_group_destroy(g);
  dp_model_destroy(m);
  dp_context_destroy(ctx);
}

TEST_CASE("checkpoint: round trip of parameters, buffers, optimizer state and steps") {
  for (const char* opt_json : {kSgd, kAdam, R"({"type": "adamw", "lr": 0.01})"}) {
    CAPTURE(opt_json);
    TmpDir dir;
    std::string path = dir / "ckpt.safetensors";
    Trainer a(kNet, opt_json);
    a.train(0);
    a.train(1);
    DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"epoch": 3, "note": "hi", "cfg": {"a": [1, 2]}})"));
    CHECK(dir.files() == std::vector<std::string>{"ckpt.safetensors"});

    json meta = metadata_of(path);
    CHECK(meta["format"] == "dp-checkpoint-1");
    CHECK(json::parse(meta["model"].get<std::string>()) == json::parse(kNet));
    CHECK(meta["group_step"] == "2");
    CHECK(meta["optimizer_type"] == json::parse(opt_json)["type"]);
    CHECK(meta["optimizer_steps"] == "2");
    CHECK(meta["epoch"] == "3");
    CHECK(meta["note"] == "hi");
    CHECK(meta["cfg"] == R"({"a":[1,2]})");
    CHECK(!meta.contains("loader_epoch"));
    CHECK(meta["data_crc32"].get<std::string>().size() == 8);  // the tensor data's CRC-32, verified at load
    for (auto& kv : meta.items()) CHECK(kv.value().is_string());

    // Tensors: the optimizer's state per parameter, by PyTorch's state names.
    json h = json::parse(read_bytes(path).substr(8, le64(read_bytes(path))));
    bool sgd = std::string(opt_json) == kSgd;
    for (const char* p : {"0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"}) {
      CAPTURE(p);
      CHECK(h.contains(p));
      if (sgd) {
        CHECK(h.contains(std::string("optimizer.momentum_buffer.") + p));
      } else {
        CHECK(h.contains(std::string("optimizer.exp_avg.") + p));
        CHECK(h.contains(std::string("optimizer.exp_avg_sq.") + p));
      }
    }
    CHECK(h.contains("1.running_mean"));
    CHECK(h.contains("1.running_var"));

    Trainer b(kNet, opt_json);
    CHECK(!bitwise_equal(a.params(), b.params()));
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), b.g, b.opt, nullptr));
    CHECK(bitwise_equal(a.params(), b.params()));
    CHECK(bitwise_equal(a.buffers(), b.buffers()));
    auto init_bn = Trainer(kNet, nullptr).buffers();
    CHECK(!bitwise_equal(b.buffers(), init_bn));  // running statistics were trained and restored
    // Momentum / moments, step counts (Adam's bias correction) and the group
    // step (dropout masks) all show in the next step.
    a.train(2);
    b.train(2);
    CHECK(bitwise_equal(a.params(), b.params()));
    CHECK(bitwise_equal(a.buffers(), b.buffers()));

    // The file loads as plain weights too (its optimizer state is skipped).
    Trainer c(kNet, nullptr);
    DP_REQUIRE_OK(dp_model_load_safetensors(c.m, path.c_str()));
    // Without an optimizer the checkpoint restores the model and group only.
    Trainer d(kNet, nullptr);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), d.g, nullptr, nullptr));
    CHECK(bitwise_equal(c.params(), d.params()));
  }
}

TEST_CASE("checkpoint: exact resume with dropout and batch norm is bitwise equal to an uninterrupted run") {
  for (const char* opt_json : {kAdam, kSgd}) {
    CAPTURE(opt_json);
    TmpDir dir;
    std::string path = dir / "step3.safetensors";
    Trainer full(kNet, opt_json);
    for (int step = 0; step < 6; ++step) {
      full.train(step);
      if (step == 2) DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), full.g, full.opt, nullptr, nullptr));
    }

    Trainer resumed(kNet, opt_json);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), resumed.g, resumed.opt, nullptr));
    for (int step = 3; step < 6; ++step) resumed.train(step);
    auto want = full.params(), got = resumed.params();
    REQUIRE(want.size() == got.size());
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    CHECK(bitwise_equal(full.buffers(), resumed.buffers()));

    // The test can tell: the weights alone (no optimizer state, group step
    // 0, so other dropout masks) do not resume exactly.
    Trainer weights_only(kNet, opt_json);
    DP_REQUIRE_OK(dp_model_load_safetensors(weights_only.m, path.c_str()));
    for (int step = 3; step < 6; ++step) weights_only.train(step);
    CHECK(!bitwise_equal(weights_only.params(), want));
  }
}

TEST_CASE("weights: damaged files are rejected with the file and the fault named; the model is unchanged") {
  TmpDir dir;
  Trainer src(kNet, kSgd);
  src.train(0);
  std::string good_path = dir / "good.safetensors";
  DP_REQUIRE_OK(dp_model_save_safetensors(src.m, good_path.c_str()));
  const std::string good = read_bytes(good_path);
  const StParts parts = split(good);
  Trainer tr(kNetSeed4, nullptr);
  std::string path = dir / "bad.safetensors";
  auto load = [&] { return dp_model_load_safetensors(tr.m, path.c_str()); };
  auto with_header = [&](const std::function<void(ojson&)>& edit) {
    ojson h = parts.header;
    edit(h);
    write_bytes(path, join(h, parts.data));
  };

  SUBCASE("missing file") {
    std::filesystem::remove(path);
    rejects(tr, load, DP_ERR_IO, {path, "cannot open", "No such file"});
  }
  SUBCASE("shorter than the header size") {
    write_bytes(path, good.substr(0, 5));
    rejects(tr, load, DP_ERR_IO, {path, "truncated"});
  }
  SUBCASE("truncated tensor data") {
    write_bytes(path, good.substr(0, good.size() - 40));
    rejects(tr, load, DP_ERR_IO, {path, "truncated: header says 460 bytes of tensor data, file has 420"});
  }
  SUBCASE("header size larger than the file") {
    std::string b = good;
    b.replace(0, 8, le64_bytes(good.size()));
    write_bytes(path, b);
    rejects(tr, load, DP_ERR_IO, {path, "header size says " + std::to_string(good.size())});
  }
  SUBCASE("absurd header size") {
    std::string b = good;
    b.replace(0, 8, le64_bytes(~0ull));
    write_bytes(path, b);
    rejects(tr, load, DP_ERR_IO, {path, "header size"});
  }
  SUBCASE("bad JSON") {
    std::string h = "{\"0.weight\": {\"dtype\": \"F32\",";
    h.append((8 - h.size() % 8) % 8, ' ');
    write_bytes(path, le64_bytes(h.size()) + h + parts.data);
    rejects(tr, load, DP_ERR_IO, {path, "not valid JSON"});
  }
  SUBCASE("not a JSON object") {
    std::string h = "[1, 2]  ";
    write_bytes(path, le64_bytes(h.size()) + h + parts.data);
    rejects(tr, load, DP_ERR_IO, {path, "not a JSON object"});
  }
  SUBCASE("a value nested 200000 deep (found by tests/fuzz: quoting it overflowed the stack)") {
    std::string h = "{\"0.weight\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
    h.append((8 - h.size() % 8) % 8, ' ');
    write_bytes(path, le64_bytes(h.size()) + h + parts.data);
    rejects(tr, load, DP_ERR_IO, {path, "tensor '0.weight': expected an object", "got [[[[[[[[[...]]]]]]]]]"});
  }
  SUBCASE("a name given twice") {
    std::string h = parts.header.dump();
    std::string dup = "\"0.bias\":" + parts.header["0.bias"].dump() + ",";
    h.insert(1, dup);
    h.append((8 - h.size() % 8) % 8, ' ');
    write_bytes(path, le64_bytes(h.size()) + h + parts.data);
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias' twice"});
  }
  SUBCASE("offsets out of range") {
    StBuilder b;
    std::vector<float> v(4, 1.0f);
    b.add("x", "F32", {4}, v.data(), 16);
    b.header["x"]["data_offsets"] = {16, 32};
    write_bytes(path, b.bytes());
    rejects(tr, load, DP_ERR_IO, {path, "tensor 'x'", "[16, 32]", "outside the data buffer (16 bytes)"});
  }
  SUBCASE("offsets that end before they begin") {
    with_header([](ojson& h) { h["0.bias"]["data_offsets"] = {224, 192}; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "end before they begin"});
  }
  SUBCASE("overlapping offsets") {
    // 0.bias moved 8 bytes back into 0.weight; the gap it leaves stays a fault too.
    with_header([](ojson& h) { h["0.bias"]["data_offsets"] = {184, 216}; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.weight'", "'0.bias'", "overlap"});
  }
  SUBCASE("a gap between tensors") {
    StBuilder b;
    std::vector<float> v(8, 1.0f);
    b.add("x", "F32", {4}, v.data(), 16);
    b.add("y", "F32", {4}, v.data(), 16);
    b.header["y"]["data_offsets"] = {20, 36};
    b.data.append(4, '\0');
    write_bytes(path, b.bytes());
    rejects(tr, load, DP_ERR_IO, {path, "before tensor 'y'", "no gaps"});
  }
  SUBCASE("trailing bytes after the tensors") {
    write_bytes(path, good + std::string(8, '\0'));
    rejects(tr, load, DP_ERR_IO, {path, "8 bytes after the last tensor"});
  }
  SUBCASE("dtype inconsistent with the byte count") {
    with_header([](ojson& h) { h["0.bias"]["dtype"] = "F64"; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "F64", "make 64 bytes", "span 32"});
  }
  SUBCASE("shape inconsistent with the byte count") {
    with_header([](ojson& h) { h["0.bias"]["shape"] = {9}; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "[9]", "make 36 bytes", "span 32"});
  }
  SUBCASE("unknown dtype") {
    with_header([](ojson& h) { h["0.bias"]["dtype"] = "F33"; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "unknown dtype 'F33'"});
  }
  SUBCASE("malformed entry") {
    with_header([](ojson& h) { h["0.bias"]["shape"] = {-8}; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "non-negative integer"});
    with_header([](ojson& h) { h["0.bias"].erase("data_offsets"); });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "data_offsets"});
    with_header([](ojson& h) { h["0.bias"]["offsets"] = 1; });
    rejects(tr, load, DP_ERR_IO, {path, "'0.bias'", "unknown field 'offsets'"});
  }
  SUBCASE("non-string metadata") {
    with_header([](ojson& h) { h["__metadata__"] = {{"epoch", 3}}; });
    rejects(tr, load, DP_ERR_IO, {path, "__metadata__", "'epoch'", "must be a string"});
  }
  SUBCASE("a parameter of another dtype") {
    with_header([](ojson& h) { h["4.bias"]["dtype"] = "I32"; });  // same size: a valid file
    rejects(tr, load, DP_ERR_MODEL, {path, "'4.bias'", "I32", "F32"});
  }
  SUBCASE("a parameter of another shape") {
    // The last parameter: every one before it fits and was staged already.
    with_header([](ojson& h) { h["4.weight"]["shape"] = {8, 3}; });
    rejects(tr, load, DP_ERR_MODEL, {path, "'4.weight'", "[8, 3]", "[3, 8]"});
  }
  SUBCASE("a buffer of another shape") {
    with_header([](ojson& h) { h["1.running_var"]["shape"] = {2, 4}; });
    rejects(tr, load, DP_ERR_MODEL, {path, "'1.running_var'", "[2, 4]", "[8]"});
  }
  SUBCASE("a missing parameter") {
    StBuilder b;
    auto p = src.params();
    b.add("0.weight", "F32", {8, 6}, p.data(), 192);
    b.add("1.weight", "F32", {8}, p.data() + 56, 32);
    b.add("1.bias", "F32", {8}, p.data() + 64, 32);
    b.add("4.weight", "F32", {3, 8}, p.data() + 72, 96);
    b.add("4.bias", "F32", {3}, p.data() + 96, 12);
    write_bytes(path, b.bytes());
    rejects(tr, load, DP_ERR_MODEL, {path, "missing parameter 0.bias"});
  }
  SUBCASE("an extra tensor") {
    StBuilder b;
    auto p = src.params();
    b.add("0.weight", "F32", {8, 6}, p.data(), 192);
    b.add("0.bias", "F32", {8}, p.data() + 48, 32);
    b.add("1.weight", "F32", {8}, p.data() + 56, 32);
    b.add("1.bias", "F32", {8}, p.data() + 64, 32);
    b.add("4.weight", "F32", {3, 8}, p.data() + 72, 96);
    b.add("4.bias", "F32", {3}, p.data() + 96, 12);
    b.add("5.weight", "F32", {2}, p.data(), 8);
    int64_t tracked = 5;
    b.add("1.num_batches_tracked", "I64", {}, &tracked, 8);  // ignored, as PyTorch writes it
    write_bytes(path, b.bytes());
    rejects(tr, load, DP_ERR_MODEL, {path, "tensor 5.weight is not in the model"});
    // Without the extra one it loads; buffers are optional for weights.
    StBuilder c;
    c.add("0.weight", "F32", {8, 6}, p.data(), 192);
    c.add("0.bias", "F32", {8}, p.data() + 48, 32);
    c.add("1.weight", "F32", {8}, p.data() + 56, 32);
    c.add("1.bias", "F32", {8}, p.data() + 64, 32);
    c.add("4.weight", "F32", {3, 8}, p.data() + 72, 96);
    c.add("4.bias", "F32", {3}, p.data() + 96, 12);
    c.add("1.num_batches_tracked", "I64", {}, &tracked, 8);
    write_bytes(path, c.bytes());
    auto buffers = tr.buffers();
    DP_REQUIRE_OK(load());
    CHECK(bitwise_equal(tr.params(), p));
    CHECK(bitwise_equal(tr.buffers(), buffers));
  }
  SUBCASE("a NaN weight, an infinite running variance: values no run can continue from") {
    const float nan = std::nanf(""), inf = INFINITY;
    std::string d = parts.data;
    std::memcpy(&d[5 * 4], &nan, 4);
    write_bytes(path, join(parts.header, d));
    rejects(tr, load, DP_ERR_IO, {path, "tensor '0.weight' element 5 is NaN (must be finite)"});
    d = parts.data;
    std::memcpy(&d[d.size() - 4], &inf, 4);  // the last tensor: 1.running_var
    write_bytes(path, join(parts.header, d));
    rejects(tr, load, DP_ERR_IO, {path, "tensor '1.running_var' element 7 is inf (must be finite)"});
  }
  // The model still works after all that.
  DP_REQUIRE_OK(dp_model_load_safetensors(tr.m, good_path.c_str()));
  CHECK(bitwise_equal(tr.params(), src.params()));
}

TEST_CASE("checkpoint: damaged or mismatched checkpoints change nothing") {
  TmpDir dir;
  std::string path = dir / "ckpt.safetensors";
  Trainer src(kNet, kAdam);
  src.train(0);
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), src.g, src.opt, nullptr, nullptr));
  const std::string good = read_bytes(path);
  const StParts parts = split(good);
  std::string bad = dir / "bad.safetensors";

  // The target has trained too, so its state differs from the file's.
  Trainer tr(kNet, kAdam);
  tr.train(5);
  auto load = [&] { return dp_checkpoint_load(bad.c_str(), tr.g, tr.opt, nullptr); };
  auto with_meta = [&](const std::function<void(ojson&)>& edit) {
    ojson h = parts.header;
    edit(h["__metadata__"]);
    write_bytes(bad, join(h, parts.data));
  };
  // Reference: the target's next step when nothing changed.
  Trainer ref(kNet, kAdam);
  ref.train(5);

  SUBCASE("truncated") {
    write_bytes(bad, good.substr(0, good.size() - 1));
    rejects(tr, load, DP_ERR_IO, {bad, "truncated"});
  }
  SUBCASE("a weights file is not a checkpoint") {
    DP_REQUIRE_OK(dp_model_save_safetensors(src.m, bad.c_str()));
    rejects(tr, load, DP_ERR_IO, {bad, "not a dp checkpoint"});
  }
  SUBCASE("written for another model: the first difference is named") {
    Trainer other(kNetSeed4, kAdam);
    rejects(other, [&] { return dp_checkpoint_load(path.c_str(), other.g, other.opt, nullptr); }, DP_ERR_MODEL,
            {path, "checkpoint was written for another model (/seed is 3 in the checkpoint, 4 here)"});
    Trainer wide(kWide, kAdam);
    rejects(wide, [&] { return dp_checkpoint_load(path.c_str(), wide.g, wide.opt, nullptr); }, DP_ERR_MODEL,
            {"checkpoint was written for another model (the checkpoint's model has 5 layers, this one 2)"});
    // A hyperparameter that changes what is computed, not the tensors.
    std::string p5 = kNet;
    p5.replace(p5.find("0.3"), 3, "0.5");
    Trainer drop(p5.c_str(), kAdam);
    rejects(drop, [&] { return dp_checkpoint_load(path.c_str(), drop.g, drop.opt, nullptr); }, DP_ERR_MODEL,
            {"(/layers/3/p is 0.3 in the checkpoint, 0.5 here)"});
    // Layers of another type: the type is named, not the first key that differs.
    std::string gelu = kNet;
    gelu.replace(gelu.find("relu"), 4, "gelu");
    Trainer g2(gelu.c_str(), kAdam);
    rejects(g2, [&] { return dp_checkpoint_load(path.c_str(), g2.g, g2.opt, nullptr); }, DP_ERR_MODEL,
            {"(/layers/2/type is \"relu\" in the checkpoint, \"gelu\" here)"});
    // A checkpoint written before dp recorded what the model means: its JSON is read as this dp reads it.
    with_meta([](ojson& m) { m.erase("model_canonical"); });
    rejects(other, [&] { return dp_checkpoint_load(bad.c_str(), other.g, other.opt, nullptr); }, DP_ERR_MODEL,
            {"(/seed is 3 in the checkpoint, 4 here)"});
    Trainer same(kNet, kAdam);
    DP_REQUIRE_OK(dp_checkpoint_load(bad.c_str(), same.g, same.opt, nullptr));
    // ... and where this dp cannot read it (a type this context lacks), the JSON itself is compared.
    with_meta([](ojson& m) {
      m.erase("model_canonical");
      m["model"] = R"({"input": {"shape": [6]}, "layers": [{"type": "nosuch"}]})";
    });
    rejects(same, [&] { return dp_checkpoint_load(bad.c_str(), same.g, same.opt, nullptr); }, DP_ERR_MODEL,
            {"its __metadata__ 'model' differs from this group's model JSON"});
  }
  SUBCASE("the same model written otherwise loads: free text, spacing, defaults written out, [3, 3] for 3") {
    // kNet as another user would write it, then both continue alike.
    const char* written_otherwise = R"({"name": "net", "description": "kNet, annotated", "seed": 3,
      "input": {"shape": [6], "dtype": "float32"},
      "layers": [{"type": "linear", "out_features": 8, "bias": true, "name": "0"},
                 {"type": "batch_norm", "eps": 1e-5, "momentum": 0.1, "inputs": ["0"]},
                 {"type": "relu"}, {"type": "dropout", "p": 0.3},
                 {"type": "linear", "out_features": 3, "in_features": 8}],
      "loss": {"type": "cross_entropy", "label_smoothing": 0.0}})";
    Trainer a(kNet, kAdam), b(written_otherwise, kAdam);
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), a.g, a.opt, nullptr));
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), b.g, b.opt, nullptr));
    a.train(7);
    b.train(7);
    CHECK(bitwise_equal(a.params(), b.params()));
    CHECK(bitwise_equal(a.buffers(), b.buffers()));
  }
  SUBCASE("another optimizer type") {
    Trainer sgd(kNet, kSgd);
    rejects(sgd, [&] { return dp_checkpoint_load(path.c_str(), sgd.g, sgd.opt, nullptr); }, DP_ERR_MODEL,
            {path, "'adam' optimizer, this one is 'sgd'"});
  }
  SUBCASE("the same optimizer type set otherwise: refused, naming it; another lr loads") {
    // Adam's state under other betas or eps means another run: it loaded silently before.
    for (const auto& c : std::vector<std::pair<const char*, const char*>>{
             {R"({"type": "adam", "lr": 0.01, "betas": [0.5, 0.999]})", "/betas/0 is 0.9 in the checkpoint, 0.5 here"},
             {R"({"type": "adam", "lr": 0.01, "eps": 0.1})", "/eps is 1e-08 in the checkpoint, 0.1 here"},
             {R"({"type": "adam", "lr": 0.01, "weight_decay": 0.5})", "/weight_decay is 0.0 in the checkpoint, 0.5 here"}}) {
      CAPTURE(c.first);
      Trainer other(kNet, c.first);
      rejects(other, [&] { return dp_checkpoint_load(path.c_str(), other.g, other.opt, nullptr); }, DP_ERR_MODEL,
              {path, "an optimizer set otherwise", c.second, "the learning rate may differ"});
    }
    Trainer slower(kNet, R"({"type": "adam", "lr": 0.001})");
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), slower.g, slower.opt, nullptr));
    double lr = 0;
    DP_REQUIRE_OK(dp_optimizer_lr(slower.opt, &lr));
    CHECK(lr == 0.001);  // the loading optimizer's
  }
  SUBCASE("no optimizer state in the file") {
    DP_REQUIRE_OK(dp_checkpoint_save(bad.c_str(), src.g, nullptr, nullptr, nullptr));
    rejects(tr, load, DP_ERR_MODEL, {bad, "no optimizer state"});
  }
  SUBCASE("damaged metadata") {
    with_meta([](ojson& m) { m["group_step"] = "-1"; });
    rejects(tr, load, DP_ERR_IO, {bad, "'group_step'", "non-negative integer"});
    with_meta([](ojson& m) { m.erase("optimizer_steps"); });
    rejects(tr, load, DP_ERR_IO, {bad, "'optimizer_steps'"});
    with_meta([](ojson& m) { m["model"] = "{\"seed\": "; });
    rejects(tr, load, DP_ERR_IO, {bad, "'model' is not JSON"});
    // The record is read only where this dp cannot read the model JSON (here: a type it lacks).
    with_meta([](ojson& m) {
      m["model"] = R"({"input": {"shape": [6]}, "layers": [{"type": "nosuch"}]})";
      m["model_canonical"] = "{\"seed\": ";
    });
    rejects(tr, load, DP_ERR_IO, {bad, "'model_canonical' is not JSON"});
  }
  SUBCASE("a missing optimizer tensor, the last one read") {
    ojson h = parts.header;
    // Rename it: the file stays valid, the state incomplete and an unknown tensor appears.
    REQUIRE(h.contains("optimizer.exp_avg_sq.4.bias"));
    h["optimizer.exp_avg_sq.4.bjas"] = h["optimizer.exp_avg_sq.4.bias"];
    h.erase("optimizer.exp_avg_sq.4.bias");
    write_bytes(bad, join(h, parts.data));
    rejects(tr, load, DP_ERR_MODEL, {bad, "missing optimizer state optimizer.exp_avg_sq.4.bias"});
  }
  SUBCASE("a changed metadata value or tensor name: the header's checksum") {
    // Each of these loaded before dp wrote header_crc32, restoring a wrong state
    // (a step count that is Adam's bias correction, a loader position).
    auto corrupted = [&](const std::function<void(ojson&)>& edit) {
      ojson h = parts.header;
      edit(h);
      write_bytes(bad, join_raw(h, parts.data));  // the checksum as it was
      rejects(tr, load, DP_ERR_IO, {bad, "the header is corrupted", "__metadata__ 'header_crc32' says"});
      char* meta = nullptr;
      CHECK(dp_checkpoint_metadata(bad.c_str(), &meta) == DP_ERR_IO);
      CHECK(meta == nullptr);
    };
    corrupted([](ojson& h) { h["__metadata__"]["optimizer_steps"] = "9"; });
    corrupted([](ojson& h) { h["__metadata__"]["group_step"] = "0"; });
    corrupted([](ojson& h) { h["__metadata__"]["extra"] = "x"; });
    corrupted([](ojson& h) {  // two tensors of one size trading places: their offsets swapped
      std::swap(h["0.weight"]["data_offsets"], h["optimizer.exp_avg.0.weight"]["data_offsets"]);
    });
    corrupted([](ojson& h) {  // one value split into two keys whose bytes run together the same way
      h["__metadata__"]["format"] = "dp-check";
      h["__metadata__"]["formau"] = "point-1";
    });
    corrupted([](ojson& h) {
      h["optimizer.exp_avg_sq.4.bjas"] = h["optimizer.exp_avg_sq.4.bias"];
      h.erase("optimizer.exp_avg_sq.4.bias");
    });
    // The same edit with the checksum recomputed (as if dp wrote it) loads: the checksum is what refused it.
    with_meta([](ojson& m) { m["optimizer_steps"] = "9"; });
    Trainer other(kNet, kAdam);
    DP_REQUIRE_OK(dp_checkpoint_load(bad.c_str(), other.g, other.opt, nullptr));
    int64_t steps = 0;
    DP_REQUIRE_OK(dp_optimizer_steps(other.opt, &steps));
    CHECK(steps == 9);
  }
  SUBCASE("a flipped bit in the tensor data: the checksum") {
    std::string d = parts.data;
    d[4] ^= 0x40;
    write_bytes(bad, join(parts.header, d));
    rejects(tr, load, DP_ERR_IO, {bad, "the tensor data is corrupted: its CRC-32 is", "__metadata__ 'data_crc32' says"});
    with_meta([](ojson& m) { m["data_crc32"] = "0BAD"; });
    rejects(tr, load, DP_ERR_IO, {bad, "'data_crc32' must be 8 lowercase hex digits, got '0BAD'"});
  }
  SUBCASE("a NaN parameter, a negative exp_avg_sq (in a file without a checksum)") {
    ojson h = parts.header;
    h["__metadata__"].erase("data_crc32");
    const float nan = std::nanf(""), minus_one = -1.f;
    std::string d = parts.data;
    std::memcpy(&d[4], &nan, 4);
    write_bytes(bad, join(h, d));
    rejects(tr, load, DP_ERR_IO, {bad, "tensor '0.weight' element 1 is NaN (must be finite)"});
    d = parts.data;
    const size_t at = h["optimizer.exp_avg_sq.0.weight"]["data_offsets"][0].get<size_t>();
    std::memcpy(&d[at + 2 * 4], &minus_one, 4);
    write_bytes(bad, join(h, d));
    rejects(tr, load, DP_ERR_IO, {bad, "tensor 'optimizer.exp_avg_sq.0.weight' element 2 is -1.0 (must be >= 0)"});
  }
  SUBCASE("a corrupt byte count in the optimizer state") {
    ojson h = parts.header;
    h["optimizer.exp_avg.0.bias"]["shape"] = {7};
    write_bytes(bad, join(h, parts.data));
    rejects(tr, load, DP_ERR_IO, {bad, "'optimizer.exp_avg.0.bias'", "make 28 bytes"});
  }
  // Nothing changed, the optimizer state and step counts included: the next
  // step is the one an untouched trainer takes.
  tr.train(6);
  ref.train(6);
  CHECK(bitwise_equal(tr.params(), ref.params()));
  CHECK(bitwise_equal(tr.buffers(), ref.buffers()));
}

TEST_CASE("checkpoint: one without data_crc32, header_crc32 and optimizer_config (written before dp recorded them) still loads") {
  TmpDir dir;
  std::string path = dir / "ckpt.safetensors", old = dir / "old.safetensors";
  Trainer src(kNet, kAdam);
  src.train(0);
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), src.g, src.opt, nullptr, nullptr));
  StParts parts = split(read_bytes(path));
  REQUIRE(parts.header["__metadata__"].contains("data_crc32"));
  REQUIRE(parts.header["__metadata__"]["header_crc32"] == header_crc32(parts.header));  // the test's own computation
  REQUIRE(parts.header["__metadata__"].contains("optimizer_config"));
  for (const char* key : {"data_crc32", "header_crc32", "optimizer_config"}) parts.header["__metadata__"].erase(key);
  write_bytes(old, join_raw(parts.header, parts.data));
  Trainer tr(kNet, kAdam);
  DP_REQUIRE_OK(dp_checkpoint_load(old.c_str(), tr.g, tr.opt, nullptr));
  CHECK(bitwise_equal(tr.params(), src.params()));
}

// dp loads only values training can continue from (finite; exp_avg_sq >= 0).
// The setters took NaN, and saves wrote it, into files dp then called damaged.
TEST_CASE("values no load would take: refused by the setters (DP_ERR_NUMERIC, nothing set) and by saves (nothing written)") {
  TmpDir dir;
  Trainer tr(kNet, kAdam);
  tr.train(0);
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(tr.m, &n));
  const std::vector<float> before = tr.params();
  std::vector<float> bad = before;
  bad[7] = std::nanf("");
  CHECK(dp_model_set_parameters(tr.m, bad.data(), n) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("tensor '0.weight' element 7 is NaN (must be finite): nothing was set") !=
        std::string::npos);
  CHECK(tr.params() == before);
  std::vector<float> buffers = tr.buffers();
  if (!buffers.empty()) {
    const std::vector<float> kept = buffers;
    buffers.back() = INFINITY;
    CHECK(dp_model_set_buffers(tr.m, buffers.data(), static_cast<int64_t>(buffers.size())) == DP_ERR_NUMERIC);
    CHECK(std::string(dp_last_error()).find("is inf (must be finite)") != std::string::npos);
    CHECK(tr.buffers() == kept);
  }
  std::vector<float> state(static_cast<size_t>(n), 0.f);
  DP_REQUIRE_OK(dp_optimizer_copy_state(tr.opt, "exp_avg_sq", state.data(), n));
  const std::vector<float> kept_state = state;
  state[2] = -1.f;
  CHECK(dp_optimizer_set_state(tr.opt, "exp_avg_sq", state.data(), n) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("element 2 is -1.0 (must be >= 0)") != std::string::npos);
  state[2] = -1.f;
  DP_REQUIRE_OK(dp_optimizer_set_state(tr.opt, "exp_avg", state.data(), n));  // a first moment may be negative
  DP_REQUIRE_OK(dp_optimizer_copy_state(tr.opt, "exp_avg_sq", state.data(), n));
  CHECK(state == kept_state);

  // Training itself can overflow a parameter with a finite loss (SGD, a huge lr and input): such a
  // model is not saved, rather than written into a file no load takes.
  Trainer big(R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 1}], "loss": {"type": "mse"}})",
              R"({"type": "sgd", "lr": 1e30})", "cpu:0");
  dp_tensor* x = make_f32(big.ctx, {1e19f, 1.f}, {1, 2});
  dp_tensor* y = make_f32(big.ctx, {0.f}, {1, 1});
  float loss = 0;
  DP_REQUIRE_OK(dp_group_train_step(big.g, big.opt, x, y, &loss));
  REQUIRE(std::isfinite(loss));
  REQUIRE(!std::isfinite(big.params()[0]));
  const std::string ckpt = dir / "inf.ckpt", weights = dir / "inf.safetensors";
  CHECK(dp_checkpoint_save(ckpt.c_str(), big.g, big.opt, nullptr, nullptr) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("parameter: tensor '0.weight' element 0 is inf (must be finite): it would not "
                                          "load") != std::string::npos);
  CHECK(dp_model_save_safetensors(big.m, weights.c_str()) == DP_ERR_NUMERIC);
  CHECK(dir.files().empty());
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
}

TEST_CASE("checkpoint: atomic write; a failed save leaves no temporary file and the old checkpoint intact") {
  TmpDir dir;
  std::string path = dir / "ckpt.safetensors";
  Trainer a(kNet, kAdam);
  a.train(0);
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"which": "first"})"));
  const std::string first = read_bytes(path);
  CHECK(dir.files() == std::vector<std::string>{"ckpt.safetensors"});
  a.train(1);

  SUBCASE("overwriting a checkpoint replaces it whole") {
    DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"which": "second"})"));
    CHECK(metadata_of(path)["which"] == "second");
    CHECK(dir.files() == std::vector<std::string>{"ckpt.safetensors"});
  }
  SUBCASE("a directory that does not exist") {
    std::string p = dir / "no/such/dir/ckpt.safetensors";
    CHECK(dp_checkpoint_save(p.c_str(), a.g, a.opt, nullptr, nullptr) == DP_ERR_IO);
    std::string msg = dp_last_error();
    CHECK(msg.find(p) != std::string::npos);
    CHECK(msg.find("No such file or directory") != std::string::npos);
    CHECK(dp_model_save_safetensors(a.m, p.c_str()) == DP_ERR_IO);
  }
  SUBCASE("the disk fills up while writing (file size limit)") {
    // A write that fails half way: the file-size limit stands in for a full disk.
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 1000;  // the checkpoint is about 3 KB
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    dp_status s = dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"which": "second"})");
    std::string msg = dp_last_error();
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK(s == DP_ERR_IO);
    INFO(msg);
    CHECK(msg.find("File too large") != std::string::npos);
    CHECK(msg.find(path) != std::string::npos);
  }
  SUBCASE("the target is a directory") {
    std::string p = dir / "adir";
    std::filesystem::create_directory(p);
    CHECK(dp_checkpoint_save(p.c_str(), a.g, a.opt, nullptr, nullptr) == DP_ERR_IO);
    CHECK(std::string(dp_last_error()).find("Is a directory") != std::string::npos);
    CHECK(std::filesystem::is_directory(p));
    std::filesystem::remove(p);
  }
  SUBCASE("a symbolic link is written through: the file it names is replaced, the link stays") {
    // Renaming over the link replaced the link with a file, and the file it
    // named was never written. Links to links, relative; the file's
    // permissions kept; a link to nothing refused, as cp refuses it.
    namespace fs = std::filesystem;
    fs::create_directory(dir / "real");
    std::ofstream(dir / "real/target.safetensors") << "old";
    ::chmod((dir / "real/target.safetensors").c_str(), 0600);
    fs::create_symlink("real/target.safetensors", dir / "link1");
    fs::create_symlink("link1", dir / "link2");
    const std::string link = dir / "link2";
    DP_REQUIRE_OK(dp_checkpoint_save(link.c_str(), a.g, a.opt, nullptr, R"({"which": "through a link"})"));
    CHECK(fs::is_symlink(dir / "link2"));
    CHECK(fs::is_symlink(dir / "link1"));
    CHECK(metadata_of(dir / "real/target.safetensors")["which"] == "through a link");
    struct stat st {};
    REQUIRE(::stat((dir / "real/target.safetensors").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    DP_REQUIRE_OK(dp_model_save_safetensors(a.m, link.c_str()));  // weights, over the checkpoint
    CHECK(fs::is_symlink(dir / "link2"));
    Trainer b(kNet, kAdam);
    DP_REQUIRE_OK(dp_model_load_safetensors(b.m, (dir / "real/target.safetensors").c_str()));
    for (const auto& f : fs::directory_iterator(dir / "real"))
      CHECK_MESSAGE(f.path().filename() == "target.safetensors", "left behind: " << f.path());
    fs::create_symlink("real/nothing.safetensors", dir / "dangling");
    const std::string dangling = dir / "dangling";
    CHECK(dp_checkpoint_save(dangling.c_str(), a.g, a.opt, nullptr, nullptr) == DP_ERR_IO);
    CHECK(std::string(dp_last_error()).find("a symbolic link to a file that does not exist") != std::string::npos);
    CHECK(fs::is_symlink(dir / "dangling"));
    CHECK_FALSE(fs::exists(dir / "real/nothing.safetensors"));
    fs::remove_all(dir / "real");
    fs::remove(dir / "link1");
    fs::remove(dir / "link2");
    fs::remove(dir / "dangling");
  }
  SUBCASE("a symbolic link loop is an error, not a hang") {
    namespace fs = std::filesystem;
    fs::create_symlink("loop_b", dir / "loop_a");
    fs::create_symlink("loop_a", dir / "loop_b");
    const std::string p = dir / "loop_a";
    CHECK(dp_checkpoint_save(p.c_str(), a.g, a.opt, nullptr, nullptr) == DP_ERR_IO);
    CHECK(std::string(dp_last_error()).find("Too many levels of symbolic links") != std::string::npos);
    CHECK(fs::is_symlink(dir / "loop_a"));
    fs::remove(dir / "loop_a");
    fs::remove(dir / "loop_b");
  }
  SUBCASE("a FIFO is written in place, never replaced by a file; without a reader it fails at once") {
    // (Renamed over, a FIFO became a file; as root /dev/full became one too.)
    const std::string fifo = dir / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(dp_checkpoint_save(fifo.c_str(), a.g, a.opt, nullptr, nullptr) == DP_ERR_IO);  // no reader: no wait
    CHECK(std::string(dp_last_error()).find("a FIFO with no reader") != std::string::npos);
    std::string got;
    std::thread reader([&] {
      std::ifstream in(fifo, std::ios::binary);
      got.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    });
    dp_status st = DP_ERR_INTERNAL;
    for (int i = 0; i < 500 && st != DP_OK; ++i) {  // until the reader has opened its end
      st = dp_checkpoint_save(fifo.c_str(), a.g, a.opt, nullptr, R"({"which": "fifo"})");
      if (st != DP_OK) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(st == DP_OK);
    if (st != DP_OK) {  // let the reader's open return
      int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
    }
    reader.join();
    struct stat sb {};
    REQUIRE(::lstat(fifo.c_str(), &sb) == 0);
    CHECK(S_ISFIFO(sb.st_mode));
    CHECK(got.size() > 1000);
    std::filesystem::remove(fifo);
  }
  SUBCASE("bad user metadata fails before anything is written") {
    CHECK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, "{oops") == DP_ERR_JSON);
    CHECK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, "[1]") == DP_ERR_INVALID_ARGUMENT);
    CHECK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"model": "x"})") == DP_ERR_INVALID_ARGUMENT);
    CHECK(std::string(dp_last_error()).find("'model' is reserved") != std::string::npos);
    CHECK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"a": 1, "a": 2})") == DP_ERR_JSON);
    CHECK(std::string(dp_last_error()).find("user_metadata_json JSON: 'a' appears twice") != std::string::npos);
    CHECK(dp_checkpoint_save(path.c_str(), a.g, a.opt, nullptr, R"({"optimizer_config": "{}"})") == DP_ERR_INVALID_ARGUMENT);
  }
  auto files = dir.files();
  for (const auto& f : files) CHECK_MESSAGE(f.find(".tmp-") == std::string::npos, "left behind: " << f);
  if (read_bytes(path) != first) return;  // replaced on purpose above
  // The old checkpoint is intact and loads.
  Trainer b(kNet, kAdam);
  DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), b.g, b.opt, nullptr));
  CHECK(metadata_of(path)["which"] == "first");
}

TEST_CASE("checkpoint metadata, argument checks, out-parameters untouched on failure") {
  TmpDir dir;
  Trainer a(kNet, kSgd);
  Trainer other(kNet, kSgd);
  std::string path = dir / "c.safetensors";
  CHECK(dp_checkpoint_save(nullptr, a.g, a.opt, nullptr, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_checkpoint_save(path.c_str(), nullptr, nullptr, nullptr, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_checkpoint_save(path.c_str(), a.g, other.opt, nullptr, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("another group") != std::string::npos);
  CHECK(dp_checkpoint_load(path.c_str(), a.g, other.opt, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_load_safetensors(nullptr, path.c_str()) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_load_safetensors(a.m, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_save_safetensors(nullptr, path.c_str()) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_export_onnx(nullptr, path.c_str()) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_export_onnx(a.m, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_checkpoint_metadata(path.c_str(), nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dir.files().empty());

  char* text = reinterpret_cast<char*>(0x1);
  CHECK(dp_checkpoint_metadata(path.c_str(), &text) == DP_ERR_IO);  // no such file
  CHECK(text == reinterpret_cast<char*>(0x1));
  write_bytes(path, "garbage!garbage!");
  CHECK(dp_checkpoint_metadata(path.c_str(), &text) == DP_ERR_IO);
  CHECK(text == reinterpret_cast<char*>(0x1));

  // Any safetensors file has metadata, maybe none.
  DP_REQUIRE_OK(dp_model_save_safetensors(a.m, path.c_str()));
  CHECK(metadata_of(path) == json::object());
  CHECK(metadata_of(std::string(DP_IO_DIR) + "/pytorch_linear.safetensors") == json::object());
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), a.g, nullptr, nullptr, "{}"));
  json meta = metadata_of(path);
  CHECK(meta.size() == 6);  // format, model, model_canonical, group_step, data_crc32, header_crc32
  CHECK(meta["group_step"] == "0");
  dp_free(nullptr);
}

namespace {

// A shuffled loader over 40 fixed samples (4 batches of 10 an epoch).
struct Data {
  dp_context* ctx = nullptr;
  dp_dataset* ds = nullptr;
  dp_loader* loader = nullptr;
  dp_tensor *x = nullptr, *t = nullptr;
  explicit Data(dp_context* c) : ctx(c) {
    TestRng rng(77);
    std::vector<float> inputs(40 * 6);
    for (float& v : inputs) v = rng.uniform(-2, 2);
    std::vector<int64_t> targets(40);
    for (auto& v : targets) v = rng.next() % 3;
    int64_t shape[1] = {6};
    DP_REQUIRE_OK(dp_dataset_from_arrays(ctx, inputs.data(), 1, shape, 40, DP_I64, targets.data(), 0, nullptr, 0, &ds));
    DP_REQUIRE_OK(dp_loader_create(ds, R"({"batch_size": 10, "shuffle": true, "num_workers": 2, "seed": 5})", &loader));
    int64_t xs[2] = {10, 6}, ts[1] = {10};
    DP_REQUIRE_OK(dp_tensor_create(ctx, DP_F32, 2, xs, &x));
    DP_REQUIRE_OK(dp_tensor_create(ctx, DP_I64, 1, ts, &t));
  }
  ~Data() {
    dp_tensor_destroy(x);
    dp_tensor_destroy(t);
    dp_loader_destroy(loader);
    dp_dataset_destroy(ds);
  }
  // One training step on the loader's next batch (into the next epoch at the end of one).
  void step(Trainer& tr) {
    int64_t rows = 0;
    DP_REQUIRE_OK(dp_loader_next(loader, x, t, &rows));
    if (rows == 0) DP_REQUIRE_OK(dp_loader_next(loader, x, t, &rows));
    REQUIRE(rows == 10);
    DP_REQUIRE_OK(dp_group_train_step(tr.g, tr.opt, x, t, nullptr));
  }
  std::pair<int64_t, int64_t> position() const {
    int64_t e = -1, b = -1;
    DP_REQUIRE_OK(dp_loader_position(loader, &e, &b));
    return {e, b};
  }
};

}  // namespace

TEST_CASE("checkpoint: the loader's position is saved and restored; exact resume across an epoch boundary") {
  TmpDir dir;
  std::string path = dir / "ckpt.safetensors";
  Trainer full(kNet, kAdam);
  Data full_data(full.ctx);
  for (int step = 0; step < 6; ++step) {
    full_data.step(full);
    if (step == 2) DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), full.g, full.opt, full_data.loader, nullptr));
  }
  json meta = metadata_of(path);
  CHECK(meta["loader_epoch"] == "0");
  CHECK(meta["loader_batch"] == "3");

  Trainer resumed(kNet, kAdam);
  Data data(resumed.ctx);
  DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), resumed.g, resumed.opt, data.loader));
  CHECK(data.position() == std::make_pair<int64_t, int64_t>(0, 3));
  for (int step = 3; step < 6; ++step) data.step(resumed);
  CHECK(data.position() == full_data.position());
  CHECK(data.position() == std::make_pair<int64_t, int64_t>(1, 2));
  auto want = full.params(), got = resumed.params();
  CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  CHECK(bitwise_equal(full.buffers(), resumed.buffers()));

  SUBCASE("a checkpoint without a loader position, given a loader") {
    std::string p = dir / "noloader.safetensors";
    DP_REQUIRE_OK(dp_checkpoint_save(p.c_str(), full.g, full.opt, nullptr, nullptr));
    rejects(resumed, [&] { return dp_checkpoint_load(p.c_str(), resumed.g, resumed.opt, data.loader); }, DP_ERR_MODEL,
            {p, "no loader position"});
    CHECK(data.position() == std::make_pair<int64_t, int64_t>(1, 2));
  }
  SUBCASE("a position the loader refuses: nothing changes") {
    std::string p = dir / "badpos.safetensors";
    StParts parts = split(read_bytes(path));
    parts.header["__metadata__"]["loader_batch"] = "999";
    write_bytes(p, join(parts.header, parts.data));
    rejects(resumed, [&] { return dp_checkpoint_load(p.c_str(), resumed.g, resumed.opt, data.loader); },
            DP_ERR_INVALID_ARGUMENT, {"loader: ", "999"});
    CHECK(data.position() == std::make_pair<int64_t, int64_t>(1, 2));
  }
  SUBCASE("the loader may be left out of a load") {
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), resumed.g, resumed.opt, nullptr));
    CHECK(data.position() == std::make_pair<int64_t, int64_t>(1, 2));
  }
  SUBCASE("inside an epoch, a loader of another batch size, shuffle or seed is refused: its batch 3 is other samples") {
    CHECK(meta["loader_order"] == R"({"batch_size": 10, "shuffle": true, "seed": 5, "drop_last": false, "samples": 40})");
    for (const char* config : {R"({"batch_size": 20, "shuffle": true, "seed": 5})", R"({"batch_size": 10, "seed": 5})",
                               R"({"batch_size": 10, "shuffle": true, "seed": 6})"}) {
      CAPTURE(config);
      dp_loader* other = nullptr;
      DP_REQUIRE_OK(dp_loader_create(data.ds, config, &other));
      rejects(resumed, [&] { return dp_checkpoint_load(path.c_str(), resumed.g, resumed.opt, other); },
              DP_ERR_INVALID_ARGUMENT, {path, "stopped inside epoch 0 (after batch 3 of 4)", "resume with the saved settings"});
      int64_t e = -1, b = -1;
      DP_REQUIRE_OK(dp_loader_position(other, &e, &b));
      CHECK((e == 0 && b == 0));
      dp_loader_destroy(other);
    }
  }
  SUBCASE("a loader_order record that is not the one dp writes (a key renamed, one missing, a type changed)") {
    // "ramples" made the record's dataset 0 samples long, and a loader of 11 samples resumed at its end.
    const std::string order = meta["loader_order"].get<std::string>();
    for (const std::string& bad_order :
         {std::string(R"({"batch_size": 10, "shuffle": true, "seed": 5, "drop_last": false, "ramples": 40})"),
          std::string(R"({"batch_size": 10, "shuffle": true, "seed": 5, "drop_last": false})"),
          std::string(R"({"batch_size": 10, "shuffle": 1, "seed": 5, "drop_last": false, "samples": 40})")}) {
      CAPTURE(bad_order);
      std::string p = dir / "badorder.safetensors";
      StParts parts = split(read_bytes(path));
      parts.header["__metadata__"]["loader_order"] = bad_order;
      write_bytes(p, join(parts.header, parts.data));  // the header checksum recomputed: the record's own check
      dp_loader* other = nullptr;
      DP_REQUIRE_OK(dp_loader_create(data.ds, R"({"batch_size": 11})", &other));
      rejects(resumed, [&] { return dp_checkpoint_load(p.c_str(), resumed.g, resumed.opt, other); }, DP_ERR_IO,
              {p, "'loader_order' is not dp's"});
      dp_loader_destroy(other);
    }
    CHECK(order == meta["loader_order"].get<std::string>());
  }
  SUBCASE("at an epoch's end another loader goes on: the ended epoch is its end of that epoch") {
    std::string p = dir / "end.safetensors";
    Trainer t(kNet, kAdam);
    Data d(t.ctx);
    for (int step = 0; step < 4; ++step) d.step(t);
    REQUIRE(d.position() == std::make_pair<int64_t, int64_t>(0, 4));
    DP_REQUIRE_OK(dp_checkpoint_save(p.c_str(), t.g, t.opt, d.loader, nullptr));
    dp_loader* other = nullptr;
    DP_REQUIRE_OK(dp_loader_create(data.ds, R"({"batch_size": 8})", &other));
    DP_REQUIRE_OK(dp_checkpoint_load(p.c_str(), resumed.g, resumed.opt, other));
    int64_t e = -1, b = -1;
    DP_REQUIRE_OK(dp_loader_position(other, &e, &b));
    CHECK((e == 0 && b == 5));  // 40 samples in batches of 8: its epoch 0 is over
    dp_loader_destroy(other);
  }
}

TEST_CASE("checkpoint: random damage to the header or length is rejected cleanly, never half-applied") {
  TmpDir dir;
  std::string path = dir / "ckpt.safetensors", bad = dir / "bad.safetensors";
  Trainer src(kNet, kAdam);
  src.train(0);
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), src.g, src.opt, nullptr, nullptr));
  const std::string good = read_bytes(path);
  const size_t header_end = 8 + le64(good);
  Trainer tr(kNet, kAdam);
  TestRng rng(9);
  int rejected = 0;
  for (int i = 0; i < 300; ++i) {
    std::string b = good;
    if (i % 3 == 0) {
      b.resize(rng.next() % good.size());
    } else {
      for (int k = 0, n = 1 + i % 4; k < n; ++k) b[rng.next() % header_end] = static_cast<char>(rng.next());
    }
    write_bytes(bad, b);
    auto params = tr.params(), buffers = tr.buffers();
    dp_status s = dp_checkpoint_load(bad.c_str(), tr.g, tr.opt, nullptr);
    if (s == DP_OK) continue;  // a harmless change (inside a string, say)
    ++rejected;
    CHECK((s == DP_ERR_IO || s == DP_ERR_MODEL));
    CHECK(std::string(dp_last_error()).find(bad) != std::string::npos);
    CHECK(bitwise_equal(tr.params(), params));
    CHECK(bitwise_equal(tr.buffers(), buffers));
  }
  CHECK(rejected > 250);
}
