// `dp train --plot`: see plot.h. A hand-written SVG (no plotting library):
// text widths are estimated from DejaVu Sans's advances (the first font named,
// and wider than Arial or Helvetica, the fallbacks), so that a layout which
// fits with it fits with them; tests/check_plot.py measures the rendered
// text with librsvg.
#include "plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>

#include "cli.h"

namespace dpcli {
namespace {

// Canvas and layout, in px.
constexpr double kW = 820;      // canvas width
constexpr double kPad = 14;     // outer padding
constexpr double kTick = 5;     // tick length, outward
constexpr double kInset = 7;    // data kept this far inside the frames (markers stay inside)
constexpr double kLossH = 270;  // loss panel height
constexpr double kAccH = 150;   // accuracy panel height
constexpr double kPanelGap = 16;
constexpr double kMidMarker = 3;  // mid-epoch evaluations' hollow markers' radius (epochs': 4)
constexpr double kTickFont = 11, kLabelFont = 12, kTitleFont = 15, kLegendFont = 12, kCaptionFont = 11;
// A line of text of size s: ink within [baseline - kAscent s, baseline + kDescent s] (DejaVu Sans).
constexpr double kAscent = 0.93, kDescent = 0.24;

const char* const kFont = "DejaVu Sans, Arial, Helvetica, sans-serif";
const char* const kInk = "#333333";    // frames, ticks
const char* const kText = "#222222";   // labels
const char* const kMuted = "#555555";  // caption, notes
const char* const kGrid = "#e8e8e8";
const char* const kLossColor = "#1f77b4";  // matplotlib's tab10
const char* const kTrainColor = "#ff7f0e";
const char* const kTestColor = "#d62728";
const char* const kAccColor = "#2ca02c";

// DejaVu Sans advance widths (em) of ASCII 32..126.
const double kAdvance[95] = {
    0.318, 0.401, 0.460, 0.838, 0.636, 0.950, 0.780, 0.275, 0.390, 0.390, 0.500, 0.838, 0.318, 0.361, 0.318, 0.337,
    0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.337, 0.337, 0.838, 0.838, 0.838, 0.531,
    1.000, 0.684, 0.686, 0.698, 0.770, 0.632, 0.575, 0.775, 0.752, 0.295, 0.295, 0.656, 0.557, 0.863, 0.748, 0.787,
    0.603, 0.787, 0.695, 0.635, 0.611, 0.732, 0.684, 0.989, 0.685, 0.611, 0.685, 0.390, 0.337, 0.390, 0.838, 0.500,
    0.500, 0.613, 0.635, 0.550, 0.635, 0.615, 0.352, 0.635, 0.634, 0.278, 0.278, 0.579, 0.278, 0.974, 0.634, 0.612,
    0.635, 0.635, 0.411, 0.521, 0.392, 0.634, 0.592, 0.818, 0.592, 0.592, 0.525, 0.636, 0.337, 0.636, 0.838};

// Code points of valid UTF-8 (see clean_utf8).
std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Valid UTF-8 that XML 1.0 accepts: malformed bytes become U+FFFD, control
// characters (newlines included: the caption is one line) a space.
std::string clean_utf8(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
    uint32_t cp = 0xFFFD;
    if (n == 0 || i + n > s.size()) {
      n = 1;
    } else {
      cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
      bool ok = true;
      for (int k = 1; k < n; ++k) {
        unsigned char d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xC0) != 0x80) ok = false;
        cp = (cp << 6) | (d & 0x3F);
      }
      static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
      if (!ok || cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000) || cp == 0xFFFE || cp == 0xFFFF) {
        cp = 0xFFFD;
        n = 1;  // resynchronise on the next byte
      }
    }
    if (cp < 0x20 || cp == 0x7F) cp = ' ';
    append_utf8(out, cp);
    i += n;
  }
  return out;
}

// Escaped for XML text and attribute values; s must be clean_utf8's.
std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double cp_width(uint32_t cp) {
  if (cp >= 32 && cp < 127) return kAdvance[cp - 32];
  if (cp == 0xB7) return 0.318;  // middle dot
  return 1.0;                    // wider than most glyphs: an over-estimate
}

// Estimated width of s (clean UTF-8) at font size `size`.
double text_width(const std::string& s, double size, bool bold = false) {
  double w = 0;
  for (uint32_t cp : code_points(s)) w += cp_width(cp);
  return w * size * (bold ? 1.12 : 1.0);
}

// snprintf's number with a '.' whatever LC_NUMERIC a plugin may have set.
std::string c_locale(const char* buf) {
  std::string s = buf;
  for (char& c : s)
    if (c == ',') c = '.';
  return s;
}

