#!/usr/bin/env bash
# The xdp-filter demo (called by scripts/demo.sh --mode xdp-filter; needs root and a build):
# two fresh network namespaces joined by a veth pair; infergate in xdp-filter mode in one,
# infergate-bench and a malformed-request sender in the other; a report with the XDP counters.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=5; CONNS=32
source bench/lib.sh
parse_opts "demo-xdp: " --duration DURATION --connections CONNS -- "$@"
[ "$(id -u)" -eq 0 ] || { echo "demo-xdp: needs root (network namespaces, XDP)" >&2; exit 1; }
BIN=$PWD/build/app/infergate
source scripts/lib/demo-netns.sh  # cwd is the repository root (see above)
demo_netns_setup igd 232

cat >"$WORK/gw.yaml" <<YAML
mode: xdp-filter
listeners: [{name: http, address: 0.0.0.0, port: 8000, protocol: http}]
admin: {address: 127.0.0.1, port: 8002}
xdp: {interface: $GIF, attach: native, methods: [GET, POST], path_prefixes: ["/v2/"]}
$IDENTITY_MODELS
YAML
echo "== infergate demo: xdp-filter mode on veth $GIF (namespace $GW), clients in namespace $CL"
ns_exec "$GW" "$BIN" run -c "$WORK/gw.yaml" >"$WORK/infergate.log" 2>&1 &
GW_PID=$!
wait_serving "$WORK/infergate.log" "$GW_PID"

echo "== load: infergate-bench from $CL, ${CONNS} keep-alive connections (closed loop), ${DURATION}s, KServe v2 infer (FP32 1x16)"
ip netns exec "$CL" "$PWD/build/bench/load/infergate-bench" -u "$GW_IP:8000" --mode closed \
  --concurrency "$CONNS" -d "$DURATION" --warmup 0 --progress never --json "$WORK/bench.json" >"$WORK/bench.out"
echo "== 20 malformed request starts (bad method, path outside /v2/, bad version)"
ip netns exec "$CL" /usr/bin/python3 - "$GW_IP" <<'PY'
import socket, sys
bad = [b"BREW /v2/x HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
       b"GET /v2/x HTTP/9.1\r\nHost: x\r\n\r\n"]
reset = 0
for i in range(20):
    s = socket.create_connection((sys.argv[1], 8000), timeout=3)
    s.sendall(bad[i % 3])
    try:
        if not s.recv(100):
            pass
    except (ConnectionResetError, socket.timeout):
        reset += 1
    s.close()
print("   %d of 20 were reset by the XDP program" % reset)
PY
ip netns exec "$GW" curl -sS http://127.0.0.1:8002/metrics >"$WORK/metrics"
/usr/bin/python3 - "$WORK/bench.json" "$WORK/metrics" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latency_us"]
non2xx = sum(v for k, v in r["errors"].items() if k.startswith("http_"))
m = open(sys.argv[2]).read()
print("== report")
print("  requests       %d in %.1f s" % (r["ok"] + r["error_count"], r["duration_s"]))
print("  rate           %.0f req/s" % r["achieved_rate"])
print("  latency        p50 %d us   p90 %d us   p99 %d us   max %d us" % (lat["p50"], lat["p90"], lat["p99"], lat["max"]))
print("  errors         %d (non-2xx %d)" % (r["error_count"], non2xx))
print("  XDP counters (non-zero):")
for line in m.splitlines():
    if line.startswith("infergate_xdp_packets_total") and not line.endswith(" 0"):
        print("    " + line)
PY
