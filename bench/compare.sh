#!/usr/bin/env bash
# Front-door comparison with infergate-bench: the same open-loop rate sweep (KServe v2 infer on the
# identity model) against each contender, one after the other, in one run, on the same server
# core budget, over a veth pair between two fresh network namespaces:
#   ig-socket      infergate, socket mode
#   ig-xdp-filter  infergate, xdp-filter mode (XDP program on the gateway's veth)
#   nginx-proxy    NGINX (proxy_pass, keep-alive upstream) in front of infergate socket mode
#   ig-afxdp       infergate, afxdp mode (only with --afxdp; skipped when the mode is unavailable)
# Writes per-contender JSON reports and plots, a combined table (summary.md) and combined plots
# (p99 by offered rate, percentile spectrum at each contender's best rate) under the results folder.
#
# Usage: bench/compare.sh [--build DIR] [--infergate BIN] [--bench BIN] [--results DIR] [--server-cpus 0] [--client-cpus 1]
#          [--protocol rest|grpc] [--format json|binary] [--connections 64] [--threads 1]
#          [--duration 3] [--warmup 1] [--sweep-start 2000] [--sweep-factor 2]
#          [--sweep-max 400000] [--sweep-refine 2] [--p99-target-ms 2] [--arrival poisson]
#          [--afxdp] [--only NAME,NAME]
# Needs root (namespaces, XDP), a build with the bench (<build>/app/infergate,
# <build>/bench/load/infergate-bench), nginx and gnuplot.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build; RESULTS=""; SCPUS=0; CCPUS=1; PROTO=rest; FORMAT=json; CONNS=64; THREADS=1
DURATION=3; WARMUP=1; START=2000; FACTOR=2; SMAX=400000; REFINE=2; P99=2; ARRIVAL=poisson
AFXDP=0; ONLY=""
CMD="bench/compare.sh $*"
source bench/lib.sh
parse_opts "compare: " --build BUILD --infergate IG --bench BENCH --results RESULTS \
  --server-cpus SCPUS --client-cpus CCPUS --protocol PROTO --format FORMAT --connections CONNS \
  --threads THREADS --duration DURATION --warmup WARMUP --sweep-start START \
  --sweep-factor FACTOR --sweep-max SMAX --sweep-refine REFINE --p99-target-ms P99 \
  --arrival ARRIVAL --afxdp AFXDP=1 --only ONLY -h help=2,20 --help help=2,20 -- "$@"
[ "$(id -u)" -eq 0 ] || { echo "compare: needs root (network namespaces, XDP)" >&2; exit 1; }
IG=$(realpath "${IG:-$BUILD/app/infergate}")
BENCH=$(realpath "${BENCH:-$BUILD/bench/load/infergate-bench}")
[ -x "$IG" ] || { echo "compare: $IG missing: build first" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "compare: $BENCH missing: build with -DINFERGATE_BUILD_BENCH=ON" >&2; exit 1; }
command -v nginx >/dev/null || NGINX_MISSING=1
[ -n "$RESULTS" ] || RESULTS=results/compare-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)

