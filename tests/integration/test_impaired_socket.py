"""An impaired link, both directions: 10,000 KServe v2 requests over 100 keep-alive
connections from the kernel's TCP in a client namespace to infergate in a gateway namespace,
through infergate's own fault injector (tools/impair, `infergate-impair`) dropping 5%,
duplicating 1% and reordering 1% of the TCP segments each way. Every request must complete
with the right body within a bounded time, and the injector's counters must show that the
impairment really happened.

Both hooks sit on the client's veth (egress: client -> gateway; ingress: gateway ->
client), so the same test covers afxdp mode later: the gateway's veth carries infergate's
XDP program, and AF_XDP transmits bypass the gateway's tc egress hook.

    /usr/bin/python3 test_impaired_socket.py --binary build/app/infergate --source . \
        [--mode socket|afxdp] [--impair build/tools/impair/infergate-impair]
(or IG_IMPAIR_MODE=afxdp). ctest runs both: test_impaired_afxdp.py is this test in afxdp mode.
"""
import json
import math
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402


def _take_flag(name, default):
    """Removes `--name value` / `--name=value` from sys.argv (harness/unittest don't know it)."""
    value = default
    out = [sys.argv[0]]
    args = sys.argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == name and i + 1 < len(args):
            value = args[i + 1]
            i += 2
            continue
        if a.startswith(name + "="):
            value = a.split("=", 1)[1]
        else:
            out.append(a)
        i += 1
    sys.argv[:] = out
    return value


MODE = _take_flag("--mode", os.environ.get("IG_IMPAIR_MODE", "socket"))
IMPAIR = _take_flag("--impair", os.environ.get("IG_IMPAIR_BINARY", ""))

CONNECTIONS = 100
REQUESTS = 10000
DROP, DUPLICATE, REORDER = 0.05, 0.01, 0.01
TIME_BOUND_S = 180  # the whole load, 100 connections in parallel

CONFIG = """
mode: {mode}
reactors: {reactors}
listeners: [{{name: http, address: 0.0.0.0, port: 8000, protocol: http}}]
admin: {{address: 127.0.0.1, port: 8002}}
limits: {{max_connections: 1000, idle_timeout_ms: 120000, header_timeout_ms: 60000, body_timeout_ms: 60000}}
logging: {{level: info, access_log: false}}
{xdp}
models:
""" + harness.braces(harness.model_yaml("identity", [1, 16], 0))

# Runs in the client namespace: CONNECTIONS threads, each with one keep-alive connection and
# REQUESTS / CONNECTIONS requests carrying data of its own; checks every response body.
CLIENT = netns.SCRIPT_PATH + r'''
import json, socket, sys, threading, time
host, conns, total, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
per = total // conns
results = {"ok": 0, "failures": [], "max_latency_s": 0.0}
lock = threading.Lock()

from harness import read_response

def worker(c):
    ok, fails, worst = 0, [], 0.0
    try:
        s = socket.create_connection((host, 8000), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        for i in range(per):
            data = [float(c * 100000 + i * 16 + k) for k in range(16)]
            body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                           "data": data}]}).encode()
            req = (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: gw\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
            t0 = time.time()
            s.sendall(req)
            status, _, rbody, buf = read_response(s, buf)
            worst = max(worst, time.time() - t0)
            if status != 200:
                fails.append("conn %d req %d: status %d %r" % (c, i, status, rbody[:200]))
                continue
            out = json.loads(rbody)["outputs"][0]
            if out["name"] != "OUTPUT0" or [float(x) for x in out["data"]] != data:
                fails.append("conn %d req %d: wrong body %r" % (c, i, rbody[:200]))
                continue
            ok += 1
        s.close()
    except Exception as e:  # a timeout or reset: the remaining requests of this connection fail
        fails.append("conn %d after %d ok: %s: %s" % (c, ok, type(e).__name__, e))
    with lock:
        results["ok"] += ok
        results["failures"] += fails
        results["max_latency_s"] = max(results["max_latency_s"], worst)

t0 = time.time()
threads = [threading.Thread(target=worker, args=(c,)) for c in range(conns)]
for t in threads:
    t.start()
for t in threads:
    t.join()
results["elapsed_s"] = time.time() - t0
results["failures"] = results["failures"][:20]
print(json.dumps(results))
'''


