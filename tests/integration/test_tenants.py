"""Per-tenant limits and Retry-After (issue 19; docs/CONFIGURATION.md "tenants", docs/ERRORS.md
"Retry-After").

One real gateway in socket mode (HTTP/1.1 and gRPC listeners on 127.0.0.1) with four tenants:
alpha and beta (API keys, 0.2 requests per second, burst 2), solo (an API key, one request in
flight) and lab (the source CIDR 127.0.0.0/8, no limits: it only counts), and three identity
models: `identity` (fast), `slowc` (1.5 s per call) and `queued` (2 s per batch of one, a
queue of one). Shown:
  - over its rate, alpha's third request is 429 with Retry-After 5 (the bucket's refill time for
    one request), and nothing of its body reaches a model;
  - gRPC: beta's third ModelInfer is RESOURCE_EXHAUSTED with retry-after: 5 and
    grpc-retry-pushback-ms: 5000 in its trailing metadata;
  - solo's second request while its first is in flight on the slow model is 429 Retry-After 1;
    once the first is answered the next one goes through;
  - an unknown API key falls back to the source's tenant (lab);
  - a full queue's refusal (503; gRPC UNAVAILABLE) carries Retry-After 4 (gRPC: retry-after 4,
    grpc-retry-pushback-ms 4000): one request queued ahead plus itself, two batches of 2 s;
  - /metrics has the per-tenant series, labelled by the configured names only; no key appears
    in /metrics or the log;
  - a reload that changes tenants: applies live ("tenants" applied, 200) under load: delta
    (0.2 requests per second, burst 2: its third request 429 Retry-After 5) gets a full bucket
    at its new rate (0.5 per second, burst 3): exactly three more admitted, the fourth 429 with
    Retry-After 2; the lab tenant's requests running meanwhile all succeed (none fails), and
    delta's metrics series continue (5 admitted, 2 rate_limited); a reload without delta takes
    its series out of /metrics, one with it again brings them back with their counts.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CONFIG = """
mode: socket
reactors: 1
listeners:
  - {name: http, address: 127.0.0.1, port: 0, protocol: http}
  - {name: grpc, address: 127.0.0.1, port: 0, protocol: grpc}
admin: {address: 127.0.0.1, port: 0}
tenants:
  api_key_header: x-api-key
  list:
    - {name: alpha, api_keys: [alpha-key-7f3a], rate: 0.2, burst: 2}
    - {name: beta, api_keys: [beta-key-91c2], rate: 0.2, burst: 2}
    - {name: solo, api_keys: [solo-key-44d0], max_concurrent: 1}
    - {name: lab, sources: [127.0.0.0/8]}
    - {name: delta, api_keys: [delta-key-0b6e], rate: 0.2, burst: 2}
models:
""" + harness.model_yaml("identity", [16], version="1", backend=True) \
    + harness.model_yaml("slowc", [16], version="1", backend=True,
                         extra="    identity: {fixed_us: 1500000, per_item_us: 0}\n") \
    + harness.model_yaml("queued", [16], 1, version="1", backend=True, extra="""\
    identity: {fixed_us: 2000000, per_item_us: 0}
    dynamic_batching:
      default_queue_policy: {max_queue_size: 1}
