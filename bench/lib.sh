# shellcheck shell=bash
# Sourced (from the repository root) by the benchmarks in bench/ and the demos in scripts/.
#
# parse_opts reads a script's options from a table; processes started in the background go
# into PIDS and are stopped, the network namespaces in NETNS deleted and WORK removed by
# bench_cleanup (trap it on EXIT); wait_serving waits for a gateway's "serving"
# line; free_port prints a free loopback TCP port; nginx_conf_head prints the start of an NGINX
# config; IDENTITY_MODELS and loopback_config are the gateway configs the benchmarks share;
# bench_veth_up joins two fresh namespaces with a veth pair (scripts/lib/netns.sh) and removes
# them on exit.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/netns.sh"
PIDS=()
NETNS=()
bench_cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
}

#   bench_veth_up NAME OCTET
# Two fresh network namespaces joined by a veth pair (veth_pair_up), unique per run: sets GW CL
# (namespaces ig-NAME-gw-TAG, ig-NAME-cl-TAG), GIF CIF (interfaces; NAME at most 6 characters)
# and GW_IP CL_IP (10.OCTET.x.1 and .2); deletes them (and stops PIDS, removes WORK) on exit;
# turns checksum offload off at the gateway end too: userspace stacks and XDP see frames as sent.
bench_veth_up() {
  local tag; tag=$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
  GW=ig-$1-gw-$tag; CL=ig-$1-cl-$tag; GIF=ig${1}g$tag; CIF=ig${1}c$tag
  GW_IP=10.$2.$(( $$ % 250 )).1; CL_IP=10.$2.$(( $$ % 250 )).2
  NETNS=("$GW" "$CL")
  trap bench_cleanup EXIT
  veth_pair_up "$GW" "$CL" "$GIF" "$CIF" "$GW_IP" "$CL_IP"
  ip netns exec "$GW" ethtool -K "$GIF" tx off >/dev/null 2>&1 || true
}

#   parse_opts PREFIX SPEC... -- "$@"
# Each SPEC is two words: an option and what it does: VAR (the option takes a value, VAR=$2),
# VAR=VALUE (a flag that sets VAR to VALUE) or help=LINES (print those lines of the script,
# e.g. help=2,20, and exit 0). An option not in the table: "PREFIXunknown option X", exit 2.
parse_opts() {
  local prefix=$1 o
  shift
  local -A spec=()
  while [ "$1" != -- ]; do spec[$1]=$2; shift 2; done
  shift
  while [ $# -gt 0 ]; do
    o=
    [ -n "$1" ] && o=${spec[$1]:-}
    case "$o" in
      "") echo "${prefix}unknown option $1" >&2; exit 2 ;;
      help=*) sed -n "${o#help=}p" "$0"; exit 0 ;;
      *=*) printf -v "${o%%=*}" '%s' "${o#*=}"; shift ;;
      *) printf -v "$o" '%s' "$2"; shift 2 ;;
    esac
  done
}

#   wait_serving LOG PID [TRIES]
# Waits (TRIES x 0.1 s, default 100) for the gateway writing LOG to say "serving"; if process
# PID ends first, prints LOG and exits 1. Then prints LOG, indented.
wait_serving() {
  for _ in $(seq "${3:-100}"); do
    grep -q "serving" "$1" 2>/dev/null && break
    kill -0 "$2" 2>/dev/null || { cat "$1"; exit 1; }
    sleep 0.1
  done
  sed 's/^/   | /' "$1"
}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

#   nginx_conf_head CPU WORKER_CONNECTIONS [MAIN_DIRECTIVE...]
# The start of an NGINX config for the peer: one worker pinned to CPU, in the foreground, pid
# and error log in WORK, access log off, up to and including "http {". Each MAIN_DIRECTIVE
# (e.g. "worker_rlimit_nofile 19000;") is a line after the CPU affinity.
nginx_conf_head() {
  echo "worker_processes 1;"
  echo "worker_cpu_affinity $(printf '1%0*d' "$1" 0);"
  local d
  for d in "${@:3}"; do echo "$d"; done
  cat <<NGX
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections $2; }
http {
  access_log off;
NGX
}

