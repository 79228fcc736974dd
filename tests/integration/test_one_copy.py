"""One copy and cancellation, end to end through the real binary in socket mode.

One copy (docs/BATCHING.md, "One copy"): a tensor sent with the binary tensor extension over
HTTP/1.1 (curl and a raw socket) or in gRPC raw_input_contents is written once, by the decoder,
from the received bytes into its slot in the model's batch buffer, and the batch is dispatched
from there. Asserted per request from /metrics deltas of the batched `identity` model:
  request_bytes (received) == slot_bytes (decoded into slots) == bytes_copied (all writes)
  staged_bytes == compacted_bytes == 0
i.e. bytes_copied / request_bytes == 1 exactly, and received_copy_bytes == 0: the HTTP/1.1 body
is streamed (docs/PROTOCOLS.md "HTTP/1.1 body streaming"), Content-Length or chunked, from the
read buffer straight into the slot. A chunked raw binary body (size unknown) is assembled first:
received_copy_bytes == the tensor bytes, ratio 2. JSON `data` is parsed straight into the slot
too (slot_bytes == request_bytes).

Cancellation: with the `slow` model's one in-flight batch busy, a queued request whose client
resets its connection (HTTP/1.1) or cancels its call (gRPC RST_STREAM) is cancelled before
dispatch (infergate_batcher_cancellations_total), and the request queued behind it is
answered with its own values.
"""

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

COUNTERS = ("request_bytes", "slot_bytes", "bytes_copied", "staged_bytes", "compacted_bytes",
            "received_copy_bytes")
VALUES = [float(i) + 0.5 for i in range(16)]
RAW = struct.pack("<16f", *VALUES)


def binary_body(rid="r", values_raw=RAW):
    header = json.dumps({
        "id": rid,
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                    "parameters": {"binary_data_size": len(values_raw)}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }).encode()
    return header, header + values_raw


def post_raw(path, body, extra=b""):
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
            % (path, len(body), extra)) + body


class OneCopyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = harness.Gateway(template=harness.GRPC_CONFIG, max_connections=100, slow_us=300000)
        m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", cls.gw.read_log())
        cls.grpc_port = int(m.group(1)) if m else None
        cls.pb = None
        cls.stubs = None
        try:
            import grpc  # noqa: F401
            cls.stubs = tempfile.mkdtemp(prefix="infergate-onecopy-stubs-")
            proto_dir = os.path.join(harness.ARGS.source, "frontend", "proto")
            subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I" + proto_dir,
                            "-I/usr/include", "--python_out=" + cls.stubs,
                            "--grpc_python_out=" + cls.stubs,
                            os.path.join(proto_dir, "grpc_service.proto")], check=True)
            sys.path.insert(0, cls.stubs)
            import grpc_service_pb2, grpc_service_pb2_grpc  # noqa: E401
            cls.pb, cls.svc = grpc_service_pb2, grpc_service_pb2_grpc
        except Exception as e:  # noqa: BLE001
            cls.grpc_error = str(e)

    @classmethod
    def tearDownClass(cls):
        rc = cls.gw.stop()
        if cls.stubs:
            shutil.rmtree(cls.stubs, ignore_errors=True)
        assert rc == 0, "infergate exit code %r" % rc

    def counters(self, model="identity"):
        text = self.gw.metrics()
        out = {}
        for c in COUNTERS:
            name = "infergate_batcher_%s_total" % c
            self.assertIn(name + "{", text, "metric %s missing from /metrics" % name)
            out[c] = self.gw.metric(name, model=model)
        return out

    def delta(self, before, model="identity"):
        after = self.counters(model)
        return {k: after[k] - before[k] for k in COUNTERS}

    def assert_one_copy(self, d, tensor_bytes):
        # Streamed from the read buffer into the slot: nothing copied before the decoder.
        self.assertEqual(d["received_copy_bytes"], 0, d)
        self.assertEqual(d["request_bytes"], tensor_bytes, d)
        self.assertEqual(d["slot_bytes"], tensor_bytes, d)
        self.assertEqual(d["bytes_copied"], d["request_bytes"], d)  # the ratio is exactly 1
        self.assertEqual(d["staged_bytes"], 0, d)
        self.assertEqual(d["compacted_bytes"], 0, d)

    def check_binary_response(self, status, headers, body):
        self.assertEqual(status, 200, body[:200])
        n = int(headers["inference-header-content-length"])
        self.assertEqual(body[n:], RAW)

    # --- one copy --------------------------------------------------------------------------

    def test_binary_extension_with_curl_is_one_copy(self):
        if shutil.which("curl") is None:
            self.skipTest("curl not installed")
        header, body = binary_body("curl")
        with tempfile.NamedTemporaryFile() as f:
            f.write(body)
            f.flush()
            before = self.counters()
            out = subprocess.run(
                ["curl", "-s", "-D", "-", "--data-binary", "@" + f.name,
                 "-H", "Content-Type: application/octet-stream",
                 "-H", "Inference-Header-Content-Length: %d" % len(header),
                 self.gw.url("/v2/models/identity/infer")],
                capture_output=True, check=True).stdout
        head, _, resp = out.partition(b"\r\n\r\n")
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        m = re.search(rb"(?i)inference-header-content-length: (\d+)", head)
        self.assertEqual(resp[int(m.group(1)):], RAW)
        self.assert_one_copy(self.delta(before), len(RAW))

    def test_binary_extension_over_raw_socket_is_one_copy(self):
        for i in range(3):  # three requests, one at a time: each exactly one copy
            header, body = binary_body("raw%d" % i)
            before = self.counters()
            with harness.connect(self.gw.port) as s:
                s.sendall(post_raw(b"/v2/models/identity/infer", body,
                                   b"Inference-Header-Content-Length: %d\r\n" % len(header)))
                status, headers, resp, _ = harness.read_response(s)
            self.check_binary_response(status, headers, resp)
            self.assert_one_copy(self.delta(before), len(RAW))

    def test_raw_binary_body_is_one_copy(self):
        before = self.counters()
        with harness.connect(self.gw.port) as s:
            s.sendall(post_raw(b"/v2/models/identity/infer", RAW,
                               b"Inference-Header-Content-Length: 0\r\n"))
            status, headers, resp, _ = harness.read_response(s)
        self.check_binary_response(status, headers, resp)
        self.assert_one_copy(self.delta(before), len(RAW))

    def test_chunked_binary_extension_is_one_copy(self):
        # De-chunked on the fly into the slot: chunks of 7 bytes cross the JSON header and the
        # tensor, the tensor arrives in its own segments.
        header, body = binary_body("chunked")
        before = self.counters()
        with harness.connect(self.gw.port) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Transfer-Encoding: chunked\r\nInference-Header-Content-Length: %d\r\n\r\n"
                      % len(header))
            for off in range(0, len(body), 7):
                c = body[off:off + 7]
                s.sendall(b"%x\r\n%s\r\n" % (len(c), c))
                if off >= len(header):
                    time.sleep(0.002)
            s.sendall(b"0\r\n\r\n")
            status, headers, resp, _ = harness.read_response(s)
        self.check_binary_response(status, headers, resp)
        self.assert_one_copy(self.delta(before), len(RAW))

    def test_chunked_raw_binary_body_counts_its_assembly(self):
        # A raw binary body of unknown size is assembled first: that copy is counted, exactly.
        before = self.counters()
        with harness.connect(self.gw.port) as s:
            s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Transfer-Encoding: chunked\r\nInference-Header-Content-Length: 0\r\n\r\n"
                      b"%x\r\n%s\r\n0\r\n\r\n" % (len(RAW), RAW))
            status, headers, resp, _ = harness.read_response(s)
        self.check_binary_response(status, headers, resp)
        d = self.delta(before)
        self.assertEqual(d["request_bytes"], len(RAW), d)
        self.assertEqual(d["slot_bytes"], len(RAW), d)
        self.assertEqual(d["received_copy_bytes"], len(RAW), d)
        self.assertEqual(d["bytes_copied"], 2 * len(RAW), d)  # assembly + the decoder's write
        self.assertEqual(d["staged_bytes"], 0, d)

    def test_json_data_is_parsed_into_the_slot(self):
        body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                                       "data": VALUES}]}).encode()
        before = self.counters()
        status, _, resp = harness.http_request(self.gw.port, "POST",
                                               "/v2/models/identity/infer", body)
        self.assertEqual(status, 200, resp)
        self.assertEqual(json.loads(resp)["outputs"][0]["data"], VALUES)
        d = self.delta(before)
        self.assertEqual(d["slot_bytes"], len(RAW), d)  # parsed straight into the slot
        self.assertEqual(d["bytes_copied"], d["request_bytes"], d)
        self.assertEqual(d["received_copy_bytes"], 0, d)  # JSON text assembly is not a tensor copy

    def grpc_request(self, rid, model="identity", values_raw=RAW, shape=(1, 16)):
        req = self.pb.ModelInferRequest(model_name=model, id=rid)
        i = req.inputs.add()
        i.name, i.datatype = "INPUT0", "FP32"
        i.shape.extend(shape)
        req.raw_input_contents.append(values_raw)
        return req

    def need_grpc(self):
        if self.pb is None:
            self.skipTest("python3-grpcio / grpc_tools not available: %s"
                          % getattr(self, "grpc_error", ""))
        if self.grpc_port is None:
            self.skipTest("no grpc listener in this build")

    def test_grpc_raw_input_contents_is_one_copy(self):
        self.need_grpc()
        import grpc
        with grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port) as ch:
            stub = self.svc.GRPCInferenceServiceStub(ch)
            stub.ServerLive(self.pb.ServerLiveRequest(), timeout=10)  # connect first
            for i in range(3):
                before = self.counters()
                resp = stub.ModelInfer(self.grpc_request("g%d" % i), timeout=10)
                self.assertEqual(resp.raw_output_contents[0], RAW)
                self.assert_one_copy(self.delta(before), len(RAW))

    # --- cancellation ----------------------------------------------------------------------

    SLOW_RAW = struct.pack("<4f", 1, 2, 3, 4)

    def slow_body(self, rid, raw):
        header = json.dumps({
            "id": rid,
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                        "parameters": {"binary_data_size": len(raw)}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
        return post_raw(b"/v2/models/slow/infer", header + raw,
                        b"Inference-Header-Content-Length: %d\r\n" % len(header))

    def wait_metric(self, name, want, timeout=5, **labels):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.gw.metric(name, **labels)
            if v >= want:
                return v
            time.sleep(0.02)
        return self.gw.metric(name, **labels)

    def test_http1_client_reset_cancels_its_queued_request(self):
        cancelled0 = self.gw.metric("infergate_batcher_cancellations_total", model="slow")
        batches0 = self.gw.metric("infergate_batcher_batches_total", model="slow")
        busy = harness.connect(self.gw.port)
        busy.sendall(self.slow_body("busy", self.SLOW_RAW))  # occupies the backend for 300 ms
        self.assertEqual(self.wait_metric("infergate_batcher_batches_total", batches0 + 1,
                                          model="slow"), batches0 + 1)
        gone = harness.connect(self.gw.port)
        gone.sendall(self.slow_body("gone", struct.pack("<4f", 9, 9, 9, 9)))
        self.assertEqual(self.wait_metric("infergate_batcher_queue_depth", 1, model="slow"), 1)
        # Abort: SO_LINGER 0 turns close() into a reset, as a killed client would.
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()
        self.assertEqual(self.wait_metric("infergate_batcher_cancellations_total",
                                          cancelled0 + 1, model="slow"), cancelled0 + 1)
        self.assertEqual(self.gw.metric("infergate_batcher_queue_depth", model="slow"), 0)
        neighbour = harness.connect(self.gw.port)
        neighbour.sendall(self.slow_body("next", struct.pack("<4f", 5, 6, 7, 8)))
        for s, raw in ((busy, self.SLOW_RAW), (neighbour, struct.pack("<4f", 5, 6, 7, 8))):
            status, headers, resp, _ = harness.read_response(s)
            self.assertEqual(status, 200, resp)
            self.assertEqual(resp[int(headers["inference-header-content-length"]):], raw)
            s.close()
        # The cancelled request was never dispatched: two batches (busy, next), not three.
        self.assertEqual(self.gw.metric("infergate_batcher_batches_total", model="slow"),
                         batches0 + 2)

    def test_grpc_cancel_frees_the_queued_request(self):
        self.need_grpc()
        import grpc
        cancelled0 = self.gw.metric("infergate_batcher_cancellations_total", model="slow")
        batches0 = self.gw.metric("infergate_batcher_batches_total", model="slow")
        with grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port) as ch:
            stub = self.svc.GRPCInferenceServiceStub(ch)
            stub.ServerLive(self.pb.ServerLiveRequest(), timeout=10)
            busy = stub.ModelInfer.future(self.grpc_request("busy", "slow", self.SLOW_RAW, (1, 4)),
                                          timeout=10)
            self.assertEqual(self.wait_metric("infergate_batcher_batches_total", batches0 + 1,
                                              model="slow"), batches0 + 1)
            gone = stub.ModelInfer.future(
                self.grpc_request("gone", "slow", struct.pack("<4f", 9, 9, 9, 9), (1, 4)),
                timeout=10)
            self.assertEqual(self.wait_metric("infergate_batcher_queue_depth", 1, model="slow"), 1)
            self.assertTrue(gone.cancel())  # RST_STREAM(CANCEL)
            self.assertEqual(self.wait_metric("infergate_batcher_cancellations_total",
                                              cancelled0 + 1, model="slow"), cancelled0 + 1)
            nxt = stub.ModelInfer.future(
                self.grpc_request("next", "slow", struct.pack("<4f", 5, 6, 7, 8), (1, 4)),
                timeout=10)
            self.assertEqual(busy.result().raw_output_contents[0], self.SLOW_RAW)
            self.assertEqual(nxt.result().raw_output_contents[0], struct.pack("<4f", 5, 6, 7, 8))
        self.assertEqual(self.gw.metric("infergate_batcher_batches_total", model="slow"),
                         batches0 + 2)


if __name__ == "__main__":
    harness.main()
