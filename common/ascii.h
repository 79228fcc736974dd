#pragma once
// Small ASCII helpers for parsing untrusted text: the HTTP/1.1 request parser
// (frontend/http1_parser.cc), the URL parser and HTTP/1.1 response reader
// (backends/http_client.cc) and the Prometheus text parser (backends/prometheus_text.cc).
// Locale-free, no allocation except printable(). Thread-safe (no state).

#include <cstddef>
#include <string>
#include <string_view>

namespace infergate::common::ascii {

inline bool isDigit(char c) { return c >= '0' && c <= '9'; }
inline bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A printable rendering of untrusted bytes for messages (at most 60 characters).
inline std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 60)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (s.size() > 60) out += "...";
  return out;
}

}  // namespace infergate::common::ascii
