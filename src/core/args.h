// Reads a layer's (or optimizer's) JSON object with errors that name the JSON
// path and say what would be valid:
//   /layers/3/kernel_size: expected a positive integer, got -1
// Every key read is remembered, so finish() can reject unknown keys (a typo
// such as "kernal_size" must not be silently ignored), with the value it was
// read as, defaults included (resolved(): what the object means, however it
// was written: kernel_size 3 and [3, 3], a default left out or written out).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dp {

// A JSON value as error messages quote it: compact JSON, cut to max_chars
// (ending "..."), with what is nested deeper than a few levels shown as
// [...] or {...}. Bounded work and stack whatever the value: json::dump()
// recurses once per level, so quoting a value nested 100000 deep (a
// 200 KB file) would overflow the stack.
std::string json_brief(const nlohmann::json& v, size_t max_chars = 60);

// A config's text as JSON (comments allowed): DP_ERR_JSON "<what> JSON: " and
// the parser's reason, or the path of an object that names a key twice
// ("model JSON: /layers/0: 'out_features' appears twice"), which the parser
// would resolve silently to the last one.
nlohmann::json parse_config(const std::string& text, const char* what);

class Args {
 public:
  // obj must outlive the Args. Throws DP_ERR_MODEL unless obj is an object.
  Args(const nlohmann::json& obj, std::string path);

  const std::string& path() const { return path_; }
  const nlohmann::json& object() const { return obj_; }  // the JSON object read (plugins get it as text)
  std::string path_of(const char* key) const { return path_ + "/" + key; }
  // Whether obj has the key; the key counts as known (finish lists it) but not as read.
  bool has(const char* key) const;

  // Integers >= min_value; `required` ones throw when absent.
  int64_t integer(const char* key, int64_t default_value, int64_t min_value);
  // An integer in [min_value, max_value].
  int64_t integer(const char* key, int64_t default_value, int64_t min_value, int64_t max_value);
  int64_t required_integer(const char* key, int64_t min_value);
  // An integer or a list of two, as PyTorch's kernel_size=3 or (3, 5), each in
  // [min_value, max_value].
  std::array<int64_t, 2> pair(const char* key, std::array<int64_t, 2> default_value, int64_t min_value,
                              int64_t max_value = INT64_MAX);
  std::array<int64_t, 2> required_pair(const char* key, int64_t min_value, int64_t max_value = INT64_MAX);
  // A number in [lo, hi].
  double number(const char* key, double default_value, double lo, double hi);
  // A list of `count` numbers in [lo, hi] (count 0: any number of them but none).
  std::vector<double> numbers(const char* key, std::vector<double> default_value, size_t count, double lo, double hi);
  bool boolean(const char* key, bool default_value);
  std::string string(const char* key, const std::string& default_value);
  // A list of integer dims as in torch (negative counts from the end).
  std::vector<int64_t> integers(const char* key, std::vector<int64_t> default_value);

  // Marks keys that the caller handles itself (type, name, inputs...).
  void accept(const char* key) { used_.insert(key); }
  // Throws for a key never read: "/layers/2: unknown key 'kernal_size' for conv2d (known: ...)",
  // listing every key read, accepted or asked about with has().
  void finish(const std::string& what) const;
  // Every key read so far with the value it was read as (a default where
  // absent; a pair as a list of two), as a JSON object.
  const nlohmann::json& resolved() const { return *resolved_; }

 private:
  const nlohmann::json* get(const char* key);
  [[noreturn]] void bad(const char* key, const std::string& expected, const nlohmann::json& got) const;
  [[noreturn]] void missing(const char* key, const std::string& expected) const;
  template <class T>
  T keep(const char* key, T value);

  const nlohmann::json& obj_;
  std::string path_;
  std::set<std::string> used_;           // read or accepted
  mutable std::set<std::string> asked_;  // asked about with has()
  std::shared_ptr<nlohmann::json> resolved_;
};

}  // namespace dp
