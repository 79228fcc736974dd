"""Slow readers and output memory (issue 13, item 3) against the real binary, with the kernel's
TCP as the client: a client with a tiny SO_RCVBUF that pipelines requests for large responses
and never reads must not pin the gateway's memory. It is reset once it has drained less than
limits.min_drain_bytes in limits.send_timeout_ms, the counter moves, the output gauge never
goes far past limits.max_output_bytes_per_connection and returns to 0, and other clients are
served all along.

- socket mode: on loopback (no privileges needed);
- afxdp mode: the same client in a network namespace across a veth pair to infergate's own TCP
  stack (skips without root, namespaces or the XDP build).

    /usr/bin/python3 test_slow_reader.py --binary build/app/infergate --source .
"""
import contextlib
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hostile  # noqa: E402
import netns  # noqa: E402

PER_CONN = 4 << 20  # limits.max_output_bytes_per_connection: reading pauses at 2 MiB
SEND_TIMEOUT_MS = 2000
N_FLOATS = 65536    # one request ~128 KiB of JSON, its answer ~256 KiB

LIMITS = ("limits: {{max_body_bytes: 4194304, idle_timeout_ms: 60000, send_timeout_ms: {t}, "
          "min_drain_bytes: 65536, max_output_bytes_per_connection: {pc}, "
          "max_output_bytes: {pp}}}\n")
# IG_SLOW_READER_OFF=1 runs the same scenario with every limit off (what the gateway did before
# issue 13): the test then fails, and prints what one slow reader pins.
OFF = os.environ.get("IG_SLOW_READER_OFF") == "1"


def limits():
    if OFF:
        return LIMITS.format(t=0, pc=0, pp=0)
    return LIMITS.format(t=SEND_TIMEOUT_MS, pc=PER_CONN, pp=64 << 20)

MODELS = "models:\n" + harness.IDENTITY_MODEL + harness.model_yaml("big", [-1], 0)

SOCKET_CONFIG = harness.loopback_head()

AFXDP_CONFIG = """mode: afxdp
reactors: 1
listeners: [{{name: http, address: 0.0.0.0, port: 8000, protocol: http}}]
admin: {{address: 127.0.0.1, port: 8002}}
xdp: {{interface: {ifname}, attach: native, methods: [GET, POST], path_prefixes: ["/v2/"]}}
"""

BIG_BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [N_FLOATS], "datatype": "FP32",
                                   "data": [1] * N_FLOATS}]}).encode()
BIG_REQUEST = (b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % len(BIG_BODY)) + BIG_BODY
SMALL_BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                     "data": [2] * 16}]}).encode()


def slow_client(connect, requests=40):
    """A client with a 4 KiB receive buffer that pipelines `requests` large requests from a
    thread and never reads. Returns (socket, thread)."""
    def make():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        return s
    s = connect(make)

    def pump():
        try:
            for _ in range(requests):
                s.sendall(BIG_REQUEST)
        except OSError as e:
            t.error = e  # reset by the gateway, as it should be
    t = threading.Thread(target=pump, daemon=True)
    t.error = None
    t.start()
    return s, t


def well_behaved(connect_plain, n=20):
    """n keep-alive requests on a fresh connection; returns the statuses."""
    s = connect_plain()
    statuses = []
    with s:
        s.settimeout(5)
        for _ in range(n):
            s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d"
                      b"\r\n\r\n" % len(SMALL_BODY) + SMALL_BODY)
            st, _, body, _ = harness.read_response(s)
            statuses.append(st)
    return statuses