""")

KEYS = ("alpha-key-7f3a", "beta-key-91c2", "solo-key-44d0", "delta-key-0b6e")
GW = None
GRPC_PORT = None
PB = None
STUBS_DIR = None


def body():
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                                   "data": [float(i) for i in range(16)]}]}).encode()


def send_infer(sock, model, key=None):
    b = body()
    extra = "x-api-key: %s\r\n" % key if key else ""
    sock.sendall(("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n"
                  "Content-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
                  % (model, extra, len(b))).encode() + b)


def infer(model, key=None):
    with harness.connect(GW.port, timeout=15) as s:
        send_infer(s, model, key)
        status, headers, resp, _ = harness.read_response(s)
        return status, headers, resp


def setUpModule():
    global GW, GRPC_PORT, PB, STUBS_DIR
    GW = harness.Gateway(config_text=CONFIG)
    m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", GW.read_log())
    assert m, GW.read_log()
    GRPC_PORT = int(m.group(1))
    STUBS_DIR = tempfile.mkdtemp(prefix="infergate-tenants-stubs-")
    proto_dir = os.path.join(harness.ARGS.source, "frontend", "proto")
    subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I" + proto_dir,
                    "-I/usr/include", "--python_out=" + STUBS_DIR,
                    "--grpc_python_out=" + STUBS_DIR,
                    os.path.join(proto_dir, "grpc_service.proto")], check=True)
    sys.path.insert(0, STUBS_DIR)
    import grpc_service_pb2, grpc_service_pb2_grpc  # noqa
    PB = (grpc_service_pb2, grpc_service_pb2_grpc)


def tearDownModule():
    if GW is not None:
        rc = GW.stop()
        assert rc == 0, "exit code %r\n%s" % (rc, GW.read_log())
    if STUBS_DIR:
        shutil.rmtree(STUBS_DIR, ignore_errors=True)


class TenantsTest(unittest.TestCase):
    def count(self, tenant, result):
        return GW.metric("infergate_tenant_requests_total", tenant=tenant, result=result)

    def test_http_rate_limit_has_retry_after_of_the_refill_time(self):
        for _ in range(2):  # the burst
            status, _, resp = infer("identity", "alpha-key-7f3a")
            self.assertEqual(status, 200, resp)
        status, headers, resp = infer("identity", "alpha-key-7f3a")
        self.assertEqual(status, 429, resp)
        # One request per 5 s; a few ms since the last: the next token is 5 s away, rounded up.
        self.assertEqual(headers.get("retry-after"), "5", headers)
        self.assertIn("tenant 'alpha' is over its request rate", resp.decode())
        self.assertEqual(self.count("alpha", "admitted"), 2)
        self.assertEqual(self.count("alpha", "rate_limited"), 1)

    def test_unknown_key_falls_back_to_the_source_tenant(self):
        before = self.count("lab", "admitted")
        status, _, resp = infer("identity", "not-a-key")
        self.assertEqual(status, 200, resp)
        status, _, resp = infer("identity")
        self.assertEqual(status, 200, resp)
        self.assertEqual(self.count("lab", "admitted") - before, 2)
        # GETs are not counted.
        status, _, _ = harness.http_request(GW.port, "GET", "/v2/health/ready")
        self.assertEqual(status, 200)
        self.assertEqual(self.count("lab", "admitted") - before, 2)

    def test_grpc_rate_limit_has_the_hint_in_trailing_metadata(self):
        import grpc
        pb, svc = PB
        with grpc.insecure_channel("127.0.0.1:%d" % GRPC_PORT) as ch:
            stub = svc.GRPCInferenceServiceStub(ch)
            req = pb.ModelInferRequest(model_name="identity")
            t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
            t.contents.fp32_contents.extend([1.0] * 16)
            md = (("x-api-key", "beta-key-91c2"),)
            for _ in range(2):
                stub.ModelInfer(req, metadata=md, timeout=10)
            with self.assertRaises(grpc.RpcError) as cm:
                stub.ModelInfer(req, metadata=md, timeout=10)
            e = cm.exception
            self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
            self.assertIn("tenant 'beta' is over its request rate", e.details())
            trailers = dict(e.trailing_metadata())
            self.assertEqual(trailers.get("retry-after"), "5", trailers)
            self.assertEqual(trailers.get("grpc-retry-pushback-ms"), "5000", trailers)
            # Metadata calls are not counted against the tenant.
            stub.ServerReady(pb.ServerReadyRequest(), metadata=md, timeout=10)
        self.assertEqual(self.count("beta", "admitted"), 2)
        self.assertEqual(self.count("beta", "rate_limited"), 1)

    def test_concurrency_cap_with_a_slow_model(self):
        with harness.connect(GW.port, timeout=15) as slow:
            t0 = time.monotonic()
            send_infer(slow, "slowc", "solo-key-44d0")  # 1.5 s in flight
            time.sleep(0.3)
            status, headers, resp = infer("identity", "solo-key-44d0")
            self.assertLess(time.monotonic() - t0, 1.4, "the refusal waited for the slow call")
            self.assertEqual(status, 429, resp)
            self.assertEqual(headers.get("retry-after"), "1", headers)
            self.assertIn("tenant 'solo' has 1 requests in flight", resp.decode())
            self.assertEqual(GW.metric("infergate_tenant_inflight", tenant="solo"), 1)
            status, _, resp, _ = harness.read_response(slow)
            self.assertEqual(status, 200, resp)
        status, _, resp = infer("identity", "solo-key-44d0")  # the place is free again
        self.assertEqual(status, 200, resp)
        self.assertEqual(self.count("solo", "concurrency_limited"), 1)
        self.assertEqual(GW.metric("infergate_tenant_inflight", tenant="solo"), 0)

    def test_full_queue_refusal_has_retry_after_from_the_queue(self):
        # queued: one batch of one in flight (2 s), one request queued, the next refused.
        socks = [harness.connect(GW.port, timeout=15) for _ in range(2)]
        try:
            send_infer(socks[0], "queued")
            time.sleep(0.3)  # dispatched: in flight
            send_infer(socks[1], "queued")
            time.sleep(0.3)  # queued
            status, headers, resp = infer("queued")
            self.assertEqual(status, 503, resp)
            self.assertIn("Exceeds maximum queue size", resp.decode())
            # One queued ahead plus itself: 2 batches of 2 s (the configured cost: no batch
            # has completed yet).
            self.assertEqual(headers.get("retry-after"), "4", headers)
            # gRPC: the same refusal (before copying the message) with the hint in its trailers.
            import grpc
            pb, svc = PB
            with grpc.insecure_channel("127.0.0.1:%d" % GRPC_PORT) as ch:
                req = pb.ModelInferRequest(model_name="queued")
                t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
                t.contents.fp32_contents.extend([1.0] * 16)
                with self.assertRaises(grpc.RpcError) as cm:
                    svc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=10)
                e = cm.exception
                self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
                self.assertEqual(e.details(), "Exceeds maximum queue size")
                trailers = dict(e.trailing_metadata())
                self.assertEqual(trailers.get("retry-after"), "4", trailers)
                self.assertEqual(trailers.get("grpc-retry-pushback-ms"), "4000", trailers)
            for s in socks:
                status, _, resp, _ = harness.read_response(s)
                self.assertEqual(status, 200, resp)
        finally:
            for s in socks:
                s.close()

    def test_reload_applies_a_rate_change_under_load(self):
        # Load on another tenant (lab: no key, the loopback source) across the reload.
        stop = threading.Event()
        results = []

        def load():
            with harness.connect(GW.port, timeout=15) as s:
                buf = b""
                while not stop.is_set():
                    send_infer(s, "identity")
                    status, _, _, buf = harness.read_response(s, buf)
                    results.append(status)

        worker = threading.Thread(target=load)
        worker.start()
        with open(GW.config_path) as f:
            original = f.read()
        try:
            key = "delta-key-0b6e"
            for _ in range(2):  # the burst at 0.2 per second
                self.assertEqual(infer("identity", key)[0], 200)
            status, headers, _ = infer("identity", key)
            self.assertEqual(status, 429)
            self.assertEqual(headers.get("retry-after"), "5", headers)
            with open(GW.config_path, "w") as f:
                f.write(original.replace("delta-key-0b6e], rate: 0.2, burst: 2}",
                                         "delta-key-0b6e], rate: 0.5, burst: 3}"))
            status, _, resp = harness.http_request(GW.admin_port, "POST", "/admin/reload")
            self.assertEqual(status, 200, resp)
            answer = json.loads(resp)
            self.assertEqual(answer["result"], "ok", answer)
            self.assertEqual(answer["applied"], ["tenants"], answer)
            for k in KEYS:
                self.assertNotIn(k, resp.decode())
            # A changed rate starts a full bucket at the new rate: burst 3, then 429 with the
            # new refill time (2 s).
            for _ in range(3):
                status, _, resp = infer("identity", key)
                self.assertEqual(status, 200, resp)
            status, headers, resp = infer("identity", key)
            self.assertEqual(status, 429, resp)
            self.assertEqual(headers.get("retry-after"), "2", headers)
            self.assertIn("tenant 'delta' is over its request rate (0.5 per second, burst 3)",
                          resp.decode())
            # One series per name across the reload.
            self.assertEqual(self.count("delta", "admitted"), 5)
            self.assertEqual(self.count("delta", "rate_limited"), 2)
            # A reload without delta: its series leave /metrics; back: they are there again,
            # with their counts.
            with open(GW.config_path, "w") as f:
                f.write(original.replace(
                    "    - {name: delta, api_keys: [delta-key-0b6e], rate: 0.2, burst: 2}\n", ""))
            status, _, resp = harness.http_request(GW.admin_port, "POST", "/admin/reload")
            self.assertEqual(status, 200, resp)
            self.assertNotIn('tenant="delta"', GW.metrics())
            with open(GW.config_path, "w") as f:
                f.write(original)
            status, _, resp = harness.http_request(GW.admin_port, "POST", "/admin/reload")
            self.assertEqual(status, 200, resp)
            self.assertEqual(self.count("delta", "admitted"), 5)
        finally:
            stop.set()
            worker.join(20)
            with open(GW.config_path, "w") as f:
                f.write(original)
            status, _, resp = harness.http_request(GW.admin_port, "POST", "/admin/reload")
            self.assertEqual(status, 200, resp)
        self.assertGreater(len(results), 0)
        self.assertEqual([s for s in results if s != 200], [])  # nothing failed under load

    def test_zz_metrics_are_bounded_and_keys_never_show(self):
        text = GW.metrics()
        tenants = set(re.findall(r'infergate_tenant_requests_total\{[^}]*tenant="([^"]*)"', text))
        self.assertEqual(tenants, {"default", "alpha", "beta", "solo", "lab", "delta"})
        log = GW.read_log()
        for k in KEYS:
            self.assertNotIn(k, text)
            self.assertNotIn(k, log)


if __name__ == "__main__":
    harness.main()
