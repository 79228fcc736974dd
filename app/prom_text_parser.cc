#include "app/prom_text_parser.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "fmt/format.h"

namespace infergate::app {

namespace {

bool nameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool nameChar(char c) { return nameStart(c) || (c >= '0' && c <= '9'); }

void skipBlanks(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

// A metric name (colons allowed) or a label name (no colons); empty when there is none or it
// is longer than `max`.
std::string_view takeName(std::string_view s, size_t& i, size_t max, bool colons) {
  const size_t start = i;
  if (i >= s.size() || !nameStart(s[i]) || (!colons && s[i] == ':')) return {};
  while (i < s.size() && nameChar(s[i]) && (colons || s[i] != ':')) ++i;
  if (i - start > max) return {};
  return s.substr(start, i - start);
}

// A float of the format: [+-]digits[.digits][e[+-]digits], +Inf, -Inf, Inf, NaN.
bool parseValue(std::string_view v, double& out) {
  if (v.empty() || v.size() > 64) return false;
  if (v == "+Inf" || v == "Inf" || v == "+inf" || v == "inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (v == "-Inf" || v == "-inf") {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (v == "NaN" || v == "nan") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (v.front() == '+') v.remove_prefix(1);
  if (v.empty()) return false;
  // Only digits, one sign, '.', 'e'/'E': from_chars alone also takes "inf"/"nan" spellings and
  // hex with a prefix-less form we do not want.
  for (char c : v) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+')) {
      return false;
    }
  }
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range) {
    // Beyond double's range: the format has no such values; a hostile one is refused.
    return false;
  }
  return ec == std::errc() && p == v.data() + v.size();
}

}  // namespace

std::string_view PromSample::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

bool parsePromSampleLine(std::string_view line, const PromLimits& limits, PromSample& out) {
  out.name.clear();
  out.labels.clear();
  out.value = 0;
  if (line.size() > limits.max_line_bytes) return false;
  size_t i = 0;
  skipBlanks(line, i);
  const std::string_view name = takeName(line, i, limits.max_name_bytes, true);
  if (name.empty()) return false;
  out.name.assign(name);
  const size_t after_name = i;
  skipBlanks(line, i);
  bool blank = i > after_name;
  if (i < line.size() && line[i] == '{') {
    blank = false;  // the blank that counts is the one after the labels
    ++i;
    for (;;) {
      skipBlanks(line, i);
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      if (out.labels.size() >= limits.max_labels) return false;
      const std::string_view key = takeName(line, i, limits.max_name_bytes, false);
      if (key.empty()) return false;
      skipBlanks(line, i);
      if (i >= line.size() || line[i] != '=') return false;
      ++i;
      skipBlanks(line, i);
      if (i >= line.size() || line[i] != '"') return false;
      ++i;
      std::string value;
      for (;;) {
        if (i >= line.size()) return false;  // unterminated
        char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) return false;
          const char e = line[i++];
          if (e == 'n') {
            c = '\n';
          } else if (e == '\\' || e == '"') {
            c = e;
          } else {
            return false;
          }
        }
        if (value.size() >= limits.max_label_value_bytes) return false;
        value.push_back(c);
      }
      for (const auto& [k, v] : out.labels) {
        if (k == key) return false;  // a label twice: ambiguous, refused
      }
      out.labels.emplace_back(std::string(key), std::move(value));
      skipBlanks(line, i);
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return false;
    }
  }
  // At least one blank between the name (or labels) and the value.
  if (i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
    blank = true;
    skipBlanks(line, i);
  }
  if (!blank || i >= line.size()) return false;
  size_t end = i;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  if (!parseValue(line.substr(i, end - i), out.value)) return false;
  // An optional timestamp (integer milliseconds), then nothing.
  i = end;
  skipBlanks(line, i);
  if (i < line.size()) {
    size_t ts_end = i;
    if (line[ts_end] == '-') ++ts_end;
    const size_t digits = ts_end;
    while (ts_end < line.size() && line[ts_end] >= '0' && line[ts_end] <= '9') ++ts_end;
    if (ts_end == digits || ts_end - digits > 19) return false;
    i = ts_end;
    skipBlanks(line, i);
    if (i != line.size()) return false;
  }
  return true;
}

absl::StatusOr<PromScrape> parsePromText(std::string_view body, const PromLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    return absl::ResourceExhaustedError(
        fmt::format("the metrics body is {} bytes, more than the {} allowed", body.size(),
                    limits.max_body_bytes));
  }
  PromScrape out;
  PromSample sample;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    if (nl == std::string_view::npos) nl = body.size();
    std::string_view line = body.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    skipBlanks(line, i);
    if (i == line.size()) continue;  // blank
    if (line[i] == '#') {
      if (line.size() > limits.max_line_bytes) ++out.skipped_lines;
      continue;
    }
    if (!parsePromSampleLine(line, limits, sample)) {
      ++out.skipped_lines;
      continue;
    }
    if (out.samples.size() >= limits.max_samples) {
      return absl::ResourceExhaustedError(
          fmt::format("the metrics body has more than {} samples", limits.max_samples));
    }
    out.samples.push_back(std::move(sample));
    sample = PromSample();
  }
  return out;
}

}  // namespace infergate::app
