"""Memory follows received bytes (issue 33; docs/SECURITY.md "Memory follows received bytes").

Clients announce large tensors and send nothing more: for an unbatched model (no batch slots,
so the decoders write into tensor buffers of their own), 8 REST connections whose JSON header
announces a 16 MiB binary tensor, 8 gRPC ModelInfer streams and 8 TF Predict streams whose
header announces 16 MiB of tensor bytes. Before the fix each announcement allocated and
zero-filled its 16 MiB (3 x 128 MiB); now the gateway's RSS grows by what arrived. Then the
same clients send their bytes and every request is answered 200 / OK: nothing accepted is lost.
"""
import os
import re
import socket
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_grpc_api import generate_stubs  # noqa: E402
import test_grpc_api  # noqa: E402

ELEMENTS = 4 << 20          # FP32: 16 MiB a tensor
BYTES = ELEMENTS * 4
CLIENTS = 8
BOUND = 24 << 20            # RSS growth allowed for all 24 announcements together

TEMPLATE = harness.GRPC_CONFIG.replace("max_body_bytes: {max_body_bytes}",
                                       "max_body_bytes: 67108864") + \
    harness.braces(harness.model_yaml("big", [ELEMENTS], 0, version="1", backend=True))


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024


class AnnouncedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pb = generate_stubs(harness.ARGS.source)
        cls.gw = harness.Gateway(template=TEMPLATE)
        log = cls.gw.read_log()
        cls.grpc_port = int(re.search(r"listener 'grpc' on [^ ]+:(\d+)", log).group(1))

    @classmethod
    def tearDownClass(cls):
        rc = cls.gw.stop()
        if test_grpc_api.STUBS_DIR:
            import shutil
            shutil.rmtree(test_grpc_api.STUBS_DIR, ignore_errors=True)
        assert rc == 0, "infergate exited with %d:\n%s" % (rc, cls.gw.read_log())

    def rest_opening(self):
        header = ('{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[%d],'
                  '"parameters":{"binary_data_size":%d}}]}' % (ELEMENTS, BYTES)).encode()
        head = ("POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\n"
                "Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                % (len(header), len(header) + BYTES)).encode()
        return head + header

    def grpc_opening(self, predict):
        import h2.config
        import h2.connection
        pb = self.pb
        if predict:
            req = pb["tfp"].PredictRequest()
            req.model_spec.name = "big"
            t = req.inputs["INPUT0"]
            t.dtype = 1  # DT_FLOAT
            t.tensor_shape.dim.add().size = ELEMENTS
            t.tensor_content = b"\0" * BYTES
            path = "/tensorflow.serving.PredictionService/Predict"
        else:
            req = pb["pb"].ModelInferRequest(model_name="big")
            req.inputs.add(name="INPUT0", datatype="FP32", shape=[ELEMENTS])
            req.raw_input_contents.append(b"\0" * BYTES)
            path = "/inference.GRPCInferenceService/ModelInfer"
        wire = req.SerializeToString()
        msg = b"\0" + struct.pack(">I", len(wire)) + wire
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", path),
                           (":authority", "x"), ("content-type", "application/grpc"),
                           ("te", "trailers")])
        opening = c.data_to_send()
        # The message up to its first tensor byte, as DATA (the tensor bytes end the message).
        head_len = len(msg) - BYTES
        return opening, c, msg, head_len

    def test_announced_bytes_hold_no_memory_and_sent_ones_are_served(self):
        pid = self.gw.proc.pid
        time.sleep(0.5)
        before = rss(pid)
        rest = []
        for _ in range(CLIENTS):
            s = harness.connect(self.gw.port)
            s.sendall(self.rest_opening())
            rest.append(s)
        streams = []
        for predict in (False, True):
            for _ in range(CLIENTS):
                s = harness.connect(self.grpc_port)
                opening, c, msg, head_len = self.grpc_opening(predict)
                c.send_data(1, msg[:head_len])
                s.sendall(opening + c.data_to_send())
                streams.append((s, c, msg, head_len))
        time.sleep(1.5)  # every header decoded
        grown = rss(pid) - before
        print("\n[announced] %d announcements of %d MiB each: RSS grew %.1f MiB (bound %d MiB)"
              % (3 * CLIENTS, BYTES >> 20, grown / 2**20, BOUND >> 20))
        self.assertLess(grown, BOUND)
        # Now the bytes: every request is served.
        for s in rest:
            s.sendall(b"\0" * BYTES)
        for s in rest:
            status = harness.read_response(s)[0]
            self.assertEqual(status, 200)
            s.close()
        import h2.events
        for s, c, msg, head_len in streams:
            pos = head_len
            done = None
            s.settimeout(10)
            while done is None:
                while pos < len(msg) and c.local_flow_control_window(1) > 0:
                    n = min(len(msg) - pos, c.local_flow_control_window(1), c.max_outbound_frame_size)
                    c.send_data(1, msg[pos:pos + n], end_stream=pos + n == len(msg))
                    pos += n
                s.sendall(c.data_to_send())
                data = s.recv(1 << 20)
                if not data:
                    break
                for e in c.receive_data(data):
                    if isinstance(e, h2.events.DataReceived):  # the 16 MiB answer
                        c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    if isinstance(e, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
                        h = dict(e.headers)
                        if b"grpc-status" in h:
                            done = h[b"grpc-status"]
                s.sendall(c.data_to_send())
            self.assertEqual(done, b"0")
            s.close()


if __name__ == "__main__":
    harness.main()
