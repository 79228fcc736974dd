"""`infergate top` against a running gateway (docs/OPERATIONS.md): --once output (the model
row's name and a nonzero rate, errors by code), the live view inside tmux at a fixed size
(capture-pane: the row, the width; q and Ctrl-C quit and the terminal comes back: the shell's
screen, echo and canonical mode), and the admin client's bounds against hostile admin ports (an
oversized body, a trickle, escape sequences in label values)."""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BODY = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                               "data": [0.5] * 16}]}).encode()
ESC = "\x1b"


class Load(threading.Thread):
    """Keep-alive KServe requests to `identity` (about 200/s) plus one unknown model (404) in
    ten, until stop()."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.done = threading.Event()
        self.ok = 0
        self.errors = []

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        i = 0
        while not self.done.is_set():
            model = "nope" if i % 10 == 9 else "identity"
            try:
                conn.request("POST", "/v2/models/%s/infer" % model, BODY,
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    self.ok += 1
            except Exception as e:  # noqa: BLE001 (reported by the test)
                self.errors.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            i += 1
            time.sleep(0.005)
        conn.close()

    def stop(self):
        self.done.set()
        self.join(10)


def top_cmd(admin_port, *extra):
    return [harness.ARGS.binary, "top", "--admin", "127.0.0.1:%d" % admin_port] + list(extra)


def model_row(text, model, protocol="kserve_http"):
    """The cells of the MODEL table row for (model, protocol), or None."""
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == model and cells[1] == protocol:
            return cells
    return None


def rate(cell):
    m = re.fullmatch(r"([0-9.]+)([kMG]?)", cell)
    assert m, cell
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def setUpModule():
    global GW, LOAD
    GW = harness.Gateway()
    LOAD = Load(GW.port)
    LOAD.start()


def tearDownModule():
    LOAD.stop()
    GW.stop()


class TopOnceTest(unittest.TestCase):
    def test_once_shows_the_model_rate_and_errors(self):
        r = subprocess.run(top_cmd(GW.admin_port, "--once", "--interval-ms", "500"),
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertNotIn(ESC, out)  # not a tty: no escape sequences
        self.assertRegex(out.splitlines()[0], r"^infergate top  127\.0\.0\.1:%d " % GW.admin_port)
        row = model_row(out, "identity")
        self.assertIsNotNone(row, out)
        self.assertGreater(rate(row[2]), 20, out)  # ~180/s are sent
        self.assertRegex(row[3], r"^[0-9.]+(us|ms|s)$")  # p50
        self.assertRegex(row[4], r"^[0-9.]+(us|ms|s)$")  # p99
        # The unknown model's 404s: a row without a model, its errors by code.
        none = model_row(out, "(none)")
        self.assertIsNotNone(none, out)
        self.assertGreater(rate(none[5]), 0, out)
        self.assertRegex(none[6], r"^404:[0-9.]+$")
        # The batcher line for identity: batches/s > 0, the queue depth per level.
        b = [l for l in out.splitlines() if l.startswith("identity ") and "L1:" in l]
        self.assertEqual(len(b), 1, out)
        self.assertGreater(rate(b[0].split()[1]), 0, out)
        # Socket mode: no XDP, TCP, AF_XDP or GPU lines.
        self.assertNotRegex(out, r"(?m)^(XDP|TCP|AF_XDP|GPU) ")

    def test_sort_by_name_and_columns(self):
        r = subprocess.run(top_cmd(GW.admin_port, "--once", "--interval-ms", "200", "--sort",
                                   "name"), capture_output=True, text=True, timeout=20,
                           env=dict(os.environ, COLUMNS="64"))
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("sort: name", lines[0])
        for line in lines:
            self.assertLessEqual(len(line), 64, line)
        start = lines.index(next(l for l in lines if l.startswith("MODEL ")))
        end = lines.index("", start)
        names = [l.split()[0] for l in lines[start + 1:end]]
        self.assertEqual(names, ["(none)", "identity"])  # by name, not by rate
        bad = subprocess.run(top_cmd(GW.admin_port, "--once", "--sort", "bogus"),
                             capture_output=True, text=True, timeout=10)
        self.assertNotEqual(bad.returncode, 0)

    def test_no_gateway_is_a_clear_error(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        r = subprocess.run(top_cmd(port, "--once", "--interval-ms", "100"),
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot connect to the admin listener at 127.0.0.1:%d" % port, r.stderr)


class HostileAdmin(threading.Thread):
    """A listener that answers every connection with `respond(sock)`."""

    def __init__(self, respond):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.respond = respond
        self.start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                c.recv(4096)
                self.respond(c)
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.sock.close()


class TopHostileAdminTest(unittest.TestCase):
    def run_once(self, respond, timeout=15):
        srv = HostileAdmin(respond)
        try:
            t0 = time.time()
            r = subprocess.run(top_cmd(srv.port, "--once", "--interval-ms", "100"),
                               capture_output=True, text=True, timeout=timeout)
            return r, time.time() - t0
        finally:
            srv.close()

    def test_oversized_body_is_refused(self):
        def respond(c):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n")
            chunk = b"x 1\n" * 16384
            try:
                for _ in range(33554432 // len(chunk)):
                    c.sendall(chunk)
            except OSError:
                pass
        r, _ = self.run_once(respond)
        self.assertEqual(r.returncode, 1)
        self.assertIn("larger than 16777216 bytes", r.stderr)

    def test_trickling_peer_times_out(self):
        def respond(c):
            c.sendall(b"HTTP/1.1 200 OK\r\n")
            for _ in range(60):  # a byte every 100 ms, for longer than the 2 s deadline
                time.sleep(0.1)
                c.sendall(b"X")
        r, took = self.run_once(respond)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no complete response within 2000 ms", r.stderr)
        self.assertLess(took, 5.5)

    def test_escape_sequences_in_labels_are_not_printed(self):
        body = ('infergate_requests_total{code="200",model="evil\x1b[2J\x1b]0;x\x07",'
                'protocol="kserve_http"} 5\n').encode()

        def respond(c):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        r, _ = self.run_once(respond)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("evil?[2J?]0;x?", r.stdout)
        self.assertFalse(any(ord(ch) < 0x20 and ch != "\n" for ch in r.stdout), repr(r.stdout))


@unittest.skipUnless(shutil.which("tmux"), "needs tmux (scripts/install-deps.sh installs it)")
class TopTmuxTest(unittest.TestCase):
    WIDTH, HEIGHT = 100, 30

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="infergate-top-")
        # A tmux server of its own per test (a name reused right after kill-server can meet the
        # old server still exiting: "server exited unexpectedly").
        self.sock = "ig-top-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
        # A plain shell at a fixed size; its own tmux server (-L), so nothing else is touched.
        self.tmux("new-session", "-d", "-s", "top", "-x", str(self.WIDTH), "-y", str(self.HEIGHT),
                  "env", "PS1=$ ", "bash", "--norc", "--noprofile")
        self.tmux("set-option", "-t", "top", "status", "off")

    def tearDown(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)
        self.tmp.cleanup()

    def tmux(self, *args):
        r = subprocess.run(["tmux", "-L", self.sock] + list(args), capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(r.returncode, 0, (args, r.stderr))
        return r.stdout

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "top")

    def wait_screen(self, pred, what, timeout=10):
        deadline = time.time() + timeout
        s = ""
        while time.time() < deadline:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.1)
        self.fail("timed out waiting for %s; the pane:\n%s" % (what, s))

    def stty(self, name):
        path = os.path.join(self.tmp.name, name)
        self.tmux("send-keys", "-t", "top", "stty -a > %s" % path, "Enter")
        deadline = time.time() + 5
        while time.time() < deadline:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                time.sleep(0.05)
                with open(path) as f:
                    return f.read()
            time.sleep(0.05)
        self.fail("stty did not run; the pane:\n" + self.screen())

    def run_view_and_quit(self, key):
        before = self.stty("before")
        self.assertRegex(before, r"(?<!-)icanon")
        self.assertRegex(before, r"(?<!-)echo ")
        self.tmux("send-keys", "-t", "top",
                  " ".join(top_cmd(GW.admin_port, "--interval-ms", "300")), "Enter")

        def live(s):
            row = model_row(s, "identity")
            return row is not None and row[2] != "-" and rate(row[2]) > 0
        s = self.wait_screen(live, "the identity row with a rate")
        lines = s.split("\n")
        self.assertTrue(lines[0].startswith("infergate top  127.0.0.1:%d" % GW.admin_port), s)
        for line in lines:
            self.assertLessEqual(len(line), self.WIDTH)
        self.assertIn("q quit", s)
        # Press the key; the alternate screen goes away and the shell's screen is back.
        self.tmux("send-keys", "-t", "top", key)
        s = self.wait_screen(lambda s: "infergate top  " not in s, "the view to close")
        self.assertIn("stty -a > ", s)
        # The shell again, with echo and canonical input restored.
        after = self.stty("after")
        self.assertEqual(after, before)
        self.assertEqual(self.tmux("display-message", "-p", "-t", "top",
                                   "#{pane_current_command}").strip(), "bash")

    def test_q_quits_and_restores_the_terminal(self):
        self.run_view_and_quit("q")

    def test_ctrl_c_quits_and_restores_the_terminal(self):
        self.run_view_and_quit("C-c")


if __name__ == "__main__":
    harness.main()
