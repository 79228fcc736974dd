"""Queue-depth aware picking end to end: infergate (socket mode, backend triton) in front of two
KServe v2 test servers (tests/servers/kserve_server.py) that also serve Triton-style /metrics
(--metrics-port). Each server reports nv_inference_pending_request_count = ModelInfer calls in
progress + a control-settable pending_bias.

Asserts: with a large bias on one server, at least 90% of the batches go to the other (power of
two choices on in-flight batches alone would split two equal servers about 50/50: 90% of 40 or
more batches by chance is below 1e-7; without dynamic_batching each request is one batch); swapping the bias moves the traffic; a metrics URL that
refuses connections leaves its endpoint healthy and serving, with the scrape errors counted in
infergate's /metrics and the gauge at -1; metrics_port fills in the URL of plain endpoints.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401 (unittest's module fixtures)


def model(endpoints, extra=""):
    """The triton model `remote`, without dynamic batching (each request is one batch)."""
    return bf.model_yaml(endpoints=endpoints, batching="", ejection_ms=None, startup_timeout_ms=5000,
                         extra="      max_concurrency: 8\n      metrics_interval_ms: 50\n" + extra)


def refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def batches(server):
    return server.control("Stats")["infer_requests"]


class QueueDepthTest(bf.BackendTestCase):
    def server(self, *args):
        """kserve_server.py with --metrics-port 0."""
        return super().server(*args, metrics_port=0)

    def wait_metric(self, pred, name, timeout=10, **labels):
        deadline = time.time() + timeout
        v = None
        while time.time() < deadline:
            v = self.gw.metric(name, **labels)
            if pred(v):
                return v
            time.sleep(0.05)
        self.fail("%s%r stayed at %r" % (name, labels, v))

    def check_traffic_avoids_bias(self, a, b, on):
        """Once infergate reads the bias on server `on` ("a" or "b") and none on the other, 8x40
        requests: at least 40 batches, 90% of them at the other server."""
        biased, other = (a, b) if on == "a" else (b, a)
        self.wait_metric(lambda v: v == 1000, "infergate_backend_queue_depth", endpoint=biased.address)
        self.wait_metric(lambda v: 0 <= v < 1000, "infergate_backend_queue_depth",
                         endpoint=other.address)
        a0, b0 = batches(a), batches(b)
        self.load(8, 40)
        da, db = batches(a) - a0, batches(b) - b0
        print("bias on %s: a=%d b=%d batches" % (on, da, db))
        self.assertGreaterEqual(da + db, 40)
        self.assertGreaterEqual(db if on == "a" else da, 0.9 * (da + db), (da, db))

    def test_traffic_follows_the_servers_queue_depth(self):
        a, b = self.server("--latency-ms", "3"), self.server("--latency-ms", "3")
        a.control("Set", {"pending_bias": 1000})
        self.start_gateway(model(['{address: "%s", metrics_url: "%s"}' % (s.address, s.metrics_url)
                                  for s in (a, b)]))
        self.check_traffic_avoids_bias(a, b, "a")

        # Swap the bias: the traffic moves to a.
        a.control("Set", {"pending_bias": 0})
        b.control("Set", {"pending_bias": 1000})
        self.check_traffic_avoids_bias(a, b, "b")
        self.assertEqual(self.gw.metric("infergate_backend_metrics_scrape_errors_total",
                                        model="remote"), 0)

    def test_refused_metrics_url_keeps_the_endpoint_serving(self):
        a, b = self.server(), self.server()
        dead = "http://127.0.0.1:%d/metrics" % refused_port()
        # a: a URL that refuses connections; b: a plain entry, its URL from metrics_port.
        self.start_gateway(model(['{address: "%s", metrics_url: "%s"}' % (a.address, dead),
                                  '"%s"' % b.address],
                                 extra="      metrics_port: %d" % b.metrics_port))
        self.wait_metric(lambda v: v >= 3, "infergate_backend_metrics_scrape_errors_total",
                         endpoint=a.address)
        self.wait_metric(lambda v: v >= 0, "infergate_backend_queue_depth", endpoint=b.address)
        a0 = batches(a)
        self.load(4, 20)
        self.assertGreater(batches(a) - a0, 0)  # still picked (on in-flight batches)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", endpoint=a.address), 1)
        self.assertEqual(self.gw.metric("infergate_backend_queue_depth", endpoint=a.address), -1)
        self.assertEqual(self.gw.metric("infergate_backend_metrics_scrape_errors_total",
                                        endpoint=b.address), 0)
        log = self.gw.read_log()
        self.assertIn("cannot read the queue depth of triton endpoint %s from %s" % (a.address, dead),
                      log)
        self.assertEqual(log.count("cannot read the queue depth"), 1, log)  # once, not per scrape


if __name__ == "__main__":
    harness.main()
