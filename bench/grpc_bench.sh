#!/usr/bin/env bash
# gRPC ModelInfer throughput and latency with h2load: infergate socket mode directly, and the
# same calls through NGINX's grpc_pass (keep-alive upstream) in front of infergate socket mode,
# in one run. The request is a framed ModelInferRequest for the identity model: FP32 [1,16] as
# raw_input_contents (64 bytes). Rounds alternate between the two legs; the table gives medians
# of requests/s and of h2load's per-request latencies (p50/p99 from --log-file).
#
# Usage: bench/grpc_bench.sh [--binary PATH] [--rounds N] [--duration S] [--clients C]
#                            [--streams M] [--server-cpu N] [--client-cpu N]
# Needs: infergate built, h2load (nghttp2-client), nginx with the grpc module (Debian's
# nginx-light has it: `grpc_pass` passes `nginx -t`).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/app/infergate; ROUNDS=3; DURATION=5; CLIENTS=16; STREAMS=8; SCPU=0; CCPU=1
source bench/lib.sh
parse_opts "" --binary BIN --rounds ROUNDS --duration DURATION --clients CLIENTS --streams STREAMS \
  --server-cpu SCPU --client-cpu CCPU -- "$@"
[ -x "$BIN" ] || { echo "build first (or pass --binary): $BIN" >&2; exit 1; }
command -v h2load >/dev/null || { echo "h2load not found (apt-get install nghttp2-client)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/infergate-grpc-bench.XXXXXX)
trap bench_cleanup EXIT
IG_PORT=$(free_port); IG_ADMIN=$(free_port); NG_PORT=$(free_port)

loopback_config grpc "$IG_PORT" "$IG_ADMIN" "$SCPU" >"$WORK/ig.yaml"

NGINX=1
nginx_grpc_pass_conf "$SCPU" "$NG_PORT" "$IG_PORT" >"$WORK/nginx.conf"
nginx_usable "$WORK/nginx.conf" grpc_pass || NGINX=0

write_infer_request "$WORK/infer.bin"

"$BIN" run -c "$WORK/ig.yaml" >"$WORK/ig.log" 2>&1 & PIDS+=($!)
if [ "$NGINX" = 1 ]; then nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 & PIDS+=($!); fi
for _ in $(seq 50); do grep -q serving "$WORK/ig.log" && break; sleep 0.1; done
grep -q serving "$WORK/ig.log" || { echo "infergate did not start"; cat "$WORK/ig.log"; exit 1; }

grpc_infer_check infergate "$IG_PORT" "$WORK/infer.bin"
[ "$NGINX" = 1 ] && grpc_infer_check nginx "$NG_PORT" "$WORK/infer.bin"

run_h2load() {  # name port
  h2load_infer "$1" "$2" "$CCPU" "$CLIENTS" "$STREAMS" "$DURATION" "$WORK/infer.bin" "$r"
}

echo "# $(date -u +%F) $(nproc) cores, $(uname -r); server CPU $SCPU (infergate and nginx), client CPU $CCPU"
echo "# h2load -c $CLIENTS -m $STREAMS -t 1 -D $DURATION --warm-up-time=1; $ROUNDS round(s); ModelInfer FP32 [1,16] raw"
for r in $(seq "$ROUNDS"); do
  run_h2load infergate "$IG_PORT"
  [ "$NGINX" = 1 ] && run_h2load nginx-grpc_pass "$NG_PORT"
done
print_medians "$WORK/results" <<'PY'
print()
print("%-22s %12s %10s %10s %8s" % ("path", "median req/s", "p50 us", "p99 us", "failed"))
med = medians(("rps", "p50_us", "p99_us", "failed"))
for n, m in med.items():
    print("%-22s %12.0f %10.0f %10.0f %8d" % (n, m["rps"], m["p50_us"], m["p99_us"], m["failed"]))
if "nginx-grpc_pass" in med and med["nginx-grpc_pass"]["rps"] > 0:
    print("ratio direct/through-nginx (median req/s): %.2f" %
          (med["infergate"]["rps"] / med["nginx-grpc_pass"]["rps"]))
PY
