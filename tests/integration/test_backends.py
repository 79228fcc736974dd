"""Remote backends end to end: infergate (socket mode) in front of 2-3 KServe v2 gRPC test
servers (tests/servers/kserve_server.py) and a TF Serving test server.

Asserts: requests come back correct through batching and the pool; with shared_memory: system
no tensor byte crosses gRPC (the server's received ModelInfer sizes); an endpoint killed mid-load
-> every request answered (200 or 503 naming the endpoint), traffic moves to the others, the
endpoint is re-admitted after restart (and its shm region registered again); deadlines expire
with 503 "Request timeout expired"; a metadata mismatch stops start-up with a message naming the
difference; backend down -> fast 503.
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SERVERS = None  # tests/servers, set in setUpModule
STUBS = None    # generated Python messages, shared by the test servers


def setUpModule():
    global SERVERS, grpc
    SERVERS = os.path.join(harness.ARGS.source, "tests", "servers")
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError as e:
        raise unittest.SkipTest("needs python3-grpcio and python3-grpc-tools: %s" % e)
    sys.path.insert(0, SERVERS)
    import stubs
    global STUBS
    STUBS = tempfile.TemporaryDirectory(prefix="infergate-stubs-")
    os.environ["INFERGATE_STUBS_DIR"] = STUBS.name  # servers reuse it (they may be SIGKILLed)
    stubs.generate(STUBS.name)


def tearDownModule():
    if STUBS is not None:
        STUBS.cleanup()


class TestServer:
    """A test server process; `port` fixed after the first start so a restart reuses it."""

    def __init__(self, kind="kserve", port=0, args=()):
        self.kind, self.port, self.args = kind, port, list(args)
        if "--model" not in self.args:
            self.args += ["--model", "remote"]
        self.proc = None
        self.start()

    def start(self):
        script = os.path.join(SERVERS, "kserve_server.py" if self.kind == "kserve" else "tfserving_server.py")
        self.proc = subprocess.Popen(["/usr/bin/python3", script, "--port", str(self.port)] + self.args,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"PORT (\d+)", line or "")
        if not m:
            self.proc.kill()
            raise RuntimeError("test server did not start: %r" % line)
        self.port = int(m.group(1))

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def control(self, method, body=None):
        ch = grpc.insecure_channel(self.address)
        try:
            fn = ch.unary_unary("/infergate.test.Control/" + method)
            return json.loads(fn(json.dumps(body or {}).encode(), timeout=5))
        finally:
            ch.close()


def model_yaml(name="remote", backend="triton", endpoints=(), extra="", dtype="FP32", ejection_ms=500,
               batching="dynamic_batching: {max_queue_delay_us: 2000}"):
    eps = ", ".join(endpoints)
    return """
  - name: {name}
    version: "1"
    backend: {backend}
    max_batch_size: 8
    inputs:
      - {{name: INPUT0, datatype: {dtype}, shape: [16]}}
    outputs:
      - {{name: OUTPUT0, datatype: {dtype}, shape: [16]}}
    {backend}:
      endpoints: [{eps}]
      health_check_interval_ms: 100
      health_check_timeout_ms: 500
      startup_timeout_ms: 3000
      ejection_ms: {ejection_ms}
{extra}
    {batching}
""".format(name=name, backend=backend, eps=eps, extra=extra, dtype=dtype, ejection_ms=ejection_ms, batching=batching)


def gateway_config(models):
    return """
mode: socket
reactors: 2
listeners:
  - {name: http, address: 127.0.0.1, port: 0, protocol: http}
