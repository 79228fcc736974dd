"""HTTP/1.1 behaviour over raw kernel-TCP sockets: pipelining, malformed requests, chunked
bodies, Expect: 100-continue, timeouts, connection limits, and the counters they move."""
import json
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

INFER = b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[%s]}]}'


def infer_body(v):
    return INFER % ",".join([str(v)] * 16).encode()


def post(path, body, extra=b""):
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n" % (path, len(body), extra)) + body


class Http1RawTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = harness.Gateway(max_connections=20, header_timeout_ms=1000, idle_timeout_ms=3000,
                                 max_body_bytes=100000)

    @classmethod
    def tearDownClass(cls):
        rc = cls.gw.stop()
        assert rc == 0, "infergate exited with %d:\n%s" % (rc, cls.gw.read_log())

    def test_pipelining_in_order(self):
        # Mix a slow model (answered later from its worker thread) with instant ones: responses
        # must still come back in request order.
        slow = b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[7,7,7,7]}]}'
        reqs = (post(b"/v2/models/slow/infer", slow) + post(b"/v2/models/identity/infer", infer_body(1)) +
                b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" + post(b"/v2/models/identity/infer", infer_body(2)))
        with harness.connect(self.gw.port) as s:
            s.sendall(reqs)
            rest = b""
            got = []
            for _ in range(4):
                status, headers, body, rest = harness.read_response(s, rest)
                got.append((status, body))
        self.assertEqual([g[0] for g in got], [200, 200, 200, 200])
        self.assertEqual(json.loads(got[0][1])["outputs"][0]["data"], [7, 7, 7, 7])
        self.assertEqual(json.loads(got[1][1])["outputs"][0]["data"], [1.0] * 16)
        self.assertEqual(got[2][1], b"")
        self.assertEqual(json.loads(got[3][1])["outputs"][0]["data"], [2.0] * 16)

    def test_pipelining_byte_by_byte(self):
        reqs = post(b"/v2/models/identity/infer", infer_body(3)) * 2
        with harness.connect(self.gw.port) as s:
            for b in reqs:
                s.send(bytes([b]))
            st1, _, b1, rest = harness.read_response(s)
            st2, _, b2, _ = harness.read_response(s, rest)
        self.assertEqual((st1, st2), (200, 200))
        self.assertEqual(b1, b2)

    def test_malformed_requests(self):
        cases = [
            (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
            (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400),
            (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400),
            (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400),
            (b"GET /v2/health/live HTTP/1.1\nHost: x\r\n\r\n", 400),
            (b"GET /v2/health/live HTTP/2.0\r\nHost: x\r\n\r\n", 505),
            (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n\r\n", 411),
            (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n", 413),
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
            (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20000 + b"\r\n\r\n", 431),
            (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
            (b"GET /v2/health/live HTTP/1.1\r\n\r\n", 400),
        ]
        before = self.gw.metric("infergate_http_rejections_total")
        for raw, want in cases:
            with harness.connect(self.gw.port) as s:
                s.sendall(raw)
                status, _, body, _ = harness.read_response(s)
                self.assertEqual(status, want, raw[:80])
                self.assertIn("error", json.loads(body), raw[:80])
                self.assertTrue(harness.is_closed(s), "connection left open after %r" % raw[:60])
        after = self.gw.metric("infergate_http_rejections_total")
        self.assertEqual(after - before, len(cases))

    def test_error_after_good_request_keeps_order(self):
        with harness.connect(self.gw.port) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/9.9\r\nHost: x\r\n\r\n")
            st1, _, _, rest = harness.read_response(s)
            st2, _, _, _ = harness.read_response(s, rest)
            self.assertEqual((st1, st2), (200, 505))
            self.assertTrue(harness.is_closed(s))

    def test_chunked_body(self):
        body = infer_body(5)
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7)) + b"0\r\n\r\n"
        with harness.connect(self.gw.port) as s:
            s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
            status, _, resp, _ = harness.read_response(s)
        self.assertEqual(status, 200, resp)
        self.assertEqual(json.loads(resp)["outputs"][0]["data"], [5.0] * 16)

    def test_expect_100_continue(self):
        body = infer_body(6)
        with harness.connect(self.gw.port) as s:
            s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            interim = s.recv(100)
            self.assertEqual(interim, b"HTTP/1.1 100 Continue\r\n\r\n")
            s.sendall(body)
            status, _, resp, _ = harness.read_response(s)
        self.assertEqual(status, 200)

    def test_header_timeout_408(self):
        with harness.connect(self.gw.port) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")  # never finished
            t0 = time.time()
            status, _, body, _ = harness.read_response(s)
            self.assertEqual(status, 408)
            self.assertLess(time.time() - t0, 5)
            self.assertTrue(harness.is_closed(s))

    def test_idle_timeout_closes(self):
        with harness.connect(self.gw.port) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            harness.read_response(s)
            self.assertTrue(harness.is_closed(s, timeout=6))

    def test_connection_close_honoured(self):
        with harness.connect(self.gw.port) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                      b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, _, rest = harness.read_response(s)
            self.assertEqual(status, 200)
            self.assertEqual(headers.get("connection"), "close")
            self.assertTrue(harness.is_closed(s))

    def test_half_close_still_answered(self):
        with harness.connect(self.gw.port) as s:
            s.sendall(post(b"/v2/models/identity/infer", infer_body(8)))
            s.shutdown(socket.SHUT_WR)
            status, _, body, _ = harness.read_response(s)
            self.assertEqual(status, 200)
            self.assertTrue(harness.is_closed(s))

    def test_connection_limit(self):
        socks = []
        try:
            refused = 0
            for _ in range(25):
                s = harness.connect(self.gw.port)
                socks.append(s)
            time.sleep(0.3)
            for s in socks:
                s.settimeout(0.2)
                try:
                    data = s.recv(300)
                    if data.startswith(b"HTTP/1.1 503"):
                        head, _, body = data.partition(b"\r\n\r\n")
                        self.assertIn(b"Content-Length: %d" % len(body), head)
                        self.assertIn("max_connections", json.loads(body)["error"])
                        refused += 1
                except socket.timeout:
                    pass
            self.assertEqual(refused, 5)
            self.assertGreaterEqual(self.gw.metric("infergate_connections_refused_total"), 5)
        finally:
            for s in socks:
                s.close()
        time.sleep(0.3)
        self.assertEqual(harness.http_request(self.gw.port, "GET", "/v2/health/live")[0], 200)


if __name__ == "__main__":
    harness.main()
