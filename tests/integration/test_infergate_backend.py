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
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402

pb = None    # grpc_service_pb2, generated in setUpModule

REQUEST_TIMEOUT_S = 30.0  # B's request_timeout_ms below


def setUpModule():
    # Skips are per test: harness.main() reports "skipped" (77) only when tests ran and all
    # skipped, and a module-level skip runs none (exit 0).
    global pb
    bf.set_up_stubs(skip_per_test=True)
    if not bf.MISSING:
        import grpc_service_pb2
        pb = grpc_service_pb2


def tearDownModule():
    bf.tear_down_stubs()


# A: the backend, the in-process identity model. `grpc_port` is 0 on the first start, then the
# port it got (a restart reuses it).
A_MODEL = """
  - name: identity
    version: "1"
    backend: identity
    max_batch_size: 8
    inputs: [{name: INPUT0, datatype: FP32, shape: [16]}]
    outputs: [{name: OUTPUT0, datatype: FP32, shape: [16]}]
"""


def start_a(grpc_port=0):
    return bf.start_gateway(A_MODEL, reactors=1, grpc_port=grpc_port)


def start_b(endpoint, dtype="FP32", shape="[16]"):
    """B: the front. The model is called 'remote' here and 'identity' at A (triton.model_name)."""
    return bf.start_gateway(bf.model_yaml(endpoints=['"%s"' % endpoint], dtype=dtype, shape=shape,
                                          extra="      model_name: identity\n      shared_memory: none\n"
                                                "      request_timeout_ms: %d" % (REQUEST_TIMEOUT_S * 1000)),
                            grpc_port=0)


def rest_infer(port, values, model="remote"):
    return bf.infer(port, model, values, sock_timeout=REQUEST_TIMEOUT_S + 10)


class GrpcClient:
    def __init__(self, port):
        self.ch = bf.grpc.insecure_channel("127.0.0.1:%d" % port, options=[("grpc.enable_http_proxy", 0)])
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


class InfergateBackendTest(bf.BackendTestCase):
    def setUp(self):
        super().setUp()
        self.a = None
        self.b = None

    def tearDown(self):
        for gw in (self.b, self.a):
            if gw is not None:
                gw.stop()
        super().tearDown()

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
            with self.assertRaises(bf.grpc.RpcError) as cm:
                cl.call(bytes(64))
            grpc_s = time.time() - t0
            self.assertEqual(cm.exception.code(), bf.grpc.StatusCode.UNAVAILABLE, cm.exception)
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
