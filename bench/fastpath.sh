#!/usr/bin/env bash
# The fast-path figures of issue 15, in one run, on one veth pair between two fresh network
# namespaces, every server pinned to one CPU (--server-cpu: NGINX's one worker; every thread of
# a gateway, not only its reactor) and the client to another
# (--client-cpu) in the client namespace. Servers run one at a time (started, measured, stopped),
# in the same order every round; rounds alternate; medians over the rounds and ratios at the end.
# Sections (--sections, comma-separated; default all):
#   throughput  wrk -t1 -c32 (bench/wrk/infer.lua: KServe v2 infer, FP32 1x16 JSON, keep-alive)
#               against NGINX `return 200` of the same answer (1 worker) and infergate socket and
#               afxdp modes, for the identity model inline (max_batch_size: 0) and with dynamic
#               batching (max_batch_size: 8, max_queue_delay_us: 0): req/s, p50, p99, ratios to
#               NGINX and batched/inline, and the batch sizes the batched runs dispatched
#               (infergate_batcher_batch_size from the admin port's /metrics).
#   openloop    infergate-bench --mode open -R RATE -c 64 (constant arrivals, coordinated-omission
#               safe) against NGINX, afxdp and socket: p50/p99 and p99 / NGINX's p99.
#   batching    GPU-like cost (identity fixed_us: 200, per_item_us: 2, max_queue_delay_us: 100),
#               wrk 128 connections, socket mode, 1 reactor, max batch 8 and 16: req/s, mean batch
#               n, the device's ideal n / (200 + 2n) us and the ratio.
#   large       256 KiB tensors (FP32 1x65536), infergate-bench closed loop (-c 8): REST with the
#               binary tensor extension and gRPC (raw_input_contents), afxdp vs socket.
# --before B2 adds the same socket/afxdp measurements for a second binary in the same run
# (servers named socket-before and afxdp-before).
# --dpdk adds infergate in dpdk mode (a DPDK build: docs/DPDK.md) over net_af_packet on the same
# veth end, measured last in each round: while it runs the gateway end has no kernel address and
# no offloads (the kernel would answer for the address; af_packet needs whole frames); both ends'
# addresses and offloads are restored when it stops.
#
# Usage (root): bench/fastpath.sh [--binary B] [--before B2] [--bench infergate-bench]
#        [--sections throughput,openloop,batching,large] [--rounds 3] [--duration 5]
#        [--server-cpu 0] [--client-cpu 1] [--connections 32] [--rate 45000] [--smoke] [--dpdk]
# --smoke: 1 round x 1 s per cell (checks the script, not the figures). Needs nginx and wrk;
# openloop and large also need infergate-bench (build with -DINFERGATE_BUILD_BENCH=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/build/app/infergate; BEFORE=""; BENCH=$PWD/build/bench/load/infergate-bench
SECTIONS=throughput,openloop,batching,large; ROUNDS=3; DURATION=5; SCPU=0; CCPU=1; CONNS=32
RATE=45000; SMOKE=0; DPDK=0
source bench/lib.sh
parse_opts "fastpath: " --binary BIN --before BEFORE --bench BENCH --sections SECTIONS \
  --rounds ROUNDS --duration DURATION --server-cpu SCPU --client-cpu CCPU --connections CONNS \
  --rate RATE --smoke SMOKE=1 --dpdk DPDK=1 -h help=2,32 --help help=2,32 -- "$@"
[ "$SMOKE" = 1 ] && { ROUNDS=1; DURATION=1; }
die() { echo "fastpath: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, XDP, AF_XDP)"
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }
for s in ${SECTIONS//,/ }; do
  case "$s" in throughput|openloop|batching|large) ;; *) die "unknown section '$s' (throughput,openloop,batching,large)" ;; esac
done
BIN=$(realpath "$BIN"); [ -x "$BIN" ] || die "$BIN missing: build first or pass --binary"
[ -z "$BEFORE" ] || { BEFORE=$(realpath "$BEFORE"); [ -x "$BEFORE" ] || die "--before $BEFORE is not executable"; }
command -v wrk >/dev/null || die "wrk not found (apt-get install wrk)"
command -v nginx >/dev/null || die "nginx not found (apt-get install nginx-light)"
if want openloop || want large; then
  [ -x "$BENCH" ] || die "$BENCH missing: build with -DINFERGATE_BUILD_BENCH=ON (or pass --bench)"
