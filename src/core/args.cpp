#include "core/args.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dp {

using nlohmann::json;

namespace {

// Appends v to out until out passes cap; containers below depth 8 are elided.
void brief(const json& v, int depth, size_t cap, std::string& out) {
  if (!v.is_structured()) {
    out += v.dump();
    return;
  }
  const bool array = v.is_array();
  if (depth >= 8 && !v.empty()) {
    out += array ? "[...]" : "{...}";
    return;
  }
  out += array ? '[' : '{';
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (out.size() > cap) return;  // cut below anyway
    if (it != v.begin()) out += ',';
    if (!array) out += json(it.key()).dump() + ':';
    brief(*it, depth + 1, cap, out);
  }
  out += array ? ']' : '}';
}

}  // namespace

json parse_config(const std::string& text, const char* what) {
  // Where the parser is: per open object its keys and the last one, per open array its index.
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
    size_t index = 0;
  };
  std::vector<Frame> open;
  std::string duplicate;
  auto element_done = [&] {
    if (!open.empty() && !open.back().object) ++open.back().index;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open.push_back({true, {}, {}, 0}); break;
      case json::parse_event_t::array_start: open.push_back({false, {}, {}, 0}); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        open.pop_back();
        element_done();
        break;
      case json::parse_event_t::value: element_done(); break;
      case json::parse_event_t::key: {
        Frame& f = open.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second && duplicate.empty()) {
          std::string path;
          for (size_t i = 0; i + 1 < open.size(); ++i)
            path += "/" + (open[i].object ? open[i].key : std::to_string(open[i].index));
          duplicate = (path.empty() ? std::string() : path + ": ") + "'" + f.key + "' appears twice";
        }
        break;
      }
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text, cb, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number such as 1e999
    fail(DP_ERR_JSON, std::string(what) + " JSON: " + e.what());
  }
  if (!duplicate.empty()) fail(DP_ERR_JSON, std::string(what) + " JSON: " + duplicate);
  return doc;
}

std::string json_brief(const json& v, size_t max_chars) {
  std::string out;
  brief(v, 0, max_chars, out);
  if (out.size() > max_chars) out = out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return out;
}

Args::Args(const json& obj, std::string path)
    : obj_(obj), path_(std::move(path)), resolved_(std::make_shared<json>(json::object())) {
  if (!obj.is_object())
    fail(DP_ERR_MODEL, (path_.empty() ? "/" : path_) + ": expected an object, got " + json_brief(obj));
}

bool Args::has(const char* key) const {
  asked_.insert(key);
  return obj_.contains(key);
}

const json* Args::get(const char* key) {
  used_.insert(key);
  auto it = obj_.find(key);
  return it == obj_.end() ? nullptr : &*it;
}

// v as an int64, or false: not an integer, or an unsigned one past INT64_MAX
// (18446744073709551615 would read as -1).
static bool as_int64(const json& v, int64_t* out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) return false;
  *out = v.get<int64_t>();
  return true;
}

void Args::bad(const char* key, const std::string& expected, const json& got) const {
  fail(DP_ERR_MODEL, path_of(key) + ": expected " + expected + ", got " + json_brief(got));
}

template <class T>
T Args::keep(const char* key, T value) {
  (*resolved_)[key] = value;
  return value;
}

// Edits (insertions, deletions, substitutions) between a and b.
static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A required key that is absent: a key given nearby in spelling
// ("out_feature" for "out_features") is named, since finish() never runs.
void Args::missing(const char* key, const std::string& expected) const {
  std::string near;
  for (auto it = obj_.begin(); it != obj_.end() && near.empty(); ++it)
    if (!used_.count(it.key()) && edit_distance(it.key(), key) <= 2) near = it.key();
  fail(DP_ERR_MODEL, path_of(key) + ": missing; expected " + expected +
                         (near.empty() ? "" : " (the object has '" + near + "': a misspelling of '" + key + "'?)"));
}

static std::string at_least(int64_t min_value) {
  if (min_value == 1) return "a positive integer";
  if (min_value == 0) return "a non-negative integer";
  return "an integer >= " + std::to_string(min_value);
}

// A pair's element: "a positive integer", "... up to 2147483647" when max_value bounds it.
static std::string pair_element(int64_t min_value, int64_t max_value) {
  return at_least(min_value) + (max_value == INT64_MAX ? "" : " up to " + std::to_string(max_value));
}

