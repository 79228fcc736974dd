"""A short keep-alive load with wrk (a real HTTP/1.1 client): no errors, and every request
wrk completed is counted by infergate's /metrics."""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class WrkLoadTest(unittest.TestCase):
    def test_keepalive_load(self):
        gw = harness.Gateway(reactors=2)
        try:
            before = gw.metric("infergate_requests_total", model="identity", code="200")
            script = os.path.join(harness.ARGS.source, "bench", "wrk", "infer.lua")
            out = subprocess.run(["wrk", "-t", "1", "-c", "16", "-d", "2s", "-s", script, gw.url("/")],
                                 capture_output=True, text=True, timeout=60).stdout
            m = re.search(r"WRK_JSON (\{.*\})", out)
            self.assertIsNotNone(m, out)
            r = json.loads(m.group(1))
            self.assertGreater(r["requests"], 100, out)
            self.assertEqual(r["errors"], 0, out)
            after = gw.metric("infergate_requests_total", model="identity", code="200")
            # wrk counts completed responses; requests in flight at its stop may also be answered.
            self.assertGreaterEqual(after - before, r["requests"])
            self.assertLessEqual(after - before, r["requests"] + 16)
            self.assertGreaterEqual(gw.metric("infergate_connections_total"), 16)
        finally:
            rc = gw.stop()
        self.assertEqual(rc, 0, gw.read_log())


if __name__ == "__main__":
    harness.main()
