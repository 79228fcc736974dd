#!/usr/bin/env bash
# Large tensors through the gateway (issue 16): UINT8 tensors of 256 KiB, 4 MiB and 64 MiB, sent
# with infergate-bench in a closed loop over one veth pair between two fresh network
# namespaces, REST with the binary tensor extension and gRPC with raw_input_contents, to
# infergate in socket mode (the kernel's TCP: the kernel path) and in afxdp mode (our TCP over
# AF_XDP), each serving a batched in-process identity model (one request per batch, decoded
# into pinned batch slots). With --before B2 the same servers run the older binary too, in the
# same rounds. Every server runs pinned to --server-cpu (its whole process), the client to
# --client-cpu; servers alternate within each round; medians over the rounds.
# Per cell: req/s, MiB/s of tensor bytes in, p50/p99, and the gateway's own copy count
# (infergate_batcher_bytes_copied_total / _request_bytes_total over the cell: 1.00 = one
# userspace copy per tensor byte) from its /metrics. 64 MiB cells run twice --duration.
#
# Usage (root): bench/large_tensors.sh [--binary B] [--before B2] [--bench infergate-bench]
#        [--sizes 256k,4m,64m] [--rounds 3] [--duration 5] [--server-cpu 0] [--client-cpu 1]
#        [--smoke]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/build/app/infergate; BEFORE=""; BENCH=$PWD/build/bench/load/infergate-bench
SIZES=256k,4m,64m; ROUNDS=3; DURATION=5; SCPU=0; CCPU=1; SMOKE=0
source bench/lib.sh
parse_opts "large_tensors: " --binary BIN --before BEFORE --bench BENCH --sizes SIZES \
  --rounds ROUNDS --duration DURATION --server-cpu SCPU --client-cpu CCPU --smoke SMOKE=1 \
  -h help=2,17 --help help=2,17 -- "$@"