# The identity model (FP32 [16], batches of 8): the `models:` section of a gateway config.
IDENTITY_MODELS='models:
  - name: identity
    max_batch_size: 8
    inputs: [{name: INPUT0, datatype: FP32, shape: [16]}]
    outputs: [{name: OUTPUT0, datatype: FP32, shape: [16]}]'

#   loopback_config PROTOCOL PORT ADMIN_PORT CPU
# A socket-mode gateway on 127.0.0.1 (one reactor pinned to CPU) serving the identity model.
loopback_config() {
  cat <<YAML
mode: socket
reactors: 1
cpus: [$4]
listeners: [{name: $1, address: 127.0.0.1, port: $2, protocol: $1}]
admin: {address: 127.0.0.1, port: $3}
$IDENTITY_MODELS
YAML
}

#   print_medians RESULTS: reads the "NAME {json}" lines the benchmarks append to RESULTS; the
# Python code on stdin then has `rows` (NAME -> list of dicts, in order of first appearance)
# and `medians(keys)` (NAME -> {key: median over the rounds}).
print_medians() {
  /usr/bin/python3 -c 'import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, js = line.split(" ", 1)
    rows.setdefault(name, []).append(json.loads(js))
def medians(keys):
    return {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in rows.items()}
exec(sys.stdin.read())' "$1"
}

#   write_infer_request FILE
# FILE gets a framed gRPC ModelInferRequest (5-byte prefix + protobuf) for the identity model:
# FP32 [1,16] as raw_input_contents (64 bytes), written by hand from the field numbers of
# Triton's grpc_service.proto: model_name=1, inputs=5 {name=1, datatype=2, shape=3},
# raw_input_contents=7.
write_infer_request() {
  /usr/bin/python3 - "$1" <<'PY'
import struct, sys
def ld(field, b): return bytes([field << 3 | 2, len(b)]) + b
tensor = ld(1, b"INPUT0") + ld(2, b"FP32") + ld(3, bytes([1, 16]))
msg = ld(1, b"identity") + ld(5, tensor) + ld(7, struct.pack("<16f", *range(16)))
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(msg)) + msg)
PY
}

GRPC_INFER_PATH=/inference.GRPCInferenceService/ModelInfer

#   grpc_infer_check NAME PORT REQUEST
# One ModelInfer call (REQUEST: write_infer_request's file) with nghttp to 127.0.0.1:PORT; exits
# 1 unless it ends with grpc-status 0. Does nothing when nghttp is not installed.
grpc_infer_check() {
  command -v nghttp >/dev/null || return 0
  local out
  out=$(nghttp -v -H 'content-type: application/grpc' -H 'te: trailers' -d "$3" \
        "http://127.0.0.1:$2$GRPC_INFER_PATH" 2>&1 | tr -d '\0' || true)
  echo "$out" | grep -q 'grpc-status: 0' || { echo "$1: ModelInfer did not return grpc-status 0:"; echo "$out" | tail -20; exit 1; }
}

#   h2load_infer NAME PORT CPU CLIENTS STREAMS DURATION REQUEST TAG
# h2load (pinned to CPU) sending REQUEST as ModelInfer to 127.0.0.1:PORT for DURATION s after a
# 1 s warm-up; appends "NAME {rps, failed, p50_us, p99_us, n}" (latencies from h2load's
# --log-file) to $WORK/results and prints it. TAG names the round's files in WORK.
h2load_infer() {
  local log="$WORK/$1.$8.log"
  taskset -c "$3" h2load -c "$4" -m "$5" -t 1 -D "$6" --warm-up-time=1 \
    -d "$7" -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file="$log" "http://127.0.0.1:$2$GRPC_INFER_PATH" >"$WORK/$1.$8.out" 2>&1 || true
  /usr/bin/python3 - "$1" "$WORK/$1.$8.out" "$log" <<'PY' | tee -a "$WORK/results"
import json, re, sys
name, out, log = sys.argv[1:]
text = open(out).read()
m = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", text)
ok = re.search(r"requests: .*?(\d+) succeeded, (\d+) failed, (\d+) errored", text)
lat = sorted(int(l.split()[2]) for l in open(log) if l.strip())
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else 0
print(name, json.dumps({"rps": float(m.group(2)) if m else 0.0,
                        "failed": int(ok.group(2)) + int(ok.group(3)) if ok else -1,
                        "p50_us": pct(0.50), "p99_us": pct(0.99), "n": len(lat)}))
PY
}

