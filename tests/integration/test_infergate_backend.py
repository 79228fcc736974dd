"""infergate as the KServe v2 gRPC backend of another infergate.

Gateway A (socket mode, the in-process identity model, an http and a grpc listener) is the
triton backend of gateway B (socket mode, `backend: triton`, `shared_memory: none`). Clients
send KServe v2 REST and gRPC to B.

Asserts: outputs come back correct (REST values, gRPC raw bytes byte-exact) through B's batcher
and A; B's start-up metadata check (ServerReady, ModelReady, ModelMetadata at A) passes, and a
B configured with a different datatype or shape is refused at start-up with a message naming
the difference and A's address; A stopped -> B answers 503 naming A well under the request
timeout; A started again on the same port -> B serves again.
"""
import json
import os
import re
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

pb = None    # grpc_service_pb2, generated in setUpModule
grpc = None
STUBS = None
MISSING = None  # why the tests cannot run here (each test skips with it)


def setUpModule():
    # Skips are per test: harness.main() reports "skipped" (77) only when tests ran and all
    # skipped, and a module-level skip runs none (exit 0).
    global pb, grpc, STUBS, MISSING
    try:
        import grpc as grpc_mod  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError as e:
        MISSING = "needs python3-grpcio and python3-grpc-tools: %s" % e
        return
    grpc = grpc_mod
    sys.path.insert(0, os.path.join(harness.ARGS.source, "tests", "servers"))
    import stubs
    STUBS = tempfile.TemporaryDirectory(prefix="infergate-stubs-")
    stubs.generate(STUBS.name)
    import grpc_service_pb2
    pb = grpc_service_pb2


def tearDownModule():
    if STUBS is not None:
        STUBS.cleanup()


# A: the backend. `{grpc_port}` is 0 on the first start, then the port it got (a restart reuses it).
A_CONFIG = """
mode: socket
reactors: 1
listeners:
  - {{name: http, address: 127.0.0.1, port: 0, protocol: http}}
  - {{name: grpc, address: 127.0.0.1, port: {grpc_port}, protocol: grpc}}
admin: {{address: 127.0.0.1, port: 0}}
logging: {{level: info, access_log: false}}
models:
  - name: identity
    version: "1"
    backend: identity
    max_batch_size: 8
    inputs: [{{name: INPUT0, datatype: FP32, shape: [16]}}]
    outputs: [{{name: OUTPUT0, datatype: FP32, shape: [16]}}]
"""

# B: the front. The model is called 'remote' here and 'identity' at A (triton.model_name).
B_CONFIG = """
mode: socket
reactors: 2
listeners:
  - {{name: http, address: 127.0.0.1, port: 0, protocol: http}}
  - {{name: grpc, address: 127.0.0.1, port: 0, protocol: grpc}}
admin: {{address: 127.0.0.1, port: 0}}
logging: {{level: info, access_log: false}}
models:
  - name: remote
    version: "1"
    backend: triton
    max_batch_size: 8
    inputs: [{{name: INPUT0, datatype: {dtype}, shape: {shape}}}]
    outputs: [{{name: OUTPUT0, datatype: {dtype}, shape: {shape}}}]
    triton:
      endpoints: ["{endpoint}"]
      model_name: identity
      shared_memory: none
      health_check_interval_ms: 100
      health_check_timeout_ms: 500
      startup_timeout_ms: 3000
      request_timeout_ms: 30000
      ejection_ms: 500
    dynamic_batching: {{max_queue_delay_us: 2000}}
"""

REQUEST_TIMEOUT_S = 30.0  # B's request_timeout_ms above


def start_a(grpc_port=0):
    gw = harness.Gateway(config_text=A_CONFIG.format(grpc_port=grpc_port))
    m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", gw.read_log())
    assert m, gw.read_log()
    gw.grpc_port = int(m.group(1))
    return gw