[ "$SMOKE" = 1 ] && { ROUNDS=1; DURATION=1; }
die() { echo "large_tensors: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, XDP, AF_XDP)"
BIN=$(realpath "$BIN"); [ -x "$BIN" ] || die "$BIN missing: build first or pass --binary"
[ -z "$BEFORE" ] || { BEFORE=$(realpath "$BEFORE"); [ -x "$BEFORE" ] || die "--before $BEFORE is not executable"; }
[ -x "$BENCH" ] || die "$BENCH missing: build with -DINFERGATE_BUILD_BENCH=ON (or pass --bench)"
declare -A BYTES=([256k]=262144 [4m]=4194304 [64m]=67108864)
declare -A CONC=([256k]=8 [4m]=4 [64m]=2)
for z in ${SIZES//,/ }; do [ -n "${BYTES[$z]:-}" ] || die "unknown size '$z' (256k,4m,64m)"; done
WORK=$(mktemp -d /tmp/infergate-large.XXXXXX)
bench_veth_up large 237
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

gateway_config() {  # mode http_port admin_port
  local xdp=""
  [ "$1" = afxdp ] && xdp="xdp: {interface: $GIF, attach: native}"
  cat <<YAML
mode: $1
reactors: 1
cpus: [$SCPU]
listeners:
  - {name: http, address: 0.0.0.0, port: $2, protocol: http}
  - {name: grpc, address: 0.0.0.0, port: $(($2 + 1)), protocol: grpc}
admin: {address: 127.0.0.1, port: $3}
limits: {idle_timeout_ms: 600000, body_timeout_ms: 600000, max_body_bytes: $((65 << 20))}
$xdp
models:
YAML
  for z in ${SIZES//,/ }; do
    echo "  - {name: t$z, max_batch_size: 0, dynamic_batching: {max_queue_delay_us: 0}, inputs: [{name: INPUT0, datatype: UINT8, shape: [${BYTES[$z]}]}], outputs: [{name: OUTPUT0, datatype: UINT8, shape: [${BYTES[$z]}]}]}"
  done
}

SERVERS=(socket afxdp)
[ -n "$BEFORE" ] && SERVERS+=(socket-before afxdp-before)
declare -A PORT=([socket]=8010 [afxdp]=8020 [socket-before]=8030 [afxdp-before]=8040)
declare -A ADMIN=([socket]=9110 [afxdp]=9120 [socket-before]=9130 [afxdp-before]=9140)
for s in "${SERVERS[@]}"; do gateway_config "${s%-before}" "${PORT[$s]}" "${ADMIN[$s]}" >"$WORK/$s.yaml"; done

SERVER_PID=""
start_server() {
  local log=$WORK/$1.log bin=$BIN
  [[ "$1" == *-before ]] && bin=$BEFORE
  ns_exec "$GW" taskset -c "$SCPU" "$bin" run -c "$WORK/$1.yaml" >"$log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  wait_http "$CL" "http://$GW_IP:${PORT[$1]}/v2/health/ready" "$SERVER_PID" "$log"
}
stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  local left; left=$(ip netns pids "$GW" 2>/dev/null | xargs)
  [ -z "$left" ] || die "processes left in $GW after stopping a server: $left"
}
copies() {  # server model: "bytes_copied request_bytes" now
  ip netns exec "$GW" curl -sf --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" |
    /usr/bin/python3 -c 'import re, sys
t = sys.stdin.read(); m = sys.argv[1]
def v(n):
    x = re.search(r"^infergate_batcher_%s_total\{model=\"%s\"\} (\S+)$" % (n, m), t, re.M)
    return float(x.group(1)) if x else 0.0
print(v("bytes_copied"), v("request_bytes"))' "$2"
}
run_cell() {  # name server port model bytes conc args...
  local j=$WORK/bench.json c0 c1 d=$DURATION
  [ "$5" -ge $((64 << 20)) ] && d=$((DURATION * 2))  # 64 MiB: a few requests a second at most
  rm -f "$j"
  c0=$(copies "$2" "$4")
  ip netns exec "$CL" taskset -c "$CCPU" "$BENCH" -u "$GW_IP:$3" -d "$d" --warmup 1 \
    --timeout 60 --progress never --json "$j" --mode closed -c "$6" -m "$4" \
    -i "INPUT0:UINT8:$5" "${@:7}" >"$WORK/bench.out" 2>&1 ||
    { cat "$WORK/bench.out" >&2; die "infergate-bench against $2 port $3 failed"; }
  c1=$(copies "$2" "$4")
  /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[2])); l = r.get("latency_us", {})
b0, q0 = map(float, sys.argv[4].split()); b1, q1 = map(float, sys.argv[5].split())
print(sys.argv[1], json.dumps({"rps": r["achieved_rate"], "mibs": r["achieved_rate"] * int(sys.argv[3]) / 2**20,
      "p50_us": l.get("p50", 0), "p99_us": l.get("p99", 0), "errors": r["error_count"],
      "copies": (b1 - b0) / (q1 - q0) if q1 > q0 else 0.0}))' "$1" "$j" "$5" "$c0" "$c1"
}
measure() {
  local s=$1 p=${PORT[$1]}
  for z in ${SIZES//,/ }; do
    run_cell "$z.$s.rest" "$s" "$p" "t$z" "${BYTES[$z]}" "${CONC[$z]}" -p rest --format binary
    run_cell "$z.$s.grpc" "$s" "$((p + 1))" "t$z" "${BYTES[$z]}" "${CONC[$z]}" -p grpc
  done
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# veth $GIF <-> $CIF; servers on CPU $SCPU, clients on CPU $CCPU; $ROUNDS round(s) x ${DURATION}s per cell; sizes $SIZES"
echo "# binary $BIN${BEFORE:+; before $BEFORE}"
for r in $(seq "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    start_server "$s"
    measure "$s" | tee -a "$WORK/results" | sed "s/^/# round $r: /"
    stop_server
  done
done
echo "# load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"

SERVERS="${SERVERS[*]}" SIZES=$SIZES print_medians "$WORK/results" <<'PY'
import os
servers = os.environ["SERVERS"].split()
med = medians(("rps", "mibs", "p50_us", "p99_us", "copies"))
def ratio(a, b): return "%.2fx" % (a / b) if b else "-"
print("\n## large tensors: UINT8, infergate-bench --mode closed (-c 8 / 4 / 2 for 256k / 4m / 64m); medians of %d round(s)" % len(next(iter(rows.values()))))
print("%-5s %-5s %-13s %9s %9s %10s %10s %7s %13s %13s %6s" % ("size", "proto", "server", "req/s", "MiB/s", "p50 us", "p99 us", "copies", "afxdp/socket", "after/before", "errors"))
for z in os.environ["SIZES"].split(","):
    for proto in ("rest", "grpc"):
        for s in servers:
            n = "%s.%s.%s" % (z, s, proto)
            if n not in med: continue
            m = med[n]
            peer = "%s.%s.%s" % (z, s.replace("afxdp", "socket"), proto)
            a_s = ratio(m["rps"], med[peer]["rps"]) if s.startswith("afxdp") and peer in med else ""
            old = "%s.%s-before.%s" % (z, s, proto)
            a_b = ratio(m["rps"], med[old]["rps"]) if old in med else ""
            errs = int(sum(r["errors"] for r in rows[n]))
            print("%-5s %-5s %-13s %9.1f %9.0f %10.0f %10.0f %7.2f %13s %13s %6d" % (z, proto, s, m["rps"], m["mibs"], m["p50_us"], m["p99_us"], m["copies"], a_s, a_b, errs))
PY
