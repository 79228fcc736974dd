#!/usr/bin/env bash
# CPU cost of rejecting malformed requests: the same flood of malformed request starts (many
# connections, each sending one "BREW /v2/health/live HTTP/1.1" request start), sent from the
# client namespace of a veth pair once to infergate in xdp-filter mode (the XDP program answers
# with a RST) and once to NGINX answering 400, in one run. Reports CPU seconds per rejected
# request for each, and the ratio.
#
# Usage: sudo bench/xdp_reject_cpu.sh [--binary build/app/infergate] [--connections N]
#                                     [--concurrency C] [--max-seconds S] [--server-cpu N]
#                                     [--mode xdp-filter|afxdp]
#
# --mode afxdp: infergate in afxdp mode with xdp.syn_cookies: always. The program answers each
# SYN with a cookie SYN-ACK, drops the handshake's pure ACK (deferred accept) and answers the
# malformed first data segment with a RST itself: a rejected connection never reaches
# userspace (the AF_XDP rx counter delta is printed to show it). xdp-filter mode: the kernel
# does the handshake, the program resets the request start.
#
# Method. The gateway side runs in its own namespace, pinned to --server-cpu. For each server,
# over a window from just before the flood to SETTLE seconds after it (so that infergate's idle
# timeout has reaped the kernel sockets of the reset connections, and NGINX's lingering closes
# are done):
#   server CPU  = utime + stime of the server processes (/proc/PID/stat; NGINX master+worker);
#   softirq CPU = the softirq column of /proc/stat summed over all CPUs. On a veth pair the
#                 gateway's receive path (XDP, kernel TCP handshake, the RST) runs in softirq,
#                 in whichever CPU's context the sender runs; it also holds the client's own
#                 receive processing and anything else the machine does meanwhile, so it is an
#                 upper bound, measured the same way for both servers.
#   cost/request = (server CPU + softirq CPU) / rejected requests, where rejected = the XDP
#                 program's tx counter delta (infergate) or the 400 responses the client saw
#                 (NGINX). The client's own user/system time is not counted.
# Needs root (namespaces, XDP), nginx, python3. Namespaces are unique and always removed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/app/infergate; CONNS=3000; CONC=16; MAXS=60; SCPU=0; SETTLE=2; MODE=xdp-filter
source bench/lib.sh
parse_opts "" --binary BIN --connections CONNS --concurrency CONC --max-seconds MAXS \
  --server-cpu SCPU --mode MODE -- "$@"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, XDP)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "no infergate binary at $BIN (--binary)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx not found" >&2; exit 1; }
BIN=$(readlink -f "$BIN")
WORK=$(mktemp -d /tmp/ig-reject-cpu.XXXXXX)
bench_veth_up rc 233
ip netns exec "$CL" sysctl -qw net.ipv4.ip_local_port_range="10000 65000"
ip netns exec "$GW" sysctl -qw net.core.somaxconn=4096 net.ipv4.tcp_max_syn_backlog=4096

cat >"$WORK/flood.py" <<'PY'
# One malformed request start per connection; bounded in count and time. Prints JSON counts.
import json, socket, sys, threading, time
host, port, total, conc, maxs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
REQ = b"BREW /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
lock = threading.Lock()
counts = {"sent": 0, "reset": 0, "400": 0, "other": 0, "timeout": 0, "connect_fail": 0}
deadline = time.time() + maxs
left = [total]
def worker():
    while True:
        with lock:
            if left[0] <= 0 or time.time() > deadline:
                return
            left[0] -= 1
        try:
            s = socket.create_connection((host, port), timeout=3)
        except OSError:
            with lock: counts["connect_fail"] += 1
            continue
        try:
            s.sendall(REQ)
            with lock: counts["sent"] += 1
            data = s.recv(4096)
            k = "400" if data.startswith(b"HTTP/1.1 400") else "other"
        except ConnectionResetError:
            k = "reset"
        except socket.timeout:
            k = "timeout"
        except OSError:
            k = "other"
        finally:
            s.close()
        with lock: counts[k] += 1
t0 = time.time()
ts = [threading.Thread(target=worker) for _ in range(conc)]
for t in ts: t.start()
for t in ts: t.join()
counts["seconds"] = round(time.time() - t0, 3)
print(json.dumps(counts))
PY

softirq_ticks() { awk '/^cpu /{print $8}' /proc/stat; }
proc_ticks() {  # utime+stime of the given pids
  local t=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") ))
  done
  echo "$t"
}
HZ=$(getconf CLK_TCK)

