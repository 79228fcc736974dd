"""infergate-bench end to end.

1. The coordinated-omission effect, shown: a tiny HTTP/1.1 server that stalls every response
   for 1 s once (like a GC pause). An open-loop run (fixed arrival rate, latency from each
   request's intended send time) must put the stall in its tail (p99 >= ~the stall); a
   closed-loop run against the same stall sees it only on the few requests in flight, so its
   p99 stays far below the stall although its max shows the stall happened.
2. Real runs against infergate (harness.Gateway) over REST (JSON and binary) and gRPC, with a
   priority mix and malformed requests: no errors, the gateway counted what the tool sent, the
   malformed requests were answered with the statuses the protocol defines.

infergate-bench is looked for next to the infergate binary's build tree
(<build>/bench/load/infergate-bench) or in $INFERGATE_BENCH; without it the tests skip.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STALL_S = 1.0


def bench_binary():
    env = os.environ.get("INFERGATE_BENCH")
    if env:
        return env
    build = os.path.dirname(os.path.dirname(os.path.abspath(harness.ARGS.binary)))
    return os.path.join(build, "bench", "load", "infergate-bench")


def run_bench(args, timeout=120):
    tmp = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
    tmp.close()
    try:
        p = subprocess.run([bench_binary()] + args + ["--json", tmp.name, "--progress", "never"],
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise AssertionError("infergate-bench failed (%d):\n%s\n%s" % (p.returncode, p.stdout, p.stderr))
        with open(tmp.name) as f:
            return json.load(f), p.stdout
    finally:
        os.unlink(tmp.name)


class StallingServer:
    """HTTP/1.1 keep-alive server (a thread per connection) answering 200 at once, except that
    STALL_S after the first request, every response is held until the stall ends, once."""

    def __init__(self, stall_after_s):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.stall_after_s = stall_after_s
        self.first = None
        self.stall_until = None
        self.lock = threading.Lock()
        self.requests = 0
        self.stopped = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def hold(self):
        now = time.monotonic()
        with self.lock:
            self.requests += 1
            if self.first is None:
                self.first = now
            if self.stall_until is None and now - self.first >= self.stall_after_s:
                self.stall_until = now + STALL_S
            until = self.stall_until
        if until is not None and now < until:
            time.sleep(until - now)

    def serve(self, c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        body = b'{"ok":true}'
        resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body), body)
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = c.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                n = int(m.group(1)) if m else 0
                while len(buf) < n:
                    chunk = c.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                buf = buf[n:]
                self.hold()
                c.sendall(resp)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stopped = True
        self.sock.close()


class CoordinatedOmissionTest(unittest.TestCase):
    def setUp(self):
        if not os.access(bench_binary(), os.X_OK):
            self.skipTest("needs infergate-bench (build with -DINFERGATE_BUILD_BENCH=ON, or set "
                          "INFERGATE_BENCH): not found at " + bench_binary())

    def common(self, port):
        # Warm-up 0.5 s; the server stalls 1.5 s after the first request, i.e. 1 s into the
        # measured window of 4 s. A generous lag threshold: this checks the latency figures,
        # not the (shared, busy) machine's scheduling.
        return ["-u", "127.0.0.1:%d" % port, "-p", "rest", "--warmup", "0.5", "-d", "4",
                "--timeout", "10", "--lag-threshold-ms", "50"]

    def test_open_loop_reports_the_stall_closed_loop_hides_it(self):
        srv = StallingServer(stall_after_s=1.5)
        try:
            opened, out_open = run_bench(self.common(srv.port) + ["--mode", "open", "-R", "200", "-c", "4"])
            self.assertIsNotNone(srv.stall_until, "the server never stalled")
            # Every success the tool counted was a request the server answered.
            self.assertGreaterEqual(srv.requests, opened["ok"])
        finally:
            srv.close()
        srv = StallingServer(stall_after_s=1.5)
        try:
            closed, out_closed = run_bench(self.common(srv.port) + ["--mode", "closed", "--concurrency", "4"])
            self.assertIsNotNone(srv.stall_until, "the server never stalled")
            self.assertGreaterEqual(srv.requests, closed["ok"])
        finally:
            srv.close()
        print(out_open, out_closed, sep="\n")
        stall_us = STALL_S * 1e6
        # Open loop: every request intended during the stall waited for its end, so ~1/4 of
        # the window is delayed and p99 is close to the full stall.
        self.assertEqual(opened["error_count"], 0, out_open)
        self.assertGreaterEqual(opened["sent"], 780, out_open)
        self.assertGreaterEqual(opened["latency_us"]["p99"], 0.9 * stall_us, out_open)
        self.assertGreaterEqual(opened["latency_us"]["max"], 0.95 * stall_us, out_open)
        self.assertGreaterEqual(opened["latency_us"]["p90"], 0.5 * stall_us * 0.5, out_open)
        self.assertFalse(opened["generator"]["saturated"], out_open)
        self.assertGreater(opened["generator"]["queued_sends"], 50, out_open)
        # The timeline shows when: the interval the stall began in has a max near the stall.
        worst = max(opened["timeline"], key=lambda t: t["max_us"])
        self.assertGreaterEqual(worst["max_us"], 0.95 * stall_us)
        # Closed loop: only the 4 requests in flight saw the stall; the tail looks healthy.
        self.assertEqual(closed["error_count"], 0, out_closed)
        self.assertGreater(closed["ok"], 400, out_closed)  # 4 in flight, a 4 s window
        self.assertGreaterEqual(closed["latency_us"]["max"], 0.95 * stall_us, out_closed)
        self.assertLess(closed["latency_us"]["p99"], 0.1 * stall_us, out_closed)
        self.assertLess(closed["latency_us"]["p99"], opened["latency_us"]["p99"] / 10)



class GatewayTest(unittest.TestCase):
    gw = None

    @classmethod
    def setUpClass(cls):
        # Skipped per test (setUp), not per class: harness.main() reports "skipped" (77) only
        # when every test run was skipped, and a class-level skip is not counted as run.
        if not os.access(bench_binary(), os.X_OK):
            return
        cls.gw = harness.Gateway(template=harness.GRPC_CONFIG)
        m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", cls.gw.read_log())
        cls.grpc_port = int(m.group(1)) if m else None

    @classmethod
    def tearDownClass(cls):
        if cls.gw is None:
            return
        rc = cls.gw.stop()
        assert rc == 0, cls.gw.read_log()

    def setUp(self):
        if self.gw is None:
            self.skipTest("needs infergate-bench (build with -DINFERGATE_BUILD_BENCH=ON, or set "
                          "INFERGATE_BENCH): not found at " + bench_binary())

    def rest_run(self, fmt):
        before = self.gw.metric("infergate_requests_total", model="identity", code="200")
        r, out = run_bench(["-u", "127.0.0.1:%d" % self.gw.port, "-p", "rest", "--format", fmt,
                            "-R", "300", "-d", "2", "--warmup", "0.5", "-c", "8",
                            "--priority-mix", "0:0.5,1:0.5", "--malformed-fraction", "0.1",
                            "--malformed-kinds", "bad-json,bad-shape,unknown-model,bad-path",
                            "--lag-threshold-ms", "50"])
        print(out)
        after = self.gw.metric("infergate_requests_total", model="identity", code="200")
        self.assertEqual(r["error_count"], 0, out)
        self.assertEqual(r["protocol"], "rest/" + fmt)
        self.assertGreater(r["ok"], 450, out)  # 600 in the window, 10% malformed
        self.assertEqual(set(r["by_priority"]), {"0", "1"}, out)
        # The gateway answered at least every success the tool counted (warm-up ones too).
        self.assertGreaterEqual(after - before, r["ok"])
        malformed = r["malformed"]
        self.assertTrue(malformed, out)
        for key, n in malformed.items():
            kind, outcome = key.split(" ")
            want = "http_404" if kind in ("unknown-model", "bad-path") else "http_400"
            self.assertEqual(outcome, want, "%s answered %s:\n%s" % (kind, outcome, out))
        return r

    def test_rest_json(self):
        self.rest_run("json")

    def test_rest_binary(self):
        self.rest_run("binary")

    def test_grpc(self):
        if self.grpc_port is None:
            self.skipTest("this infergate build has no grpc listener")
        r, out = run_bench(["-u", "127.0.0.1:%d" % self.grpc_port, "-p", "grpc", "-R", "300",
                            "-d", "2", "--warmup", "0.5", "-c", "2", "--priority-mix", "0:0.3,1:0.7",
                            "--malformed-fraction", "0.1", "--lag-threshold-ms", "50"])
        print(out)
        self.assertEqual(r["error_count"], 0, out)
        self.assertGreater(r["ok"], 450, out)
        self.assertEqual(set(r["by_priority"]), {"0", "1"}, out)
        expect = {"bad-proto": "grpc_3", "bad-shape": "grpc_3", "unknown-model": "grpc_5",
                  "bad-path": "grpc_12"}
        self.assertTrue(r["malformed"], out)
        for key in r["malformed"]:
            kind, outcome = key.split(" ")
            self.assertEqual(outcome, expect[kind], "%s answered %s:\n%s" % (kind, outcome, out))

    def test_closed_loop_grpc_uses_streams(self):
        if self.grpc_port is None:
            self.skipTest("this infergate build has no grpc listener")
        r, out = run_bench(["-u", "127.0.0.1:%d" % self.grpc_port, "-p", "grpc", "--mode", "closed",
                            "--concurrency", "16", "-c", "1", "-d", "1", "--warmup", "0.3"])
        print(out)
        self.assertEqual(r["error_count"], 0, out)
        self.assertEqual(r["concurrency"], 16)
        self.assertGreater(r["ok"], 200, out)

    def test_help_documents_every_option(self):
        p = subprocess.run([bench_binary(), "--help"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        for opt in ("--target", "--protocol", "--format", "--model", "--input", "--input-file",
                    "--mode", "--rate", "--arrival", "--concurrency", "--connections", "--threads",
                    "--duration", "--warmup", "--priority-mix", "--malformed-fraction",
                    "--malformed-kinds", "--lag-threshold-ms", "--sweep-start", "--p99-target-ms",
                    "--json", "--plot", "--plot-format", "--progress"):
            self.assertIn(opt, p.stdout)
        bad = subprocess.run([bench_binary(), "--priority-mix", "x"], capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--priority-mix 'x'", bad.stderr)


if __name__ == "__main__":
    harness.main()