def reset_seen(s, timeout):
    """Reads everything the gateway sent; True when the connection ends in a reset."""
    s.settimeout(timeout)
    try:
        while s.recv(1 << 16):
            pass
        return False
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class Checks:
    """What both modes must show; `metrics()` returns the admin /metrics text."""

    timeout_metric = None  # the send-timeout counter's name in this mode

    def run_scenario(self, connect, connect_plain, metrics, pid):
        def m(name, **labels):
            return harness.parse_metric(metrics(), name, **labels)
        before = m(self.timeout_metric)
        rss0 = hostile.rss_kib(pid)
        peak_rss = rss0
        s, pump = slow_client(connect)
        t0 = time.time()
        peak = 0.0
        served = []
        closed_at = None
        while time.time() - t0 < SEND_TIMEOUT_MS / 1000.0 + 8:
            text = metrics()
            peak = max(peak, harness.parse_metric(text, "infergate_output_bytes"))
            peak_rss = max(peak_rss, hostile.rss_kib(pid))
            if not served and time.time() - t0 > 0.5:
                served = well_behaved(connect_plain)  # while the slow client is stuck
            if harness.parse_metric(text, self.timeout_metric) > before:
                closed_at = time.time() - t0
                break
            time.sleep(0.05)
        print("slow reader %s; peak infergate_output_bytes %d; gateway RSS %d KiB -> peak %d KiB"
              % ("reset after %.2f s" % closed_at if closed_at else "never reset", peak, rss0,
                 peak_rss))
        self.assertIsNotNone(closed_at, "the slow reader was not closed:\n" + metrics())
        self.assertGreaterEqual(closed_at, SEND_TIMEOUT_MS / 1000.0 - 0.1)
        self.assertEqual(served, [200] * 20)
        # Reading paused at half the connection's budget; nothing near the old unbounded queue
        # (40 x 256 KiB).
        self.assertGreater(peak, 0)
        self.assertLessEqual(peak, PER_CONN + (512 << 10))
        # The reset reaches the client's socket once; whichever of its reader and its writer
        # thread asks first gets the error.
        reset = reset_seen(s, 5)
        pump.join(5)
        self.assertTrue(reset or isinstance(pump.error, ConnectionResetError),
                        "no reset seen (writer: %r)" % pump.error)
        s.close()
        deadline = time.time() + 3
        while m("infergate_output_bytes") != 0 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(m("infergate_output_bytes"), 0)
        self.assertEqual(well_behaved(connect_plain, 3), [200] * 3)  # still serving
        return m


    def run_late_reader(self, connect, n=100):
        """A client that pipelines n requests without reading, then reads: every answer must
        come. The sessions pause reading while 8 MiB are queued; before issue 13 nothing made
        them look again once the transport had drained, and the rest of the requests were
        never read (the client waited for the idle timeout)."""
        s, pump = slow_client(connect, n)
        time.sleep(2)
        s.settimeout(10)
        rest = b""
        for i in range(n):
            try:
                st, _, _, rest = harness.read_response(s, rest)
            except socket.timeout:
                self.fail("answer %d of %d never came" % (i + 1, n))
            self.assertEqual(st, 200)
        pump.join(5)
        self.assertIsNone(pump.error)
        s.sendall(BIG_REQUEST)
        st, _, _, _ = harness.read_response(s, rest)
        self.assertEqual(st, 200)
        s.close()


class SocketModeTest(Checks, unittest.TestCase):
    timeout_metric = "infergate_send_timeouts_total"

    @contextlib.contextmanager
    def gateway(self, limits_yaml):
        """A socket-mode gateway with these limits, for the body of a `with`, which gets it and
        connect(make): a socket from make() connected to it. Its exit code must be 0."""
        gw = harness.Gateway(config_text=SOCKET_CONFIG + limits_yaml + MODELS)

        def connect(make):
            s = make()
            s.connect(("127.0.0.1", gw.port))
            return s
        try:
            yield gw, connect
        finally:
            rc = gw.stop()
        self.assertEqual(rc, 0, gw.read_log()[-3000:])

    def test_never_reading_client_is_reset_and_others_are_served(self):
        with self.gateway(limits()) as (gw, connect):
            m = self.run_scenario(connect, lambda: harness.connect(gw.port), gw.metrics,
                                  gw.proc.pid)
            self.assertGreater(m("infergate_output_discarded_bytes_total"), 0)
            self.assertGreaterEqual(m("infergate_output_read_pauses_total"), 1)

    def test_client_that_reads_late_gets_every_answer(self):
        with self.gateway("limits: {max_body_bytes: 4194304}\n") as (_, connect):
            self.run_late_reader(connect)


class AfXdpModeTest(Checks, netns.VethTestCase):
    tmp_prefix = "ig-slow-reader-"
    timeout_metric = "infergate_tcp_send_timeouts_total"

    def test_never_reading_client_is_reset_and_others_are_served(self):
        net = self.net
        p, logpath = netns.start_gateway(net, AFXDP_CONFIG.format(ifname=net.gw_if) + limits() + MODELS,
                                         expect_start=False, what="infergate (afxdp)")
        try:
            text = hostile.read_log(logpath)
            if "serving" not in text:
                if "needs a build with" in text:
                    self.skipTest("afxdp mode needs the XDP build: " + text[-300:])
                self.fail("infergate (afxdp) did not start:\n" + text[-3000:])

            def connect(make):
                with hostile.in_netns(net.client_ns):
                    s = make()
                s.settimeout(10)
                s.connect((net.gw_ip, 8000))
                return s

            def connect_plain():
                with hostile.in_netns(net.client_ns):
                    s = socket.create_connection((net.gw_ip, 8000), timeout=5)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return s
            m = self.run_scenario(connect, connect_plain, lambda: hostile.metrics_text(net), p.pid)
            self.assertGreater(m("infergate_tcp_output_discarded_bytes_total"), 0)
        finally:
            rc = hostile.stop_gateway(p)
        self.assertEqual(rc, 0, hostile.read_log(logpath)[-3000:])


if __name__ == "__main__":
    harness.main()