metric() {  # sum of an infergate metric (all label sets matching a grep pattern)
  { ip netns exec "$GW" curl -s http://127.0.0.1:8002/metrics || true; } |
    awk -v re="$1" '$0 ~ re {s+=$NF} END {print s+0}'
}

measure() {  # name, port, pids...: runs the flood, prints "name rejected server_s softirq_s"
  local name=$1 port=$2; shift 2
  local s0 p0 s1 p1 out
  s0=$(softirq_ticks); p0=$(proc_ticks "$@")
  out=$(ip netns exec "$CL" /usr/bin/python3 "$WORK/flood.py" "$GW_IP" "$port" "$CONNS" "$CONC" "$MAXS")
  sleep "$SETTLE"
  s1=$(softirq_ticks); p1=$(proc_ticks "$@")
  echo "$name client: $out" >&2
  echo "$out" >"$WORK/$name.json"
  echo "$name $(( p1 - p0 )) $(( s1 - s0 ))"
}

# --- infergate, xdp-filter or afxdp mode ---------------------------------------------------
case "$MODE" in
  xdp-filter) EXTRA="" ;;
  afxdp) EXTRA="  syn_cookies: always
  rst_rate_limit: {rate_per_sec: 0}" ;;
  *) echo "--mode: xdp-filter or afxdp" >&2; exit 2 ;;
esac
cat >"$WORK/ig.yaml" <<YAML
mode: $MODE
reactors: 1
cpus: [$SCPU]
listeners: [{name: http, address: 0.0.0.0, port: 8000, protocol: http}]
admin: {address: 127.0.0.1, port: 8002}
limits: {idle_timeout_ms: 1000}
xdp:
  interface: $GIF
  attach: native
  methods: [GET, POST]
  path_prefixes: ["/v2/"]
$EXTRA
$IDENTITY_MODELS
YAML
ip netns exec "$GW" "$BIN" run -c "$WORK/ig.yaml" >"$WORK/ig.log" 2>&1 & IGPID=$!; PIDS+=($IGPID)
for _ in $(seq 100); do grep -q serving "$WORK/ig.log" && break; sleep 0.1; done
grep -q serving "$WORK/ig.log" || { echo "infergate did not start:"; cat "$WORK/ig.log"; exit 1; }
tx0=$(metric '^infergate_xdp_packets_total\{verdict="tx",reason="bad_')
rx0=$(metric '^infergate_afxdp_rx_frames_total')
read -r _ IG_P IG_S < <(measure infergate 8000 "$IGPID")
tx1=$(metric '^infergate_xdp_packets_total\{verdict="tx",reason="bad_')
rx1=$(metric '^infergate_afxdp_rx_frames_total')
IG_REJ=$(( ${tx1%.*} - ${tx0%.*} ))
if [ "$MODE" = afxdp ]; then
  echo "infergate afxdp: frames that reached userspace during the flood: $(( ${rx1%.*} - ${rx0%.*} ))" >&2
  ip netns exec "$GW" curl -s http://127.0.0.1:8002/metrics |
    grep -E 'reason="(syn_cookie_sent|cookie_ack_deferred|bad_method)"' | grep -v ' 0$' >&2 || true
fi
kill -TERM "$IGPID"; wait "$IGPID" 2>/dev/null || true

# --- NGINX, 400 for anything but GET/POST under /v2/ ---------------------------------------
{ nginx_conf_head "$SCPU" 8192; cat <<NGX
  server {
    listen 0.0.0.0:8080 backlog=4096;
    if (\$request_method !~ ^(GET|POST)\$) { return 400; }
    location /v2/ { return 200 'ok'; }
    location / { return 400; }
  }
}
NGX
} >"$WORK/nginx.conf"
ip netns exec "$GW" nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 & NGPID=$!; PIDS+=($NGPID)
for _ in $(seq 50); do [ -s "$WORK/nginx.pid" ] && break; sleep 0.1; done
sleep 0.3
NGPIDS=$(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')
read -r _ NG_P NG_S < <(measure nginx 8080 "$(cat "$WORK/nginx.pid")" $NGPIDS)
NG_REJ=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["400"])' "$WORK/nginx.json")

/usr/bin/python3 - "$HZ" "$IG_REJ" "$IG_P" "$IG_S" "$NG_REJ" "$NG_P" "$NG_S" "$CONNS" "$CONC" "$MODE" <<'PY'
import sys
hz = float(sys.argv[1])
ig_rej, ig_p, ig_s, ng_rej, ng_p, ng_s = (int(float(x)) for x in sys.argv[2:8])
print("# malformed-request flood: %s connections, concurrency %s; CPU = server process + softirq (all CPUs); infergate mode %s" % (sys.argv[8], sys.argv[9], sys.argv[10]))
print("%-10s %9s %10s %10s %14s" % ("server", "rejected", "proc_s", "softirq_s", "us/rejected"))
res = {}
for name, rej, p, s in (("infergate", ig_rej, ig_p, ig_s), ("nginx", ng_rej, ng_p, ng_s)):
    per = (p + s) / hz / rej * 1e6 if rej else float("nan")
    res[name] = per
    print("%-10s %9d %10.2f %10.2f %14.2f" % (name, rej, p / hz, s / hz, per))
if res["nginx"] == res["nginx"] and res["infergate"] == res["infergate"] and res["infergate"] > 0:
    print("ratio nginx/infergate (CPU per rejected request): %.2f" % (res["nginx"] / res["infergate"]))
PY
