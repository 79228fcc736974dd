#include "gpu/gpu_view.h"

#include <cmath>
#include <cstdlib>
#include <iterator>

#include "fmt/format.h"

namespace infergate::gpu {

namespace {

// For the terminal: control characters (and DEL) become '?'; truncated to `width` bytes.
std::string cell(std::string_view s, size_t width) {
  std::string out(s.substr(0, width));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

std::string signedBytes(double per_s) {
  const int64_t b = static_cast<int64_t>(std::llround(per_s));
  if (b == 0) return "0 B";
  return (b > 0 ? "+" : "-") + formatBytes(b > 0 ? b : -b);
}

std::string formatAgeMs(uint64_t ms) {
  const uint64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string flagsOf(bool leak, bool anomaly, bool quota) {
  std::string f;
  auto add = [&](const char* x) {
    if (!f.empty()) f += ',';
    f += x;
  };
  if (leak) add("LEAK");
  if (anomaly) add("3X");
  if (quota) add("QUOTA");
  return f.empty() ? "-" : f;
}

const char* eventTypeName(int type) {
  switch (type) {
    case IG_GPU_EV_ALLOC_FAILED: return "alloc_failed";
    case IG_GPU_EV_LARGE_ALLOC: return "large_alloc";
    default: return "unknown";
  }
}

template <typename... T>
void appendf(std::string& out, fmt::format_string<T...> f, T&&... args) {
  fmt::format_to(std::back_inserter(out), f, std::forward<T>(args)...);
}

// JSON writer helpers.
void jsonDouble(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", v);
}

void jsonContainer(std::string& out, const ContainerInfo& c) {
  out += "{\"label\":" + jsonString(c.label());
  out += ",\"cgroup_path\":" + jsonString(c.cgroup_path);
  out += ",\"runtime\":" + jsonString(c.runtime);
  out += ",\"container_id\":" + jsonString(c.container_id);
  out += ",\"pod_uid\":" + jsonString(c.pod_uid);
  out += ",\"qos\":" + jsonString(c.qos);
  out += ",\"pod\":" + jsonString(c.pod_name);
  out += ",\"namespace\":" + jsonString(c.pod_namespace);
  out += '}';
}

void jsonStrings(std::string& out, const std::vector<std::string>& v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += jsonString(v[i]);
  }
  out += ']';
}

// Length of a valid UTF-8 sequence starting at s[i] (1..4), or 0 when invalid.
size_t utf8Len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return n;
}

}  // namespace

std::string formatBytes(int64_t bytes) {
  const bool neg = bytes < 0;
  const double a = neg ? -static_cast<double>(bytes) : static_cast<double>(bytes);
  const char* sign = neg ? "-" : "";
  if (a < 1024) return fmt::format("{}{} B", sign, static_cast<uint64_t>(a));
  if (a < 1024.0 * 1024) return fmt::format("{}{:.1f} KiB", sign, a / 1024);
  if (a < 1024.0 * 1024 * 1024) return fmt::format("{}{:.1f} MiB", sign, a / (1024.0 * 1024));
  if (a < 1024.0 * 1024 * 1024 * 1024)
    return fmt::format("{}{:.2f} GiB", sign, a / (1024.0 * 1024 * 1024));
  return fmt::format("{}{:.2f} TiB", sign, a / (1024.0 * 1024 * 1024 * 1024));
}

std::string formatNs(uint64_t ns) {
  if (ns == 0) return "-";
  if (ns < 1000) return fmt::format("{}ns", ns);
  if (ns < 1000000) return fmt::format("{:.1f}µs", static_cast<double>(ns) / 1e3);
  if (ns < 1000000000) return fmt::format("{:.2f}ms", static_cast<double>(ns) / 1e6);
  return fmt::format("{:.2f}s", static_cast<double>(ns) / 1e9);
}

std::string jsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8Len(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string validUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8Len(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string renderGpuText(const GpuView& view, size_t max_rows) {
  std::string out;
  if (!view.probes.active) {
    appendf(out, "GPU probes are off: {}\n",
        view.probes.reason.empty() ? "no reason given" : cell(view.probes.reason, 4096));
    return out;
  }
  appendf(out, "GPU probes: active, library {}, {} symbols attached, {} missing; {} processes, {} "
      "containers; detections: leak {}, anomaly {}, over quota {}; events {}\n",
      cell(view.probes.library, 4096), view.probes.attached.size(), view.probes.missing.size(),
      view.processes.size(), view.containers.size(), view.leak_detections_total,
      view.anomaly_detections_total, view.over_quota_detections_total, view.events_total);
  // fmt pads by display width, so "ΔMEM/s" and "µs" line up.
  appendf(out, "{:<8} {:<16} {:<20} {:>12} {:>11} {:>10} {:>10} {:>9} {:>9}  {}\n", "PID", "COMM",
          "CONTAINER", "DEVICE-MEM", "ΔMEM/s", "LAUNCH/s", "GRAPH/s", "SYNC-P50", "SYNC-P99",
          "FLAGS");
  size_t rows = 0;
  for (const ProcessView& p : view.processes) {
    if (max_rows != 0 && rows == max_rows) break;
    ++rows;
    appendf(out, "{:<8} {:<16} {:<20} {:>12} {:>11} {:>10.1f} {:>10.1f} {:>9} {:>9}  {}\n", p.tgid,
            cell(p.comm, 16), cell(p.container.label(), 20), formatBytes(p.device_bytes),
            signedBytes(p.device_bytes_per_s), p.launches_per_s, p.graph_launches_per_s,
            formatNs(p.sync_p50_ns), formatNs(p.sync_p99_ns),
            flagsOf(p.leak_suspect, p.anomaly, p.over_quota));
  }
  if (rows < view.processes.size()) appendf(out, "({} more processes)\n", view.processes.size() - rows);

  if (!view.containers.empty()) {
    appendf(out, "\n{:<20} {:<28} {:<16} {:>12} {:>11} {:>10} {:>6}  {}\n", "CONTAINER", "POD",
            "NAMESPACE", "DEVICE-MEM", "QUOTA", "LAUNCH/s", "PROCS", "FLAGS");
    for (const ContainerView& c : view.containers)
      appendf(out, "{:<20} {:<28} {:<16} {:>12} {:>11} {:>10.1f} {:>6}  {}\n", cell(c.label, 20),
          c.container.pod_name.empty() ? "-" : cell(c.container.pod_name, 28),
          c.container.pod_namespace.empty() ? "-" : cell(c.container.pod_namespace, 16),
          formatBytes(c.device_bytes), c.quota_bytes ? formatBytes(static_cast<int64_t>(c.quota_bytes)) : "-",
          c.launches_per_s, c.processes, c.over_quota ? "QUOTA" : "-");
  }

  bool leak_header = false;
  for (const ProcessView& p : view.processes) {
    if (!p.leak_suspect) continue;
    if (!leak_header) out += "\nLeak candidates:\n";
    leak_header = true;
    appendf(out, "  pid {} ({}) in {}: {} live, {} old allocations listed\n", p.tgid, cell(p.comm, 16),
        cell(p.container.label(), 64), formatBytes(p.device_bytes), p.leak_allocs.size());
    for (const AllocView& a : p.leak_allocs)
      appendf(out, "    {:>12}  {:<8} age {:<8} ptr 0x{:x}\n", formatBytes(static_cast<int64_t>(a.bytes)),
          memKindName(a.kind), formatAgeMs(a.age_ms), a.ptr);
  }

  if (!view.recent_events.empty()) {
    out += "\nRecent events:\n";
    for (const GpuEvent& e : view.recent_events)
      appendf(out, "  {} {} pid {} ({}) {} CUresult {}\n", eventTypeName(e.type), fnName(e.fn), e.tgid,
          cell(e.comm, 16), formatBytes(static_cast<int64_t>(e.bytes)), e.result);
  }
  return out;
}

std::string renderGpuJson(const GpuView& view) {
  std::string out;
  appendf(out, "{{\"taken_ns\":{},\"probes\":{{\"active\":{},\"library\":{},\"reason\":{},\"attached\":",
      view.taken_ns, view.probes.active, jsonString(view.probes.library),
      jsonString(view.probes.reason));
  jsonStrings(out, view.probes.attached);
  out += ",\"missing\":";
  jsonStrings(out, view.probes.missing);
  out += "},\"processes\":[";
  for (size_t i = 0; i < view.processes.size(); ++i) {
    const ProcessView& p = view.processes[i];
    if (i) out += ',';
    appendf(out, "{{\"pid\":{},\"comm\":{},\"container\":", p.tgid, jsonString(p.comm));
    jsonContainer(out, p.container);
    appendf(out, ",\"cgroup_id\":{},\"device_bytes\":{},\"host_bytes\":{},\"device_bytes_per_s\":",
        p.cgroup_id, p.device_bytes, p.host_bytes);
    jsonDouble(out, p.device_bytes_per_s);
    out += ",\"launches_per_s\":";
    jsonDouble(out, p.launches_per_s);
    out += ",\"graph_launches_per_s\":";
    jsonDouble(out, p.graph_launches_per_s);
    appendf(out, ",\"launches_total\":{},\"alloc_failures_total\":{},\"sync_p50_ns\":{},\"sync_p99_ns\":{},"
        "\"sync_mean_ns\":",
        p.launches_total, p.alloc_failures_total, p.sync_p50_ns, p.sync_p99_ns);
    jsonDouble(out, p.sync_mean_ns);
    out += ",\"baseline_ns\":";
    jsonDouble(out, p.baseline_ns);
    appendf(out, ",\"leak_suspect\":{},\"anomaly\":{},\"over_quota\":{},\"leak_allocs\":[", p.leak_suspect,
        p.anomaly, p.over_quota);
    for (size_t j = 0; j < p.leak_allocs.size(); ++j) {
      const AllocView& a = p.leak_allocs[j];
      if (j) out += ',';
      appendf(out, "{{\"ptr\":\"0x{:x}\",\"bytes\":{},\"age_ms\":{},\"kind\":\"{}\"}}", a.ptr, a.bytes,
          a.age_ms, memKindName(a.kind));
    }
    out += "]}";
  }
  out += "],\"containers\":[";
  for (size_t i = 0; i < view.containers.size(); ++i) {
    const ContainerView& c = view.containers[i];
    if (i) out += ',';
    appendf(out, "{{\"label\":{},\"container\":", jsonString(c.label));
    jsonContainer(out, c.container);
    appendf(out, ",\"cgroup_id\":{},\"device_bytes\":{},\"quota_bytes\":{},\"over_quota\":{},"
        "\"launches_per_s\":",
        c.cgroup_id, c.device_bytes, c.quota_bytes, c.over_quota);
    jsonDouble(out, c.launches_per_s);
    appendf(out, ",\"processes\":{}}}", c.processes);
  }
  out += "],\"stats\":{\"calls\":{";
  for (int f = 0; f < IG_GPU_FN_MAX; ++f) appendf(out, "{}\"{}\":{}", f ? "," : "", fnName(f), view.stats.calls[f]);
  appendf(out, "}},\"proc_map_full\":{},\"cgroup_map_full\":{},\"alloc_map_full\":{},\"call_map_full\":{},"
      "\"pending_map_full\":{},\"ringbuf_full\":{},\"returns_unmatched\":{}}}",
      view.stats.proc_map_full, view.stats.cgroup_map_full, view.stats.alloc_map_full,
      view.stats.call_map_full, view.stats.pending_map_full, view.stats.ringbuf_full,
      view.stats.returns_unmatched);
  appendf(out, ",\"detections\":{{\"leak\":{},\"anomaly\":{},\"over_quota\":{}}},\"events_total\":{},"
      "\"recent_events\":[",
      view.leak_detections_total, view.anomaly_detections_total, view.over_quota_detections_total,
      view.events_total);
  for (size_t i = 0; i < view.recent_events.size(); ++i) {
    const GpuEvent& e = view.recent_events[i];
    if (i) out += ',';
    appendf(out, "{{\"type\":\"{}\",\"fn\":\"{}\",\"pid\":{},\"tid\":{},\"comm\":{},\"cgroup_id\":{},"
        "\"bytes\":{},\"ptr\":\"0x{:x}\",\"ts_ns\":{},\"result\":{}}}",
        eventTypeName(e.type), fnName(e.fn), e.tgid, e.tid, jsonString(e.comm), e.cgroup_id,
        e.bytes, e.ptr, e.ts_ns, e.result);
  }
  out += "]}";
  return out;
}

}  // namespace infergate::gpu
