"""The tfserving backend end to end: infergate (socket mode) in front of the TF Serving test server
(tests/servers/tfserving_server.py).

Asserts: a model whose signature_def (GetModelMetadata) matches the configuration starts, and
the check really ran (the server counted the call); with validate_metadata: false a mismatching
signature is not asked for; a mismatching signature (dtype, shape, an extra input, a missing
output, a missing signature) stops infergate at start-up, exit status non-zero, with a message
naming every difference; BYTES tensors make a REST JSON round trip through batching as DT_STRING
string_val (the server saw the strings); FP32 through batching comes back value for value, with
batches of more than one request.

Reuses test_backends.py's test-server process wrapper and config builders.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_backends as tb  # noqa: E402  (TestServer, model_yaml, gateway_config, infer)


def setUpModule():
    tb.setUpModule()


def tearDownModule():
    tb.tearDownModule()


def tf_model(endpoints, dtype="FP32", extra=""):
    return tb.model_yaml(backend="tfserving", endpoints=endpoints, dtype=dtype, extra=extra)


def post_json(port, model, body):
    data = json.dumps(body).encode()
    s = harness.connect(port)
    try:
        s.sendall(("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (model, len(data))).encode() + data)
        status, _, payload, _ = harness.read_response(s)
        return status, json.loads(payload or b"{}")
    finally:
        s.close()


class TfServingTest(unittest.TestCase):
    def setUp(self):
        self.servers = []
        self.gw = None

    def tearDown(self):
        if self.gw is not None:
            self.gw.stop()
        for s in self.servers:
            s.kill()

    def server(self, *args):
        s = tb.TestServer("tfserving", args=args)
        self.servers.append(s)
        return s

    def start_gateway(self, models):
        self.gw = harness.Gateway(config_text=tb.gateway_config(models))
        return self.gw

    def refused(self, models):
        """Runs infergate with `models`, expecting it to refuse to start: (exit status, stderr,
        stdout). The refusal is logged ("cannot start: ..."), on stdout today (spdlog's default
        sink), so tests look at both."""
        with tempfile.TemporaryDirectory(prefix="infergate-it-") as d:
            path = os.path.join(d, "infergate.yaml")
            with open(path, "w") as f:
                f.write(tb.gateway_config(models))
            p = subprocess.run([harness.ARGS.binary, "run", "-c", path], capture_output=True,
                               text=True, timeout=20)
        return p.returncode, p.stderr, p.stdout

    # --- metadata validation ---
    def test_matching_signature_starts_after_checking_it(self):
        a = self.server()
        self.start_gateway(tf_model([a.address]))
        self.assertGreaterEqual(a.control("Stats")["metadata_requests"], 1)
        st, body = tb.infer(self.gw.port, "remote", [1.0] * 16)
        self.assertEqual(st, 200, body)

    def test_validate_metadata_false_skips_the_check(self):
        a = self.server("--signature", "other", "--input", "INPUT0:FP16:-1,16")
        self.start_gateway(tf_model([a.address], extra="      validate_metadata: false\n"
                                                       "      signature_name: other"))
        self.assertEqual(a.control("Stats")["metadata_requests"], 0)

    def test_mismatch_refused_at_startup_naming_each_difference(self):
        a = self.server("--input", "INPUT0:FP16:-1,16", "--input", "MASK:BOOL:-1,16",
                        "--output", "OUTPUT0:FP32:-1,8", "--output", "SCORES:FP32:-1")
        rc, err, out = self.refused(tf_model([a.address]))
        text = err + out
        self.assertNotEqual(rc, 0, text)
        self.assertIn("cannot start", text)
        self.assertIn("model 'remote': the backend model 'remote' at %s does not match the "
                      "configuration" % a.address, text)
        self.assertIn("inputs[0] 'INPUT0': datatype FP32 (DT_FLOAT) configured, the backend has "
                      "DT_HALF", text)
        self.assertIn("signature 'serving_default' also needs input 'MASK' (DT_BOOL [-1,16]), "
                      "which is not configured", text)
        self.assertIn("outputs[0] 'OUTPUT0': shape [-1,16] configured (with the batch dimension), "
                      "the backend has [-1,8]", text)
        self.assertNotIn("SCORES", text)  # an extra output is fine

    def test_missing_signature_refused_naming_the_ones_there(self):
        a = self.server("--signature", "predict_v2")
        rc, err, out = self.refused(tf_model([a.address]))
        text = err + out
        self.assertNotEqual(rc, 0, text)
        self.assertIn("signature 'serving_default' not found (the model has: 'predict_v2'; set "
                      "tfserving.signature_name)", text)
        # Naming the advertised signature makes it start.
        self.start_gateway(tf_model([a.address], extra="      signature_name: predict_v2"))
        st, body = tb.infer(self.gw.port, "remote", [2.0] * 16)
        self.assertEqual(st, 200, body)
        self.assertEqual(set(a.control("Stats")["signatures"]), {"predict_v2"})

    # --- data ---
    def test_bytes_round_trip_through_batching(self):
        a = self.server("--input", "INPUT0:BYTES:-1,16", "--output", "OUTPUT0:BYTES:-1,16",
                        "--latency-ms", "5")
        self.start_gateway(tf_model([a.address], dtype="BYTES"))
        results, lock = [], threading.Lock()

        def client(c):
            for i in range(8):
                vals = ["c%d-i%d-e%d" % (c, i, k) + "x" * k for k in range(15)] + [""]
                st, body = post_json(self.gw.port, "remote", {"inputs": [
                    {"name": "INPUT0", "shape": [1, 16], "datatype": "BYTES", "data": vals}]})
                with lock:
                    results.append((st, body, vals))

        ts = [threading.Thread(target=client, args=(c,)) for c in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(len(results), 32)
        for st, body, vals in results:
            self.assertEqual(st, 200, body)
            out = body["outputs"][0]
            self.assertEqual((out["name"], out["datatype"], out["shape"]),
                             ("OUTPUT0", "BYTES", [1, 16]))
            self.assertEqual(out["data"], vals)
        stats = a.control("Stats")
        sent = [s for batch in stats["string_inputs"] for s in batch]
        self.assertEqual(len(sent), 32 * 16)  # every element went as a string_val
        self.assertIn("c3-i7-e14" + "x" * 14, sent)
        # Batches of several requests were sliced back per request (checked above).
        self.assertGreater(max(stats["batch_sizes"]), 1, stats["batch_sizes"])

    def test_fp32_round_trip_through_batching(self):
        a = self.server("--latency-ms", "5")
        self.start_gateway(tf_model([a.address]))
        results, lock = [], threading.Lock()

        def client(c):
            for i in range(10):
                vals = [float(c * 1000 + i) + k / 16.0 for k in range(16)]
                st, body = tb.infer(self.gw.port, "remote", vals)
                with lock:
                    results.append((st, body, vals))

        ts = [threading.Thread(target=client, args=(c,)) for c in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for st, body, vals in results:
            self.assertEqual(st, 200, body)
            self.assertEqual(body["outputs"][0]["data"], vals)
        stats = a.control("Stats")
        self.assertEqual(sum(stats["batch_sizes"]), 60)
        self.assertGreater(max(stats["batch_sizes"]), 1, stats["batch_sizes"])


if __name__ == "__main__":
    harness.main()
