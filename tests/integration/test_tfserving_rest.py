"""TF Serving REST API (POST /v1/models/{m}[/versions/{v}]:predict, GET /v1/models/{m}) against
the real binary, with curl as the client (the HTTP listener of harness.BASE_CONFIG).

Models (harness.BASE_CONFIG): identity (FP32 [-1,16], max_batch_size 8), multi (version 2,
no batching: A INT32 [-1], B BYTES [2], C BOOL [2,2]).
"""
import json
import math
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

GW = None


def setUpModule():
    global GW
    GW = harness.Gateway()


def tearDownModule():
    if GW:
        assert GW.stop() == 0


def curl(method, path, body=None):
    """Returns (status, body bytes) using curl against the gateway."""
    cmd = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", GW.url(path)]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body]
    out = subprocess.run(cmd, check=True, capture_output=True, timeout=20).stdout
    text, _, code = out.rpartition(b"\n")
    return int(code), text


def parse(body):
    # TF Serving writes bare NaN/Infinity; Python's json accepts them.
    return json.loads(body.decode())


ROW = [float(i) for i in range(16)]


class TfServingRest(unittest.TestCase):
    def test_row_format_single_input(self):
        before = GW.metric("infergate_requests_total", protocol="tfserving_http", code="200")
        body = json.dumps({"signature_name": "serving_default", "instances": [ROW, ROW[::-1]]})
        status, out = curl("POST", "/v1/models/identity:predict", body)
        self.assertEqual(status, 200, out)
        self.assertEqual(parse(out), {"predictions": [ROW, ROW[::-1]]})
        after = GW.metric("infergate_requests_total", protocol="tfserving_http", code="200")
        self.assertEqual(after - before, 1)

    def test_row_format_with_nan_and_infinity(self):
        vals = "[NaN, Infinity, -Infinity" + ", 1.5" * 13 + "]"
        status, out = curl("POST", "/v1/models/identity/versions/1:predict",
                           '{"instances": [%s]}' % vals)
        self.assertEqual(status, 200, out)
        self.assertIn(b"[NaN,Infinity,-Infinity,1.5", out)
        pred = parse(out)["predictions"][0]
        self.assertTrue(math.isnan(pred[0]))
        self.assertEqual(pred[1:3], [math.inf, -math.inf])

    def test_columnar_format(self):
        status, out = curl("POST", "/v1/models/identity:predict", json.dumps({"inputs": [ROW]}))
        self.assertEqual(status, 200, out)
        self.assertEqual(parse(out), {"outputs": [ROW]})

    def test_named_inputs_row_and_columnar(self):
        # multi: no batch dimension, so instances stack into the first dimension of A.
        inst = {"instances": [{"A": 1, "B": "x", "C": [True, False]},
                              {"A": 2, "B": {"b64": "eQ=="}, "C": [False, True]}]}
        status, out = curl("POST", "/v1/models/multi/versions/2:predict", json.dumps(inst))
        self.assertEqual(status, 200, out)
        self.assertEqual(parse(out), {"predictions": [
            {"A_OUT": 1, "B_OUT": "x", "C_OUT": [True, False]},
            {"A_OUT": 2, "B_OUT": "y", "C_OUT": [False, True]}]})
        col = {"inputs": {"A": [5, 6, 7], "B": ["p", "q"], "C": [[True, True], [False, False]]}}
        status, out = curl("POST", "/v1/models/multi:predict", json.dumps(col))
        self.assertEqual(status, 200, out)
        self.assertEqual(parse(out), {"outputs": {"A_OUT": [5, 6, 7], "B_OUT": ["p", "q"],
                                                  "C_OUT": [[True, True], [False, False]]}})

    def test_model_status(self):
        want = {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}]}
        status, out = curl("GET", "/v1/models/identity")
        self.assertEqual((status, parse(out)), (200, want))
        status, out = curl("GET", "/v1/models/multi/versions/2")
        self.assertEqual(status, 200)
        self.assertEqual(parse(out)["model_version_status"][0]["version"], "2")

    def test_errors(self):
        before = GW.metric("infergate_requests_total", protocol="tfserving_http", code="400")
        cases = [
            ("POST", "/v1/models/nope:predict", '{"instances":[1]}', 404,
             "Servable not found for request: Latest(nope)"),
            ("POST", "/v1/models/identity/versions/9:predict", '{"instances":[1]}', 404,
             "Servable not found for request: Specific(identity, 9)"),
            ("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
            ("GET", "/v1/models/identity:predict", None, 400,
             "Malformed request: GET /v1/models/identity:predict"),
            ("POST", "/v1/models/identity:predict", "{}", 400,
             "Missing 'inputs' or 'instances' key"),
            ("POST", "/v1/models/identity:predict", '{"instances": [[1,2]]}', 400, None),
            ("POST", "/v1/models/identity:predict", '{"instances": [[1,2', 400,
             "JSON Parse error"),
            ("POST", "/v1/models/identity:predict",
             json.dumps({"instances": [ROW, ROW[:15]]}), 400, "same shape"),
            ("POST", "/v1/models/identity:predict", json.dumps({"instances": [ROW] * 9}), 400,
             None),
            ("POST", "/v1/models/identity:classify", "{}", 501, None),
        ]
        for method, path, body, code, msg in cases:
            status, out = curl(method, path, body)
            self.assertEqual(status, code, (path, body, out))
            err = parse(out)
            self.assertEqual(list(err), ["error"], out)
            if msg:
                self.assertIn(msg, err["error"])
        after = GW.metric("infergate_requests_total", protocol="tfserving_http", code="400")
        self.assertEqual(after - before, 6)

    def test_kserve_routes_unaffected(self):
        status, out = curl("GET", "/v2/models/identity")
        self.assertEqual(status, 200)
        self.assertEqual(parse(out)["name"], "identity")


# A batched model (the dynamic batcher with batch slots), for the one-copy counters.
ONE_COPY_CONFIG = harness.loopback_head() + """\
logging: {level: info, access_log: false}
models:
""" + harness.model_yaml("batched", [4], 8, version="1", backend=True, extra="""\
    dynamic_batching: {max_queue_delay_us: 0}
""") + harness.model_yaml("batched16", [2], 8, datatype="INT16", version="1", backend=True,
                          extra="""\
    dynamic_batching: {max_queue_delay_us: 0}
""")

COPY_COUNTERS = ("request_bytes", "bytes_copied", "received_copy_bytes", "slot_bytes",
                 "staged_bytes")


class TfServingRestOneCopy(unittest.TestCase):
    """Issue 16: a TF Serving REST predict to a batched model is decoded straight into the
    batch slot: nothing is staged at dispatch and bytes_copied == request_bytes."""

    @classmethod
    def setUpClass(cls):
        cls.gw = harness.Gateway(config_text=ONE_COPY_CONFIG)

    @classmethod
    def tearDownClass(cls):
        assert cls.gw.stop() == 0

    def counters(self, model):
        text = self.gw.metrics()
        return {n: harness.parse_metric(text, "infergate_batcher_%s_total" % n, model=model)
                for n in COPY_COUNTERS}

    def predict(self, model, body):
        status, _, out = harness.http_request(self.gw.port, "POST",
                                              "/v1/models/%s:predict" % model,
                                              body=json.dumps(body).encode())
        return status, out

    def test_row_and_columnar_predict_is_one_copy(self):
        cases = [
            ("batched", {"instances": [[1.5, 2, 3, 4], [5, 6, 7, 8]]}, 2 * 4 * 4),
            ("batched", {"inputs": [[0.25, -1, 2, 3]]}, 4 * 4),
            ("batched", {"inputs": {"INPUT0": [[1, 2, 3, 4], [4, 3, 2, 1], [0, 0, 0, 0]]}},
             3 * 4 * 4),
            ("batched16", {"instances": [{"INPUT0": [1, -2]}, {"INPUT0": [300, 4]}]}, 2 * 2 * 2),
        ]
        for model, body, size in cases:
            before = self.counters(model)
            status, out = self.predict(model, body)
            self.assertEqual(status, 200, out)
            rows = body.get("instances") or body["inputs"]
            if isinstance(rows, dict):
                self.assertEqual(json.loads(out), {"outputs": rows["INPUT0"]})
            elif isinstance(rows[0], dict):
                self.assertEqual(json.loads(out)["predictions"], [r["INPUT0"] for r in rows])
            else:
                key = "predictions" if "instances" in body else "outputs"
                self.assertEqual(json.loads(out), {key: rows})
            after = self.counters(model)
            d = {n: after[n] - before[n] for n in COPY_COUNTERS}
            self.assertEqual(d["request_bytes"], size, (model, body, d))
            self.assertEqual(d["slot_bytes"], size, (model, body, d))  # decoded into the slot
            self.assertEqual(d["staged_bytes"], 0, (model, body, d))
            self.assertEqual(d["received_copy_bytes"], 0, (model, body, d))
            self.assertEqual(d["bytes_copied"], d["request_bytes"], (model, body, d))


if __name__ == "__main__":
    harness.main()
