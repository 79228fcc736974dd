"""Backend discovery from DNS (docs/BACKENDS.md "Discovery"): a triton model whose endpoints are
`dns:///backends.test:<port>`, answered by a DNS server the test runs on loopback
(tests/integration/dnsstub.py, reached through the model's `dns_server` key). Three KServe test
servers listen on 127.0.0.2/.3/.4, one port. During a closed-loop load run the answer changes:
{.2, .3} -> {.2, .3, .4} (one added) -> {.3, .4} (one removed).

Asserts: zero failed requests; traffic moves (the added server takes requests once added, the
removed one takes none after its drain); the gateway's endpoints gauge follows (2, 3, 2) and its
resolutions counter counts; an NXDOMAIN answer keeps the last good set (counted, no failure).
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import infer, model_yaml  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401
import dnsstub  # noqa: E402

NAME = "backends.test"


class HostServer(bf.TestServer):
    """A kserve test server listening on `ip` (127.0.0.x): every one of them shares the port."""

    def __init__(self, ip, port=0):
        self.ip = ip
        super().__init__("kserve", port=port, args=["--host", ip])

    @property
    def address(self):
        return "%s:%d" % (self.ip, self.port)


class DnsDiscoveryTest(bf.BackendTestCase):
    def test_answers_change_under_load(self):
        a = HostServer("127.0.0.2")
        self.servers.append(a)
        b = HostServer("127.0.0.3", port=a.port)
        self.servers.append(b)
        c = HostServer("127.0.0.4", port=a.port)
        self.servers.append(c)
        dns = dnsstub.DnsStub({NAME: [a.ip, b.ip]}, ttl=1)
        self.addCleanup(dns.stop)
        extra = "\n".join(["      dns_server: %s" % dns.server, "      dns_refresh_ms: 200",
                           "      dns_min_refresh_ms: 100"])
        gw = self.start_gateway(model_yaml(endpoints=["dns:///%s:%d" % (NAME, a.port)], extra=extra))
        self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 2)

        stop = threading.Event()
        results = []
        lock = threading.Lock()

        def client(cid):
            i = 0
            while not stop.is_set():
                vals = [float(cid * 100000 + i)] * 16
                try:
                    st, body = infer(gw.port, "remote", vals)
                    ok = st == 200 and body["outputs"][0]["data"] == vals
                except Exception as e:  # noqa: BLE001
                    st, body, ok = -1, {"error": repr(e)}, False
                with lock:
                    results.append((ok, st, body))
                i += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        try:
            time.sleep(1.5)
            n0 = {s.ip: s.control("Stats")["infer_requests"] for s in (a, b, c)}
            self.assertGreater(n0[a.ip], 0)
            self.assertGreater(n0[b.ip], 0)
            self.assertEqual(n0[c.ip], 0)
            # One added.
            dns.set(NAME, [a.ip, b.ip, c.ip])
            self.assertTrue(bf.wait_for(lambda: c.control("Stats")["infer_requests"] > 20, timeout=5))
            self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 3)
            # One removed: drained, then it takes nothing more.
            dns.set(NAME, [b.ip, c.ip])
            self.assertTrue(bf.wait_for(
                lambda: gw.metric("infergate_backend_endpoints", model="remote") == 2, timeout=5))
            time.sleep(0.5)  # its in-flight batches complete
            a_after = a.control("Stats")["infer_requests"]
            # NXDOMAIN for a while: the last good set stays, nothing fails.
            dns.set(NAME, None)
            time.sleep(1.0)
            self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 2)
            dns.set(NAME, [b.ip, c.ip])
            time.sleep(1.0)
        finally:
            stop.set()
            for t in threads:
                t.join()
        n1 = {s.ip: s.control("Stats")["infer_requests"] for s in (a, b, c)}
        failed = [r for r in results if not r[0]]
        self.assertEqual(failed, [], "%d of %d requests failed" % (len(failed), len(results)))
        self.assertEqual(n1[a.ip], a_after)  # no request after the drain
        self.assertGreater(n1[b.ip] - n0[b.ip], 50)
        self.assertGreater(n1[c.ip], 50)
        self.assertGreaterEqual(gw.metric("infergate_backend_dns_resolutions_total", model="remote"), 5)
        self.assertGreaterEqual(gw.metric("infergate_backend_dns_empty_total", model="remote"), 1)
        self.assertEqual(gw.metric("infergate_backend_dns_failures_total", model="remote"), 0)
        # c-ares' calls (UDP sockets, /etc/resolv.conf...) pass the seccomp allowlist.
        self.assertNotIn("seccomp refused", gw.read_log())
        print("dns discovery: %d requests, 0 failed; per server %s" % (len(results), n1))


if __name__ == "__main__":
    harness.main()
