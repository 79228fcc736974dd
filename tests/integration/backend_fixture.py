"""Shared fixture of the remote-backend integration tests (test_backends*.py,
test_infergate_backend.py): generated gRPC stubs, the test-server processes
(tests/servers/kserve_server.py, tfserving_server.py), infergate configuration builders, a KServe
v2 REST client and a unittest base class. Not a test itself (ctest runs test_*.py only).

A test script uses it as:
    import backend_fixture as bf
    from backend_fixture import setUpModule, tearDownModule  # noqa: F401 (module fixtures)
    class MyTest(bf.BackendTestCase): ...
or, to skip per test instead of per module, calls bf.set_up_stubs(skip_per_test=True) from its
own setUpModule (harness.main() reports "skipped" (77) only when tests ran and all skipped).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SERVERS = None  # tests/servers, set by set_up_stubs()
STUBS = None    # generated Python messages, shared by the test servers and the clients
MISSING = None  # why the tests cannot run here (BackendTestCase skips each test with it)
grpc = None     # the grpc module, once set_up_stubs() found it


def set_up_stubs(skip_per_test=False, precheck=None):
    """Finds grpcio/grpc-tools and generates the stubs into STUBS (INFERGATE_STUBS_DIR, so the
    test servers reuse them: they may be SIGKILLed). Without them (or when `precheck()` returns
    a reason) raises unittest.SkipTest, or with `skip_per_test` only records the reason in
    MISSING."""
    global SERVERS, STUBS, MISSING, grpc
    SERVERS = os.path.join(harness.ARGS.source, "tests", "servers")
    MISSING = precheck() if precheck else None
    if not MISSING:
        try:
            import grpc as grpc_mod  # noqa: F401
            import grpc_tools  # noqa: F401
            grpc = grpc_mod
        except ImportError as e:
            MISSING = "needs python3-grpcio and python3-grpc-tools: %s" % e
    if MISSING:
        if skip_per_test:
            return
        raise unittest.SkipTest(MISSING)
    sys.path.insert(0, SERVERS)
    import stubs
    STUBS = tempfile.TemporaryDirectory(prefix="infergate-stubs-")
    os.environ["INFERGATE_STUBS_DIR"] = STUBS.name
    stubs.generate(STUBS.name)


def tear_down_stubs():
    global STUBS
    if STUBS is not None:
        STUBS.cleanup()
        STUBS = None


def setUpModule():
    set_up_stubs()


def tearDownModule():
    tear_down_stubs()


class TestServer:
    """A test server process (kind "kserve" or "tfserving"); `port` (and `metrics_port`) fixed
    after the first start so that a restart reuses them. `metrics_port` not None: started with
    --metrics-port (kserve only), and `metrics_url` is its Triton-style /metrics. `net`: a
    netns.VethPair, to run the server in its gateway namespace (killed with the pair). `host`
    (kserve only): listen on that loopback address (127.0.0.x) instead of 127.0.0.1, so that
    several servers can share one port."""

    def __init__(self, kind="kserve", port=0, args=(), metrics_port=None, net=None, host=None):
        self.kind, self.port, self.args = kind, port, list(args)
        self.metrics_port, self.net = metrics_port, net
        self.host = host or "127.0.0.1"
        if host is not None:
            self.args += ["--host", host]
        if "--model" not in self.args:
            self.args += ["--model", "remote"]
        self.proc = None
        self.start()

    def start(self):
        script = os.path.join(SERVERS, "kserve_server.py" if self.kind == "kserve" else "tfserving_server.py")
        cmd = ["/usr/bin/python3", script, "--port", str(self.port)] + self.args
        want = {"PORT"}
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
            want.add("METRICS_PORT")
        if self.net is not None:
            cmd = ["ip", "netns", "exec", self.net.gw_ns] + cmd  # exec's python: proc is the server
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self.net is not None:
            self.net.procs.append(self.proc)  # killed by the namespace fixture whatever happens
        ports = {}
        for _ in want:  # "PORT <n>", then "METRICS_PORT <n>"
            m = re.match(r"(PORT|METRICS_PORT) (\d+)", self.proc.stdout.readline() or "")
            if m:
                ports[m.group(1)] = int(m.group(2))
        if set(ports) != want:
            self.kill()
            raise RuntimeError("test server did not start: %r" % ports)
        self.port = ports["PORT"]
        self.metrics_port = ports.get("METRICS_PORT")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.metrics_port

    def control(self, method, body=None):
        """Control/<method> (JSON) on the server, from this namespace."""
        ch = grpc.insecure_channel(self.address)
        try:
            fn = ch.unary_unary("/infergate.test.Control/" + method)
            return json.loads(fn(json.dumps(body or {}).encode(), timeout=5))
        finally:
            ch.close()


def model_yaml(name="remote", backend="triton", endpoints=(), extra="", dtype="FP32", shape="[16]",
               ejection_ms=500, startup_timeout_ms=3000,
               batching="dynamic_batching: {max_queue_delay_us: 2000}"):
    """One model entry of a remote backend; `extra`: more lines of the backend section (indented
    six spaces); ejection_ms None: left out (the default)."""
    lines = ["", "  - name: %s" % name, '    version: "1"', "    backend: %s" % backend,
             "    max_batch_size: 8",
             "    inputs:", "      - {name: INPUT0, datatype: %s, shape: %s}" % (dtype, shape),
             "    outputs:", "      - {name: OUTPUT0, datatype: %s, shape: %s}" % (dtype, shape),
             "    %s:" % backend, "      endpoints: [%s]" % ", ".join(endpoints),
             "      health_check_interval_ms: 100", "      health_check_timeout_ms: 500",
             "      startup_timeout_ms: %d" % startup_timeout_ms]
    if ejection_ms is not None:
        lines.append("      ejection_ms: %d" % ejection_ms)
    return "\n".join(lines + [extra, "    " + batching, ""])


def gateway_config(models, reactors=2, grpc_port=None, mode="socket", address="127.0.0.1",
                   http_port=0, admin_port=0, xdp=""):
    """infergate's configuration: an http listener (and a grpc one when grpc_port is not None),
    admin on loopback, `xdp` (a top-level section, or empty), then `models` (model_yaml())."""
    listeners = ["  - {name: http, address: %s, port: %d, protocol: http}" % (address, http_port)]
    if grpc_port is not None:
        listeners.append("  - {name: grpc, address: %s, port: %d, protocol: grpc}" % (address, grpc_port))
    return "\n".join(["", "mode: %s" % mode, "reactors: %d" % reactors, "listeners:"] + listeners + [
        "admin: {address: 127.0.0.1, port: %d}" % admin_port,
        "logging: {level: info, access_log: false}",
        xdp + "models:", ""]) + models


def start_gateway(models, **config):
    """A harness.Gateway running gateway_config(models, **config); with a grpc listener, its port
    is the gateway's `grpc_port`."""
    gw = harness.Gateway(config_text=gateway_config(models, **config))
    if config.get("grpc_port") is not None:
        m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", gw.read_log())
        assert m, gw.read_log()
        gw.grpc_port = int(m.group(1))
    return gw


