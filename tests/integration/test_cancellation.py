"""Cancellation reaches the backend (issue 19; docs/BATCHING.md "Cancellation"), end to end
through the real binary in socket mode in front of the KServe test server
(tests/servers/kserve_server.py) made slow (Control/Set latency_ms), which counts the
ModelInfer calls its clients cancel (Stats "cancelled_calls": the gRPC context went inactive).

A client that goes away while its request is at the backend:
  - HTTP/1.1: the connection is reset (SO_LINGER 0), or, with limits.cancel_on_half_close, the
    client closes its side (FIN; without the option a FIN leaves the request running);
  - HTTP/2: RST_STREAM(CANCEL) on the call's stream (raw frames);
  - gRPC: grpcio's future.cancel();
makes the gateway cancel the backend call (RST_STREAM CANCEL to the server): the server's
counter moves within a second (not after the 10 s latency), and the gateway counts it in
infergate_requests_cancelled_total{stage="in_flight"}, infergate_batcher_batches_cancelled_total
and infergate_backend_cancelled_total. A request that completes is counted nowhere, and the
gateway goes on serving.
"""
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from test_grpc_api import DATA, HEADERS, PREFACE, RST, SETTINGS, frame, grpc_headers  # noqa: E402

pb = None  # grpc_service_pb2, generated in setUpModule
SLOW_MS = 10000  # the server's latency while a test cancels: far longer than any wait here
CANCEL = 8       # HTTP/2 error code CANCEL


def setUpModule():
    global pb
    bf.set_up_stubs(skip_per_test=True)
    if not bf.MISSING:
        import grpc_service_pb2
        pb = grpc_service_pb2


def tearDownModule():
    bf.tear_down_stubs()


def infer_request(rid):
    req = pb.ModelInferRequest(model_name="remote", id=rid)
    t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    del t
    req.raw_input_contents.append(struct.pack("<16f", *[float(i) for i in range(16)]))
    return req


class CancellationTest(bf.BackendTestCase):
    def setUp(self):
        super().setUp()
        self.srv = self.server()
        if self._testMethodName != "test_http1_half_close_cancels_with_the_option":
            self.gateway()

    def gateway(self, top=""):
        # `top`: a top-level section of the configuration (gateway_config's `xdp` slot).
        self.start_gateway(bf.model_yaml(endpoints=['"%s"' % self.srv.address]), reactors=1,
                           grpc_port=0, xdp=top)

    # --- helpers -------------------------------------------------------------------------------

    def stats(self):
        return self.srv.control("Stats")

    def slow(self):
        self.srv.control("Set", {"latency_ms": SLOW_MS})
        return self.stats()["infer_requests"]

    def wait_at_server(self, before):
        """Waits until the server has received one more ModelInfer than `before`."""
        self.assertTrue(bf.wait_for(lambda: self.stats()["infer_requests"] == before + 1, 5),
                        self.stats())

    def counters(self):
        m = self.gw.metrics()
        return {
            "in_flight": harness.parse_metric(m, "infergate_requests_cancelled_total",
                                              model="remote", stage="in_flight"),
            "queued": harness.parse_metric(m, "infergate_requests_cancelled_total",
                                           model="remote", stage="queued"),
            "batches": harness.parse_metric(m, "infergate_batcher_batches_cancelled_total",
                                            model="remote"),
            "backend": harness.parse_metric(m, "infergate_backend_cancelled_total",
                                            model="remote", endpoint=self.srv.address),
            "errors": harness.parse_metric(m, "infergate_backend_errors_total", model="remote"),
        }

    def assert_cancelled_at_server(self, t0):
        """The server saw the cancel well before its latency ran out, and the gateway counted
        it once at each level; then a fresh request is served."""
        self.assertTrue(bf.wait_for(lambda: self.stats()["cancelled_calls"] == 1, 3),
                        "the server saw no cancellation: %r" % self.stats())
        self.assertLess(time.time() - t0, SLOW_MS / 1000.0 / 2)
        self.assertTrue(bf.wait_for(lambda: self.counters()["backend"] == 1, 3), self.counters())
        self.assertEqual(self.counters(), {"in_flight": 1, "queued": 0, "batches": 1, "backend": 1,
                                           "errors": 0})
        self.srv.control("Set", {"latency_ms": 0})
        st, body = bf.infer(self.gw.port, "remote", [float(i) for i in range(16)])
        self.assertEqual(st, 200, body)
        self.assertEqual(self.stats()["cancelled_calls"], 1)
        self.assertEqual(self.counters()["backend"], 1)

    # --- tests ---------------------------------------------------------------------------------

    def http1_request_at_server(self):
        """An HTTP/1.1 request sent on a fresh connection, once the server has it."""
        before = self.slow()
        s = harness.connect(self.gw.port)
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                       "data": [float(i) for i in range(16)]}]}).encode()
        s.sendall(b"POST /v2/models/remote/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        self.wait_at_server(before)
        return s

    def test_http1_reset_cancels_the_backend_call(self):
        s = self.http1_request_at_server()
        t0 = time.time()
        # Abort: SO_LINGER 0 turns close() into a reset, as a killed client would.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        self.assert_cancelled_at_server(t0)

    def test_http1_half_close_cancels_with_the_option(self):
        self.gateway("limits: {cancel_on_half_close: true}\n")
        s = self.http1_request_at_server()
        t0 = time.time()
        s.shutdown(socket.SHUT_WR)  # FIN: a client that gave up and closed
        try:
            self.assert_cancelled_at_server(t0)
        finally:
            s.close()

    def test_http2_rst_stream_cancels_the_backend_call(self):
        before = self.slow()
        msg = infer_request("h2").SerializeToString()
        s = harness.connect(self.gw.grpc_port)
        try:
            s.sendall(PREFACE + frame(SETTINGS, 0, 0, b"") +
                      frame(HEADERS, 0x4, 1, grpc_headers(b"/inference.GRPCInferenceService/ModelInfer")) +
                      frame(DATA, 0x1, 1, b"\x00" + struct.pack(">I", len(msg)) + msg))
            self.wait_at_server(before)
            t0 = time.time()
            s.sendall(frame(RST, 0, 1, struct.pack(">I", CANCEL)))
            self.assert_cancelled_at_server(t0)
        finally:
            s.close()

    def test_grpc_cancel_cancels_the_backend_call(self):
        before = self.slow()
        ch = bf.grpc.insecure_channel("127.0.0.1:%d" % self.gw.grpc_port)
        try:
            infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=pb.ModelInferResponse.FromString)
            fut = infer.future(infer_request("grpc"), timeout=30)
            self.wait_at_server(before)
            t0 = time.time()
            self.assertTrue(fut.cancel())  # RST_STREAM(CANCEL)
            self.assert_cancelled_at_server(t0)
        finally:
            ch.close()

    def test_completed_requests_are_not_counted(self):
        self.srv.control("Set", {"latency_ms": 50})
        st, body = bf.infer(self.gw.port, "remote", [float(i) for i in range(16)])
        self.assertEqual(st, 200, body)
        ch = bf.grpc.insecure_channel("127.0.0.1:%d" % self.gw.grpc_port)
        try:
            infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=pb.ModelInferResponse.FromString)
            resp = infer(infer_request("done"), timeout=10)
            self.assertEqual(resp.id, "done")
        finally:
            ch.close()
        self.assertEqual(self.stats()["infer_requests"], 2)
        self.assertEqual(self.stats()["cancelled_calls"], 0)
        self.assertEqual(self.counters(), {"in_flight": 0, "queued": 0, "batches": 0, "backend": 0,
                                           "errors": 0})


if __name__ == "__main__":
    harness.main()
