#!/usr/bin/env bash
# infergate's self-contained demo: installs dependencies, builds, starts infergate on its
# embedded default configuration (socket mode, identity model), runs a short keep-alive load
# with infergate-bench (closed loop, one request in flight per connection), and prints a report
# (rate, latency percentiles, errors, what /metrics counted).
#
# Usage: scripts/demo.sh [--mode socket|xdp-filter|afxdp] [--duration SECONDS] [--connections N]
#
# --mode xdp-filter runs the gateway in a fresh network namespace behind a veth pair with the
# XDP ingress program attached, loads it from a client namespace, sends a few malformed
# requests (reset by the XDP program), and adds the XDP counters to the report.
# --mode afxdp does the same with the XDP program redirecting to AF_XDP sockets and infergate's
# own TCP stack serving (scripts/demo-afxdp.sh): curl, a 4 MiB tensor, ping/ARP, wrk, counters.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=5
CONNS=32
MODE=socket
source bench/lib.sh
parse_opts "demo: " --duration DURATION --connections CONNS --mode MODE -h help=2,15 --help help=2,15 -- "$@"

# The build's progress, one line per step (scripts/lib/build-progress.sh); on failure the error.
source scripts/lib/build-progress.sh
BUILD_LOG=$(mktemp /tmp/infergate-build.XXXXXX)
echo "demo: installing dependencies, configuring and building infergate (first time: several minutes)..."
run_build "$BUILD_LOG" bash scripts/build.sh
rm -f "$BUILD_LOG"
BIN=build/app/infergate
case "$MODE" in
  socket) ;;
  xdp-filter) exec bash scripts/demo-xdp.sh --duration "$DURATION" --connections "$CONNS" ;;
  afxdp) exec bash scripts/demo-afxdp.sh --duration "$DURATION" --connections "$CONNS" ;;
  *) echo "demo: unknown mode '$MODE' (socket, xdp-filter or afxdp)" >&2; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/infergate-demo.XXXXXX)
cleanup() {
  [ -n "${GW_PID:-}" ] && kill -TERM "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

for port in 8000 8002; do
  if ss -ltnH "sport = :$port" | grep -q .; then
    echo "demo: port $port is in use; stop what listens there (ss -ltnp 'sport = :$port')" >&2
    exit 1
  fi
done

echo "== infergate demo: socket mode, identity model, embedded default config"
"$BIN" run >"$WORK/infergate.log" 2>&1 &
GW_PID=$!
wait_serving "$WORK/infergate.log" "$GW_PID"

echo "== one request with curl"
curl -sS -X POST http://127.0.0.1:8000/v2/models/identity/infer \
  -H 'Content-Type: application/json' \
  -d '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}'
echo

echo "== load: infergate-bench, ${CONNS} keep-alive connections (closed loop), ${DURATION}s, KServe v2 infer (FP32 1x16)"
build/bench/load/infergate-bench -u 127.0.0.1:8000 --mode closed --concurrency "$CONNS" \
  -d "$DURATION" --warmup 0 --progress never --json "$WORK/bench.json" >"$WORK/bench.out"
METRICS=$(curl -sS http://127.0.0.1:8002/metrics)
/usr/bin/python3 - "$WORK/bench.json" <<PY
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latency_us"]
non2xx = sum(v for k, v in r["errors"].items() if k.startswith("http_"))
metrics = """$METRICS"""
ok = sum(float(l.split()[-1]) for l in metrics.splitlines()
         if l.startswith('infergate_requests_total{') and 'model="identity"' in l and 'code="200"' in l)
print("== report")
print("  requests       %d in %.1f s" % (r["ok"] + r["error_count"], r["duration_s"]))
print("  rate           %.0f req/s" % r["achieved_rate"])
print("  latency        p50 %d us   p90 %d us   p99 %d us   max %d us" % (lat["p50"], lat["p90"], lat["p99"], lat["max"]))
print("  errors         %d (non-2xx %d)" % (r["error_count"], non2xx))
print("  /metrics       infergate_requests_total{model=identity,code=200} = %d" % ok)
PY
