#!/usr/bin/env python3
"""One slow reader against infergate (socket mode) and NGINX: what it pins and how long it lives.

A client with a 4 KiB receive buffer pipelines 40 requests for ~256 KiB answers and never reads
(issue 13, item 3). For each server, in alternating rounds on loopback (server pinned to CPU 0,
client on CPU 1), it prints:
  - close_s: seconds until the server ended the connection (its side leaves ESTABLISHED: a
    reset, or a close whose FIN waits behind the unsent data), or "never" within the window;
  - rss_kib: growth of the server's resident memory while the client was stuck (peak - before);
  - sendq_kib: bytes the server's kernel socket held for the client at the peak (ss Send-Q,
    any state: after a plain close the kernel keeps them in an orphaned socket).
Servers:
  - infergate: limits.send_timeout_ms 2000, min_drain_bytes 65536, 4 MiB per connection;
  - infergate-off: the same binary with every output limit off (the behaviour before issue 13);
  - nginx: a static 256 KiB file, send_timeout 2s (NGINX's own slow-reader defence), sendfile.

    /usr/bin/python3 bench/slow_reader.py --binary build/app/infergate [--rounds 3] [--window 8]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402
from hostile import rss_kib  # noqa: E402

N_FLOATS = 65536
BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [N_FLOATS], "datatype": "FP32",
                               "data": [1] * N_FLOATS}]}).encode()
INFER = (b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
         % len(BODY)) + BODY
CONFIG = """mode: socket
reactors: 1
cpus: [0]
listeners: [{{name: http, address: 127.0.0.1, port: 0, protocol: http}}]
admin: {{address: 127.0.0.1, port: 0}}
limits: {{max_body_bytes: 4194304, send_timeout_ms: {t}, min_drain_bytes: 65536,
          max_output_bytes_per_connection: {pc}, max_output_bytes: {pp}}}
models:
  - name: big
    max_batch_size: 0
    inputs: [{{name: INPUT0, datatype: FP32, shape: [-1]}}]
    outputs: [{{name: OUTPUT0, datatype: FP32, shape: [-1]}}]
"""


def server_established(port):
    """Connections the server on `port` still holds open (ESTABLISHED on its side)."""
    out = subprocess.run(["ss", "-tnH", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True).stdout
    return len(out.splitlines())


def sendq_kib(port):
    """Send-Q of the server's sockets on `port` (bytes queued for the client), in KiB."""
    out = subprocess.run(["ss", "-tnH", "state", "all", "( sport = :%d )" % port],
                         capture_output=True, text=True).stdout
    total = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2].isdigit():
            total += int(parts[2])
    return total // 1024


def one_round(port, pid, request, window):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))

    def pump():
        try:
            for _ in range(40):
                s.sendall(request)
        except OSError:
            pass
    rss0 = rss_kib(pid)
    t = threading.Thread(target=pump, daemon=True)
    t0 = time.time()
    t.start()
    peak_rss, peak_q, closed = rss0, 0, None
    while time.time() - t0 < window:
        peak_rss = max(peak_rss, rss_kib(pid))
        peak_q = max(peak_q, sendq_kib(port))
        if server_established(port) == 0:  # reset, or closed (FIN queued behind the data)
            closed = time.time() - t0
            break
        time.sleep(0.05)
    s.close()
    t.join(timeout=5)
    time.sleep(0.3)
    return closed, peak_rss - rss0, peak_q


def start_nginx(work, port, body_bytes):
    root = os.path.join(work, "root")
    os.makedirs(root)
    os.chmod(work, 0o755)  # the worker runs as nobody
    with open(os.path.join(root, "big"), "wb") as f:
        f.write(b"x" * body_bytes)
    os.chmod(os.path.join(root, "big"), 0o644)
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""worker_processes 1;
worker_cpu_affinity 1;
daemon off;
pid %s/nginx.pid;
error_log %s/nginx.err warn;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  send_timeout 2s;
  keepalive_requests 1000;
  server { listen 127.0.0.1:%d; root %s; }
}
""" % (work, work, port, root))
    p = subprocess.Popen(["nginx", "-c", conf, "-p", work], stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    # the worker (child of the master) is the process that holds the connection
    time.sleep(0.2)
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    return p, int(kids[0]) if kids else p.pid


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/app/infergate")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=8.0, help="seconds to watch each client")
    args = ap.parse_args()
    os.sched_setaffinity(0, {1})
    harness.ARGS = argparse.Namespace(binary=os.path.abspath(args.binary),
                                      source=os.path.join(os.path.dirname(__file__), ".."))
    servers = {}
    gws = []
    for name, t, pc, pp in (("infergate", 2000, 4 << 20, 64 << 20), ("infergate-off", 0, 0, 0)):
        gw = harness.Gateway(config_text=CONFIG.format(t=t, pc=pc, pp=pp))
        gws.append(gw)
        servers[name] = (gw.port, gw.proc.pid, INFER)
    work = tempfile.mkdtemp(prefix="ig-slow-nginx-")
    nginx = None
    if shutil.which("nginx"):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        nginx, worker = start_nginx(work, port, 262144)
        servers["nginx"] = (port, worker, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    results = {n: [] for n in servers}
    try:
        for r in range(args.rounds):
            for name, (port, pid, req) in servers.items():
                results[name].append(one_round(port, pid, req, args.window))
    finally:
        for gw in gws:
            gw.stop()
        if nginx:
            nginx.terminate()
            nginx.wait()
        shutil.rmtree(work, ignore_errors=True)
    print("%-14s %10s %10s %10s   (medians of %d rounds, window %.0f s)"
          % ("server", "close_s", "rss_kib", "sendq_kib", args.rounds, args.window))
    for name, rs in results.items():
        closes = [c for c, _, _ in rs if c is not None]
        close = ("%.2f" % statistics.median(closes)) if len(closes) == len(rs) else \
            "never" if not closes else "%d/%d" % (len(closes), len(rs))
        print("%-14s %10s %10d %10d" % (name, close, statistics.median(r for _, r, _ in rs),
                                         statistics.median(q for _, _, q in rs)))


if __name__ == "__main__":
    main()