def post_json(port, model, body, timeout=10):
    """POST /v2/models/<model>/infer with a JSON body: (status, parsed JSON reply)."""
    data = json.dumps(body).encode()
    s = harness.connect(port, timeout=timeout)
    try:
        s.sendall(("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (model, len(data))).encode() + data)
        status, _, payload, _ = harness.read_response(s)
        return status, json.loads(payload or b"{}")
    finally:
        s.close()


def infer(port, model, values, timeout_us=None, priority=None, sock_timeout=10):
    """One FP32 [1,16] INPUT0 request; timeout_us/priority as request parameters."""
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": values}]}
    params = {}
    if timeout_us is not None:
        params["timeout"] = timeout_us
    if priority is not None:
        params["priority"] = priority
    if params:
        body["parameters"] = params
    return post_json(port, model, body, timeout=sock_timeout)


def wait_for(pred, timeout=10, interval=0.1):
    """Polls pred() until it is true or `timeout` seconds passed; returns its last value."""
    deadline = time.time() + timeout
    v = pred()
    while not v and time.time() < deadline:
        time.sleep(interval)
        v = pred()
    return v


def run_clients(n_clients, per_client, call):
    """Closed-loop clients: thread c runs call(c, i) for i in range(per_client); returns every
    result (completion order)."""
    results = []
    lock = threading.Lock()

    def client(c):
        for i in range(per_client):
            r = call(c, i)
            with lock:
                results.append(r)

    ts = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def stats(*servers):
    """Control/Stats of each TestServer (its counters: infer_requests, ready_calls...), in order."""
    return [s.control("Stats") for s in servers]


class ClosedLoopLoad:
    """`clients` closed-loop clients posting to `model` at `port` for as long as the `with`
    block lasts (joined when it ends, whatever happens in it). Client c's request i carries
    [c * 100000 + i] * 16; `results` holds (ok, status, body) for every request, ok: a 200
    with the identity output (a connection error is status -1)."""

    def __init__(self, port, model="remote", clients=6):
        self.port, self.model = port, model
        self.results = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(c,)) for c in range(clients)]

    def _client(self, cid):
        i = 0
        while not self._stop.is_set():
            vals = [float(cid * 100000 + i)] * 16
            try:
                st, body = infer(self.port, self.model, vals)
                ok = st == 200 and body["outputs"][0]["data"] == vals
            except Exception as e:  # noqa: BLE001
                st, body, ok = -1, {"error": repr(e)}, False
            with self._lock:
                self.results.append((ok, st, body))
            i += 1

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join()
        return False

    def failed(self):
        """The results that are not ok."""
        with self._lock:
            return [r for r in self.results if not r[0]]