// A coordinate: one decimal, no "-0", no ".0".
std::string num(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s = c_locale(buf);
  if (s == "-0.0") s = "0.0";
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// Linear map from data to px.
struct Scale {
  double d0, d1, p0, p1;
  double operator()(double v) const { return p0 + (v - d0) * (p1 - p0) / (d1 - d0); }
};

// The smallest 1, 2 or 5 times a power of ten that is >= raw.
double nice_at_least(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  double e = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * e >= raw * (1 - 1e-9)) return m * e;
  return 10 * e;
}
double next_nice(double step) { return nice_at_least(step * (1 + 1e-6)); }

// Multiples of step within [lo, hi].
std::vector<double> multiples(double lo, double hi, double step) {
  std::vector<double> v;
  double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  if (!(k1 - k0 < 1000)) return v;
  for (double k = k0; k <= k1; ++k) v.push_back(std::fabs(k) < 0.5 ? 0.0 : k * step);
  return v;
}

// Tick labels of one axis: decimals from the step, "20k" / "3M" for round
// thousands and millions (si), exponents for huge or tiny values (with the
// digits that tell the ticks apart).
std::vector<std::string> tick_labels(const std::vector<double>& ticks, double step, bool si) {
  double big = 0;
  for (double t : ticks) big = std::max(big, std::fabs(t));
  const int digits = std::max(3, int(std::floor(std::log10(std::max(big, step))) - std::floor(std::log10(step))) + 1);
  std::vector<std::string> out;
  char buf[64];
  for (double t : ticks) {
    if (t == 0 && si) {
      std::snprintf(buf, sizeof buf, "0");
    } else if (si && big >= 1e7 && big < 1e13 && std::fmod(step, 1e6) == 0) {
      std::snprintf(buf, sizeof buf, "%.0fM", t / 1e6);
    } else if (si && big >= 1e4 && big < 1e10 && std::fmod(step, 1e3) == 0) {
      std::snprintf(buf, sizeof buf, "%.0fk", t / 1e3);
    } else if ((big >= 1e7 && !(si && step >= 1 && big < 1e13)) || step < 1e-4) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, t);
    } else {
      int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step) - 1e-9));
      std::snprintf(buf, sizeof buf, "%.*f", decimals, t);
    }
    out.push_back(c_locale(buf));
  }
  return out;
}

struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;
  double label_width = 0;  // the widest label's
};

// An x axis over exactly [lo, hi] drawn `px` long: the finest 1-2-5 step
// with ticks about `spacing` px apart or more whose labels keep 14 px apart;
// integer steps when `integer`.
Axis x_axis(double lo, double hi, double px, double spacing, bool integer, bool si) {
  Axis a;
  a.lo = lo, a.hi = hi;
  double step = nice_at_least((hi - lo) / std::max(1.0, px / spacing));
  if (integer) step = std::max(step, 1.0);
  for (int i = 0; i < 64; ++i, step = next_nice(step)) {
    a.step = step;
    a.ticks = multiples(lo, hi, step);
    a.labels = tick_labels(a.ticks, step, si);
    a.label_width = 0;
    for (const auto& l : a.labels) a.label_width = std::max(a.label_width, text_width(l, kTickFont));
    if (step * px / (hi - lo) >= a.label_width + 14) break;
  }
  return a;
}

// A y axis around [lo, hi], widened to whole steps (about 5 of them, at
// least 22 px apart); within [floor, ceil] when those are finite.
Axis y_axis(double lo, double hi, double px, double floor_ = -INFINITY, double ceil_ = INFINITY) {
  Axis a;
  double step = nice_at_least((hi - lo) / 5);
  for (int i = 0; i < 64; ++i, step = next_nice(step)) {
    a.step = step;
    a.lo = std::max(floor_, std::floor(lo / step + 1e-9) * step);
    a.hi = std::min(ceil_, std::ceil(hi / step - 1e-9) * step);
    if (a.hi <= a.lo) a.hi = a.lo + step;
    if (step * px / (a.hi - a.lo) >= 22) break;
  }
  a.ticks = multiples(a.lo, a.hi, a.step);
  a.labels = tick_labels(a.ticks, a.step, false);
  for (const auto& l : a.labels) a.label_width = std::max(a.label_width, text_width(l, kTickFont));
  return a;
}

// Words (split at spaces) of s, clean UTF-8, a word longer than `width` px
// at `size` cut into pieces that fit.
std::vector<std::string> words_of(const std::string& s, double size, double width) {
  std::vector<std::string> words, pieces;
  std::string cur;
  for (char c : s + " ") {
    if (c != ' ') {
      cur += c;
    } else if (!cur.empty()) {
      words.push_back(cur);
      cur.clear();
    }
  }
  for (const auto& w : words) {
    if (text_width(w, size) <= width) {
      pieces.push_back(w);
      continue;
    }
    std::string piece;
    for (uint32_t cp : code_points(w)) {
      std::string next = piece;
      append_utf8(next, cp);
      if (!piece.empty() && text_width(next, size) > width) {
        pieces.push_back(piece);
        piece.clear();
        append_utf8(piece, cp);
      } else {
        piece = next;
      }
    }
    if (!piece.empty()) pieces.push_back(piece);
  }
  return pieces;
}