fi
WORK=$(mktemp -d /tmp/infergate-fastpath.XXXXXX)
bench_veth_up fastp 236
ip netns exec "$CL" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# One gateway config per server: every model the sections use, so one start serves them all.
#   identity          inline (max_batch_size 0), FP32 [1,16]: throughput, openloop
#   identity_batched  max_batch_size 8, dynamic batching without queue delay: throughput
#   identity_cost8/16 the GPU-like cost model, max batch 8 / 16, 100 us queue delay: batching
#   identity_large    inline, FP32 [1,65536] (256 KiB): large
gateway_config() {  # mode http_port admin_port
  local xdp=""
  [ "$1" = afxdp ] && xdp="xdp: {interface: $GIF, attach: native}"
  [ "$1" = dpdk ] && xdp="dpdk: {no_huge: true, vdevs: [\"net_af_packet0,iface=$GIF\"], ipv4: $GW_IP}"
  local t16='[{name: INPUT0, datatype: FP32, shape: [16]}]' o16='[{name: OUTPUT0, datatype: FP32, shape: [16]}]'
  cat <<YAML
mode: $1
reactors: 1
cpus: [$SCPU]
listeners:
  - {name: http, address: 0.0.0.0, port: $2, protocol: http}
  - {name: grpc, address: 0.0.0.0, port: $(($2 + 1)), protocol: grpc}
admin: {address: 127.0.0.1, port: $3}
limits: {idle_timeout_ms: 600000}
$xdp
models:
  - {name: identity, max_batch_size: 0, inputs: [{name: INPUT0, datatype: FP32, shape: [1, 16]}], outputs: [{name: OUTPUT0, datatype: FP32, shape: [1, 16]}]}
  - {name: identity_batched, max_batch_size: 8, dynamic_batching: {max_queue_delay_us: 0}, inputs: $t16, outputs: $o16}
  - {name: identity_cost8, max_batch_size: 8, dynamic_batching: {max_queue_delay_us: 100}, identity: {fixed_us: 200, per_item_us: 2}, inputs: $t16, outputs: $o16}
  - {name: identity_cost16, max_batch_size: 16, dynamic_batching: {max_queue_delay_us: 100}, identity: {fixed_us: 200, per_item_us: 2}, inputs: $t16, outputs: $o16}
  - {name: identity_large, max_batch_size: 0, inputs: [{name: INPUT0, datatype: FP32, shape: [1, 65536]}], outputs: [{name: OUTPUT0, datatype: FP32, shape: [1, 65536]}]}
YAML
}

# Servers, in the order each round measures them; each has its own ports.
SERVERS=(nginx socket afxdp)
[ -n "$BEFORE" ] && SERVERS+=(socket-before afxdp-before)
if [ "$DPDK" = 1 ]; then
  ldd "$BIN" | grep -q librte_eal || die "--dpdk: $BIN is not a DPDK build (cmake -DINFERGATE_WITH_DPDK=ON)"
  SERVERS+=(dpdk)
fi
declare -A PORT=([nginx]=8000 [socket]=8010 [afxdp]=8020 [socket-before]=8030 [afxdp-before]=8040 [dpdk]=8050)
declare -A ADMIN=([socket]=9110 [afxdp]=9120 [socket-before]=9130 [afxdp-before]=9140 [dpdk]=9150)
nginx_return200_conf "$SCPU" "$GW_IP:${PORT[nginx]}" 4096 >"$WORK/nginx.conf"
for s in "${SERVERS[@]}"; do
  [ "$s" = nginx ] || gateway_config "${s%-before}" "${PORT[$s]}" "${ADMIN[$s]}" >"$WORK/$s.yaml"
done

