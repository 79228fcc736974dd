"""Dynamic batching end to end: many concurrent keep-alive clients at mixed priorities against
the identity model with a cost model (8000 us + 100 us per item per batch, one stream).

Asserts: batches form (batch-size histogram from /metrics), priority level 1 waits less than
level 2 under load, expired requests get 503 {"error": "Request timeout expired"}, and every
request gets exactly one response.

Needs the `dynamic_batching` model keys wired into the config loader (docs/BATCHING.md); with
a binary that does not know them the tests skip, saying so.
"""
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CONFIG = "\n" + harness.loopback_head(reactors=2) + """\
logging: {level: info, access_log: false}
models:
""" + harness.model_yaml("batched", [16], 8, version="1", backend=True, extra="""\
    identity: {fixed_us: 8000, per_item_us: 100}
    dynamic_batching:
      max_queue_delay_us: 500
      priority_levels: 2
      default_priority_level: 2
      overload_status: 503
      default_queue_policy: {max_queue_size: 0, default_timeout_us: 0,
                             allow_timeout_override: true, timeout_action: REJECT}
""") + harness.model_yaml("slow", [4], 1, version="1", backend=True, extra="""\
    identity: {fixed_us: 200000, per_item_us: 0}
    dynamic_batching:
      priority_levels: 1
      default_queue_policy: {default_timeout_us: 0, allow_timeout_override: true,
                             timeout_action: REJECT}
""")


def infer_body(model_cols, req_id, priority=None, timeout_us=None, value=1.0):
    params = {}
    if priority is not None:
        params["priority"] = priority
    if timeout_us is not None:
        params["timeout"] = timeout_us
    body = {"id": req_id,
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, model_cols],
                        "data": [value + i for i in range(model_cols)]}]}
    if params:
        body["parameters"] = params
    return json.dumps(body).encode()


def post(sock, model, body, headers=None):
    extra = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
    req = ("POST /v2/models/%s/infer HTTP/1.1\r\nHost: localhost\r\n"
           "Content-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
           % (model, extra, len(body)))
    sock.sendall(req.encode() + body)


class BatchingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            cls.gw = harness.Gateway(config_text=CONFIG)
        except RuntimeError as e:
            if "dynamic_batching" in str(e):
                raise unittest.SkipTest("this infergate build does not accept the "
                                        "models[].dynamic_batching config keys yet (needs the "
                                        "batcher wired into config/ and app/server.cc)")
            raise

    @classmethod
    def tearDownClass(cls):
        rc = cls.gw.stop()
        assert rc == 0, "infergate exited with %d:\n%s" % (rc, cls.gw.read_log())

    def hist(self, name, **labels):
        return (self.gw.metric(name + "_count", **labels), self.gw.metric(name + "_sum", **labels))

    def run_clients(self, clients, per_client, priority_of, via_header=False):
        """Closed-loop keep-alive clients; returns per-priority latencies and response tallies."""
        lock = threading.Lock()
        lat = {}
        statuses = {}
        mismatched = []
        extra = []

        def client(c):
            prio = priority_of(c)
            with harness.connect(self.gw.port, timeout=30) as s:
                buf = b""
                for i in range(per_client):
                    rid = "c%d-%d" % (c, i)
                    t0 = time.monotonic()
                    if via_header:  # x-infergate-priority only, no KServe parameter
                        post(s, "batched", infer_body(16, rid, value=float(c)),
                             {"x-infergate-priority": str(prio)})
                    else:
                        post(s, "batched", infer_body(16, rid, priority=prio, value=float(c)))
                    status, _, body, buf = harness.read_response(s, buf)
                    dt = time.monotonic() - t0
                    with lock:
                        statuses[status] = statuses.get(status, 0) + 1
                        lat.setdefault(prio, []).append(dt)
                        if status == 200:
                            out = json.loads(body)
                            if out.get("id") != rid or out["outputs"][0]["data"][0] != float(c):
                                mismatched.append((rid, out.get("id")))
                # Exactly one response per request: nothing more arrives on the connection.
                s.settimeout(0.2)
                try:
                    more = buf + s.recv(65536)
                except socket.timeout:
                    more = buf
                if more:
                    with lock:
                        extra.append((c, more[:80]))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads), "clients hung")
        self.assertEqual(mismatched, [], "responses carried another request's id or data")
        self.assertEqual(extra, [], "bytes after the last response: a request answered twice")
        return lat, statuses

    def test_1_batches_form_and_every_request_gets_one_response(self):
        before_count, before_sum = self.hist("infergate_batcher_batch_size", model="batched")
        clients, per_client = 24, 20
        _, statuses = self.run_clients(clients, per_client, lambda c: 1 + c % 2)
        self.assertEqual(statuses, {200: clients * per_client})
        count, rows = self.hist("infergate_batcher_batch_size", model="batched")
        batches, rows = count - before_count, rows - before_sum
        self.assertEqual(rows, clients * per_client, "every request ran in exactly one batch")
        # 24 closed-loop clients against an 8.8 ms / 8-item batch: batches should be mostly full.
        self.assertLess(batches, clients * per_client / 3.0,
                        "average batch size %.2f" % (rows / max(batches, 1)))
        singles = self.gw.metric("infergate_batcher_batch_size_bucket", model="batched", le="1")
        self.assertLess(singles, batches)

    def queue_times(self):
        """Per priority level: (count, sum) of the batched model's queue-time histogram."""
        return {lvl: self.hist("infergate_batcher_queue_time_seconds", model="batched",
                               level=str(lvl)) for lvl in (1, 2)}

    def check_level_1_waits_less(self, via_header):
        """32 clients, a quarter at priority 1 (the KServe parameter, or the header): offered
        load is above what one stream serves at max batch 8, so the level-2 queue stays long;
        level 1 must wait less in the queue and at the client. The batch costs 8.8 ms so that the
        model, not the Python clients, is the bottleneck even on a busy machine: at 2.8 ms the
        level-2 queue was only 2.4-3x level 1's (this asserts 2x; it failed under heavy contention),
        at 8.8 ms it is 3.1-3.4x (6 runs beside a running CI)."""
        base = self.queue_times()
        lat, statuses = self.run_clients(32, 15, lambda c: 1 if c % 4 == 0 else 2,
                                         via_header=via_header)
        self.assertEqual(statuses, {200: 32 * 15})
        now = self.queue_times()
        mean = {}
        for lvl in (1, 2):
            n = now[lvl][0] - base[lvl][0]
            if via_header:
                # 8 header-level-1 clients x 15, 24 level-2 clients x 15: the header chose the level.
                self.assertEqual(n, (8 if lvl == 1 else 24) * 15, "requests at level %d" % lvl)
            else:
                self.assertGreater(n, 0)
            mean[lvl] = (now[lvl][1] - base[lvl][1]) / n
        self.assertLess(mean[1] * 2, mean[2], "queue time per level (s): %r" % mean)
        client_mean = {p: sum(v) / len(v) for p, v in lat.items()}
        self.assertLess(client_mean[1], client_mean[2], "client latency per level: %r" % client_mean)

    def test_2_high_priority_waits_less_under_load(self):
        self.check_level_1_waits_less(via_header=False)

    def queue_counts(self):
        return {lvl: self.gw.metric("infergate_batcher_queue_time_seconds_count",
                                    model="batched", level=str(lvl)) for lvl in (1, 2)}

    def test_2b_header_priority_waits_less_under_load(self):
        self.check_level_1_waits_less(via_header=True)

    def test_2c_parameter_wins_over_header_and_bad_header_is_400(self):
        with harness.connect(self.gw.port, timeout=10) as s:
            before = self.queue_counts()
            post(s, "batched", infer_body(16, "p1", priority=1), {"x-infergate-priority": "2"})
            status, _, _, buf = harness.read_response(s)
            self.assertEqual(status, 200)
            after = self.queue_counts()
            self.assertEqual((after[1] - before[1], after[2] - before[2]), (1, 0))
            post(s, "batched", infer_body(16, "h1"), {"x-infergate-priority": "1"})
            status, _, _, buf = harness.read_response(s, buf)
            self.assertEqual(status, 200)
            after2 = self.queue_counts()
            self.assertEqual((after2[1] - after[1], after2[2] - after[2]), (1, 0))
            post(s, "batched", infer_body(16, "bad"), {"x-infergate-priority": "urgent"})
            status, _, body, buf = harness.read_response(s, buf)
            self.assertEqual(status, 400)
            self.assertIn("x-infergate-priority", json.loads(body)["error"])
            self.assertEqual(self.queue_counts(), after2, "a refused request was queued")

    def test_3_expired_requests_get_503_and_are_never_run(self):
        before_timeouts = self.gw.metric("infergate_batcher_timeouts_total", model="slow")
        before_batches = self.gw.metric("infergate_batcher_batches_total", model="slow")
        socks = [harness.connect(self.gw.port, timeout=10) for _ in range(4)]
        try:
            # The first occupies the single stream for 200 ms; the others may wait 20 ms.
            post(socks[0], "slow", infer_body(4, "long"))
            time.sleep(0.05)
            for i, s in enumerate(socks[1:]):
                post(s, "slow", infer_body(4, "short%d" % i, timeout_us=20000))
            for s in socks[1:]:
                status, _, body, _ = harness.read_response(s)
                self.assertEqual(status, 503)
                self.assertEqual(json.loads(body), {"error": "Request timeout expired"})
            status, _, body, _ = harness.read_response(socks[0])
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body)["id"], "long")
        finally:
            for s in socks:
                s.close()
        self.assertEqual(self.gw.metric("infergate_batcher_timeouts_total", model="slow")
                         - before_timeouts, 3)
        self.assertEqual(self.gw.metric("infergate_batcher_batches_total", model="slow")
                         - before_batches, 1, "an expired request was dispatched")


if __name__ == "__main__":
    harness.main()