// s (clean UTF-8) in lines at most `width` px wide at `size`, broken after a
// " · " separator where one fits, else between words; the separator ends
// its line. At most max_lines, the last ending in "…" if cut.
std::vector<std::string> wrap(const std::string& s, double size, double width, size_t max_lines) {
  const std::string sep = " \xC2\xB7 ";
  std::vector<std::string> segments;
  for (size_t at = 0;;) {
    size_t next = s.find(sep, at);
    segments.push_back(s.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) break;
    at = next + sep.size();
  }
  std::vector<std::string> lines;
  std::string line;
  auto fits = [&](const std::string& t) { return text_width(t, size) <= width; };
  for (size_t i = 0; i < segments.size(); ++i) {
    std::string seg = segments[i] + (i + 1 < segments.size() ? " \xC2\xB7" : "");
    if (seg.empty() || seg == " \xC2\xB7") seg = seg.empty() ? seg : "\xC2\xB7";
    if (line.empty() ? fits(seg) : fits(line + " " + seg)) {
      line = line.empty() ? seg : line + " " + seg;
      continue;
    }
    if (!line.empty()) lines.push_back(line);
    line.clear();
    if (fits(seg)) {
      line = seg;
      continue;
    }
    for (const auto& w : words_of(seg, size, width)) {
      if (line.empty() || fits(line + " " + w)) {
        line = line.empty() ? w : line + " " + w;
      } else {
        lines.push_back(line);
        line = w;
      }
    }
  }
  if (!line.empty()) lines.push_back(line);
  if (lines.size() > max_lines) {
    lines.resize(max_lines);
    std::string& last = lines.back();
    while (!last.empty() && !fits(last + " \xE2\x80\xA6")) {
      auto cps = code_points(last);
      cps.pop_back();
      last.clear();
      for (uint32_t cp : cps) append_utf8(last, cp);
    }
    last += " \xE2\x80\xA6";
  }
  return lines;
}

// Centred moving average over 2h+1 points, of the finite values; within k < h
// points of either end over 2k+1 (still centred: no pull towards the values
// beyond, as a truncated window would have where the loss falls fast); NaN
// where a window holds none.
std::vector<double> moving_average(const std::vector<double>& v, size_t h) {
  const size_t n = v.size();
  // Prefix sums: of the finite values, and how many there are.
  std::vector<std::pair<double, double>> prefix;
  prefix.reserve(n + 1);
  prefix.emplace_back(0.0, 0.0);
  for (double x : v) {
    const bool ok = std::isfinite(x);
    prefix.emplace_back(prefix.back().first + (ok ? x : 0.0), prefix.back().second + (ok ? 1.0 : 0.0));
  }
  std::vector<double> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = std::min(h, std::min(i, n - 1 - i));
    const auto& a = prefix[i - k];
    const auto& b = prefix[i + k + 1];
    const double c = b.second - a.second;
    out.push_back(c > 0 ? (b.first - a.first) / c : NAN);
  }
  return out;
}

using Points = std::vector<std::pair<double, double>>;  // px
using Lines = std::vector<Points>;                      // polylines (split at gaps)

// Points (step, value) as px polylines, split where a value is not finite.
// At most `per_column` points per px column: per_column 2 keeps each column's
// minimum and maximum in their order (the line's envelope), 1 its last point.
Lines downsample(const std::vector<double>& steps, const std::vector<double>& values, const Scale& sx, const Scale& sy,
                 int per_column) {
  Lines out;
  Points cur;
  long column = -1;
  size_t lo_i = 0, hi_i = 0, last_i = 0;
  bool open = false;  // a column's points not yet emitted
  auto flush = [&] {
    if (!open) return;
    if (per_column == 1) {
      cur.emplace_back(sx(steps[last_i]), sy(values[last_i]));
    } else {
      size_t a = std::min(lo_i, hi_i), b = std::max(lo_i, hi_i);
      cur.emplace_back(sx(steps[a]), sy(values[a]));
      if (b != a) cur.emplace_back(sx(steps[b]), sy(values[b]));
    }
    open = false;
  };
  auto end_line = [&] {
    flush();
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!std::isfinite(values[i])) {
      end_line();
      column = -1;
      continue;
    }
    long c = long(std::floor(sx(steps[i])));
    if (c != column) {
      flush();
      column = c;
      lo_i = hi_i = i;
      if (per_column == 1 && cur.empty()) cur.emplace_back(sx(steps[i]), sy(values[i]));  // a line's first point
    }
    if (values[i] < values[lo_i]) lo_i = i;
    if (values[i] > values[hi_i]) hi_i = i;
    last_i = i;
    open = true;
  }
  end_line();
  return out;
}

