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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import model_yaml  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401
import dnsstub  # noqa: E402

NAME = "backends.test"


class DnsDiscoveryTest(bf.BackendTestCase):
    def test_answers_change_under_load(self):
        a = self.server(host="127.0.0.2")
        b = self.server(host="127.0.0.3", port=a.port)  # every server shares the port
        c = self.server(host="127.0.0.4", port=a.port)
        dns = dnsstub.DnsStub({NAME: [a.host, b.host]}, ttl=1)
        self.addCleanup(dns.stop)
        extra = "\n".join(["      dns_server: %s" % dns.server, "      dns_refresh_ms: 200",
                           "      dns_min_refresh_ms: 100"])
        gw = self.start_gateway(model_yaml(endpoints=["dns:///%s:%d" % (NAME, a.port)], extra=extra))
        self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 2)

        with bf.ClosedLoopLoad(gw.port) as load:
            time.sleep(1.5)
            n0 = {s.host: s.control("Stats")["infer_requests"] for s in (a, b, c)}
            self.assertGreater(n0[a.host], 0)
            self.assertGreater(n0[b.host], 0)
            self.assertEqual(n0[c.host], 0)
            # One added.
            dns.set(NAME, [a.host, b.host, c.host])
            self.assertTrue(bf.wait_for(lambda: c.control("Stats")["infer_requests"] > 20, timeout=5))
            self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 3)
            # One removed: drained, then it takes nothing more.
            dns.set(NAME, [b.host, c.host])
            self.assertTrue(bf.wait_for(
                lambda: gw.metric("infergate_backend_endpoints", model="remote") == 2, timeout=5))
            time.sleep(0.5)  # its in-flight batches complete
            a_after = a.control("Stats")["infer_requests"]
            # NXDOMAIN for a while: the last good set stays, nothing fails.
            dns.set(NAME, None)
            time.sleep(1.0)
            self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 2)
            dns.set(NAME, [b.host, c.host])
            time.sleep(1.0)
        n1 = {s.host: s.control("Stats")["infer_requests"] for s in (a, b, c)}
        self.assert_none_failed(load)
        self.assertEqual(n1[a.host], a_after)  # no request after the drain
        self.assertGreater(n1[b.host] - n0[b.host], 50)
        self.assertGreater(n1[c.host], 50)
        self.assertGreaterEqual(gw.metric("infergate_backend_dns_resolutions_total", model="remote"), 5)
        self.assertGreaterEqual(gw.metric("infergate_backend_dns_empty_total", model="remote"), 1)
        self.assertEqual(gw.metric("infergate_backend_dns_failures_total", model="remote"), 0)
        # c-ares' calls (UDP sockets, /etc/resolv.conf...) pass the seccomp allowlist.
        self.assertNotIn("seccomp refused", gw.read_log())
        print("dns discovery: %d requests, 0 failed; per server %s" % (len(load.results), n1))


if __name__ == "__main__":
    harness.main()
