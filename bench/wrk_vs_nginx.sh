#!/usr/bin/env bash
# HTTP/1.1 keep-alive throughput: infergate (socket mode, identity model, KServe v2 infer with a
# small FP32 tensor) against NGINX answering a fixed 200, on the same core budget, in one run.
# Rounds alternate between the two; the report gives per-round figures, medians and the ratio.
#
# Usage: bench/wrk_vs_nginx.sh [--rounds N] [--duration S] [--connections C] [--server-cpu N]
#                              [--client-cpu N]
# Needs: build/app/infergate (scripts/build.sh), wrk, nginx (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3; DURATION=5; CONNS=32; SCPU=0; CCPU=1
source bench/lib.sh
parse_opts "" --rounds ROUNDS --duration DURATION --connections CONNS --server-cpu SCPU \
  --client-cpu CCPU -- "$@"
BIN=build/app/infergate
[ -x "$BIN" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
WORK=$(mktemp -d /tmp/infergate-bench.XXXXXX)
trap bench_cleanup EXIT
IG_PORT=$(free_port); IG_ADMIN=$(free_port); NG_PORT=$(free_port)

loopback_config http "$IG_PORT" "$IG_ADMIN" "$SCPU" >"$WORK/ig.yaml"
# NGINX: one worker on the same CPU, a fixed 200 with a body of the size infergate answers.
BODY='{"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[1,16],"data":[1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,9.0,10.0,11.0,12.0,13.0,14.0,15.0,16.0]}]}'
{ nginx_conf_head "$SCPU" 4096; cat <<NGX
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$NG_PORT reuseport;
    location / { default_type application/json; return 200 '$BODY'; }
  }
}
NGX
} >"$WORK/nginx.conf"
"$BIN" run -c "$WORK/ig.yaml" >"$WORK/ig.log" 2>&1 & PIDS+=($!)
nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 & PIDS+=($!)
sleep 1
curl -sf -o /dev/null "http://127.0.0.1:$NG_PORT/" || { echo "nginx did not start"; cat "$WORK/nginx.err"; exit 1; }
curl -sf -o /dev/null "http://127.0.0.1:$IG_PORT/v2/health/ready" || { echo "infergate did not start"; cat "$WORK/ig.log"; exit 1; }

run_wrk() {  # name url script
  taskset -c "$CCPU" wrk -t 1 -c "$CONNS" -d "${DURATION}s" -s "$3" "$2" | grep WRK_JSON | sed "s/^WRK_JSON /$1 /"
}
echo "# $(date -u +%F) $(nproc) cores, $(uname -r); server CPU $SCPU, client (wrk -t1 -c$CONNS) CPU $CCPU; ${DURATION}s x $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  run_wrk infergate "http://127.0.0.1:$IG_PORT/" bench/wrk/infer.lua | tee -a "$WORK/results"
  run_wrk nginx "http://127.0.0.1:$NG_PORT/" bench/wrk/get.lua | tee -a "$WORK/results"
done
print_medians "$WORK/results" <<'PY'
med = medians(("rps", "p50_us", "p99_us", "errors"))
print("%-10s %12s %10s %10s %8s" % ("server", "median req/s", "p50 us", "p99 us", "errors"))
for n, m in med.items():
    print("%-10s %12.0f %10.0f %10.0f %8d" % (n, m["rps"], m["p50_us"], m["p99_us"], m["errors"]))
print("ratio infergate/nginx (median req/s): %.2f" % (med["infergate"]["rps"] / med["nginx"]["rps"]))
PY
