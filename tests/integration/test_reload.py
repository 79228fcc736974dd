"""Configuration reload under load (docs/OPERATIONS.md "Reload"), socket mode on loopback.

While load_loop.py threads post to the models that stay (keep-alive and new connections), the
file is rewritten and reloaded: POST /admin/reload adds a model, removes another, changes the
priority levels of a batched model (replaced live) and the log level; a reload that changes a
listener is refused as a whole and names the key; SIGHUP removes the added model again; a file
that does not load is counted invalid. Zero failed requests to the models that stayed."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def config(level="info", prio_levels=2, models=("identity", "prio", "old"), listener="127.0.0.1"):
    text = ("mode: socket\nreactors: 2\n"
            "listeners: [{name: http, address: %s, port: 0, protocol: http}]\n"
            "admin: {address: 127.0.0.1, port: 0}\n"
            "logging: {level: %s}\nmodels:\n" % (listener, level))
    for m in models:
        extra = ""
        if m == "prio":
            extra = "    dynamic_batching: {max_queue_delay_us: 100, priority_levels: %d}\n" % prio_levels
        text += harness.model_yaml(m, [16], extra=extra)
    return text


BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                               "data": [1.0] * 16}]}).encode()


class ReloadTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ig-reload-")
        self.gw = harness.Gateway(config_text=config())
        self.stop_file = os.path.join(self.tmp.name, "stop")
        self.load = subprocess.Popen(
            ["/usr/bin/python3", os.path.join(HERE, "load_loop.py"), "127.0.0.1", str(self.gw.port),
             self.stop_file, "identity,prio", "4"], stdout=subprocess.PIPE, text=True)

    def tearDown(self):
        open(self.stop_file, "w").close()
        try:
            self.load.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.load.kill()
        self.gw.stop()
        self.tmp.cleanup()

    def write(self, text):
        with open(self.gw.config_path, "w") as f:
            f.write(text)

    def reload(self):
        status, _, body = harness.http_request(self.gw.admin_port, "POST", "/admin/reload")
        return status, json.loads(body)

    def infer(self, model):
        return harness.http_request(self.gw.port, "POST", "/v2/models/%s/infer" % model, BODY)[0]

    def metric(self, name, **labels):
        return self.gw.metric(name, **labels)

    def test_reload_under_load(self):
        time.sleep(1.0)  # the load runs
        self.assertEqual(self.infer("old"), 200)
        self.assertEqual(self.infer("new"), 404)
        self.assertEqual(self.metric("infergate_config_generation"), 1)
        self.assertEqual(self.metric("infergate_batcher_queue_depth", model="prio", level="3"), 0)
        self.assertNotIn('level="3",model="prio"', self.gw.metrics())

        # 1. POST /admin/reload: +new, -old, prio's priority levels 2 -> 3, log level debug.
        self.write(config(level="debug", prio_levels=3, models=("identity", "prio", "new")))
        status, answer = self.reload()
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["result"], "ok")
        self.assertEqual(answer["applied"], ["logging.level", "models.prio (changed)",
                                             "models.new (added)", "models.old (removed)"])
        self.assertEqual(answer["refused"], [])
        self.assertEqual(answer["generation"], 2)
        self.assertEqual(self.infer("new"), 200)
        self.assertEqual(self.infer("old"), 404)
        self.assertIn('level="3",model="prio"', self.gw.metrics())  # the new rules are in effect
        # The added model's requests are counted under its own name, not model="".
        self.assertGreaterEqual(self.metric("infergate_requests_total", model="new",
                                            protocol="kserve_http", code="200"), 1)
        self.assertEqual(self.metric("infergate_config_reloads_total", result="ok"), 1)
        self.assertEqual(self.metric("infergate_config_generation"), 2)
        self.assertIn("config reloaded from", self.gw.read_log())
        time.sleep(1.0)

        # 2. A listener change is refused as a whole: the model it adds is not served.
        self.write(config(level="info", prio_levels=3, models=("identity", "prio", "new", "extra"),
                          listener="127.0.0.2"))
        status, answer = self.reload()
        self.assertEqual(status, 409, answer)
        self.assertEqual(answer["result"], "refused")
        self.assertEqual([r["key"] for r in answer["refused"]], ["listeners"])
        self.assertEqual(answer["applied"], [])
        self.assertEqual(answer["generation"], 2)
        self.assertEqual(self.infer("extra"), 404)
        self.assertEqual(self.infer("new"), 200)
        self.assertEqual(self.metric("infergate_config_reloads_total", result="refused"), 1)
        self.assertIn("refused, nothing applied: listeners:", self.gw.read_log())

        # 3. SIGHUP: "new" goes again.
        self.write(config(level="debug", prio_levels=3, models=("identity", "prio")))
        self.gw.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while time.time() < deadline and self.metric("infergate_config_generation") != 3:
            time.sleep(0.05)
        self.assertEqual(self.metric("infergate_config_generation"), 3)
        self.assertEqual(self.infer("new"), 404)
        self.assertEqual(self.metric("infergate_config_reloads_total", result="ok"), 2)
        self.assertIn("applied models.new (removed)", self.gw.read_log())

        # 4. A file that does not load: counted invalid, nothing changes.
        self.write("mode: socket\nreactors: nope\n")
        status, answer = self.reload()
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer["result"], "invalid")
        self.assertIn("reactors", answer["error"])
        self.assertEqual(self.metric("infergate_config_reloads_total", result="invalid"), 1)
        self.assertEqual(self.infer("prio"), 200)
        time.sleep(0.5)

        open(self.stop_file, "w").close()
        out, _ = self.load.communicate(timeout=15)
        result = json.loads(out)
        print("load during the reloads: %s" % json.dumps(result))
        self.assertEqual(result["failed"], 0, result)
        self.assertEqual(result["retried"], 0, result)  # a reload closes no connection
        self.assertGreater(result["ok"], 200, result)


if __name__ == "__main__":
    harness.main()
