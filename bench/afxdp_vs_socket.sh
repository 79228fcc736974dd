#!/usr/bin/env bash
# afxdp vs socket vs NGINX on one veth pair, in one run: the same wrk load (bench/wrk/infer.lua:
# KServe v2 infer, identity model, FP32 1x16, keep-alive) against infergate in afxdp mode
# (XDP redirect -> AF_XDP copy mode -> infergate's TCP), infergate in socket mode (kernel TCP)
# and NGINX answering a fixed 200 of the same size, each server on the same single CPU, wrk on
# another; rounds alternate; medians and ratios at the end. Then memory per idle connection:
# N idle keep-alive connections held open against afxdp mode (and socket mode), RSS delta / N.
#
# Usage (root): bench/afxdp_vs_socket.sh [--binary B] [--rounds N] [--duration S]
#               [--connections C] [--server-cpu N] [--client-cpu N] [--idle N]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/build/app/infergate; ROUNDS=3; DURATION=5; CONNS=32; SCPU=0; CCPU=1; IDLE=50000
source bench/lib.sh
parse_opts "" --binary BIN --rounds ROUNDS --duration DURATION --connections CONNS --server-cpu SCPU \
  --client-cpu CCPU --idle IDLE -- "$@"
[ "$(id -u)" -eq 0 ] || { echo "needs root (namespaces, XDP, AF_XDP)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/infergate-bench.XXXXXX)
bench_veth_up bench 234
ip netns exec "$CL" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"

config() {  # mode port admin_port [extra yaml]
  cat <<YAML
mode: $1
reactors: 1
cpus: [$SCPU]
listeners: [{name: http, address: 0.0.0.0, port: $2, protocol: http}]
admin: {address: 127.0.0.1, port: $3}
limits: {max_connections: $((IDLE + 1000)), idle_timeout_ms: 600000}
${4:-}$IDENTITY_MODELS
YAML
}
config afxdp 8000 9100 "xdp: {interface: $GIF, attach: native}
" >"$WORK/afxdp.yaml"
config socket 8001 9101 >"$WORK/socket.yaml"
nginx_return200_conf "$SCPU" "$GW_IP:8002" 18000 "worker_rlimit_nofile 19000;" >"$WORK/nginx.conf"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ns_exec "$GW" "$BIN" run -c "$WORK/afxdp.yaml" >"$WORK/afxdp.log" 2>&1 & PIDS+=($!); AF_PID=$!
ns_exec "$GW" "$BIN" run -c "$WORK/socket.yaml" >"$WORK/socket.log" 2>&1 & PIDS+=($!); SO_PID=$!
ns_exec "$GW" nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 & PIDS+=($!)
sleep 2
for u in "http://$GW_IP:8000/v2/health/ready" "http://$GW_IP:8001/v2/health/ready" "http://$GW_IP:8002/"; do
  ip netns exec "$CL" curl -sf -o /dev/null --max-time 5 "$u" || { echo "no answer from $u"; cat "$WORK"/*.log "$WORK/nginx.err"; exit 1; }
done
grep -h "afxdp:\|bound in" "$WORK/afxdp.log" | sed 's/^/# /'

echo "# $(date -u +%F) $(nproc) cores, $(uname -r); veth pair; servers on CPU $SCPU, wrk -t1 -c$CONNS on CPU $CCPU; ${DURATION}s x $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  run_wrk afxdp "$CL" "$CCPU" "$CONNS" "$DURATION" "http://$GW_IP:8000/" bench/wrk/infer.lua | tee -a "$WORK/results"
  run_wrk socket "$CL" "$CCPU" "$CONNS" "$DURATION" "http://$GW_IP:8001/" bench/wrk/infer.lua | tee -a "$WORK/results"
  run_wrk nginx "$CL" "$CCPU" "$CONNS" "$DURATION" "http://$GW_IP:8002/" bench/wrk/get.lua | tee -a "$WORK/results"
done
print_medians "$WORK/results" <<'PY'
med = medians(("rps", "p50_us", "p99_us"))
print("%-8s %12s %9s %9s %7s" % ("server", "req/s", "p50 us", "p99 us", "errors"))
for n, m in med.items():
    print("%-8s %12.0f %9.0f %9.0f %7d" % (n, m["rps"], m["p50_us"], m["p99_us"], sum(r["errors"] for r in rows[n])))
print("ratio afxdp/socket %.2f   afxdp/nginx %.2f   socket/nginx %.2f" % (
    med["afxdp"]["rps"] / med["socket"]["rps"], med["afxdp"]["rps"] / med["nginx"]["rps"],
    med["socket"]["rps"] / med["nginx"]["rps"]))
PY

# Memory per idle connection: RSS of the gateway process before and while N idle keep-alive
# connections (each served one request first) are held open from the client namespace.
idle() {  # name port pid count
  local before after ok=0 cpids=() left=$4 i=0
  before=$(awk '/VmRSS/ {print $2}' /proc/$3/status)
  # One client process per 19000 connections (the open-file hard limit here is 20000).
  while [ "$left" -gt 0 ]; do
    local n=$(( left > 19000 ? 19000 : left )); left=$(( left - n )); i=$((i + 1))
    ip netns exec "$CL" /usr/bin/python3 - "$GW_IP" "$2" "$n" "$WORK/idle.$1.$i" <<'PY' &
import resource, selectors, socket, sys, time, os
h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
host, port, n, flag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
req = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
socks, ok = [], 0
for start in range(0, n, 500):
    batch = []
    for _ in range(min(500, n - start)):
        s = socket.socket(); s.setblocking(False)
        s.connect_ex((host, port)); batch.append(s)
    sel = selectors.DefaultSelector()
    for s in batch: sel.register(s, selectors.EVENT_WRITE)
    pending, deadline = set(batch), time.time() + 10
    while pending and time.time() < deadline:
        for key, _ in sel.select(1):
            s = key.fileobj
            if s in pending:
                pending.discard(s); sel.unregister(s)
                try: s.send(req)
                except OSError: continue
    for s in batch:
        s.setblocking(True); s.settimeout(5)
        try:
            if s.recv(4096).startswith(b"HTTP/1.1 200"): ok += 1
        except OSError: pass
    socks += batch
open(flag, "w").write(str(ok))
time.sleep(600)
PY
    cpids+=($!)
    for _ in $(seq 600); do [ -s "$WORK/idle.$1.$i" ] && break; sleep 0.5; done
    ok=$(( ok + $(cat "$WORK/idle.$1.$i" 2>/dev/null || echo 0) ))
  done
  sleep 1
  after=$(awk '/VmRSS/ {print $2}' /proc/$3/status)
  echo "$1: $ok idle connections answered and held; RSS ${before} kB -> ${after} kB: $(( (after - before) * 1024 / (ok > 0 ? ok : 1) )) bytes/connection"
  for p in "${cpids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${cpids[@]}" 2>/dev/null || true
}
if [ "$IDLE" -gt 0 ]; then
  idle afxdp 8000 "$AF_PID" "$IDLE"
  # socket mode holds one fd per connection: at most the open-file limit (20000 here)
  idle socket 8001 "$SO_PID" $(( IDLE < 18000 ? IDLE : 18000 ))
  echo "# afxdp also preallocates its connection table: $(grep -o 'max_connections: [0-9]*' "$WORK/afxdp.yaml") slots (docs/TCP.md: 647 bytes each)"
fi