def impair_binary():
    if IMPAIR:
        return IMPAIR
    build = os.path.dirname(os.path.dirname(os.path.abspath(harness.ARGS.binary)))
    return os.path.join(build, "tools", "impair", "infergate-impair")


def tcp_stat(net, field):
    """A Tcp: field of /proc/net/snmp in the client namespace."""
    text = net.run_client(["cat", "/proc/net/snmp"]).stdout
    rows = [l.split() for l in text.splitlines() if l.startswith("Tcp:")]
    return int(rows[1][rows[0].index(field)])


class ImpairedLinkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = netns.have_root_and_netns()
        if why:
            raise unittest.SkipTest(why)
        if not os.access(impair_binary(), os.X_OK):
            raise unittest.SkipTest("infergate-impair not built (%s); build target infergate-impair "
                                    "or pass --impair" % impair_binary())
        if MODE not in ("socket", "afxdp"):
            raise AssertionError("--mode must be socket or afxdp, not %r" % MODE)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ig-impair-")
        self.net = netns.VethPair().__enter__()
        if not self.net.bpffs:
            self.net.__exit__(None, None, None)
            self.skipTest("cannot mount a bpffs for the injector's pinned maps")
        self.pin_dir = os.path.join(self.net.bpffs, "impair")

    def tearDown(self):
        self.net.__exit__(None, None, None)
        self.tmp.cleanup()

    def impair(self, *args, check=True):
        return self.net.run_client([impair_binary()] + list(args) + ["--pin-dir", self.pin_dir],
                                   check=check, timeout=30)

    def counters(self, hook):
        r = self.impair("counters", "--dev", self.net.client_if, "--hook", hook, "--json")
        return json.loads(r.stdout)

    def log_tail(self, n=3000):
        with open(self.log_path) as f:
            return f.read()[-n:]

    def gw_metrics(self):
        """infergate's TCP counters (afxdp mode), summed over queues."""
        text = self.net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout
        names = ("infergate_tcp_retransmits_total", "infergate_tcp_out_of_order_total",
                 "infergate_tcp_duplicate_segments_total", "infergate_tcp_accepted_total")
        out = {n: 0.0 for n in names}
        out["bad_tcp_checksum"] = 0.0
        for line in text.splitlines():
            m = re.match(r"(\w+)(?:\{(.*)\})? (\S+)$", line)
            if not m:
                continue
            if m.group(1) in out:
                out[m.group(1)] += float(m.group(3))
            elif m.group(1) == "infergate_tcp_drops_total" and 'reason="bad_tcp_checksum"' in (m.group(2) or ""):
                out["bad_tcp_checksum"] += float(m.group(3))
        return out

    def start_gateway(self):
        net = self.net
        xdp = ""
        if MODE == "afxdp":
            xdp = "xdp: {interface: %s, attach: native}" % net.gw_if
        # afxdp: one reactor per rx queue, and the veth has one rx queue.
        text = CONFIG.format(mode=MODE, xdp=xdp, reactors=1 if MODE == "afxdp" else 2)
        p, self.log_path = netns.start_gateway(net, text, folder=self.tmp.name)
        return p

    def test_requests_complete_through_loss_duplication_and_reordering(self):
        net = self.net
        # Per-segment impairment: no GRO merging in front of the ingress hook (socket mode;
        # afxdp's XDP_TX frames need GRO on the client veth, netns.py's default), no GSO
        # super-packets at the client's egress hook.
        if MODE == "socket":
            net.run_client(["ethtool", "-K", net.client_if, "gro", "off"], check=False)
        net.run_client(["ethtool", "-K", net.client_if, "gso", "off", "tso", "off"], check=False)
        p = self.start_gateway()
        try:
            r = net.run_client(["curl", "-sS", "--max-time", "5", "http://%s:8000/v2/health/ready" % net.gw_ip],
                               check=False)
            self.assertEqual(r.returncode, 0, r.stderr + self.log_tail())
            for hook, seed in (("egress", "11"), ("ingress", "22")):
                out = self.impair("attach", "--dev", net.client_if, "--hook", hook, "--drop", str(DROP),
                                  "--duplicate", str(DUPLICATE), "--reorder", str(REORDER),
                                  "--seed", seed, "--proto", "tcp")
                self.assertIn("attached to %s %s" % (net.client_if, hook), out.stdout)
            tc = net.run_client(["tc", "filter", "show", "dev", net.client_if, "egress"]).stdout
            self.assertIn("ig_impair", tc)
            retrans_before = tcp_stat(net, "RetransSegs")

            r = net.run_client(["/usr/bin/python3", "-c", CLIENT, net.gw_ip, str(CONNECTIONS), str(REQUESTS),
                                "60"], timeout=TIME_BOUND_S + 120, check=False)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            res = json.loads(r.stdout)
            retrans = tcp_stat(net, "RetransSegs") - retrans_before
            egress, ingress = self.counters("egress"), self.counters("ingress")
            print("\n[%s] %d/%d requests ok in %.1fs (slowest %.2fs); client retransmitted %d segments\n"
                  "  client->gw (egress):  %s\n  gw->client (ingress): %s"
                  % (MODE, res["ok"], REQUESTS, res["elapsed_s"], res["max_latency_s"], retrans,
                     json.dumps(egress), json.dumps(ingress)), file=sys.stderr)

            self.assertEqual(res["failures"], [])
            self.assertEqual(res["ok"], REQUESTS)
            self.assertLess(res["elapsed_s"], TIME_BOUND_S)
            for name, c in (("egress", egress), ("ingress", ingress)):
                n = c["matched"]
                self.assertGreaterEqual(n, REQUESTS, (name, c))  # a segment per request each way at least
                for key, p_ in (("dropped", DROP), ("held", (1 - DROP) * REORDER),
                                ("duplicated", (1 - DROP) * (1 - REORDER) * DUPLICATE)):
                    got = c[key] + (c["hold_busy"] + c["hold_skipped"] if key == "held" else 0)
                    sd = math.sqrt(n * p_ * (1 - p_))
                    self.assertLess(abs(got - n * p_), 5 * sd + 1, (name, key, c))
                self.assertGreater(c["released"], 0, (name, c))
                self.assertEqual(c["errors"], 0, (name, c))
            # The loss really reached the client's TCP.
            self.assertGreater(retrans, 0)
            if MODE == "afxdp":
                # ... and infergate's own TCP: it retransmitted, saw duplicates and dropped
                # nothing for a bad checksum. (Out-of-order arrivals stay 0 here: each request
                # is one segment and the client waits for its answer, so a held segment is
                # released behind another connection's, never behind its own.)
                m = self.gw_metrics()
                print("  infergate tcp: %s" % json.dumps(m), file=sys.stderr)
                self.assertGreater(m["infergate_tcp_retransmits_total"], 0, m)
                self.assertGreater(m["infergate_tcp_duplicate_segments_total"], 0, m)
                self.assertGreaterEqual(m["infergate_tcp_accepted_total"], CONNECTIONS, m)
                self.assertEqual(m["bad_tcp_checksum"], 0, m)

            for hook in ("egress", "ingress"):
                self.impair("detach", "--dev", net.client_if, "--hook", hook)
            tc = net.run_client(["tc", "filter", "show", "dev", net.client_if, "egress"]).stdout
            self.assertNotIn("ig_impair", tc)
            self.assertNotEqual(self.impair("counters", "--dev", net.client_if, check=False).returncode, 0)
        finally:
            p.terminate()
            p.wait(timeout=20)
        self.assertEqual(p.returncode, 0, self.log_tail())


if __name__ == "__main__":
    harness.main()