#   nginx_grpc_pass_conf CPU PORT UPSTREAM_PORT
# An NGINX config (one worker on CPU) proxying gRPC from 127.0.0.1:PORT (h2c) to
# 127.0.0.1:UPSTREAM_PORT with grpc_pass over keep-alive upstream connections.
nginx_grpc_pass_conf() {
  nginx_conf_head "$1" 4096
  cat <<NGX
  upstream backend { server 127.0.0.1:$3; keepalive 64; }
  server {
    listen 127.0.0.1:$2 http2;
    http2_max_concurrent_streams 1024;
    keepalive_requests 1000000;
    location / { grpc_pass grpc://backend; }
  }
}
NGX
}

#   nginx_usable CONF WHAT
# True when nginx is installed and accepts CONF (`nginx -t`); otherwise says that the nginx
# leg (needing WHAT) is skipped, with nginx's complaint, and returns 1.
nginx_usable() {
  if ! command -v nginx >/dev/null || ! nginx -t -c "$1" -p "$WORK" >"$WORK/nginx.t" 2>&1; then
    echo "# nginx with $2 not available: skipping the nginx leg"; cat "$WORK/nginx.t" 2>/dev/null || true
    return 1
  fi
}

# The answer NGINX gives in place of the identity model's (same size as infergate's reply to
# bench/wrk/infer.lua), and a complete NGINX config serving it:
#   nginx_return200_conf CPU ADDRESS:PORT WORKER_CONNECTIONS [MAIN_DIRECTIVE...]
# one worker pinned to CPU, keep-alive without limits, `return 200` of the body on every path.
NGINX_INFER_BODY='{"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[1,16],"data":[1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,9.0,10.0,11.0,12.0,13.0,14.0,15.0,16.0]}]}'
nginx_return200_conf() {
  nginx_conf_head "$1" "$3" "${@:4}"
  cat <<NGX
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  server {
    listen $2 reuseport;
    location / { default_type application/json; return 200 '$NGINX_INFER_BODY'; }
  }
}
NGX
}

#   run_wrk NAME NS CPU CONNECTIONS SECONDS URL SCRIPT [SCRIPT_ARG...]
# wrk -t1 pinned to CPU in namespace NS; prints "NAME {json}" (the WRK_JSON line of
# bench/wrk/report.lua). Fails (prints wrk's output) when wrk prints no figures.
run_wrk() {
  local out
  out=$(ip netns exec "$2" taskset -c "$3" wrk -t 1 -c "$4" -d "${5}s" -s "$7" "$6" ${8:+--} "${@:8}" 2>&1) || true
  grep -q '^WRK_JSON ' <<<"$out" || { echo "wrk against $6 printed no figures:" >&2; echo "$out" >&2; return 1; }
  grep '^WRK_JSON ' <<<"$out" | sed "s/^WRK_JSON /$1 /"
}

#   wait_http NS URL PID LOG [SECONDS]
# Waits (default 20 s) until URL answers 2xx from namespace NS; if process PID ends first or
# time runs out, prints LOG (and says which) and exits 1.
wait_http() {
  local t
  for t in $(seq $(( ${5:-20} * 10 ))); do
    ip netns exec "$1" curl -sf -o /dev/null --max-time 1 "$2" 2>/dev/null && return 0
    if ! kill -0 "$3" 2>/dev/null; then
      echo "server for $2 exited before answering; its log ($4):" >&2; sed 's/^/   | /' "$4" >&2; exit 1
    fi
    sleep 0.1
  done
  echo "no answer from $2 in ${5:-20} s; log ($4):" >&2; sed 's/^/   | /' "$4" >&2; exit 1
}
