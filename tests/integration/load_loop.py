"""A closed-loop HTTP/1.1 load for the reload and restart tests: threads that POST KServe infer
requests in a loop until a stop file appears, half of them on keep-alive connections and half
on a new connection per request, and print one JSON line of results.

    python3 load_loop.py HOST PORT STOP_FILE MODEL[,MODEL...] [THREADS]

Counted:
  ok        200 answers
  failed    anything else: another status, a connection refused or reset, a timeout, EOF
            before a response (with the first few reasons in `reasons`)
  retried   requests sent on a keep-alive connection that the server had closed: EOF or a
            reset with no response byte on a reused connection. Like every HTTP client
            (RFC 9112 9.3.1), the request is sent again once on a new connection; the second
            try's outcome is what counts. A draining server closes idle keep-alive
            connections, and a request can cross that close on the wire.
Runs as a script so the restart test can start it in a client network namespace.
"""
import http.client
import json
import os
import sys
import threading
import time

BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                               "data": [float(i) for i in range(16)]}]}).encode()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.retried = 0
        self.reasons = []

    def fail(self, why):
        with self.lock:
            self.failed += 1
            if len(self.reasons) < 10:
                self.reasons.append(why)


def one(conn, path):
    conn.request("POST", path, body=BODY, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    return r.status


def worker(host, port, models, keepalive, stop_file, stats, index):
    conn = None
    used = False
    i = index
    while not os.path.exists(stop_file):
        path = "/v2/models/%s/infer" % models[i % len(models)]
        i += 1
        if conn is None or not keepalive:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            used = False
        try:
            status = one(conn, path)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
            conn.close()
            conn = None
            if not (keepalive and used):
                stats.fail("new connection: %r" % e)
                continue
            with stats.lock:
                stats.retried += 1
            try:  # once more, on a new connection
                conn = http.client.HTTPConnection(host, port, timeout=5)
                used = False
                status = one(conn, path)
            except Exception as e2:  # noqa: BLE001 (everything counts as a failure)
                conn.close()
                conn = None
                stats.fail("retry: %r" % e2)
                continue
        except (OSError, http.client.HTTPException) as e:
            if conn is not None:
                conn.close()
            conn = None
            stats.fail("%r" % e)
            continue
        used = True
        if status == 200:
            with stats.lock:
                stats.ok += 1
        else:
            stats.fail("%s -> %d" % (path, status))
        if not keepalive:
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def main():
    host, port, stop_file, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    stats = Stats()
    ts = [threading.Thread(target=worker,
                           args=(host, port, models.split(","), i % 2 == 0, stop_file, stats, i))
          for i in range(threads)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"ok": stats.ok, "failed": stats.failed, "retried": stats.retried,
                      "reasons": stats.reasons, "seconds": round(time.time() - t0, 2)}),
          flush=True)


if __name__ == "__main__":
    main()
