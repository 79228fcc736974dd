#include "backends/prometheus_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "common/ascii.h"

namespace infergate::backends {
namespace {

using namespace common::ascii;  // isDigit, isAlpha, iequals, trim, printable

bool isNameStart(char c) { return isAlpha(c) || c == '_' || c == ':'; }
bool isNameChar(char c) { return isNameStart(c) || isDigit(c); }
bool isLabelStart(char c) { return isAlpha(c) || c == '_'; }
bool isLabelChar(char c) { return isLabelStart(c) || isDigit(c); }

// A float as Prometheus writes it: decimal or exponent notation, NaN, +Inf, -Inf.
bool parseValue(std::string_view s, double& out) {
  if (s.empty()) return false;
  bool neg = false;
  std::string_view t = s;
  if (t[0] == '+' || t[0] == '-') {
    neg = t[0] == '-';
    t.remove_prefix(1);
  }
  if (iequals(t, "inf") || iequals(t, "infinity")) {
    out = neg ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (iequals(t, "nan")) {
    out = std::nan("");
    return true;
  }
  if (t.empty() || !(isDigit(t[0]) || t[0] == '.')) return false;
  double v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size()) return false;
  out = neg ? -v : v;
  return true;
}

struct Sample {
  std::string_view name;
  std::vector<std::pair<std::string_view, std::string>> labels;  // values unescaped
  double value = 0;
};

// Parses one sample line (not a comment, not blank). False when the syntax is wrong.
bool parseSample(std::string_view l, Sample& s) {
  size_t i = 0;
  auto skipWs = [&] {
    while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
  };
  if (i >= l.size() || !isNameStart(l[i])) return false;
  const size_t name_start = i;
  while (i < l.size() && isNameChar(l[i])) ++i;
  s.name = l.substr(name_start, i - name_start);
  s.labels.clear();
  const size_t after_name = i;
  skipWs();
  if (i < l.size() && l[i] == '{') {
    ++i;
    for (;;) {
      skipWs();
      if (i >= l.size()) return false;
      if (l[i] == '}') {
        ++i;
        break;
      }
      if (!isLabelStart(l[i])) return false;
      const size_t ls = i;
      while (i < l.size() && isLabelChar(l[i])) ++i;
      std::string_view lname = l.substr(ls, i - ls);
      skipWs();
      if (i >= l.size() || l[i] != '=') return false;
      ++i;
      skipWs();
      if (i >= l.size() || l[i] != '"') return false;
      ++i;
      std::string value;
      for (;;) {
        if (i >= l.size()) return false;  // unterminated
        const char c = l[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= l.size()) return false;
          const char e = l[i++];
          if (e == 'n') {
            value += '\n';
          } else if (e == '\\' || e == '"') {
            value += e;
          } else {
            return false;  // the format knows only \\, \" and \n
          }
        } else {
          value += c;
        }
      }
      s.labels.emplace_back(lname, std::move(value));
      skipWs();
      if (i < l.size() && l[i] == ',') {
        ++i;
        continue;
      }
      skipWs();
      if (i < l.size() && l[i] == '}') {
        ++i;
        break;
      }
      return false;
    }
  } else if (i == after_name) {
    return false;  // a name without labels is followed by a blank, then the value
  }
  // Value, then an optional integer timestamp.
  skipWs();
  const size_t vs = i;
  while (i < l.size() && l[i] != ' ' && l[i] != '\t') ++i;
  if (!parseValue(l.substr(vs, i - vs), s.value)) return false;
  skipWs();
  if (i < l.size()) {
    size_t ts = i;
    if (l[ts] == '-') ++ts;
    if (ts >= l.size()) return false;
    for (size_t k = ts; k < l.size(); ++k) {
      if (!isDigit(l[k])) {
        // Trailing blanks after the timestamp are fine.
        if (!trim(l.substr(k)).empty()) return false;
        break;
      }
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::optional<double>> sumMetricSamples(
    std::string_view text, std::string_view metric,
    const std::vector<std::pair<std::string, std::string>>& match) {
  double sum = 0;
  bool any = false;
  size_t lineno = 0;
  Sample s;
  while (!text.empty()) {
    ++lineno;
    const size_t nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    std::string_view t = trim(l);
    if (t.empty() || t[0] == '#') continue;  // # HELP, # TYPE and other comments
    if (!parseSample(t, s)) {
      return absl::InvalidArgumentError(
          fmt::format("metrics line {} is not Prometheus text format: '{}'", lineno,
                      printable(t)));
    }
    if (s.name != metric) continue;
    bool all = true;
    for (const auto& [k, v] : match) {
      bool found = false;
      for (const auto& [lk, lv] : s.labels) {
        if (lk == k) {
          found = lv == v;
          break;
        }
      }
      if (!found) {
        all = false;
        break;
      }
    }
    if (!all || std::isnan(s.value)) continue;
    sum += s.value;
    any = true;
  }
  if (!any) return std::optional<double>();
  return std::optional<double>(sum);
}

}  // namespace infergate::backends
