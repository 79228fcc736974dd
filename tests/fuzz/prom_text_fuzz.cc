// libFuzzer target: the Prometheus text `infergate top` reads from a gateway's admin port
// (app/prom_text_parser.h), and everything top does with it (app/top.h): the snapshot, the
// rates and percentiles between two scrapes, the rendering. The body is untrusted (another
// process, perhaps across a network). Nothing may crash, read out of bounds or loop; every
// bound holds (samples, labels, name and value sizes, histogram buckets); every rendered line
// fits the width and holds only printable ASCII (a label cannot move the operator's cursor).
//
// Input: two scrapes separated by the first NUL byte (none: the first is empty); the first
// byte of the input also picks small limits (odd) or the defaults (even).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "app/prom_text_parser.h"
#include "app/top.h"

#define FUZZ_CHECK(cond)                                                                        \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "fuzz: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace {

using infergate::app::PromLimits;
using infergate::app::PromSample;
using infergate::app::PromScrape;
namespace top = infergate::app::top;

bool nameOk(const std::string& n, bool colons) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(letter || (colons && c == ':') || (i > 0 && digit))) return false;
  }
  return true;
}

void checkScrape(const PromScrape& s, const PromLimits& l) {
  FUZZ_CHECK(s.samples.size() <= l.max_samples);
  for (const PromSample& x : s.samples) {
    FUZZ_CHECK(nameOk(x.name, true) && x.name.size() <= l.max_name_bytes);
    FUZZ_CHECK(x.labels.size() <= l.max_labels);
    for (const auto& [k, v] : x.labels) {
      FUZZ_CHECK(nameOk(k, false) && k.size() <= l.max_name_bytes);
      FUZZ_CHECK(v.size() <= l.max_label_value_bytes);
    }
  }
}

void checkHistograms(const top::Snapshot& s) {
  for (const auto& [k, r] : s.requests) {
    FUZZ_CHECK(r.duration.buckets.size() <= top::kMaxHistogramBuckets);
    for (size_t i = 1; i < r.duration.buckets.size(); ++i) {
      FUZZ_CHECK(r.duration.buckets[i - 1].first < r.duration.buckets[i].first);
    }
  }
  for (const auto& [k, b] : s.batchers) {
    FUZZ_CHECK(b.batch_size.buckets.size() <= top::kMaxHistogramBuckets);
  }
}

void checkLines(const std::vector<std::string>& lines, size_t width, size_t height) {
  if (height > 0) FUZZ_CHECK(lines.size() <= height);
  for (const std::string& l : lines) {
    if (width > 0) FUZZ_CHECK(l.size() <= width);
    for (char c : l) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  PromLimits limits;
  if (size > 0 && (data[0] & 1)) {
    limits.max_body_bytes = 4096;
    limits.max_samples = 64;
    limits.max_line_bytes = 256;
    limits.max_labels = 4;
    limits.max_name_bytes = 32;
    limits.max_label_value_bytes = 16;
  }
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view a = nul == std::string_view::npos ? std::string_view() : in.substr(0, nul);
  const std::string_view b = nul == std::string_view::npos ? in : in.substr(nul + 1);

  absl::StatusOr<PromScrape> pa = infergate::app::parsePromText(a, limits);
  absl::StatusOr<PromScrape> pb = infergate::app::parsePromText(b, limits);
  if (!pb.ok()) {
    FUZZ_CHECK(pb.status().code() == absl::StatusCode::kResourceExhausted);
    return 0;
  }
  checkScrape(*pb, limits);
  const top::Snapshot sb = top::buildSnapshot(*pb);
  checkHistograms(sb);
  top::Snapshot sa;
  if (pa.ok()) {
    checkScrape(*pa, limits);
    sa = top::buildSnapshot(*pa);
    checkHistograms(sa);
  }
  const top::Frame f = top::computeFrame(pa.ok() ? &sa : nullptr, sb, 1.0);
  for (const top::ModelRow& r : f.models) {
    FUZZ_CHECK(r.total > 0);
    FUZZ_CHECK(std::isnan(r.rate) || r.rate >= 0);  // counters never run backwards here
    FUZZ_CHECK(std::isnan(r.error_rate) || r.error_rate <= r.rate);
  }
  top::RenderOptions o;
  o.admin = "127.0.0.1:8002";
  o.status = "q quit";
  checkLines(top::renderFrame(f, o), 0, 0);
  o.width = 80;
  o.height = 24;
  checkLines(top::renderFrame(f, o), 80, 24);
  o.width = 1;
  o.height = 1;
  checkLines(top::renderFrame(f, o), 1, 1);
  return 0;
}
