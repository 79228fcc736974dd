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
{ nginx_conf_head "$SCPU" 4096; cat <<NGX
  upstream infergate { server 127.0.0.1:$IG_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NG_PORT http2;
    http2_max_concurrent_streams 1024;
    keepalive_requests 1000000;
    location / { grpc_pass grpc://infergate; }
  }
}
NGX
} >"$WORK/nginx.conf"
if ! command -v nginx >/dev/null || ! nginx -t -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.t" 2>&1; then
  echo "# nginx with grpc_pass not available: skipping the nginx leg"; cat "$WORK/nginx.t" 2>/dev/null || true
  NGINX=0
fi

# The framed ModelInferRequest (gRPC 5-byte prefix + protobuf), written by hand from the field
# numbers of Triton's grpc_service.proto: model_name=1, inputs=5 {name=1, datatype=2, shape=3},
# raw_input_contents=7.
/usr/bin/python3 - "$WORK/infer.bin" <<'PY'
import struct, sys
def ld(field, b): return bytes([field << 3 | 2, len(b)]) + b
tensor = ld(1, b"INPUT0") + ld(2, b"FP32") + ld(3, bytes([1, 16]))
msg = ld(1, b"identity") + ld(5, tensor) + ld(7, struct.pack("<16f", *range(16)))
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(msg)) + msg)
PY

"$BIN" run -c "$WORK/ig.yaml" >"$WORK/ig.log" 2>&1 & PIDS+=($!)
if [ "$NGINX" = 1 ]; then nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.out" 2>&1 & PIDS+=($!); fi
for _ in $(seq 50); do grep -q serving "$WORK/ig.log" && break; sleep 0.1; done
grep -q serving "$WORK/ig.log" || { echo "infergate did not start"; cat "$WORK/ig.log"; exit 1; }

URL_PATH=/inference.GRPCInferenceService/ModelInfer
check() {  # name port: one call with nghttp, must end with grpc-status 0
  local out
  out=$(nghttp -v -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/infer.bin" \
        "http://127.0.0.1:$2$URL_PATH" 2>&1 | tr -d '\0' || true)
  echo "$out" | grep -q 'grpc-status: 0' || { echo "$1: ModelInfer did not return grpc-status 0:"; echo "$out" | tail -20; exit 1; }
}
command -v nghttp >/dev/null && { check infergate "$IG_PORT"; [ "$NGINX" = 1 ] && check nginx "$NG_PORT"; }

run_h2load() {  # name port
  local log="$WORK/$1.$r.log"
  taskset -c "$CCPU" h2load -c "$CLIENTS" -m "$STREAMS" -t 1 -D "$DURATION" --warm-up-time=1 \
    -d "$WORK/infer.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file="$log" "http://127.0.0.1:$2$URL_PATH" >"$WORK/$1.$r.out" 2>&1 || true
  /usr/bin/python3 - "$1" "$WORK/$1.$r.out" "$log" <<'PY' | tee -a "$WORK/results"
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
