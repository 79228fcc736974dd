#!/usr/bin/env bash
# The latency a gateway adds in front of a C++ gRPC backend (issue 15, "gateway hop"). The
# backend is infergate itself serving the identity model over KServe v2 gRPC (socket mode,
# loopback); in front of it, in the same run: a second infergate with `backend: triton` pointing
# at it (no queue delay), optionally a second front binary (--compare, e.g. the pre-change one),
# and NGINX `grpc_pass`. Every server is pinned to the server CPU (taskset: all its threads);
# h2load, pinned to the client CPU, runs one client with one stream sending ModelInfer (FP32
# [1,16] raw_input_contents). Rounds alternate between direct, through each front, and through
# NGINX; the table gives medians of p50/p99 (h2load --log-file) and each front's hop: its median
# p50/p99 minus the direct path's.
#
# Usage: bench/gateway_hop.sh [--binary PATH] [--compare PATH] [--rounds N] [--duration S]
#                             [--server-cpu N] [--client-cpu N] [--clients C] [--streams M]
# --binary is the backend and the front; --compare adds a front run by that binary instead.
# Needs: infergate built, h2load (nghttp2-client), nginx with the grpc module (optional leg).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/app/infergate; CMP=; ROUNDS=3; DURATION=5; SCPU=0; CCPU=1; CLIENTS=1; STREAMS=1
source bench/lib.sh
parse_opts "" --binary BIN --compare CMP --rounds ROUNDS --duration DURATION --server-cpu SCPU \
  --client-cpu CCPU --clients CLIENTS --streams STREAMS --help help=2,16 -- "$@"
[ -x "$BIN" ] || { echo "build first (or pass --binary): $BIN" >&2; exit 1; }
[ -z "$CMP" ] || [ -x "$CMP" ] || { echo "--compare: not an executable: $CMP" >&2; exit 1; }
command -v h2load >/dev/null || { echo "h2load not found (apt-get install nghttp2-client)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/infergate-gateway-hop.XXXXXX)
trap bench_cleanup EXIT

BE_PORT=$(free_port); BE_ADMIN=$(free_port); NG_PORT=$(free_port)
loopback_config grpc "$BE_PORT" "$BE_ADMIN" "$SCPU" >"$WORK/backend.yaml"

#   front_config PORT ADMIN_PORT: a socket-mode gateway serving the identity model from the
# backend (`backend: triton`), each request its own batch at once.
front_config() {
  cat <<YAML
mode: socket
reactors: 1
cpus: [$SCPU]
listeners: [{name: grpc, address: 127.0.0.1, port: $1, protocol: grpc}]
admin: {address: 127.0.0.1, port: $2}
models:
  - name: identity
    backend: triton
    max_batch_size: 8
    inputs: [{name: INPUT0, datatype: FP32, shape: [16]}]
    outputs: [{name: OUTPUT0, datatype: FP32, shape: [16]}]
    dynamic_batching: {max_queue_delay_us: 0}
    triton: {endpoints: ["127.0.0.1:$BE_PORT"]}
YAML
}

#   start_gateway NAME BINARY CONFIG: runs it pinned to the server CPU, waits for "serving".
start_gateway() {
  taskset -c "$SCPU" "$2" run -c "$3" >"$WORK/$1.log" 2>&1 & PIDS+=($!)
  echo "# $1: $2"
  wait_serving "$WORK/$1.log" "$!" >/dev/null
}

write_infer_request "$WORK/infer.bin"
start_gateway backend "$BIN" "$WORK/backend.yaml"
LEGS=("direct $BE_PORT")
FRONT_PORT=$(free_port); front_config "$FRONT_PORT" "$(free_port)" >"$WORK/front.yaml"
start_gateway infergate "$BIN" "$WORK/front.yaml"
LEGS+=("infergate $FRONT_PORT")
if [ -n "$CMP" ]; then
  CMP_PORT=$(free_port); front_config "$CMP_PORT" "$(free_port)" >"$WORK/compare.yaml"
  start_gateway infergate-compare "$CMP" "$WORK/compare.yaml"
  LEGS+=("infergate-compare $CMP_PORT")
fi
nginx_grpc_pass_conf "$SCPU" "$NG_PORT" "$BE_PORT" >"$WORK/nginx.conf"
if nginx_usable "$WORK/nginx.conf" grpc_pass; then
  nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 & PIDS+=($!)
  sleep 0.3
  LEGS+=("nginx-grpc_pass $NG_PORT")
fi
for leg in "${LEGS[@]}"; do grpc_infer_check $leg "$WORK/infer.bin"; done

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); servers on CPU $SCPU, h2load on CPU $CCPU; load:$(uptime | sed 's/.*load average://')"
echo "# h2load -c $CLIENTS -m $STREAMS -t 1 -D $DURATION --warm-up-time=1; $ROUNDS round(s); ModelInfer FP32 [1,16] raw"
for r in $(seq "$ROUNDS"); do
  for leg in "${LEGS[@]}"; do
    set -- $leg
    h2load_infer "$1" "$2" "$CCPU" "$CLIENTS" "$STREAMS" "$DURATION" "$WORK/infer.bin" "$r"
  done
done
print_medians "$WORK/results" <<'PY'
print()
print("%-20s %10s %8s %8s %10s %10s %7s" % ("path", "req/s", "p50 us", "p99 us", "hop p50", "hop p99", "failed"))
med = medians(("rps", "p50_us", "p99_us", "failed"))
d = med["direct"]
for n, m in med.items():
    hop = n != "direct"
    print("%-20s %10.0f %8.0f %8.0f %10s %10s %7d" % (
        n, m["rps"], m["p50_us"], m["p99_us"],
        "%+.0f" % (m["p50_us"] - d["p50_us"]) if hop else "-",
        "%+.0f" % (m["p99_us"] - d["p99_us"]) if hop else "-", m["failed"]))
PY