class Svg {
 public:
  std::string s;
  Svg& operator<<(const std::string& t) {
    s += t;
    return *this;
  }
  Svg& operator<<(double v) {
    s += num(v);
    return *this;
  }
  void line(double x1, double y1, double x2, double y2, const char* cls = nullptr) {
    s += "<line";
    if (cls) s += std::string(" class=\"") + cls + "\"";
    s += " x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\"/>\n";
  }
  // text: clean UTF-8, escaped here.
  void text(double x, double y, const std::string& t, const char* cls, const char* anchor = nullptr,
            const std::string& extra = "") {
    s += "<text";
    if (cls) s += std::string(" class=\"") + cls + "\"";
    s += " x=\"" + num(x) + "\" y=\"" + num(y) + "\"";
    if (anchor) s += std::string(" text-anchor=\"") + anchor + "\"";
    s += extra + ">" + xml(t) + "</text>\n";
  }
  // A lone point twice: with round caps, a dot.
  void polyline(const Points& p, const std::string& attrs) {
    s += "<polyline " + attrs + " points=\"";
    for (size_t i = 0; i < p.size(); ++i) s += (i ? " " : "") + num(p[i].first) + "," + num(p[i].second);
    if (p.size() == 1) s += " " + num(p[0].first) + "," + num(p[0].second);
    s += "\"/>\n";
  }
};

enum class Marker { kCircle, kSquare };

// A marker of radius r (a square: of the same area, nearly).
void marker(Svg& svg, Marker m, double x, double y, double r = 4) {
  if (m == Marker::kCircle)
    svg << "<circle class=\"marker\" cx=\"" << x << "\" cy=\"" << y << "\" r=\"" << r << "\"/>\n";
  else
    svg << "<rect class=\"marker\" x=\"" << x - 0.9 * r << "\" y=\"" << y - 0.9 * r << "\" width=\"" << 1.8 * r
        << "\" height=\"" << 1.8 * r << "\"/>\n";
}

// A test series' points, px, in step order: epoch ends (filled markers) and
// mid-epoch evaluations (hollow ones).
struct SeriesPoint {
  double x, y;
  bool mid;
};

// The points to draw: every epoch end, and of the mid-epoch points in each px
// column the lowest and highest (all of them where they are no denser), in
// step order: the line's envelope, as downsample keeps the per-step line's.
std::vector<SeriesPoint> thin(const std::vector<SeriesPoint>& pts) {
  std::vector<SeriesPoint> out;
  for (size_t i = 0; i < pts.size();) {
    const double column = std::floor(pts[i].x);
    size_t end = i, lo = SIZE_MAX, hi = SIZE_MAX;
    for (; end < pts.size() && std::floor(pts[end].x) == column; ++end) {
      if (!pts[end].mid) continue;
      if (lo == SIZE_MAX || pts[end].y > pts[lo].y) lo = end;  // px: down is larger
      if (hi == SIZE_MAX || pts[end].y < pts[hi].y) hi = end;
    }
    if (end == i) ++end;  // (a NaN x: cannot happen, the points are finite)
    for (size_t k = i; k < end; ++k)
      if (!pts[k].mid || k == lo || k == hi) out.push_back(pts[k]);
    i = end;
  }
  return out;
}

struct Frame {
  double left, top, right, bottom;
  double width() const { return right - left; }
  double height() const { return bottom - top; }
};

}  // namespace

