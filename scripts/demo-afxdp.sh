#!/usr/bin/env bash
# The afxdp demo (called by scripts/demo.sh --mode afxdp; needs root and a build): two fresh
# network namespaces joined by a veth pair; infergate in afxdp mode in one (XDP program
# redirecting port 8000 to an AF_XDP socket in copy mode, infergate's own TCP stack), curl, a
# 4 MiB tensor, ping and wrk in the other; a report with the TCP, AF_XDP and XDP counters.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=5; CONNS=32
BIN=${INFERGATE_BIN:-$PWD/build/app/infergate}
source bench/lib.sh
parse_opts "demo-afxdp: " --duration DURATION --connections CONNS --binary BIN -- "$@"
[ "$(id -u)" -eq 0 ] || { echo "demo-afxdp: needs root (network namespaces, XDP, AF_XDP)" >&2; exit 1; }
source scripts/lib/demo-netns.sh  # cwd is the repository root (see above)
demo_netns_setup iga 233
# A userspace stack sees the frames as sent: the gateway side checksums in software too.
ip netns exec "$GW" ethtool -K "$GIF" tx off >/dev/null 2>&1 || true

cat >"$WORK/gw.yaml" <<YAML
mode: afxdp
reactors: 1
listeners: [{name: http, address: 0.0.0.0, port: 8000, protocol: http}]
admin: {address: 127.0.0.1, port: 8002}
limits: {max_body_bytes: 67108864}
xdp: {interface: $GIF, attach: native}
$IDENTITY_MODELS
  - name: big
    max_batch_size: 0
    inputs: [{name: INPUT0, datatype: UINT8, shape: [-1]}]
    outputs: [{name: OUTPUT0, datatype: UINT8, shape: [-1]}]
YAML
echo "== infergate demo: afxdp mode on veth $GIF (namespace $GW), clients in namespace $CL"
ip netns exec "$GW" "$BIN" run -c "$WORK/gw.yaml" >"$WORK/infergate.log" 2>&1 &
GW_PID=$!
wait_serving "$WORK/infergate.log" "$GW_PID" 150

echo "== one request with curl (kernel TCP in $CL -> XDP redirect -> AF_XDP -> infergate's TCP)"
ip netns exec "$CL" curl -sS --max-time 5 "http://$GW_IP:8000/v2/models/identity/infer" \
  -d '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}'
echo
echo "== a 4 MiB binary tensor up and back"
ip netns exec "$CL" /usr/bin/python3 - "$GW_IP" <<'PY'
import json, os, socket, sys, time
raw = os.urandom(4 << 20)
hdr = json.dumps({"inputs": [{"name": "INPUT0", "shape": [len(raw)], "datatype": "UINT8",
                              "parameters": {"binary_data_size": len(raw)}}],
                  "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
s = socket.create_connection((sys.argv[1], 8000), timeout=30)
t0 = time.time()
s.sendall(b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: %d\r\n"
          b"Content-Length: %d\r\n\r\n" % (len(hdr), len(hdr) + len(raw)) + hdr + raw)
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(65536)
head, body = buf.split(b"\r\n\r\n", 1)
h = {l.split(b":")[0].lower(): l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")[1:]}
n = int(h[b"content-length"])
while len(body) < n:
    body += s.recv(1 << 20)
k = int(h[b"inference-header-content-length"])
print("   %s, %d bytes back in %.2f s, byte-exact: %s" % (head.split(b"\r\n")[0].decode(), n - k,
      time.time() - t0, body[k:] == raw))
PY
echo "== ping (ICMP and ARP still answered by the kernel)"
ip netns exec "$CL" ip neigh flush dev "$CIF"
ip netns exec "$CL" /usr/bin/python3 - "$GW_IP" <<'PY'
import socket, struct, sys
def csum(b):
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.settimeout(2)
b = struct.pack("!BBHHH", 8, 0, 0, 0x4242, 1) + b"afxdp-demo-ping!"
s.sendto(b[:2] + struct.pack("!H", csum(b)) + b[4:], (sys.argv[1], 0))
try:
    s.recvfrom(2048); print("   echo reply from", sys.argv[1])
except socket.timeout:
    print("   no echo reply")
PY
ip netns exec "$CL" ip neigh show "$GW_IP" dev "$CIF" | sed 's/^/   ARP: /'

echo "== load: wrk from $CL, ${CONNS} keep-alive connections, ${DURATION}s, KServe v2 infer (FP32 1x16)"
ip netns exec "$CL" wrk -t 1 -c "$CONNS" -d "${DURATION}s" -s bench/wrk/infer.lua "http://$GW_IP:8000/" >"$WORK/wrk.out"
ip netns exec "$GW" curl -sS http://127.0.0.1:8002/metrics >"$WORK/metrics"
/usr/bin/python3 - "$WORK/wrk.out" "$WORK/metrics" <<'PY'
import json, re, sys
r = json.loads(re.search(r"WRK_JSON (\{.*\})", open(sys.argv[1]).read()).group(1))
m = open(sys.argv[2]).read()
print("== report")
print("  requests       %d in %.1f s" % (r["requests"], r["duration_s"]))
print("  rate           %.0f req/s" % r["rps"])
print("  latency        p50 %d us   p90 %d us   p99 %d us   max %d us" % (r["p50_us"], r["p90_us"], r["p99_us"], r["max_us"]))
print("  errors         %d (non-2xx %d)" % (r["errors"], r["non2xx"]))
print("  counters (non-zero):")
for line in m.splitlines():
    if re.match(r"infergate_(tcp_(accepted|segments_in|segments_out|retransmits|drops)|afxdp_|xdp_packets)", line) \
            and not line.endswith(" 0"):
        print("    " + line)
PY
