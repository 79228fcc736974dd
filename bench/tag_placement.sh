#!/usr/bin/env bash
# What the XDP program's tag placement costs afxdp mode (docs/HOSTS.md): infergate in afxdp mode
# with `xdp.tags: metadata` and with `xdp.tags: prefix` (the fallback for kernels that refuse
# bpf_xdp_adjust_meta), next to NGINX answering a fixed 200 of the same size, in one run on one
# veth pair. Servers run one at a time on --server-cpu (every thread), clients on --client-cpu;
# each side pays its own receive path: GRO and threaded NAPI on both veth ends, each NAPI thread
# pinned to its side's CPU. Per server and round:
#   - closed loop: wrk -t1 -c32 (bench/wrk/infer.lua: KServe v2 infer, identity FP32 1x16) req/s;
#   - open loop: infergate-bench --mode open --arrival constant -R RATE -c 64 (a rate the client
#     sustains): achieved rate, p50/p99, and the server side's CPU per request: the run time of
#     every thread in the gateway namespace and of the gateway veth's NAPI thread (schedstat),
#     divided by the requests answered.
# Medians over the rounds and ratios at the end. Where the kernel refuses metadata, the metadata
# server cannot start; the script says so and measures the rest.
#
# Usage (root): bench/tag_placement.sh [--binary B] [--bench infergate-bench] [--rounds 3]
#        [--duration 5] [--rate 8000] [--server-cpu 0] [--client-cpu 1]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/build/app/infergate; BENCH=$PWD/build/bench/load/infergate-bench
ROUNDS=3; DURATION=5; RATE=8000; SCPU=0; CCPU=1
source bench/lib.sh
parse_opts "tag_placement: " --binary BIN --bench BENCH --rounds ROUNDS --duration DURATION \
  --rate RATE --server-cpu SCPU --client-cpu CCPU --help help=2,17 -- "$@"
