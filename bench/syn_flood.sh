#!/usr/bin/env bash
# Random-source SYN flood against infergate afxdp mode, infergate socket mode and NGINX (kernel
# SYN cookies), one at a time, alternating in one run, on one veth pair (issue 12's acceptance
# benchmark). For each server and round:
#   1. start the server in the gateway namespace, pinned to --server-cpu;
#   2. start `hping3 --flood --rand-source -S -p 8000` (as fast as it goes) in the client
#      namespace, pinned to --client-cpu;
#   3. after 1 s, fresh legitimate connections from the client namespace (also on
#      --client-cpu): --rate per second for --duration seconds, each its own connection:
#      connect + `GET /v2/health/ready` + a 200 within --timeout seconds
#      (tests/integration/hostile.py probe); success rate and p50/p99 of connect+request
#      latency over the answered ones;
#   4. stop the flood (SIGINT: hping3 prints how many it sent) and count the SYN rate: hping3's
#      own count, and the frames that arrived at the gateway's veth (its rx_packets);
#   5. time to recover: fresh connections back to back (each with a 1 s timeout) until one is
#      answered, at most --recover-max seconds (tests/integration/hostile.py recover);
#   6. stop the server.
# Medians over rounds, one table at the end.
#
# Usage (root): bench/syn_flood.sh [--binary B] [--rounds N] [--duration S] [--rate R]
#               [--timeout S] [--recover-max S] [--server-cpu N] [--client-cpu N]
#               [--servers "afxdp socket nginx"]
# Needs hping3 (apt-get install hping3), nginx, python3. Namespaces are unique and always
# removed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/build/app/infergate; ROUNDS=3; DURATION=10; RATE=20; TIMEOUT=2; RECMAX=120
SCPU=0; CCPU=1; SERVERS="afxdp socket nginx"
source bench/lib.sh
parse_opts "" --binary BIN --rounds ROUNDS --duration DURATION --rate RATE --timeout TIMEOUT \
  --recover-max RECMAX --server-cpu SCPU --client-cpu CCPU --servers SERVERS -- "$@"
[ "$(id -u)" -eq 0 ] || { echo "needs root (namespaces, XDP, AF_XDP)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "no infergate binary at $BIN (--binary)" >&2; exit 1; }
command -v hping3 >/dev/null || { echo "needs hping3 (apt-get install hping3)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "needs nginx" >&2; exit 1; }
BIN=$(readlink -f "$BIN")
HOSTILE=$PWD/tests/integration/hostile.py
WORK=$(mktemp -d /tmp/ig-syn-flood.XXXXXX)
bench_veth_up sf 236
ip netns exec "$CL" sysctl -qw net.ipv4.ip_local_port_range="10000 65000"
# SYN cookies are per network namespace: on for the kernel's listeners (socket mode, NGINX).
ip netns exec "$GW" sysctl -qw net.ipv4.tcp_syncookies=1 net.core.somaxconn=4096
echo "# gateway netns: net.ipv4.tcp_syncookies=$(ip netns exec "$GW" sysctl -n net.ipv4.tcp_syncookies)" \
  "tcp_max_syn_backlog=$(ip netns exec "$GW" sysctl -n net.ipv4.tcp_max_syn_backlog)" \
  "somaxconn=$(ip netns exec "$GW" sysctl -n net.core.somaxconn)"

config() {  # mode: the same config the adversarial tests use (tests/integration/hostile.py)
  /usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import hostile
print(hostile.config_text(sys.argv[2], sys.argv[3], cpu=int(sys.argv[4])))' \
    "$(dirname "$HOSTILE")" "$1" "$GIF" "$SCPU"
}
config afxdp >"$WORK/afxdp.yaml"
config socket >"$WORK/socket.yaml"
{ nginx_conf_head "$SCPU" 8192; cat <<NGX
  server {
    listen 0.0.0.0:8000 backlog=4096;
    location / { return 200 'ok'; }
  }
}
NGX
} >"$WORK/nginx.conf"

SERVER_PID=
start_server() {  # name
  case "$1" in
    afxdp|socket) ns_exec "$GW" "$BIN" run -c "$WORK/$1.yaml" >"$WORK/$1.log" 2>&1 & ;;
    nginx) ns_exec "$GW" nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.log" 2>&1 & ;;
    *) echo "unknown server $1" >&2; exit 2 ;;
  esac
  SERVER_PID=$!; PIDS+=("$SERVER_PID")
  for _ in $(seq 100); do
    ip netns exec "$CL" curl -sf -o /dev/null --max-time 1 "http://$GW_IP:8000/v2/health/ready" && return 0
    sleep 0.1
  done
  echo "$1 did not answer:" >&2; cat "$WORK/$1.log" "$WORK/nginx.err" 2>/dev/null >&2; exit 1
}
stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}
gw_rx() { ip -n "$GW" -s -j link show dev "$GIF" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["rx"]["packets"])'; }