TAG=$$
GW=ig-cmp-gw-$TAG; CL=ig-cmp-cl-$TAG; GIF=igcg$TAG; CIF=igcc$TAG
NET=10.233.$((TAG % 250)); GW_IP=$NET.1; CL_IP=$NET.2
WORK=$(mktemp -d /tmp/infergate-compare.XXXXXX)
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  # Nothing of one contender may serve the next one's traffic.
  local left; left=$(ip netns pids "$GW" 2>/dev/null | xargs)
  if [ -n "$left" ]; then
    echo "compare: processes left in $GW after stopping a contender: $left" >&2
    for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
    return 1
  fi
}
cleanup() {
  stop_all || true
  for p in $(ip netns pids "$GW" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$GW" 2>/dev/null || true
  ip netns del "$CL" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
veth_pair_up "$GW" "$CL" "$GIF" "$CIF" "$GW_IP" "$CL_IP"
ip netns exec "$GW" ethtool -K "$GIF" tx off >/dev/null 2>&1 || true

NREACT=$(echo "$SCPUS" | tr ',' '\n' | grep -c .)
CPU_LIST="[$SCPUS]"

write_config() {  # mode listen_addr port [extra yaml]
  cat >"$WORK/$1-$3.yaml" <<YAML
mode: $1
reactors: $NREACT
cpus: $CPU_LIST
listeners:
  - {name: http, address: $2, port: $3, protocol: http}
  - {name: grpc, address: $2, port: $(($3 + 1)), protocol: grpc}
admin: {address: 127.0.0.1, port: $(($3 + 2))}
logging: {level: info, access_log: false}
${4:-}
$IDENTITY_MODELS
YAML
  echo "$WORK/$1-$3.yaml"
}

wait_ready() {  # port log pid
  for _ in $(seq 100); do
    if ip netns exec "$GW" curl -sf -o /dev/null "http://127.0.0.1:$1/v2/health/ready" 2>/dev/null; then return 0; fi
    kill -0 "$3" 2>/dev/null || { sed 's/^/   | /' "$2" | tail -5; return 1; }
    sleep 0.1
  done
  return 1
}

start_ig() {  # name mode port [extra yaml] -> sets PORT
  local cfg; cfg=$(write_config "$2" 0.0.0.0 "$3" "${4:-}")
  ns_exec "$GW" "$IG" run -c "$cfg" >"$RESULTS/$1.gateway.log" 2>&1 &
  PIDS+=($!)
  wait_ready "$(($3 + 2))" "$RESULTS/$1.gateway.log" "$!"
}

start_nginx_proxy() {
  local cfg; cfg=$(write_config socket 127.0.0.1 9000)
  ns_exec "$GW" "$IG" run -c "$cfg" >"$RESULTS/nginx-proxy.gateway.log" 2>&1 &
  PIDS+=($!)
  wait_ready 9002 "$RESULTS/nginx-proxy.gateway.log" "$!" || return 1
  local mask; mask=$(/usr/bin/python3 -c "import sys; print(format(sum(1 << int(c) for c in sys.argv[1].split(',')), 'b'))" "$SCPUS")
  cat >"$WORK/nginx.conf" <<NGX
worker_processes $NREACT;
user root;
worker_cpu_affinity $(for _ in $(seq "$NREACT"); do printf '%s ' "$mask"; done);
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/body; proxy_temp_path $WORK/proxy; fastcgi_temp_path $WORK/fcgi;
  uwsgi_temp_path $WORK/uwsgi; scgi_temp_path $WORK/scgi;
  upstream ig { server 127.0.0.1:9000; keepalive 256; }
  server {
    listen 0.0.0.0:8080 reuseport;
    location / { proxy_pass http://ig; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGX
  ip netns exec "$GW" nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 &
  PIDS+=($!)
  # The gateway behind NGINX shares NGINX's CPUs: the same core budget as the others.
  for _ in $(seq 50); do
    ip netns exec "$GW" curl -sf -o /dev/null "http://127.0.0.1:8080/v2/health/ready" 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$WORK/nginx.err" >&2
  return 1
}

run_sweep() {  # name port
  echo "== $1: sweep from $START req/s (x$FACTOR, p99 target $P99 ms)"
  local fmtarg=(); [ "$PROTO" = rest ] && fmtarg=(--format "$FORMAT")
  ip netns exec "$CL" taskset -c "$CCPUS" "$BENCH" -u "$GW_IP:$2" -p "$PROTO" "${fmtarg[@]}" \
    --mode sweep --arrival "$ARRIVAL" --sweep-start "$START" --sweep-factor "$FACTOR" \
    --sweep-max "$SMAX" --sweep-refine "$REFINE" --p99-target-ms "$P99" -c "$CONNS" -t "$THREADS" \
    -d "$DURATION" --warmup "$WARMUP" --label "$1" --json "$RESULTS/$1.json" \
    --plot "$RESULTS/$1" --progress never | tee "$RESULTS/$1.txt" | grep -E "^  sweep|best rate|no rate"
}

want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
SKIPPED=()
port_for() { [ "$PROTO" = grpc ] && echo $(($1 + 1)) || echo "$1"; }

echo "# $(date -u +%FT%TZ) $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)"
echo "# server CPUs $SCPUS, client CPUs $CCPUS; veth $GIF <-> $CIF; results in $RESULTS"
if want ig-socket; then
  if start_ig ig-socket socket 8000; then run_sweep ig-socket "$(port_for 8000)"; else SKIPPED+=("ig-socket: did not start"); fi
  stop_all || exit 1
fi
if want ig-xdp-filter; then
  if start_ig ig-xdp-filter xdp-filter 8000 "xdp: {interface: $GIF, attach: native, methods: [GET, POST], path_prefixes: [\"/v2/\"]}"; then
    run_sweep ig-xdp-filter "$(port_for 8000)"
  else
    SKIPPED+=("ig-xdp-filter: xdp-filter mode unavailable ($(tail -1 "$RESULTS/ig-xdp-filter.gateway.log" 2>/dev/null))")
  fi
  stop_all || exit 1
fi
if want nginx-proxy; then
  if [ -n "${NGINX_MISSING:-}" ]; then SKIPPED+=("nginx-proxy: nginx not installed")
  elif [ "$PROTO" = grpc ]; then SKIPPED+=("nginx-proxy: REST only in this script")
  elif start_nginx_proxy; then run_sweep nginx-proxy 8080
  else SKIPPED+=("nginx-proxy: did not start"); fi
  stop_all || exit 1
fi
if [ "$AFXDP" = 1 ] && want ig-afxdp; then
  if start_ig ig-afxdp afxdp 8000 "xdp: {interface: $GIF, attach: native}"; then
    run_sweep ig-afxdp "$(port_for 8000)"
  else
    SKIPPED+=("ig-afxdp: afxdp mode unavailable ($(tail -1 "$RESULTS/ig-afxdp.gateway.log" 2>/dev/null))")
  fi
  stop_all || exit 1
fi
printf '%s\n' "${SKIPPED[@]}" >"$RESULTS/skipped.txt"

# Combined table and plots.
/usr/bin/python3 - "$RESULTS" "$P99" "$CMD" <<'PY'
import glob, json, os, sys
res, p99t, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3]
runs = {}
for f in sorted(glob.glob(os.path.join(res, "*.json"))):
    runs[os.path.basename(f)[:-5]] = json.load(open(f))
order = [n for n in ("ig-socket", "ig-xdp-filter", "nginx-proxy", "ig-afxdp") if n in runs]
lines = ["| contender | best rate (req/s) with p99 <= %g ms | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors |" % p99t,
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
for n in order:
    s = runs[n]
    best = [st for st in s["steps"] if st["meets"] and st["run"]["target_rate"] == s["best_rate"]]
    if not best:
        lines.append("| %s | none (%s) | | | | | | |" % (n, s["stop_reason"]))
        continue
    r = best[0]["run"]; l = r["latency_us"]
    lines.append("| %s | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %d |" % (
        n, s["best_rate"], l["p50"] / 1e3, l["p90"] / 1e3, l["p99"] / 1e3, l["p99_9"] / 1e3, l["max"] / 1e3, r["error_count"]))
rates = sorted({st["run"]["target_rate"] for n in order for st in runs[n]["steps"]})
common = [x for x in rates if all(any(st["run"]["target_rate"] == x for st in runs[n]["steps"]) for n in order)]
lines += ["", "p99 (ms) by offered rate (rates every contender ran; * = generator saturated):", "",
          "| offered req/s | " + " | ".join(order) + " |", "|---:|" + "---:|" * len(order)]
for x in common:
    cells = []
    for n in order:
        st = [st for st in runs[n]["steps"] if st["run"]["target_rate"] == x][0]
        r = st["run"]
        cells.append("%.3f%s" % (r["latency_us"]["p99"] / 1e3, "*" if r["generator"]["saturated"] else ""))
    lines.append("| %.0f | %s |" % (x, " | ".join(cells)))
skipped = [l.strip() for l in open(os.path.join(res, "skipped.txt")) if l.strip()]
if skipped:
    lines += ["", "skipped: " + "; ".join(skipped)]
lines += ["", "command: `%s`" % cmd]
open(os.path.join(res, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
# Combined plots: p99 by offered rate; spectrum at each contender's best rate.
gp = ["set terminal pngcairo size 1000,600", "set grid", "set output 'p99_by_rate.png'",
      "set title 'p99 latency by offered rate (open loop)'", "set xlabel 'offered rate (req/s)'",
      "set ylabel 'p99 latency (ms)'", "set logscale y"]
plots = []
for n in order:
    with open(os.path.join(res, n + ".p99.dat"), "w") as f:
        for st in sorted(runs[n]["steps"], key=lambda st: st["run"]["target_rate"]):
            f.write("%f %f\n" % (st["run"]["target_rate"], st["run"]["latency_us"]["p99"] / 1e3))
    plots.append("'%s.p99.dat' using 1:2 with linespoints title '%s'" % (n, n))
gp += ["plot " + ", ".join(plots) + ", %g with lines dt 2 title 'target'" % p99t]
gp += ["unset logscale", "set output 'spectrum_at_best_rate.png'", "set title 'latency by percentile at each contender''s best rate'",
       "set xlabel 'percentile'", "set ylabel 'latency (ms)'", "set logscale x",
       "set xtics ('0%%' 1, '90%%' 10, '99%%' 100, '99.9%%' 1000, '99.99%%' 10000)"]
plots = []
for n in order:
    s = runs[n]
    best = [st for st in s["steps"] if st["run"]["target_rate"] == s["best_rate"]]
    if not best:
        continue
    with open(os.path.join(res, n + ".best.spectrum.dat"), "w") as f:
        for q, v in best[0]["run"]["spectrum"]:
            f.write("%f %f\n" % (min(1e5, 1 / (1 - q)) if q < 1 else 1e5, v / 1e3))
    plots.append("'%s.best.spectrum.dat' using 1:2 with steps title '%s @ %.0f/s'" % (n, n, s["best_rate"]))
if plots:
    gp += ["plot " + ", ".join(plots)]
open(os.path.join(res, "compare.gp"), "w").write("\n".join(gp) + "\n")
PY
(cd "$RESULTS" && gnuplot compare.gp) || echo "compare: gnuplot failed" >&2
echo "== results: $RESULTS (summary.md, p99_by_rate.png, spectrum_at_best_rate.png, per-contender JSON and plots)"