# The offloads dpdk mode turns off, as ethtool -K arguments ("tx off rx on ..."), to restore.
offloads_of() {  # namespace interface
  ip netns exec "$1" ethtool -k "$2" 2>/dev/null | /usr/bin/python3 -c '
import sys
names = {"tx-checksumming": "tx", "rx-checksumming": "rx", "generic-segmentation-offload": "gso",
         "generic-receive-offload": "gro", "tcp-segmentation-offload": "tso"}
out = []
for line in sys.stdin:
    k, _, v = line.partition(":")
    if k.strip() in names and v.split():
        out += [names[k.strip()], v.split()[0]]
print(" ".join(out))'
}
GW_OFFLOADS=""; CL_OFFLOADS=""
SERVER_PID=""
start_server() {  # name: starts it in the gateway namespace and waits until it answers
  local log=$WORK/$1.log
  if [ "$1" = nginx ]; then
    ns_exec "$GW" nginx -c "$WORK/nginx.conf" -p "$WORK" >"$log" 2>&1 &
    SERVER_PID=$!
    wait_http "$CL" "http://$GW_IP:${PORT[nginx]}/" "$SERVER_PID" "$WORK/nginx.err"
  else
    local bin=$BIN; [[ "$1" == *-before ]] && bin=$BEFORE
    if [ "$1" = dpdk ]; then  # the veth end is DPDK's (docs/DPDK.md); restored by stop_server
      GW_OFFLOADS=$(offloads_of "$GW" "$GIF"); CL_OFFLOADS=$(offloads_of "$CL" "$CIF")
      ip -n "$GW" addr flush dev "$GIF"
      ip netns exec "$GW" ethtool -K "$GIF" tx off rx off gso off gro off tso off >/dev/null 2>&1 || true
      ip netns exec "$CL" ethtool -K "$CIF" tx off gso off tso off >/dev/null 2>&1 || true
      ip -n "$CL" neigh flush dev "$CIF"
    fi
    # The whole process on the server CPU, not only its reactor: the batcher's dispatcher, the
    # simulated device and every other thread share the one core NGINX's worker has.
    ns_exec "$GW" taskset -c "$SCPU" "$bin" run -c "$WORK/$1.yaml" >"$log" 2>&1 &
    SERVER_PID=$!
    wait_http "$CL" "http://$GW_IP:${PORT[$1]}/v2/health/ready" "$SERVER_PID" "$log"
  fi
  PIDS+=("$SERVER_PID")
}
stop_server() {  # name
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  if [ "${1:-}" = dpdk ]; then
    ip -n "$GW" addr add "$GW_IP/24" dev "$GIF" 2>/dev/null || true
    # shellcheck disable=SC2086  # the saved "feature on|off" pairs
    [ -z "$GW_OFFLOADS" ] || ip netns exec "$GW" ethtool -K "$GIF" $GW_OFFLOADS >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    [ -z "$CL_OFFLOADS" ] || ip netns exec "$CL" ethtool -K "$CIF" $CL_OFFLOADS >/dev/null 2>&1 || true
    ip -n "$CL" neigh flush dev "$CIF"
  fi
  # Nothing of one server may serve the next one's traffic (an XDP program left attached would).
  local left; left=$(ip netns pids "$GW" 2>/dev/null | xargs)
  [ -z "$left" ] || die "processes left in $GW after stopping a server: $left"
}
metrics() {  # server file: the gateway's /metrics
  ip netns exec "$GW" curl -sf --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" >"$2" ||
    die "no /metrics from $1 (admin port ${ADMIN[$1]})"
}
# with_batches NAME MODEL BEFORE AFTER: reads "NAME {json}" lines on stdin, adds the batches
# MODEL dispatched between the two /metrics snapshots (count, mean size, histogram).
with_batches() {
  /usr/bin/python3 -c '
import json, re, sys
name, model, f0, f1 = sys.argv[1:5]
def read(path):
    h, s, c = {}, 0.0, 0.0
    for line in open(path):
        if not line.startswith("infergate_batcher_batch_size") or ("model=\"%s\"" % model) not in line:
            continue
        v = float(line.rsplit(" ", 1)[1])
        m = re.search(r"le=\"([^\"]+)\"", line)
        if line.startswith("infergate_batcher_batch_size_bucket") and m: h[m.group(1)] = v
        elif line.startswith("infergate_batcher_batch_size_sum"): s = v
        elif line.startswith("infergate_batcher_batch_size_count"): c = v
    return h, s, c
(h0, s0, c0), (h1, s1, c1) = read(f0), read(f1)
for line in sys.stdin:
    n, js = line.split(" ", 1)
    r = json.loads(js)
    r["batches"] = c1 - c0
    r["mean_batch"] = (s1 - s0) / (c1 - c0) if c1 > c0 else 0.0
    r["hist"] = {le: h1[le] - h0.get(le, 0.0) for le in h1}
    print(n, json.dumps(r))' "$@"
}
wrk_batched() {  # result_name server model connections
  metrics "$2" "$WORK/m0"
  run_wrk "$1" "$CL" "$CCPU" "$4" "$DURATION" "http://$GW_IP:${PORT[$2]}/" bench/wrk/infer.lua "$3" >"$WORK/cell"
  metrics "$2" "$WORK/m1"
  with_batches "$2" "$3" "$WORK/m0" "$WORK/m1" <"$WORK/cell"
}
# infergate-bench in the client namespace: prints "NAME {rps, p50_us, p99_us, errors}".
run_bench() {  # name port args...
  local j=$WORK/bench.json
  rm -f "$j"
  ip netns exec "$CL" taskset -c "$CCPU" "$BENCH" -u "$GW_IP:$2" -d "$DURATION" --warmup 1 \
    --progress never --json "$j" "${@:3}" >"$WORK/bench.out" 2>&1 ||
    { cat "$WORK/bench.out" >&2; die "infergate-bench against port $2 failed"; }
  /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[2])); l = r.get("latency_us", {})
