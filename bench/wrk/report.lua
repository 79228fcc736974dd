-- Shared by the wrk scripts (loaded with dofile): at the end prints one JSON line
-- "WRK_JSON {...}" with the figures, for scripts to parse.
function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write +
                 summary.errors.status + summary.errors.timeout
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_s":%.3f,"rps":%.1f,"errors":%d,"non2xx":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    errors, summary.errors.status, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
