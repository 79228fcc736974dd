# Sourced by the loopback benchmarks (grpc_bench.sh, wrk_vs_nginx.sh): processes started in the
# background go into PIDS and are stopped, and WORK removed, by bench_cleanup (trap it on EXIT);
# free_port prints a free loopback TCP port.
PIDS=()
bench_cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