class BackendTestCase(unittest.TestCase):
    """Test servers (self.server()) and one gateway (self.start_gateway()), all stopped after each
    test; skips each test when MISSING. No tests of its own."""

    def setUp(self):
        if MISSING:
            self.skipTest(MISSING)
        self.servers = []
        self.gw = None

    def tearDown(self):
        if self.gw is not None:
            self.gw.stop()
        for s in self.servers:
            s.kill()

    def server(self, *args, kind="kserve", **options):
        s = TestServer(kind, args=args, **options)
        self.servers.append(s)
        return s

    def start_gateway(self, models, **config):
        self.gw = start_gateway(models, **config)
        return self.gw

    def assert_none_failed(self, load):
        """Every request of `load` (a ClosedLoopLoad that has ended) succeeded."""
        failed = load.failed()
        self.assertEqual(failed, [], "%d of %d requests failed" % (len(failed), len(load.results)))

    def restart_reregisters(self, server, regions_key, count=1):
        """Restarts `server`, which forgets its shared memory regions: all `count` of them
        (Stats[regions_key]) are registered there again and traffic resumes; then the gateway
        stops cleanly."""
        server.kill()
        server.start()
        wait_for(lambda: len(server.control("Stats")[regions_key]) >= count)
        self.assertEqual(len(server.control("Stats")[regions_key]), count)
        self.load(4, 10)
        self.assertEqual(self.gw.stop(), 0)
        self.gw = None

    def load(self, n_clients, per_client, model="remote", check=True):
        """Closed-loop clients; returns a list of (status, body, sent values). `check`: every
        answer is 200 with the identity output."""

        def call(c, i):
            vals = [float(c * 1000 + i) + k / 16.0 for k in range(16)]
            try:
                st, body = infer(self.gw.port, model, vals)
            except Exception as e:  # noqa: BLE001
                st, body = -1, {"error": repr(e)}
            return st, body, vals

        results = run_clients(n_clients, per_client, call)
        if check:
            for st, body, vals in results:
                self.assertEqual(st, 200, body)
                self.assertEqual(body["outputs"][0]["name"], "OUTPUT0")
                self.assertEqual(body["outputs"][0]["data"], vals)
        return results
