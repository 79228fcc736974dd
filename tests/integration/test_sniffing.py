"""HTTP/1.1 and HTTP/2 on one port (`protocol: auto`, frontend/sniffing_session.h): curl
(HTTP/1.1, KServe and TF Serving REST), grpcio (gRPC over h2c prior knowledge) and raw
sockets against the same listener of the real binary.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_grpc_api  # noqa: E402  (stub generation)

AUTO_CONFIG = harness.BASE_CONFIG.replace("    protocol: http\nadmin:", "    protocol: auto\nadmin:")
GW = None
PB = None


def setUpModule():
    global GW, PB
    assert AUTO_CONFIG != harness.BASE_CONFIG
    PB = test_grpc_api.generate_stubs(harness.ARGS.source)
    GW = harness.Gateway(template=AUTO_CONFIG)


def tearDownModule():
    if GW:
        assert GW.stop() == 0
    if test_grpc_api.STUBS_DIR:
        shutil.rmtree(test_grpc_api.STUBS_DIR, ignore_errors=True)


def curl(*args):
    out = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}\n%{http_version}"]
                         + list(args), check=True, capture_output=True, timeout=20).stdout
    body, code, version = out.rsplit(b"\n", 2)
    return int(code), body, version.decode()


class Sniffing(unittest.TestCase):
    def test_http1_and_grpc_on_same_port(self):
        import grpc
        self.assertIn("protocol auto", GW.read_log())
        code, body, version = curl("--http1.1", GW.url("/v2/health/live"))
        self.assertEqual((code, version), (200, "1.1"))
        code, body, _ = curl("--http1.1", "-X", "POST", "--data-binary",
                             json.dumps({"instances": [[1.0] * 16]}),
                             GW.url("/v1/models/identity:predict"))
        self.assertEqual(code, 200, body)
        self.assertEqual(json.loads(body), {"predictions": [[1.0] * 16]})

        pb = PB["pb"]
        with grpc.insecure_channel("127.0.0.1:%d" % GW.port) as ch:
            stub = PB["svc"].GRPCInferenceServiceStub(ch)
            self.assertTrue(stub.ServerLive(pb.ServerLiveRequest()).live)
            vals = [float(i) for i in range(16)]
            r = stub.ModelInfer(test_grpc_api.identity_request(pb, vals))
            self.assertEqual(struct.unpack("<16f", r.raw_output_contents[0]), tuple(vals))
        # HTTP/1.1 still works after HTTP/2 connections (per-connection choice).
        code, _, version = curl("--http1.1", GW.url("/v2/models/identity/ready"))
        self.assertEqual((code, version), (200, "1.1"))

    def test_curl_h2_prior_knowledge(self):
        # curl speaking HTTP/2 with prior knowledge: the HTTP/2 side serves gRPC only, so a
        # plain GET is answered by HTTP/2 (not misparsed as HTTP/1.1): HTTP 415/405 + grpc-status.
        out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o",
                              "/dev/null", GW.url("/v2/health/live")],
                             capture_output=True, timeout=20).stdout.decode()
        self.assertTrue(out.startswith("HTTP/2 "), out)

    def test_split_preface_and_pri_http1(self):
        # The preface sent one byte at a time is still HTTP/2 (answered with a SETTINGS frame).
        with harness.connect(GW.port) as s:
            for b in test_grpc_api_preface():
                s.sendall(bytes([b]))
            hdr = b""
            while len(hdr) < 9:
                chunk = s.recv(9 - len(hdr))
                self.assertTrue(chunk, "closed before SETTINGS")
                hdr += chunk
            self.assertEqual(hdr[3], 0x4)  # SETTINGS
        # "PRI" that is not the preface goes to the HTTP/1.1 side: llhttp (strict) only allows
        # PRI with HTTP/2.0, so it answers with an HTTP/1.1 status line, 505.
        with harness.connect(GW.port) as s:
            s.sendall(b"PRI /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, _, _, _ = harness.read_response(s)
            self.assertEqual(status, 505)

    def test_silent_close_is_harmless(self):
        with harness.connect(GW.port):
            pass
        code, _, _ = curl("--http1.1", GW.url("/v2/health/live"))
        self.assertEqual(code, 200)


def test_grpc_api_preface():
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


if __name__ == "__main__":
    harness.main()