print(sys.argv[1], json.dumps({"rps": r["achieved_rate"], "p50_us": l.get("p50", 0), "p99_us": l.get("p99", 0), "errors": r["error_count"],
                              "saturated": bool(r.get("generator", {}).get("saturated", False))}))' "$1" "$j"
}

measure() {  # server: every cell of the selected sections this server takes part in
  local s=$1 p=${PORT[$1]}
  if want throughput; then
    if [ "$s" = nginx ]; then
      run_wrk tp.nginx "$CL" "$CCPU" "$CONNS" "$DURATION" "http://$GW_IP:$p/" bench/wrk/get.lua
    else
      run_wrk "tp.$s.inline" "$CL" "$CCPU" "$CONNS" "$DURATION" "http://$GW_IP:$p/" bench/wrk/infer.lua identity
      wrk_batched "tp.$s.batched" "$s" identity_batched "$CONNS"
    fi
  fi
  if want openloop; then
    local proto=(-p rest -m identity); [ "$s" = nginx ] && proto=(-p get --path /)
    run_bench "ol.$s" "$p" --mode open --arrival constant -R "$RATE" -c 64 "${proto[@]}"
  fi
  if want batching && [[ "$s" == socket* ]]; then
    wrk_batched "bt.$s.8" "$s" identity_cost8 128
    wrk_batched "bt.$s.16" "$s" identity_cost16 128
  fi
  if want large && [ "$s" != nginx ]; then
    run_bench "lg.$s.rest" "$p" --mode closed -c 8 -p rest --format binary -m identity_large -i INPUT0:FP32:1x65536
    run_bench "lg.$s.grpc" "$((p + 1))" --mode closed -c 8 -p grpc -m identity_large -i INPUT0:FP32:1x65536
  fi
}
needs() {  # server: does any selected section measure it?
  want throughput || want openloop || { want batching && [[ "$1" == socket* ]]; } ||
    { want large && [ "$1" != nginx ]; }
}

