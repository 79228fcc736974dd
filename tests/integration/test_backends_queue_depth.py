"""Queue-depth aware picking end to end: infergate (socket mode, backend triton) in front of two
KServe v2 test servers (tests/servers/kserve_server.py) that also serve Triton-style /metrics
(--metrics-port). Each server reports nv_inference_pending_request_count = ModelInfer calls in
progress + a control-settable pending_bias.

Asserts: with a large bias on one server, at least 90% of the batches go to the other (power of
two choices on in-flight batches alone would split two equal servers about 50/50: 90% of 40 or
more batches by chance is below 1e-7; without dynamic_batching each request is one batch); swapping the bias moves the traffic; a metrics URL that
refuses connections leaves its endpoint healthy and serving, with the scrape errors counted in
infergate's /metrics and the gauge at -1; metrics_port fills in the URL of plain endpoints.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SERVERS = None  # tests/servers
STUBS = None    # generated Python messages, shared by the test servers
grpc = None


def setUpModule():
    global SERVERS, STUBS, grpc
    SERVERS = os.path.join(harness.ARGS.source, "tests", "servers")
    try:
        import grpc as g  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError as e:
        raise unittest.SkipTest("needs python3-grpcio and python3-grpc-tools: %s" % e)
    grpc = g
    sys.path.insert(0, SERVERS)
    import stubs
    STUBS = tempfile.TemporaryDirectory(prefix="infergate-stubs-")
    os.environ["INFERGATE_STUBS_DIR"] = STUBS.name
    stubs.generate(STUBS.name)


def tearDownModule():
    if STUBS is not None:
        STUBS.cleanup()


class Server:
    """kserve_server.py with --metrics-port 0."""

    def __init__(self, *args):
        script = os.path.join(SERVERS, "kserve_server.py")
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", script, "--port", "0", "--metrics-port", "0", "--model", "remote"]
            + list(args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ports = {}
        for _ in range(2):
            m = re.match(r"(PORT|METRICS_PORT) (\d+)", self.proc.stdout.readline() or "")
            if m:
                ports[m.group(1)] = int(m.group(2))
        if set(ports) != {"PORT", "METRICS_PORT"}:
            self.kill()
            raise RuntimeError("test server did not start: %r" % ports)
        self.port, self.metrics_port = ports["PORT"], ports["METRICS_PORT"]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc.stdout.close()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    @property
    def metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.metrics_port

    def control(self, method, body=None):
        ch = grpc.insecure_channel(self.address)
        try:
            fn = ch.unary_unary("/infergate.test.Control/" + method)
            return json.loads(fn(json.dumps(body or {}).encode(), timeout=5))
        finally:
            ch.close()

    def batches(self):
        return self.control("Stats")["infer_requests"]


def gateway_config(endpoints_yaml, extra=""):
    return """
mode: socket
reactors: 2
listeners:
  - {name: http, address: 127.0.0.1, port: 0, protocol: http}
admin: {address: 127.0.0.1, port: 0}
logging: {level: info, access_log: false}
models:
  - name: remote
    version: "1"
    backend: triton
    max_batch_size: 8
    inputs:
      - {name: INPUT0, datatype: FP32, shape: [16]}
    outputs:
      - {name: OUTPUT0, datatype: FP32, shape: [16]}
    triton:
      endpoints:
%s
      max_concurrency: 8
      health_check_interval_ms: 100
      health_check_timeout_ms: 500
      startup_timeout_ms: 5000
      metrics_interval_ms: 50