int64_t Args::integer(const char* key, int64_t default_value, int64_t min_value) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  int64_t x = 0;
  const bool fits = as_int64(*v, &x);
  if (!fits || x < min_value)  // an integer past INT64_MAX: say where the range ends
    bad(key, at_least(min_value) + (!fits && v->is_number_unsigned() ? " up to " + std::to_string(INT64_MAX) : ""), *v);
  return keep(key, x);
}

int64_t Args::integer(const char* key, int64_t default_value, int64_t min_value, int64_t max_value) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  int64_t x = 0;
  if (!as_int64(*v, &x) || x < min_value || x > max_value)
    bad(key, "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]", *v);
  return keep(key, x);
}

int64_t Args::required_integer(const char* key, int64_t min_value) {
  if (!has(key)) missing(key, at_least(min_value));
  return integer(key, 0, min_value);
}

std::array<int64_t, 2> Args::pair(const char* key, std::array<int64_t, 2> default_value, int64_t min_value,
                                  int64_t max_value) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  int64_t a = 0, b = 0;
  auto ok = [&](const json& x, int64_t* out) { return as_int64(x, out) && *out >= min_value && *out <= max_value; };
  if (ok(*v, &a)) return keep(key, std::array<int64_t, 2>{a, a});
  if (v->is_array() && v->size() == 2 && ok((*v)[0], &a) && ok((*v)[1], &b)) return keep(key, std::array<int64_t, 2>{a, b});
  bad(key, pair_element(min_value, max_value) + " or a list of two", *v);
}

std::array<int64_t, 2> Args::required_pair(const char* key, int64_t min_value, int64_t max_value) {
  if (!has(key)) missing(key, pair_element(min_value, max_value) + " or a list of two");
  return pair(key, {0, 0}, min_value, max_value);
}

static std::string range(double lo, double hi) {
  auto f = [](double x) {
    if (std::isinf(x)) return std::string(x < 0 ? "-inf" : "inf");
    json j = x;
    return j.dump();
  };
  return "a number in [" + f(lo) + ", " + f(hi) + "]";
}

double Args::number(const char* key, double default_value, double lo, double hi) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi)) bad(key, range(lo, hi), *v);
  return keep(key, v->get<double>());
}

std::vector<double> Args::numbers(const char* key, std::vector<double> default_value, size_t count, double lo,
                                  double hi) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  const std::string range = hi >= std::numeric_limits<double>::max() ? ">= " + json(lo).dump()
                                                                       : "in [" + json(lo).dump() + ", " + json(hi).dump() + "]";
  std::string what = "a list of " + (count ? std::to_string(count) + " " : std::string()) + "numbers " + range;
  if (!v->is_array() || (count ? v->size() != count : v->empty())) bad(key, what, *v);
  std::vector<double> out;
  for (const auto& x : *v) {
    if (!x.is_number() || !(x.get<double>() >= lo && x.get<double>() <= hi)) bad(key, what, *v);
    out.push_back(x.get<double>());
  }
  return keep(key, out);
}

bool Args::boolean(const char* key, bool default_value) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  if (!v->is_boolean()) bad(key, "true or false", *v);
  return keep(key, v->get<bool>());
}

std::string Args::string(const char* key, const std::string& default_value) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  if (!v->is_string()) bad(key, "a string", *v);
  return keep(key, v->get<std::string>());
}

std::vector<int64_t> Args::integers(const char* key, std::vector<int64_t> default_value) {
  const json* v = get(key);
  if (!v) return keep(key, default_value);
  if (!v->is_array()) bad(key, "a list of integers", *v);
  std::vector<int64_t> out;
  for (const auto& x : *v) {
    int64_t i = 0;
    if (!as_int64(x, &i)) bad(key, "a list of integers (each at most 2^63 - 1)", *v);
    out.push_back(i);
  }
  return keep(key, out);
}

void Args::finish(const std::string& what) const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (used_.count(it.key())) continue;
    std::set<std::string> keys = used_;
    keys.insert(asked_.begin(), asked_.end());
    std::string known;
    for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
    fail(DP_ERR_MODEL, path_of(it.key().c_str()) + ": unknown key '" + it.key() + "' for " + what + " (known: " + known + ")");
  }
}

}  // namespace dp