echo "# $(date -u +%FT%TZ) $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# veth $GIF <-> $CIF; servers on CPU $SCPU, clients on CPU $CCPU; $ROUNDS round(s) x ${DURATION}s per cell; sections $SECTIONS"
echo "# binary $BIN${BEFORE:+; before $BEFORE}"
for r in $(seq "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    needs "$s" || continue
    start_server "$s"
    measure "$s" | tee -a "$WORK/results" | sed "s/^/# round $r: /"
    stop_server "$s"
  done
done
echo "# load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"

SERVERS="${SERVERS[*]}" CONNS=$CONNS RATE=$RATE print_medians "$WORK/results" <<'PY'
import os
servers = os.environ["SERVERS"].split()
gws = [s for s in servers if s != "nginx"]
med = medians(("rps", "p50_us", "p99_us"))
def errs(n): return int(sum(r.get("errors", 0) + r.get("non2xx", 0) for r in rows[n]))
def mean_of(n, k):
    return statistics.median(r[k] for r in rows[n])
def ratio(a, b): return "%.2fx" % (a / b) if b else "-"

if "tp.nginx" in med:
    print("\n## throughput: wrk -t1 -c%s, KServe v2 infer FP32 1x16 JSON; medians of %d round(s)" % (
        os.environ.get("CONNS", "32"), len(rows["tp.nginx"])))
    print("%-9s %-13s %10s %8s %8s %9s %15s %6s" % ("model", "server", "req/s", "p50 us", "p99 us",
                                                   "vs nginx", "batched/inline", "errors"))
    ng = med["tp.nginx"]
    print("%-9s %-13s %10.0f %8.0f %8.0f %9s %15s %6d" % ("-", "nginx", ng["rps"], ng["p50_us"], ng["p99_us"], "1.00x", "", errs("tp.nginx")))
    for kind in ("inline", "batched"):
        for s in gws:
            n = "tp.%s.%s" % (s, kind)
            if n not in med: continue
            m = med[n]
            bi = ratio(m["rps"], med["tp.%s.inline" % s]["rps"]) if kind == "batched" else ""
            print("%-9s %-13s %10.0f %8.0f %8.0f %9s %15s %6d" % (kind, s, m["rps"], m["p50_us"], m["p99_us"],
                                                           ratio(m["rps"], ng["rps"]), bi, errs(n)))
    for s in gws:
        n = "tp.%s.batched" % s
        if n not in rows: continue
        hist = {}
        for r in rows[n]:
            for le, v in r["hist"].items(): hist[le] = hist.get(le, 0) + v
        prev, parts = 0, []
        for le in sorted(hist, key=lambda x: float("inf") if x == "+Inf" else float(x)):
            parts.append("<=%s:%d" % (le, hist[le] - prev)); prev = hist[le]
        print("batch sizes, %s batched (all rounds): mean %.2f over %d batches; %s" % (
            s, sum(r["mean_batch"] * r["batches"] for r in rows[n]) / max(1, sum(r["batches"] for r in rows[n])),
            sum(r["batches"] for r in rows[n]), " ".join(parts)))

if "ol.nginx" in med:
    print("\n## open loop: infergate-bench --mode open --arrival constant -R %s -c 64; medians" % os.environ.get("RATE", ""))
    print("%-13s %10s %8s %8s %14s %6s %s" % ("server", "achieved/s", "p50 us", "p99 us", "p99/nginx p99", "errors", "client saturated (rounds)"))
    for s in servers:
        n = "ol." + s
        if n not in med: continue
        m = med[n]
        print("%-13s %10.0f %8.0f %8.0f %14s %6d %d/%d" % (s, m["rps"], m["p50_us"], m["p99_us"],
                                                     ratio(m["p99_us"], med["ol.nginx"]["p99_us"]), errs(n),
                                                     sum(r.get("saturated", False) for r in rows[n]), len(rows[n])))

bt = [s for s in gws if "bt.%s.8" % s in rows]
if bt:
    print("\n## batching: identity fixed_us 200, per_item_us 2, max_queue_delay_us 100; wrk -c128; socket mode, 1 reactor")
    print("%-13s %9s %10s %8s %8s %12s %9s" % ("server", "max batch", "req/s", "p99 us", "mean n", "ideal req/s", "vs ideal"))
    for s in bt:
        for mb in ("8", "16"):
            n = "bt.%s.%s" % (s, mb)
            m = med[n]; nb = mean_of(n, "mean_batch")
            ideal = nb / (200 + 2 * nb) * 1e6 if nb else 0
            print("%-13s %9s %10.0f %8.0f %8.2f %12.0f %9s" % (s, mb, m["rps"], m["p99_us"], nb, ideal, ratio(m["rps"], ideal)))

lg = [s for s in gws if "lg.%s.rest" % s in rows]
if lg:
    print("\n## large: FP32 1x65536 (256 KiB) identity, infergate-bench --mode closed -c 8; REST = binary tensor extension, gRPC = raw_input_contents")
    print("%-13s %-5s %9s %9s %8s %8s %14s" % ("server", "proto", "req/s", "MiB/s in", "p50 us", "p99 us", "afxdp/socket"))
    for proto in ("rest", "grpc"):
        for s in lg:
            n = "lg.%s.%s" % (s, proto)
            m = med[n]
            peer = "lg.%s.%s" % (s.replace("afxdp", "socket"), proto)
            r = ratio(m["rps"], med[peer]["rps"]) if s.startswith("afxdp") and peer in med else ""
            print("%-13s %-5s %9.0f %9.0f %8.0f %8.0f %14s" % (s, proto, m["rps"], m["rps"] * 0.25, m["p50_us"], m["p99_us"], r))
PY