measure() {  # server round: prints one JSON line
  local name=$1 round=$2 fpid rx0 rx1 t0 t1 probe rec sent
  start_server "$name"
  rx0=$(gw_rx); t0=$(date +%s.%N)
  ns_exec "$CL" taskset -c "$CCPU" hping3 --flood --rand-source -S -p 8000 "$GW_IP" >"$WORK/hping3.out" 2>&1 &
  fpid=$!; PIDS+=("$fpid")
  sleep 1
  probe=$(ip netns exec "$CL" taskset -c "$CCPU" /usr/bin/python3 "$HOSTILE" probe "$GW_IP" 8000 \
            $(( DURATION * RATE )) "$RATE" "$TIMEOUT")
  kill -INT "$fpid" 2>/dev/null || true
  wait "$fpid" 2>/dev/null || true
  t1=$(date +%s.%N); rx1=$(gw_rx)
  rec=$(ip netns exec "$CL" /usr/bin/python3 "$HOSTILE" recover "$GW_IP" 8000 "$RECMAX" 1)
  sent=$(grep -o '[0-9]* packets transmitted' "$WORK/hping3.out" | grep -o '^[0-9]*' || echo 0)
  stop_server
  /usr/bin/python3 -c 'import json, sys
p, r = json.loads(sys.argv[3]), json.loads(sys.argv[4])
s = float(sys.argv[8]) - float(sys.argv[7])
p.update(server=sys.argv[1], round=int(sys.argv[2]), recover_s=r["recover_s"], flood_s=round(s, 2),
         sent_per_s=round(int(sys.argv[5]) / s), arrived_per_s=round(int(sys.argv[6]) / s))
print(json.dumps(p))' "$name" "$round" "$probe" "$rec" "${sent:-0}" "$(( rx1 - rx0 ))" "$t0" "$t1"
}

echo "# $(date -u +%F) $(nproc) vCPU, $(uname -r); veth pair; servers on CPU $SCPU; hping3 --flood" \
  "--rand-source -S and the legitimate client on CPU $CCPU; legitimate: ${RATE}/s for ${DURATION}s," \
  "timeout ${TIMEOUT}s; $ROUNDS rounds; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for s in $SERVERS; do
    measure "$s" "$r" >>"$WORK/results"  # not in a pipeline: its background pids stay in PIDS
    tail -n 1 "$WORK/results"
  done
done
/usr/bin/python3 - "$WORK/results" "$RECMAX" <<'PY'
import json, math, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["server"], []).append(r)
def med(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None
def fmt(x, spec):
    return "-" if x is None else spec % x
print("%-8s %13s %9s %9s %13s %13s %13s" % ("server", "legit ok", "p50 ms", "p99 ms",
                                            "recover s", "SYN/s sent", "SYN/s arrived"))
for name, rs in rows.items():
    ok, total = sum(r["ok"] for r in rs), sum(r["total"] for r in rs)
    rec = [r["recover_s"] for r in rs]
    recs = fmt(med(rec), "%.2f") if all(x is not None for x in rec) else (
        ">%s" % sys.argv[2] if all(x is None for x in rec) else "%s" % rec)
    print("%-8s %13s %9s %9s %13s %13s %13s" % (
        name, "%d/%d %.1f%%" % (ok, total, 100.0 * ok / total if total else 0),
        fmt(med([r["p50_ms"] for r in rs]), "%.1f"), fmt(med([r["p99_ms"] for r in rs]), "%.1f"),
        recs, fmt(med([r["sent_per_s"] for r in rs]), "%.0f"),
        fmt(med([r["arrived_per_s"] for r in rs]), "%.0f")))
print("# legit ok: summed over rounds; p50/p99 (answered connections only), recover, SYN/s: medians over rounds")
PY