die() { echo "tag_placement: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (namespaces, XDP, AF_XDP)"
[ -x "$BENCH" ] || die "no $BENCH (ninja -C build infergate-bench)"
WORK=$(mktemp -d /tmp/infergate-tags.XXXXXX)
bench_veth_up tags 236

# Each side pays its own receive path: GRO + threaded NAPI on both ends, pinned.
napi_pin() {  # ns if cpu
  ip netns exec "$1" ethtool -K "$2" gro on >/dev/null 2>&1 || true
  ip netns exec "$1" sh -c "echo 1 > /sys/class/net/$2/threaded" 2>/dev/null || true
  for p in $(pgrep -f "napi/$2-" || true); do taskset -pc "$3" "$p" >/dev/null 2>&1 || true; done
}

config() {  # tags port admin
  cat <<YAML
mode: afxdp
reactors: 1
cpus: [$SCPU]
listeners: [{name: http, address: 0.0.0.0, port: $2, protocol: http}]
admin: {address: 127.0.0.1, port: $3}
xdp: {interface: $GIF, attach: native, tags: $1}
$IDENTITY_MODELS
YAML
}
SERVERS=(nginx metadata prefix)
declare -A PORT=([nginx]=8000 [metadata]=8010 [prefix]=8020) ADMIN=([metadata]=9110 [prefix]=9120)
nginx_return200_conf "$SCPU" "$GW_IP:${PORT[nginx]}" 4096 >"$WORK/nginx.conf"
for s in metadata prefix; do config "$s" "${PORT[$s]}" "${ADMIN[$s]}" >"$WORK/$s.yaml"; done

start_server() {  # name; sets SERVER_PID, returns 1 when it refuses to start
  local log=$WORK/$1.log
  if [ "$1" = nginx ]; then
    ns_exec "$GW" nginx -c "$WORK/nginx.conf" -p "$WORK" >"$log" 2>&1 &
    SERVER_PID=$!
    wait_http "$CL" "http://$GW_IP:${PORT[nginx]}/" "$SERVER_PID" "$WORK/nginx.err"
  else
    ns_exec "$GW" taskset -c "$SCPU" "$BIN" run -c "$WORK/$1.yaml" >"$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
      grep -q serving "$log" && break
      kill -0 "$SERVER_PID" 2>/dev/null || { wait "$SERVER_PID" 2>/dev/null || true; return 1; }
      sleep 0.1
    done
    wait_http "$CL" "http://$GW_IP:${PORT[$1]}/v2/health/ready" "$SERVER_PID" "$log"
  fi
  napi_pin "$GW" "$GIF" "$SCPU"
  napi_pin "$CL" "$CIF" "$CCPU"
  PIDS+=("$SERVER_PID")
}
stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}
# CPU the server side spent, ns: every thread of every process in the gateway namespace plus the
# gateway veth's NAPI thread (its receive path), from /proc/PID/task/TID/schedstat (exact, where
# /proc/stat's ticks are 10 ms apart).
server_ns() {
  local t=0 a f p
  for p in $(ip netns pids "$GW") $(pgrep -f "napi/$GIF-" || true); do
    for f in /proc/"$p"/task/*/schedstat; do
      read -r a _ <"$f" 2>/dev/null && t=$((t + a))
    done
  done
  echo "$t"
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, kernel $(uname -r); veth $GIF <-> $CIF, GRO + threaded NAPI pinned per side; servers on CPU $SCPU, clients on CPU $CCPU; $ROUNDS round(s) x ${DURATION}s; open loop -R $RATE -c 64"
declare -A SKIP=()
for r in $(seq "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    [ -z "${SKIP[$s]:-}" ] || continue
    if ! start_server "$s"; then
      SKIP[$s]=1
      echo "# $s: did not start: $(grep -m1 -o 'cannot start: .*' "$WORK/$s.log" || tail -1 "$WORK/$s.log")"
      continue
    fi
    [ "$r" = 1 ] && [ "$s" != nginx ] && grep -h "tags reach the stack" "$WORK/$s.log" | sed 's/^.*afxdp: /# /'
    script=bench/wrk/infer.lua; [ "$s" = nginx ] && script=bench/wrk/get.lua
    run_wrk "cl.$s" "$CL" "$CCPU" 32 "$DURATION" "http://$GW_IP:${PORT[$s]}/" "$script" >>"$WORK/results"
    proto=(-p rest -m identity); [ "$s" = nginx ] && proto=(-p get --path /)
    j=$WORK/ol.json; rm -f "$j"
    b0=$(server_ns)
    ip netns exec "$CL" taskset -c "$CCPU" "$BENCH" -u "$GW_IP:${PORT[$s]}" -d "$DURATION" --warmup 0 \
      --progress never --json "$j" --mode open --arrival constant -R "$RATE" -c 64 "${proto[@]}" \
      >"$WORK/bench.out" 2>&1 || { cat "$WORK/bench.out" >&2; die "infergate-bench against $s failed"; }
    b1=$(server_ns)
    /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[2])); l = r.get("latency_us", {})
n = r.get("ok", 0) or 1
print("ol." + sys.argv[1], json.dumps({"rps": r["achieved_rate"], "p50_us": l.get("p50", 0), "p99_us": l.get("p99", 0),
      "errors": r["error_count"], "cpu_us_per_req": (int(sys.argv[4]) - int(sys.argv[3])) / 1e3 / n}))' \
      "$s" "$j" "$b0" "$b1" >>"$WORK/results"
    stop_server
  done
done
print_medians "$WORK/results" <<'PY'
rows_all = rows
rows = {n: r for n, r in rows_all.items() if n.startswith("cl.")}
cl = {n[3:]: m for n, m in medians(("rps",)).items()}
rows = {n: r for n, r in rows_all.items() if n.startswith("ol.")}
ol = {n[3:]: m for n, m in medians(("rps", "p50_us", "p99_us", "cpu_us_per_req")).items()}
print("%-9s %12s %12s %9s %9s %14s" % ("server", "closed req/s", "open req/s", "p50 us", "p99 us", "CPU us/req"))
for n in cl:
    o = ol.get(n, {})
    print("%-9s %12.0f %12.0f %9.0f %9.0f %14.2f" % (n, cl[n]["rps"], o.get("rps", 0), o.get("p50_us", 0),
          o.get("p99_us", 0), o.get("cpu_us_per_req", 0)))
if "prefix" in cl and "metadata" in cl:
    print("prefix/metadata: closed req/s %.3f, CPU per request %.3f" % (
        cl["prefix"]["rps"] / cl["metadata"]["rps"], ol["prefix"]["cpu_us_per_req"] / ol["metadata"]["cpu_us_per_req"]))
for n in ("metadata", "prefix"):
    if n in cl and "nginx" in cl:
        print("%s/nginx: closed req/s %.3f, CPU per request %.3f" % (n, cl[n]["rps"] / cl["nginx"]["rps"],
              ol[n]["cpu_us_per_req"] / ol["nginx"]["cpu_us_per_req"]))
PY
