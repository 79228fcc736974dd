"""Reload of remote endpoints (docs/OPERATIONS.md "Reload"): a triton model whose only change is
its endpoint list is not rebuilt: its pool takes the new list live (Pool::setEndpoints: the new
endpoint is probed first, the removed one drains), and a model removed by the same reload is
retired: its pool stops probing and closes its endpoints once its in-flight batches complete.

Three KServe test servers: A and B serve model "remote" (A before the reload, B after), C serves
model "gone" (removed by the reload). Six closed-loop clients post to "remote" throughout.

Asserts: the reload applies exactly ["models.remote.endpoints", "models.gone (removed)"]; zero
failed requests; traffic moves from A to B (A takes none once drained); after the reload neither
A (drained) nor C (retired model) receives health probes any more (ServerReady calls counted by
the test server, Stats "ready_calls"), while B does.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import infer, model_yaml  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401


def models(remote_endpoint, gone_endpoint=None):
    text = model_yaml(endpoints=['"%s"' % remote_endpoint])
    if gone_endpoint is not None:
        text += model_yaml(name="gone", endpoints=['"%s"' % gone_endpoint],
                           extra="      model_name: remote")
    return text


class ReloadEndpointsTest(bf.BackendTestCase):
    def test_endpoints_change_live_and_removed_model_stops_probing(self):
        a, b, c = self.server(), self.server(), self.server()
        gw = self.start_gateway(models(a.address, c.address))
        self.assertEqual(infer(gw.port, "gone", [1.0] * 16)[0], 200)

        with bf.ClosedLoopLoad(gw.port) as load:
            time.sleep(1.0)
            self.assertGreater(a.control("Stats")["infer_requests"], 0)
            self.assertEqual(b.control("Stats")["infer_requests"], 0)
            self.assertGreater(c.control("Stats")["ready_calls"], 3)  # probed every 100 ms

            with open(gw.config_path, "w") as f:
                f.write(bf.gateway_config(models(b.address)))
            status, _, body = harness.http_request(gw.admin_port, "POST", "/admin/reload")
            answer = json.loads(body)
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["applied"], ["models.remote.endpoints", "models.gone (removed)"])
            self.assertEqual(infer(gw.port, "gone", [1.0] * 16)[0], 404)

            # A drains (its in-flight batches complete, then it is closed); B takes the traffic.
            time.sleep(1.0)
            a1, b1, c1 = bf.stats(a, b, c)
            time.sleep(1.0)
            a2, b2, c2 = bf.stats(a, b, c)
        print("requests %d, failed %d; A %d -> %d, B %d -> %d infer requests" % (
            len(load.results), len(load.failed()), a1["infer_requests"], a2["infer_requests"],
            b1["infer_requests"], b2["infer_requests"]))
        self.assert_none_failed(load)
        self.assertGreater(len(load.results), 200)
        self.assertEqual(a2["infer_requests"], a1["infer_requests"])  # drained: nothing new
        self.assertGreater(b2["infer_requests"], b1["infer_requests"] + 50)
        # No health probe at A (closed) or C (the retired model's pool stopped) any more; B is
        # probed every 100 ms.
        self.assertEqual(a2["ready_calls"], a1["ready_calls"])
        self.assertEqual(c2["ready_calls"], c1["ready_calls"])
        self.assertGreaterEqual(b2["ready_calls"], b1["ready_calls"] + 5)
        self.assertEqual(gw.metric("infergate_backend_endpoints", model="remote"), 1)
        # A's series left /metrics with it (closed after draining); B's are there.
        _, _, text = harness.http_request(gw.admin_port, "GET", "/metrics")
        text = text.decode()
        self.assertNotIn('endpoint="%s"' % a.address, text)
        self.assertIn('infergate_backend_healthy{endpoint="%s",model="remote"} 1' % b.address, text)
        log = gw.read_log()
        self.assertIn("model 'gone': retired: every triton endpoint closed", log)
        self.assertIn("endpoint %s drained and closed" % a.address, log)
        self.assertEqual(gw.stop(), 0)
        self.gw = None


if __name__ == "__main__":
    harness.main()
