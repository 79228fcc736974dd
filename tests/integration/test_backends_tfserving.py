"""The tfserving backend end to end: infergate (socket mode) in front of the TF Serving test server
(tests/servers/tfserving_server.py).

Asserts: a model whose signature_def (GetModelMetadata) matches the configuration starts, and
the check really ran (the server counted the call); with validate_metadata: false a mismatching
signature is not asked for; a mismatching signature (dtype, shape, an extra input, a missing
output, a missing signature) stops infergate at start-up, exit status non-zero, with a message
naming every difference; BYTES tensors make a REST JSON round trip through batching as DT_STRING
string_val (the server saw the strings); FP32 through batching comes back value for value, with
batches of more than one request.

Uses backend_fixture.py's test-server process wrapper, config builders and clients.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import infer, post_json  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401 (unittest's module fixtures)


def tf_model(endpoints, dtype="FP32", extra=""):
    return bf.model_yaml(backend="tfserving", endpoints=endpoints, dtype=dtype, extra=extra)


class TfServingTest(bf.BackendTestCase):
    def server(self, *args):
        return super().server(*args, kind="tfserving")

    def refused(self, models):
        """Runs infergate with `models`, expecting it to refuse to start: (exit status, stderr,
        stdout). The refusal is logged ("cannot start: ..."), on stdout today (spdlog's default
        sink), so tests look at both."""
        with tempfile.TemporaryDirectory(prefix="infergate-it-") as d:
            path = os.path.join(d, "infergate.yaml")
            with open(path, "w") as f:
                f.write(bf.gateway_config(models))
            p = subprocess.run([harness.ARGS.binary, "run", "-c", path], capture_output=True,
                               text=True, timeout=20)
        return p.returncode, p.stderr, p.stdout

    # --- metadata validation ---
    def test_matching_signature_starts_after_checking_it(self):
        a = self.server()
        self.start_gateway(tf_model([a.address]))
        self.assertGreaterEqual(a.control("Stats")["metadata_requests"], 1)
        st, body = infer(self.gw.port, "remote", [1.0] * 16)
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
        st, body = infer(self.gw.port, "remote", [2.0] * 16)
        self.assertEqual(st, 200, body)
        self.assertEqual(set(a.control("Stats")["signatures"]), {"predict_v2"})

    # --- data ---
    def test_bytes_round_trip_through_batching(self):
        a = self.server("--input", "INPUT0:BYTES:-1,16", "--output", "OUTPUT0:BYTES:-1,16",
                        "--latency-ms", "5")
        self.start_gateway(tf_model([a.address], dtype="BYTES"))

        def call(c, i):
            vals = ["c%d-i%d-e%d" % (c, i, k) + "x" * k for k in range(15)] + [""]
            st, body = post_json(self.gw.port, "remote", {"inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "BYTES", "data": vals}]})
            return st, body, vals

        results = bf.run_clients(4, 8, call)
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
        self.load(6, 10)  # every answer 200 with its values (and the output's name)
        stats = a.control("Stats")
        self.assertEqual(sum(stats["batch_sizes"]), 60)
        self.assertGreater(max(stats["batch_sizes"]), 1, stats["batch_sizes"])


if __name__ == "__main__":
    harness.main()