std::string render_plot(const TrainingRecord& r) {
  // --- data ---
  std::vector<double> steps, losses;
  steps.reserve(r.step_losses.size());
  losses.reserve(r.step_losses.size());
  for (const auto& p : r.step_losses) steps.push_back(double(p.first)), losses.push_back(p.second);
  const int64_t spe = r.steps_per_epoch;
  const bool have_steps = !steps.empty(), have_epochs = !r.epochs.empty(), have_evals = !r.evals.empty();

  double x0 = 0, x1 = 1;
  if (have_steps) {
    x0 = steps.front() - 1;
    x1 = steps.back();
  } else if (have_epochs) {  // from the start of the first epoch
    x0 = std::max(0.0, double(r.epochs.front().step - std::max<int64_t>(spe, 1)));
    x1 = double(r.epochs.back().step);
  }
  for (const auto& e : r.epochs) x0 = std::min(x0, double(e.step)), x1 = std::max(x1, double(e.step));
  for (const auto& e : r.evals) x0 = std::min(x0, double(e.step)), x1 = std::max(x1, double(e.step));
  for (double s : steps) x0 = std::min(x0, s), x1 = std::max(x1, s);  // out-of-order steps still fit
  if (!(x1 > x0)) x1 = x0 + 1;

  double lmin = INFINITY, lmax = -INFINITY;
  auto take = [&](double v) {
    if (std::isfinite(v)) lmin = std::min(lmin, v), lmax = std::max(lmax, v);
  };
  for (double v : losses) take(v);
  for (const auto& e : r.epochs) take(e.train_loss), take(e.test_loss);
  for (const auto& e : r.evals) take(e.test_loss);
  const bool have_loss = lmin <= lmax;
  if (!have_loss) lmin = 0, lmax = 1;
  if (lmax - lmin < 1e-12 * std::max(1.0, std::fabs(lmax))) {
    double d = std::max(std::fabs(lmax) * 0.05, 1e-3);
    lmin -= d, lmax += d;
  }
  double amin = INFINITY, amax = -INFINITY;
  auto take_acc = [&](double v) {
    if (std::isfinite(v)) amin = std::min(amin, 100 * v), amax = std::max(amax, 100 * v);
  };
  for (const auto& e : r.epochs) take_acc(e.test_accuracy);
  for (const auto& e : r.evals) take_acc(e.test_accuracy);
  const bool have_acc = amin <= amax;
  if (!have_acc) amin = 0, amax = 100;
  // Within 0..100 % (unless a value is not), at least 2 points wide.
  const double afloor = amin >= 0 ? 0 : -INFINITY, aceil = amax <= 100 ? 100 : INFINITY;
  if (amax - amin < 2) {
    const double mid = std::min(aceil - 1, std::max(afloor + 1, (amax + amin) / 2));
    amin = mid - 1, amax = mid + 1;
  }

  // Smoothing: a centred moving average over about 1% of the steps, at least 5.
  size_t h = std::max<size_t>(2, steps.size() / 200);
  if (2 * h + 1 > steps.size()) h = steps.empty() ? 0 : (steps.size() - 1) / 2;
  const size_t window = 2 * h + 1;
  std::vector<double> smooth = moving_average(losses, h);

  // --- vertical layout, top down ---
  double y = kPad;
  const double title_base = y + kAscent * kTitleFont;
  y += kTitleFont * (kAscent + kDescent) + 10;

  // Legend: entries in rows as wide as the panels (their left edge known below).
  struct Entry {
    std::string label, series;
  };
  std::vector<Entry> entries;
  if (have_steps) {
    entries.push_back({"training loss per step", "loss-raw"});
    entries.push_back(
        {"moving average (centred, " + std::to_string(window) + (window == 1 ? " step)" : " steps)"), "loss-smooth"});
  }
  if (have_epochs) entries.push_back({"train loss (epoch mean)", "train-loss"});
  if (have_epochs) entries.push_back({"test loss", "test-loss"});
  if (have_evals) entries.push_back({"test loss (mid-epoch)", "test-loss-mid"});
  if (have_epochs) entries.push_back({"test accuracy", "test-accuracy"});
  if (have_evals) entries.push_back({"test accuracy (mid-epoch)", "test-accuracy-mid"});

  const Axis loss_axis = y_axis(lmin, lmax, kLossH - 2 * kInset);
  const Axis acc_axis = y_axis(amin, amax, kAccH - 2 * kInset, afloor, aceil);
  const double ytitle_base = kPad + kAscent * kLabelFont;  // the rotated titles' baseline (a vertical line)
  const double ylabel_right =
      ytitle_base + kDescent * kLabelFont + 8 + std::max(loss_axis.label_width, have_acc ? acc_axis.label_width : 0);
  Frame f1{ylabel_right + 4 + kTick, 0, 0, 0};

  // Step labels are at most as wide as the last step's, unabbreviated: half of it may pass the frame's right edge.
  const double last_label = text_width(std::to_string(int64_t(x1)), kTickFont);
  f1.right = kW - kPad - std::max(8.0, last_label / 2 + 2);
  const double legend_width = f1.right - f1.left;
  const double sample_w = 26, sample_gap = 6, entry_gap = 22, row_h = 18;
  std::vector<std::vector<size_t>> rows;
  double row_x = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    double w = sample_w + sample_gap + text_width(entries[i].label, kLegendFont);
    if (rows.empty() || row_x + entry_gap + w > legend_width) {
      rows.push_back({});
      row_x = -entry_gap;
    }
    rows.back().push_back(i);
    row_x += entry_gap + w;
  }
  const double legend_top = y;
  y += rows.size() * row_h + (rows.empty() ? 0 : 8);

  double epoch_title_base = 0, epoch_label_base = 0;
  if (spe > 0) {
    epoch_title_base = y + kAscent * kLabelFont;
    y += kLabelFont * (kAscent + kDescent) + 3;
    epoch_label_base = y + kAscent * kTickFont;
    y += kTickFont * (kAscent + kDescent) + 3 + kTick;
  } else {
    y += 4;
  }
  f1.top = y;
  f1.bottom = y + kLossH;
  Frame f2{f1.left, f1.bottom + kTick + kPanelGap, f1.right, f1.bottom + kTick + kPanelGap + kAccH};
  y = f2.bottom + kTick + 3;
  const double step_label_base = y + kAscent * kTickFont;
  y += kTickFont * (kAscent + kDescent) + 5;
  const double step_title_base = y + kAscent * kLabelFont;
  y += kLabelFont * (kAscent + kDescent) + 12;

  const std::vector<std::string> caption = wrap(clean_utf8(r.caption), kCaptionFont, kW - 2 * kPad, 4);
  const double caption_line = kCaptionFont * (kAscent + kDescent) + 3;
  const double caption_top = y;
  y += caption.size() * caption_line;
  const double H = std::ceil(y + kPad - (caption.empty() ? 12 : 3));

  // --- scales and axes ---
  const Scale sx{x0, x1, f1.left + kInset, f1.right - kInset};
  const Axis step_axis = x_axis(x0, x1, sx.p1 - sx.p0, 80, true, true);
  Axis epoch_axis;
  Scale sepoch{0, 1, 0, 1};
  if (spe > 0) {
    sepoch = Scale{x0 / spe, x1 / spe, sx.p0, sx.p1};
    epoch_axis = x_axis(x0 / spe, x1 / spe, sx.p1 - sx.p0, 50, false, false);  // every epoch up to 14 of them
  }
  const Scale sloss{loss_axis.lo, loss_axis.hi, f1.bottom - kInset, f1.top + kInset};
  const Scale sacc{acc_axis.lo, acc_axis.hi, f2.bottom - kInset, f2.top + kInset};

  Svg svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << H << "\" viewBox=\"0 0 " << kW
      << " " << H << "\" font-family=\"" << kFont << "\" font-size=\"" << kTickFont << "\" fill=\"" << kText << "\">\n";
  svg << "<rect id=\"background\" width=\"" << kW << "\" height=\"" << H << "\" fill=\"#ffffff\"/>\n";
  svg.text(kPad, title_base, "Training loss and test accuracy", nullptr, nullptr,
           " id=\"title\" font-size=\"" + num(kTitleFont) + "\" font-weight=\"bold\"");

  // --- loss panel ---
  svg << "<g id=\"panel-loss\">\n";
  if (have_loss) {
    svg << "<g class=\"grid\" stroke=\"" << kGrid << "\" stroke-width=\"1\">\n";
    for (double t : loss_axis.ticks) svg.line(f1.left, sloss(t), f1.right, sloss(t));
    if (have_steps || have_epochs || have_evals)
      for (double t : step_axis.ticks) svg.line(sx(t), f1.top, sx(t), f1.bottom);
    svg << "</g>\n";
  }
  if (have_steps) {
    for (const auto& p : downsample(steps, losses, sx, sloss, 2))
      svg.polyline(
          p, "class=\"series loss-raw\" fill=\"none\" stroke=\"" + std::string(kLossColor) +
                 "\" stroke-opacity=\"0.3\" stroke-width=\"1\" stroke-linejoin=\"round\" stroke-linecap=\"round\"");
    for (const auto& p : downsample(steps, smooth, sx, sloss, 1))
      svg.polyline(p, "class=\"series loss-smooth\" fill=\"none\" stroke=\"" + std::string(kLossColor) +
                          "\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"");
  }
  // Markers shrink where epochs crowd (2.5 px apart or less: radius 1).
  double marker_r = 4;
  for (size_t i = 1; i < r.epochs.size(); ++i)
    marker_r = std::min(
        marker_r, std::max(1.0, 0.4 * std::fabs(sx(double(r.epochs[i].step)) - sx(double(r.epochs[i - 1].step)))));
  auto epoch_series = [&](const char* cls, const char* color, Marker m, double EpochPoint::*field, const Scale& sy,
                          double factor, bool line = true) {
    svg << "<g class=\"series " << cls << "\" fill=\"" << color << "\" stroke=\"" << color << "\">\n";
    Points pts;
    for (const auto& e : r.epochs) {
      double v = e.*field * factor;
      if (std::isfinite(v)) pts.emplace_back(sx(double(e.step)), sy(v));
    }
    if (line && pts.size() >= 2) svg.polyline(pts, "fill=\"none\" stroke-width=\"1.5\"");
    svg << "<g stroke=\"#ffffff\" stroke-width=\"1\">\n";
    for (const auto& p : pts) marker(svg, m, p.first, p.second, marker_r);
    svg << "</g>\n</g>\n";
  };
  // With mid-epoch evaluations: their hollow markers, smaller than the
  // epochs' (and shrinking where evaluations crowd, as the epochs' do), and
  // the line through them and the epoch ends in step order; the epochs'
  // markers are drawn over both.
  double r_mid = kMidMarker;
  if (have_evals) {
    std::vector<double> at;
    for (const auto& e : r.evals) at.push_back(sx(double(e.step)));
    for (const auto& e : r.epochs) at.push_back(sx(double(e.step)));
    std::sort(at.begin(), at.end());
    for (size_t i = 1; i < at.size(); ++i) r_mid = std::min(r_mid, std::max(1.0, 0.4 * (at[i] - at[i - 1])));
  }
  auto mid_series = [&](const char* cls, const char* color, Marker m, double EpochPoint::*efield,
                        double EvalPoint::*field, const Scale& sy, double factor) {
    std::vector<std::pair<int64_t, std::pair<double, bool>>> by_step;  // (step, (value, mid))
    for (const auto& e : r.evals) by_step.push_back({e.step, {e.*field * factor, true}});
    for (const auto& e : r.epochs) by_step.push_back({e.step, {e.*efield * factor, false}});
    std::stable_sort(by_step.begin(), by_step.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<SeriesPoint> all;
    for (const auto& p : by_step)
      if (std::isfinite(p.second.first)) all.push_back({sx(double(p.first)), sy(p.second.first), p.second.second});
    const std::vector<SeriesPoint> pts = thin(all);
    svg << "<g class=\"series " << cls << "\" fill=\"#ffffff\" stroke=\"" << color << "\">\n";
    Points line;
    for (const auto& p : pts) line.emplace_back(p.x, p.y);
    if (line.size() >= 2) svg.polyline(line, "fill=\"none\" stroke-width=\"1.5\"");
    svg << "<g stroke-width=\"1.2\">\n";
    for (const auto& p : pts)
      if (p.mid) marker(svg, m, p.x, p.y, r_mid);
    svg << "</g>\n</g>\n";
  };
  if (have_epochs) epoch_series("train-loss", kTrainColor, Marker::kCircle, &EpochPoint::train_loss, sloss, 1);
  if (have_evals)
    mid_series("test-loss-mid", kTestColor, Marker::kSquare, &EpochPoint::test_loss, &EvalPoint::test_loss, sloss, 1);
  if (have_epochs)
    epoch_series("test-loss", kTestColor, Marker::kSquare, &EpochPoint::test_loss, sloss, 1, !have_evals);
  if (!have_steps && !have_epochs && !have_evals)
    svg.text((f1.left + f1.right) / 2, (f1.top + f1.bottom) / 2 + 0.35 * kLabelFont, "no training step recorded",
             "note", "middle", " font-size=\"" + num(kLabelFont) + "\" fill=\"" + kMuted + "\"");
  svg << "<rect class=\"frame\" x=\"" << f1.left << "\" y=\"" << f1.top << "\" width=\"" << f1.width() << "\" height=\""
      << f1.height() << "\" fill=\"none\" stroke=\"" << kInk << "\" stroke-width=\"1\"/>\n";
  svg << "</g>\n";

  // --- accuracy panel ---
  svg << "<g id=\"panel-accuracy\">\n";
  if (have_acc) {
    svg << "<g class=\"grid\" stroke=\"" << kGrid << "\" stroke-width=\"1\">\n";
    for (double t : acc_axis.ticks) svg.line(f2.left, sacc(t), f2.right, sacc(t));
    for (double t : step_axis.ticks) svg.line(sx(t), f2.top, sx(t), f2.bottom);
    svg << "</g>\n";
    if (have_evals)
      mid_series("test-accuracy-mid", kAccColor, Marker::kCircle, &EpochPoint::test_accuracy, &EvalPoint::test_accuracy,
                 sacc, 100);
    if (have_epochs)
      epoch_series("test-accuracy", kAccColor, Marker::kCircle, &EpochPoint::test_accuracy, sacc, 100, !have_evals);
  } else {
    svg.text((f2.left + f2.right) / 2, (f2.top + f2.bottom) / 2 + 0.35 * kLabelFont,
             "no epoch finished: no test accuracy yet", "note", "middle",
             " font-size=\"" + num(kLabelFont) + "\" fill=\"" + kMuted + "\"");
  }
  svg << "<rect class=\"frame\" x=\"" << f2.left << "\" y=\"" << f2.top << "\" width=\"" << f2.width() << "\" height=\""
      << f2.height() << "\" fill=\"none\" stroke=\"" << kInk << "\" stroke-width=\"1\"/>\n";
  svg << "</g>\n";

  // --- axes ---
  const std::string tick_style = " stroke=\"" + std::string(kInk) + "\" stroke-width=\"1\"";
  const std::string title_attrs = " font-size=\"" + num(kLabelFont) + "\"";
  auto y_axis_svg = [&](const char* id, const Axis& a, const Scale& sy, const Frame& f, const std::string& title,
                        bool ticks) {
    svg << "<g id=\"" << id << "\" class=\"axis\"" << tick_style << ">\n";
    if (ticks)
      for (size_t i = 0; i < a.ticks.size(); ++i) {
        double ty = sy(a.ticks[i]);
        svg.line(f.left - kTick, ty, f.left, ty, "tick");
        svg.text(f.left - kTick - 4, ty + 0.36 * kTickFont, a.labels[i], "tick-label", "end", " stroke=\"none\"");
      }
    double cy = (f.top + f.bottom) / 2;
    svg.text(ytitle_base, cy, title, "axis-title", "middle",
             title_attrs + " stroke=\"none\" transform=\"rotate(-90 " + num(ytitle_base) + " " + num(cy) + ")\"");
    svg << "</g>\n";
  };
  y_axis_svg("axis-loss", loss_axis, sloss, f1, "loss", have_loss);
  y_axis_svg("axis-accuracy", acc_axis, sacc, f2, "test accuracy (%)", have_acc);

  svg << "<g id=\"axis-step-shared\" class=\"axis\"" << tick_style << ">\n";
  for (double t : step_axis.ticks) svg.line(sx(t), f1.bottom, sx(t), f1.bottom + kTick, "tick");
  svg << "</g>\n";
  svg << "<g id=\"axis-step\" class=\"axis\"" << tick_style << ">\n";
  for (size_t i = 0; i < step_axis.ticks.size(); ++i) {
    double tx = sx(step_axis.ticks[i]);
    svg.line(tx, f2.bottom, tx, f2.bottom + kTick, "tick");
    svg.text(tx, step_label_base, step_axis.labels[i], "tick-label", "middle", " stroke=\"none\"");
  }
  svg.text((f2.left + f2.right) / 2, step_title_base, "step", "axis-title", "middle", title_attrs + " stroke=\"none\"");
  svg << "</g>\n";
  if (spe > 0) {
    svg << "<g id=\"axis-epoch\" class=\"axis\"" << tick_style << ">\n";
    for (size_t i = 0; i < epoch_axis.ticks.size(); ++i) {
      double tx = sepoch(epoch_axis.ticks[i]);
      svg.line(tx, f1.top - kTick, tx, f1.top, "tick");
      svg.text(tx, epoch_label_base, epoch_axis.labels[i], "tick-label", "middle", " stroke=\"none\"");
    }
    svg.text((f1.left + f1.right) / 2, epoch_title_base, "epoch", "axis-title", "middle",
             title_attrs + " stroke=\"none\"");
    svg << "</g>\n";
  }

  // --- legend ---
  svg << "<g id=\"legend\" font-size=\"" << kLegendFont << "\">\n";
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    double ex = f1.left, base = legend_top + ri * row_h + kAscent * kLegendFont;
    double mid_y = base - 0.36 * kLegendFont;
    for (size_t i : rows[ri]) {
      const Entry& e = entries[i];
      svg << "<g class=\"legend-entry\" data-series=\"" << e.series << "\">\n";
      const bool mid = e.series == "test-loss-mid" || e.series == "test-accuracy-mid";
      const std::string of = mid ? e.series.substr(0, e.series.size() - 4) : e.series;  // the epochs' series
      const char* color = of == "train-loss"      ? kTrainColor
                          : of == "test-loss"     ? kTestColor
                          : of == "test-accuracy" ? kAccColor
                                                  : kLossColor;
      std::string stroke = " stroke=\"" + std::string(color) + "\"";
      if (e.series == "loss-raw")
        stroke += " stroke-opacity=\"0.3\" stroke-width=\"1\"";
      else if (e.series == "loss-smooth")
        stroke += " stroke-width=\"2\"";
      else
        stroke += " stroke-width=\"1.5\"";
      svg << "<line x1=\"" << ex << "\" y1=\"" << mid_y << "\" x2=\"" << ex + sample_w << "\" y2=\"" << mid_y << "\""
          << stroke << "/>\n";
      if (e.series == "train-loss" || e.series == "test-loss" || e.series == "test-accuracy") {
        svg << "<g fill=\"" << color << "\" stroke=\"#ffffff\" stroke-width=\"1\">\n";
        marker(svg, e.series == "test-loss" ? Marker::kSquare : Marker::kCircle, ex + sample_w / 2, mid_y);
        svg << "</g>\n";
      } else if (mid) {
        svg << "<g fill=\"#ffffff\" stroke=\"" << color << "\" stroke-width=\"1.2\">\n";
        marker(svg, e.series == "test-loss-mid" ? Marker::kSquare : Marker::kCircle, ex + sample_w / 2, mid_y,
               kMidMarker);
        svg << "</g>\n";
      }
      svg.text(ex + sample_w + sample_gap, base, e.label, nullptr);
      svg << "</g>\n";
      ex += sample_w + sample_gap + text_width(e.label, kLegendFont) + entry_gap;
    }
  }
  svg << "</g>\n";

  // --- caption ---
  svg << "<g id=\"caption\" font-size=\"" << kCaptionFont << "\" fill=\"" << kMuted << "\">\n";
  for (size_t i = 0; i < caption.size(); ++i)
    svg.text(kPad, caption_top + i * caption_line + kAscent * kCaptionFont, caption[i], "caption-line");
  svg << "</g>\n";
  svg << "</svg>\n";
  return svg.s;
}

void write_plot(const std::string& path, const TrainingRecord& r) {
  const std::string svg = render_plot(r);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Failure(kRuntime, "--plot: cannot write " + path + " (" + std::strerror(errno) + ")");
  f.write(svg.data(), std::streamsize(svg.size()));
  f.close();
  if (!f) {  // (a full disk): no half-written chart left behind
    const std::string why = std::strerror(errno);
    std::remove(path.c_str());
    throw Failure(kRuntime, "--plot: cannot write " + path + " (" + why + ")");
  }
}

}  // namespace dpcli