admin: {address: 127.0.0.1, port: 0}
logging: {level: info, access_log: false}
models:
""" + models


def infer(port, model, values, timeout_us=None, priority=None, sock_timeout=10):
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": values}]}
    params = {}
    if timeout_us is not None:
        params["timeout"] = timeout_us
    if priority is not None:
        params["priority"] = priority
    if params:
        body["parameters"] = params
    s = harness.connect(port, timeout=sock_timeout)
    try:
        data = json.dumps(body).encode()
        s.sendall(("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (model, len(data))).encode() + data)
        status, _, payload, _ = harness.read_response(s)
        return status, json.loads(payload or b"{}")
    finally:
        s.close()


class BackendTest(unittest.TestCase):
    def setUp(self):
        self.servers = []
        self.gw = None

    def tearDown(self):
        if self.gw is not None:
            self.gw.stop()
        for s in self.servers:
            s.kill()

    def server(self, *args, kind="kserve"):
        s = TestServer(kind, args=args)
        self.servers.append(s)
        return s

    def start_gateway(self, models):
        self.gw = harness.Gateway(config_text=gateway_config(models))
        return self.gw

    def load(self, n_clients, per_client, model="remote", check=True):
        """Closed-loop clients; returns a list of (status, body, sent values)."""
        results = []
        lock = threading.Lock()

        def client(c):
            for i in range(per_client):
                vals = [float(c * 1000 + i) + k / 16.0 for k in range(16)]
                try:
                    st, body = infer(self.gw.port, model, vals)
                except Exception as e:  # noqa: BLE001
                    st, body = -1, {"error": repr(e)}
                with lock:
                    results.append((st, body, vals))

        ts = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if check:
            for st, body, vals in results:
                self.assertEqual(st, 200, body)
                self.assertEqual(body["outputs"][0]["name"], "OUTPUT0")
                self.assertEqual(body["outputs"][0]["data"], vals)
        return results

    # --- correctness through batching and the pool ---
    def test_identity_through_pool(self):
        a, b = self.server(), self.server()
        self.start_gateway(model_yaml(endpoints=[a.address, b.address]))
        self.load(8, 20)
        sa, sb = a.control("Stats"), b.control("Stats")
        self.assertGreater(sa["infer_requests"], 0)
        self.assertGreater(sb["infer_requests"], 0)
        # Batching happened (some batch > 1 row) and raw bytes arrived over gRPC.
        self.assertGreater(max(sa["batch_sizes"] + sb["batch_sizes"]), 1)
        self.assertEqual(sa["raw_input_bytes"] + sb["raw_input_bytes"], 8 * 20 * 64)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", model="remote"), 2)

    def test_priority_and_timeout_forwarded(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        st, body = infer(self.gw.port, "remote", [1.0] * 16, timeout_us=5_000_000, priority=1)
        self.assertEqual(st, 200, body)
        s = a.control("Stats")
        self.assertEqual(s["priorities"], [1])
        self.assertEqual(len(s["timeouts"]), 1)
        self.assertTrue(0 < s["timeouts"][0] <= 5_000_000, s["timeouts"])

    # --- system shared memory ---
    def test_system_shm_moves_no_tensor_bytes_over_grpc(self):
        a, b = self.server(), self.server()
        self.start_gateway(model_yaml(endpoints=[a.address, b.address],
                                      extra="      shared_memory: system"))
        self.load(4, 20)
        total = 0
        for s in (a, b):
            st = s.control("Stats")
            self.assertEqual(st["raw_input_bytes"], 0)
            self.assertEqual(len(st["regions"]), 1, st["regions"])
            total += st["shm_input_bytes"]
            # No ModelInfer message could carry a 64-byte row: all are header-sized.
            if st["infer_request_bytes"]:
                self.assertLess(max(st["infer_request_bytes"]), 400, st["infer_request_bytes"])
        self.assertEqual(total, 4 * 20 * 64)
        self.assertEqual(self.gw.metric("infergate_backend_tensor_bytes_total", path="grpc"), 0)
        self.assertEqual(self.gw.metric("infergate_backend_tensor_bytes_total", path="shm"), 4 * 20 * 64)
        # Restart one server: its region is registered again and traffic uses it.
        a.kill()
        a.start()
        deadline = time.time() + 10
        while time.time() < deadline and not a.control("Stats")["regions"]:
            time.sleep(0.1)
        self.assertEqual(len(a.control("Stats")["regions"]), 1)
        self.load(4, 10)
        # Shutdown unregisters.
        self.assertEqual(self.gw.stop(), 0)
        self.gw = None
        self.assertEqual(b.control("Stats")["regions"], [])
        self.assertEqual(a.control("Stats")["regions"], [])

    # --- failures ---
    def test_endpoint_killed_mid_load_then_readmitted(self):
        servers = [self.server("--latency-ms", "5") for _ in range(3)]
        self.start_gateway(model_yaml(endpoints=[s.address for s in servers]))
        victim = servers[0]
        results = []

        def run():
            results.extend(self.load(6, 40, check=False))

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.5)
        victim.kill()
        t.join(timeout=120)
        self.assertFalse(t.is_alive(), "load did not finish: a request hung")
        self.assertEqual(len(results), 6 * 40)  # every request answered
        bad = [(st, b) for st, b, _ in results if st != 200]
        for st, b in bad:
            self.assertEqual(st, 503, b)
            self.assertIn(victim.address, b.get("error", ""), b)
        for st, b, vals in results:
            if st == 200:
                self.assertEqual(b["outputs"][0]["data"], vals)
        self.assertLess(len(bad), 6 * 40 // 4, bad[:3])
        # Traffic moved: the survivors serve everything now.
        self.load(4, 10)
        self.assertNotEqual(self.gw.metric("infergate_backend_healthy", endpoint=victim.address), 1)
        # Restart: re-admitted and used again.
        victim.start()
        deadline = time.time() + 10
        while time.time() < deadline and self.gw.metric("infergate_backend_healthy", endpoint=victim.address) != 1:
            time.sleep(0.1)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", endpoint=victim.address), 1)
        self.load(6, 20)
        self.assertGreater(victim.control("Stats")["infer_requests"], 0)

    def test_sent_and_failed_is_503_naming_backend_not_retried(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        a.control("Set", {"fail_next": 1, "fail_code": "INTERNAL"})
        st, body = infer(self.gw.port, "remote", [2.0] * 16)
        self.assertEqual(st, 503, body)
        self.assertIn(a.address, body["error"])
        self.assertIn("INTERNAL", body["error"])
        self.assertEqual(a.control("Stats")["infer_requests"], 1)  # not retried
        st, body = infer(self.gw.port, "remote", [2.0] * 16)
        self.assertEqual(st, 200, body)

    def test_ejection_after_consecutive_failures(self):
        a, b = self.server(), self.server()
        self.start_gateway(model_yaml(endpoints=[a.address, b.address],
                                      extra="      eject_after_failures: 2", ejection_ms=60000))
        a.control("Set", {"fail_next": 1000})
        results = self.load(2, 30, check=False)
        failed = [r for r in results if r[0] != 200]
        # Two failed batches eject the endpoint (a third may already be in flight); a batch holds
        # at most two requests (two closed-loop clients).
        self.assertLessEqual(a.control("Stats")["infer_requests"], 3)
        self.assertLessEqual(len(failed), 6, failed[:3])
        self.assertGreater(len(failed), 0)
        self.assertEqual(self.gw.metric("infergate_backend_ejections_total", endpoint=a.address), 1)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", endpoint=a.address), -1)

    def test_all_down_fails_fast_then_recovers(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        a.kill()
        time.sleep(0.5)
        t0 = time.time()
        st, body = infer(self.gw.port, "remote", [3.0] * 16)
        self.assertEqual(st, 503, body)
        self.assertLess(time.time() - t0, 2.0)
        self.assertIn(a.address, body["error"])
        a.start()
        deadline = time.time() + 10
        st = 0
        while time.time() < deadline:
            st, body = infer(self.gw.port, "remote", [3.0] * 16)
            if st == 200:
                break
            time.sleep(0.1)
        self.assertEqual(st, 200, body)

    def test_deadline_expires_with_503(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        a.control("Set", {"latency_ms": 1000})
        t0 = time.time()
        st, body = infer(self.gw.port, "remote", [4.0] * 16, timeout_us=200_000)
        self.assertEqual(st, 503, body)
        self.assertIn("Request timeout expired", body["error"])
        self.assertLess(time.time() - t0, 0.9)

    def test_backend_request_timeout_is_503_naming_endpoint(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address],
                                      extra="      request_timeout_ms: 200\n      eject_after_failures: 0"))
        a.control("Set", {"latency_ms": 1000})
        st, body = infer(self.gw.port, "remote", [4.0] * 16)
        self.assertEqual(st, 503, body)
        self.assertIn("DEADLINE_EXCEEDED", body["error"])
        self.assertIn(a.address, body["error"])

    def test_metadata_mismatch_refused_at_startup(self):
        a = self.server("--input", "INPUT0:FP16:-1,16", "--output", "OUTPUT0:FP16:-1,16")
        with self.assertRaises(RuntimeError) as cm:
            self.start_gateway(model_yaml(endpoints=[a.address]))
        msg = str(cm.exception)
        self.assertIn("does not match the configuration", msg)
        self.assertIn("inputs[0] 'INPUT0': datatype FP32 configured, the backend has FP16", msg)
        self.assertIn(a.address, msg)

    # --- TF Serving ---
    def test_tfserving_predict(self):
        a = self.server("--model", "remote", kind="tfserving")
        self.start_gateway(model_yaml(backend="tfserving", endpoints=[a.address]))
        self.load(4, 10)
        self.assertGreater(a.control("Stats")["predict_requests"], 0)


if __name__ == "__main__":
    harness.main()
