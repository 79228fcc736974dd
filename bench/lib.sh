# Sourced by the loopback benchmarks (grpc_bench.sh, wrk_vs_nginx.sh): processes started in the
# background go into PIDS and are stopped, and WORK removed, by bench_cleanup (trap it on EXIT);
# free_port prints a free loopback TCP port; nginx_conf_head prints the start of an NGINX
# config for the peer (one worker pinned to a CPU, in the foreground, pid and error log in
# WORK, access log off) up to and including "http {".
PIDS=()
bench_cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# nginx_conf_head CPU WORKER_CONNECTIONS
nginx_conf_head() {
  cat <<NGX
worker_processes 1;
worker_cpu_affinity $(printf '1%0*d' "$1" 0);
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections $2; }
http {
  access_log off;
NGX
}
