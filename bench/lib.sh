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
