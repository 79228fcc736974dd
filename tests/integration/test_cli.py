"""The command line: --version, --help, check-config on good and bad files, start-up failures
with a clear sentence, and a clean exit on SIGTERM."""
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def run(*args):
    return subprocess.run([harness.ARGS.binary] + list(args), capture_output=True, text=True, timeout=30)


class CliTest(unittest.TestCase):
    def test_version(self):
        r = run("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^infergate \d+\.\d+\.\d+")

    def test_help_everywhere(self):
        for args in (["--help"], ["run", "--help"], ["check-config", "--help"]):
            r = run(*args)
            self.assertEqual(r.returncode, 0, args)
            self.assertIn("--help", r.stdout)

    def test_check_config_examples(self):
        ex = os.path.join(harness.ARGS.source, "config", "examples")
        files = sorted(f for f in os.listdir(ex) if f.endswith(".yaml"))
        self.assertTrue(files)
        for f in files:
            r = run("check-config", "-c", os.path.join(ex, f))
            self.assertEqual(r.returncode, 0, (f, r.stderr))
            self.assertIn("OK", r.stdout)

    def test_check_config_bad(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(harness.BASE_CONFIG.format(reactors=1, max_header_bytes=1, max_body_bytes=1,
                                               max_connections=1, idle_timeout_ms=1, header_timeout_ms=1,
                                               body_timeout_ms=1, slow_us=0).replace("FP32", "FP33", 1))
        try:
            r = run("check-config", "-c", f.name)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f.name, r.stderr)
            self.assertIn("datatype", r.stderr)
            self.assertIn("FP33", r.stderr)
            r = run("run", "-c", f.name)
            self.assertEqual(r.returncode, 2)
            self.assertIn("FP33", r.stderr)
        finally:
            os.unlink(f.name)

    def test_print_config_roundtrip(self):
        r = run("print-config")
        self.assertEqual(r.returncode, 0)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(r.stdout)
        try:
            self.assertEqual(run("check-config", "-c", f.name).returncode, 0)
        finally:
            os.unlink(f.name)

    def test_port_in_use_is_a_clear_error(self):
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        try:
            text = harness.BASE_CONFIG.format(reactors=1, max_header_bytes=16384, max_body_bytes=1000,
                                              max_connections=10, idle_timeout_ms=1000, header_timeout_ms=1000,
                                              body_timeout_ms=1000, slow_us=0)
            text = text.replace("port: 0", "port: %d" % port, 1)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(text)
            r = run("run", "-c", f.name)
            os.unlink(f.name)
            self.assertEqual(r.returncode, 1)
            self.assertIn("Address already in use", r.stdout + r.stderr)
            self.assertIn("listeners", r.stdout + r.stderr)
        finally:
            blocker.close()

    def test_sigterm_drains_and_exits_zero(self):
        gw = harness.Gateway()
        self.assertEqual(harness.http_request(gw.port, "GET", "/v2/health/live")[0], 200)
        # A request in flight on the slow model (50 ms) is answered during the drain.
        s = harness.connect(gw.port)
        body = b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
        s.sendall(b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        import time
        time.sleep(0.01)
        rc = gw.stop()
        status, _, _, _ = harness.read_response(s)
        s.close()
        self.assertEqual(status, 200)
        self.assertEqual(rc, 0)
        self.assertIn("stopped", gw.read_log())


if __name__ == "__main__":
    harness.main()