def start_b(endpoint, dtype="FP32", shape="[16]"):
    gw = harness.Gateway(config_text=B_CONFIG.format(endpoint=endpoint, dtype=dtype, shape=shape))
    m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", gw.read_log())
    assert m, gw.read_log()
    gw.grpc_port = int(m.group(1))
    return gw


def rest_infer(port, values, model="remote"):
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                   "data": values}]}).encode()
    s = harness.connect(port, timeout=REQUEST_TIMEOUT_S + 10)
    try:
        s.sendall(("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (model, len(body))).encode() + body)
        status, _, payload, _ = harness.read_response(s)
        return status, json.loads(payload or b"{}")
    finally:
        s.close()


class GrpcClient:
    def __init__(self, port):
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % port, options=[("grpc.enable_http_proxy", 0)])
        self.infer = self.ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=pb.ModelInferResponse.FromString)

    def call(self, raw, rid="", model="remote", timeout=REQUEST_TIMEOUT_S + 10):
        req = pb.ModelInferRequest(model_name=model, id=rid)
        req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(raw)
        return self.infer(req, timeout=timeout)

    def close(self):
        self.ch.close()


class InfergateBackendTest(unittest.TestCase):
    def setUp(self):
        if MISSING:
            self.skipTest(MISSING)
        self.a = None
        self.b = None

    def tearDown(self):
        for gw in (self.b, self.a):
            if gw is not None:
                gw.stop()

    def endpoint(self):
        return "127.0.0.1:%d" % self.a.grpc_port

    def test_rest_and_grpc_through_b_to_a(self):
        self.a = start_a()
        self.b = start_b(self.endpoint())
        log = self.b.read_log()
        # The start-up check ran against A and passed.
        self.assertEqual(self.b.metric("infergate_backend_healthy", endpoint=self.endpoint()), 1, log)
        self.assertNotIn("does not match", log)
        self.assertIn("model 'remote': triton endpoint %s is healthy" % self.endpoint(), log)

        errors = []
        lock = threading.Lock()
        n_rest, n_grpc, per = 4, 4, 25

        def rest_client(c):
            for i in range(per):
                vals = [float(c * 1000 + i) + k / 16.0 for k in range(16)]
                try:
                    st, body = rest_infer(self.b.port, vals)
                    if st != 200 or body["outputs"][0]["name"] != "OUTPUT0" \
                            or body["outputs"][0]["data"] != vals:
                        raise AssertionError("REST %d %r" % (st, body))
                except Exception as e:  # noqa: BLE001
                    with lock:
                        errors.append(repr(e))

        def grpc_client(c):
            cl = GrpcClient(self.b.grpc_port)
            try:
                for i in range(per):
                    # Bit patterns, not just round numbers: NaN payloads and denormals must
                    # survive both hops byte for byte.
                    raw = struct.pack("<16I", *[(c * 7919 + i * 104729 + k * 2654435761) & 0xffffffff
                                                for k in range(16)])
                    rid = "c%d-%d" % (c, i)
                    r = cl.call(raw, rid)
                    if (r.id != rid or r.model_name != "remote" or len(r.outputs) != 1
                            or r.outputs[0].name != "OUTPUT0" or list(r.outputs[0].shape) != [1, 16]
                            or r.outputs[0].datatype != "FP32" or list(r.raw_output_contents) != [raw]):
                        raise AssertionError("gRPC %r" % r)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))
            finally:
                cl.close()

        ts = [threading.Thread(target=rest_client, args=(c,)) for c in range(n_rest)]
        ts += [threading.Thread(target=grpc_client, args=(c,)) for c in range(n_grpc)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        self.assertFalse(any(t.is_alive() for t in ts), "a client hung")
        self.assertEqual(errors, [], errors[:3])

        total = (n_rest + n_grpc) * per
        # Every request went through B's triton backend to A's gRPC listener, in batches.
        batches = self.b.metric("infergate_backend_batches_total", endpoint=self.endpoint())
        self.assertGreater(batches, 0)
        self.assertLessEqual(batches, total)
        self.assertEqual(self.b.metric("infergate_backend_tensor_bytes_total", path="grpc"), total * 64)
        self.assertEqual(self.b.metric("infergate_backend_tensor_bytes_total", path="shm"), 0)
        # A saw B's batches as ModelInfer calls (its count also holds B's ModelReady and
        # ModelMetadata probes) and every tensor byte, once.
        a_calls = self.a.metric("infergate_requests_total", protocol="kserve_grpc", model="identity",
                                code="200")
        self.assertGreaterEqual(a_calls, batches)
        self.assertEqual(self.a.metric("infergate_batcher_request_bytes_total", model="identity"),
                         total * 64)
        self.assertEqual(self.a.metric("infergate_requests_total", protocol="kserve_http"), 0)
        self.assertEqual(self.b.metric("infergate_backend_errors_total"), 0)

    def test_metadata_mismatch_refused_at_startup(self):
        self.a = start_a()
        ep = self.endpoint()
        with self.assertRaises(RuntimeError) as cm:
            start_b(ep, dtype="FP16")
        msg = str(cm.exception)
        self.assertIn("does not match the configuration", msg)
        self.assertIn("inputs[0] 'INPUT0': datatype FP16 configured, the backend has FP32", msg)
        self.assertIn("outputs[0] 'OUTPUT0': datatype FP16 configured, the backend has FP32", msg)
        self.assertIn(ep, msg)

        with self.assertRaises(RuntimeError) as cm:
            start_b(ep, shape="[8]")
        msg = str(cm.exception)
        self.assertIn("does not match the configuration", msg)
        self.assertIn("inputs[0] 'INPUT0': shape [-1,8] configured (with the batch dimension), "
                      "the backend has [-1,16]", msg)
        self.assertIn(ep, msg)
        # A stayed up and a matching B still starts.
        self.b = start_b(ep)
        st, body = rest_infer(self.b.port, [1.5] * 16)
        self.assertEqual(st, 200, body)

    def test_a_stopped_fast_503_then_recovers(self):
        self.a = start_a()
        ep = self.endpoint()
        self.b = start_b(ep)
        st, body = rest_infer(self.b.port, [2.0] * 16)
        self.assertEqual(st, 200, body)

        self.assertEqual(self.a.stop(), 0)
        grpc_port = self.a.grpc_port
        self.a = None
        time.sleep(0.3)  # a few health intervals: B notices without traffic too
        t0 = time.time()
        st, body = rest_infer(self.b.port, [3.0] * 16)
        rest_s = time.time() - t0
        self.assertEqual(st, 503, body)
        self.assertIn(ep, body.get("error", ""), body)
        self.assertLess(rest_s, 2.0, "503 took %.2f s (request timeout %.0f s)" % (rest_s, REQUEST_TIMEOUT_S))

        cl = GrpcClient(self.b.grpc_port)
        try:
            t0 = time.time()
            with self.assertRaises(grpc.RpcError) as cm:
                cl.call(bytes(64))
            grpc_s = time.time() - t0
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception)
            self.assertIn(ep, cm.exception.details())
            self.assertLess(grpc_s, 2.0)

            # A back on the same port: B re-admits it and serves both protocols again.
            self.a = start_a(grpc_port)
            self.assertEqual(self.a.grpc_port, grpc_port)
            deadline = time.time() + 10
            st = 0
            while time.time() < deadline:
                st, body = rest_infer(self.b.port, [4.0] * 16)
                if st == 200:
                    break
                time.sleep(0.1)
            self.assertEqual(st, 200, body)
            self.assertEqual(body["outputs"][0]["data"], [4.0] * 16)
            raw = struct.pack("<16f", *[k * 0.25 for k in range(16)])
            self.assertEqual(list(cl.call(raw, "back").raw_output_contents), [raw])
            self.assertEqual(self.b.metric("infergate_backend_healthy", endpoint=ep), 1)
        finally:
            cl.close()


if __name__ == "__main__":
    harness.main()
