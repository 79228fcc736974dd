"""HTTP/2 limits of our own against a real gateway (issue 13, item 2; docs/PROTOCOLS.md).

Raw HTTP/2 bytes from the kernel's TCP to a grpc listener with short timeouts
(limits.header_timeout_ms 500, body_timeout_ms 800):
  - a HEADERS frame without END_STREAM and then silence: the stream ends (Trailers-Only,
    DEADLINE_EXCEEDED, counted as 504 in infergate_requests_total) and RST_STREAM, the
    connection still answers PING;
  - a HEADERS frame without END_HEADERS and then silence: GOAWAY ENHANCE_YOUR_CALM and close;
  - both counted in infergate_http_rejections_total.
"""
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_grpc_api import (HEADERS, PING, PREFACE, RST, SETTINGS,  # noqa: E402
                           frame, goaway_code, grpc_headers, read_frames)

ENHANCE_YOUR_CALM = 11


class Http2LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = harness.Gateway(template=harness.GRPC_CONFIG, header_timeout_ms=500,
                                 body_timeout_ms=800, slow_us=1000)
        m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", cls.gw.read_log())
        assert m, cls.gw.read_log()
        cls.port = int(m.group(1))

    @classmethod
    def tearDownClass(cls):
        rc = cls.gw.stop()
        assert rc == 0, "infergate exited with %d:\n%s" % (rc, cls.gw.read_log())

    def rejections(self, reason):
        return self.gw.metric("infergate_http_rejections_total", reason=reason)

    def test_silent_stream_is_ended_and_the_connection_goes_on(self):
        before = self.rejections("http2_stream_timeout")
        before_504 = self.gw.metric("infergate_requests_total", protocol="kserve_grpc", code="504")
        s = harness.connect(self.port)
        try:
            s.sendall(PREFACE + frame(SETTINGS, 0, 0, b"") +
                      frame(HEADERS, 4, 1, grpc_headers(b"/inference.GRPCInferenceService/ModelInfer")))
            t0 = time.time()
            frames, closed = read_frames(s, timeout=5, until=lambda fr: any(
                t == RST and sid == 1 for t, _, sid, _ in fr))
            waited = time.time() - t0
            self.assertFalse(closed)
            ends = [p for t, fl, sid, p in frames if t == HEADERS and sid == 1 and fl & 1]
            self.assertTrue(ends, "no answer on the silent stream: %r" % frames)
            self.assertTrue(any(t == RST and sid == 1 for t, _, sid, _ in frames), frames)
            self.assertGreater(waited, 0.5)  # not before the timeout (800 ms, 100 ms ticks)
            self.assertLess(waited, 3.0)
            s.sendall(frame(PING, 0, 0, b"still-ok"))
            frames, _ = read_frames(s, until=lambda fr: any(t == PING for t, _, _, _ in fr))
            self.assertTrue(any(t == PING and p == b"still-ok" for t, _, _, p in frames), frames)
        finally:
            s.close()
        self.assertEqual(self.rejections("http2_stream_timeout"), before + 1)
        # Answered DEADLINE_EXCEEDED (recorded with the HTTP status it maps to, 504).
        self.assertEqual(self.gw.metric("infergate_requests_total", protocol="kserve_grpc",
                                        code="504"), before_504 + 1)

    def test_unfinished_header_block_ends_the_connection(self):
        before = self.rejections("http2_header_timeout")
        s = harness.connect(self.port)
        try:
            s.sendall(PREFACE + frame(SETTINGS, 0, 0, b"") +
                      frame(HEADERS, 0, 1, grpc_headers()))  # no END_HEADERS, no CONTINUATION
            t0 = time.time()
            frames, closed = read_frames(s, timeout=5)
            self.assertTrue(closed, "connection held by an unfinished header block")
            self.assertEqual(goaway_code(frames), ENHANCE_YOUR_CALM, frames)
            self.assertLess(time.time() - t0, 3.0)
        finally:
            s.close()
        self.assertEqual(self.rejections("http2_header_timeout"), before + 1)


if __name__ == "__main__":
    harness.main()