%s
""" % (endpoints_yaml, extra)


def infer(port, values):
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                   "data": values}]}).encode()
    s = harness.connect(port, timeout=10)
    try:
        s.sendall(("POST /v2/models/remote/infer HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   "application/json\r\nContent-Length: %d\r\n\r\n" % len(body)).encode() + body)
        status, _, payload, _ = harness.read_response(s)
        return status, json.loads(payload or b"{}")
    finally:
        s.close()


def refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


class QueueDepthTest(unittest.TestCase):
    def setUp(self):
        self.servers = []
        self.gw = None

    def tearDown(self):
        if self.gw is not None:
            self.gw.stop()
        for s in self.servers:
            s.kill()

    def server(self, *args):
        s = Server(*args)
        self.servers.append(s)
        return s

    def load(self, clients, per_client):
        """Closed-loop clients; every answer must be 200 with the identity output."""
        errors = []

        def client(c):
            for i in range(per_client):
                vals = [float(c * 1000 + i) + k / 16.0 for k in range(16)]
                try:
                    st, body = infer(self.gw.port, vals)
                    if st != 200 or body["outputs"][0]["data"] != vals:
                        errors.append((st, body))
                except Exception as e:  # noqa: BLE001
                    errors.append((-1, repr(e)))

        ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

    def wait_metric(self, pred, name, timeout=10, **labels):
        deadline = time.time() + timeout
        v = None
        while time.time() < deadline:
            v = self.gw.metric(name, **labels)
            if pred(v):
                return v
            time.sleep(0.05)
        self.fail("%s%r stayed at %r" % (name, labels, v))

    def test_traffic_follows_the_servers_queue_depth(self):
        a, b = self.server("--latency-ms", "3"), self.server("--latency-ms", "3")
        a.control("Set", {"pending_bias": 1000})
        eps = "\n".join('        - {address: "%s", metrics_url: "%s"}' % (s.address, s.metrics_url)
                        for s in (a, b))
        self.gw = harness.Gateway(config_text=gateway_config(eps))
        self.wait_metric(lambda v: v == 1000, "infergate_backend_queue_depth", endpoint=a.address)
        self.wait_metric(lambda v: 0 <= v < 1000, "infergate_backend_queue_depth",
                         endpoint=b.address)
        a0, b0 = a.batches(), b.batches()
        self.load(8, 40)
        da, db = a.batches() - a0, b.batches() - b0
        print("bias on a: a=%d b=%d batches" % (da, db))
        self.assertGreaterEqual(da + db, 40)
        self.assertGreaterEqual(db, 0.9 * (da + db), (da, db))

        # Swap the bias: the traffic moves to a.
        a.control("Set", {"pending_bias": 0})
        b.control("Set", {"pending_bias": 1000})
        self.wait_metric(lambda v: v == 1000, "infergate_backend_queue_depth", endpoint=b.address)
        self.wait_metric(lambda v: 0 <= v < 1000, "infergate_backend_queue_depth",
                         endpoint=a.address)
        a0, b0 = a.batches(), b.batches()
        self.load(8, 40)
        da, db = a.batches() - a0, b.batches() - b0
        print("bias on b: a=%d b=%d batches" % (da, db))
        self.assertGreaterEqual(da + db, 40)
        self.assertGreaterEqual(da, 0.9 * (da + db), (da, db))
        self.assertEqual(self.gw.metric("infergate_backend_metrics_scrape_errors_total",
                                        model="remote"), 0)

    def test_refused_metrics_url_keeps_the_endpoint_serving(self):
        a, b = self.server(), self.server()
        dead = "http://127.0.0.1:%d/metrics" % refused_port()
        # a: a URL that refuses connections; b: a plain entry, its URL from metrics_port.
        eps = ('        - {address: "%s", metrics_url: "%s"}\n        - "%s"'
               % (a.address, dead, b.address))
        self.gw = harness.Gateway(config_text=gateway_config(
            eps, extra="      metrics_port: %d" % b.metrics_port))
        self.wait_metric(lambda v: v >= 3, "infergate_backend_metrics_scrape_errors_total",
                         endpoint=a.address)
        self.wait_metric(lambda v: v >= 0, "infergate_backend_queue_depth", endpoint=b.address)
        a0 = a.batches()
        self.load(4, 20)
        self.assertGreater(a.batches() - a0, 0)  # still picked (on in-flight batches)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", endpoint=a.address), 1)
        self.assertEqual(self.gw.metric("infergate_backend_queue_depth", endpoint=a.address), -1)
        self.assertEqual(self.gw.metric("infergate_backend_metrics_scrape_errors_total",
                                        endpoint=b.address), 0)
        log = self.gw.read_log()
        self.assertIn("cannot read the queue depth of triton endpoint %s from %s" % (a.address, dead),
                      log)
        self.assertEqual(log.count("cannot read the queue depth"), 1, log)  # once, not per scrape


if __name__ == "__main__":
    harness.main()
