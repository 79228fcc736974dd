"""KServe v2 REST API end to end, with curl as the client (JSON and binary tensors)."""
import json
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def curl(*args, data=None):
    """Runs curl; returns (status, headers dict, body bytes)."""
    cmd = ["curl", "-sS", "-i", "--max-time", "10"] + list(args)
    if data is not None:
        cmd += ["--data-binary", "@-"]
    out = subprocess.run(cmd, input=data, capture_output=True, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 100"):
        head, _, body = body.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    return int(lines[0].split()[1]), headers, body


class RestApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = harness.Gateway()

    @classmethod
    def tearDownClass(cls):
        rc = cls.gw.stop()
        assert rc == 0, "infergate exited with %d:\n%s" % (rc, cls.gw.read_log())

    def test_health(self):
        self.assertEqual(curl(self.gw.url("/v2/health/live"))[0], 200)
        self.assertEqual(curl(self.gw.url("/v2/health/ready"))[0], 200)
        self.assertEqual(curl(self.gw.url("/v2/models/identity/ready"))[0], 200)
        self.assertEqual(curl(self.gw.url("/v2/models/identity/versions/1/ready"))[0], 200)

    def test_server_metadata(self):
        status, _, body = curl(self.gw.url("/v2"))
        self.assertEqual(status, 200)
        meta = json.loads(body)
        self.assertEqual(meta["name"], "infergate")
        self.assertIn("binary_tensor_data", meta["extensions"])

    def test_model_metadata(self):
        status, _, body = curl(self.gw.url("/v2/models/identity"))
        self.assertEqual(status, 200)
        meta = json.loads(body)
        self.assertEqual(meta["name"], "identity")
        self.assertEqual(meta["inputs"], [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}])
        self.assertEqual(meta["outputs"][0]["name"], "OUTPUT0")
        status, _, body = curl(self.gw.url("/v2/models/multi/versions/2"))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["inputs"][1], {"name": "B", "datatype": "BYTES", "shape": [2]})

    def test_unknown_model_404(self):
        status, _, body = curl(self.gw.url("/v2/models/nope/infer"), "-H", "Content-Type: application/json",
                               data=b'{"inputs":[]}')
        self.assertEqual(status, 404)
        self.assertIn("nope", json.loads(body)["error"])
        status, _, _ = curl(self.gw.url("/v2/models/identity/versions/9"))
        self.assertEqual(status, 404)

    def test_infer_json(self):
        values = [i * 0.5 - 3 for i in range(32)]
        req = {"id": "r1", "inputs": [{"name": "INPUT0", "shape": [2, 16], "datatype": "FP32", "data": values}]}
        status, headers, body = curl(self.gw.url("/v2/models/identity/infer"), "-H",
                                     "Content-Type: application/json", data=json.dumps(req).encode())
        self.assertEqual(status, 200, body)
        resp = json.loads(body)
        self.assertEqual(resp["model_name"], "identity")
        self.assertEqual(resp["id"], "r1")
        out = resp["outputs"][0]
        self.assertEqual((out["name"], out["datatype"], out["shape"]), ("OUTPUT0", "FP32", [2, 16]))
        self.assertEqual(out["data"], values)

    def test_infer_json_nested_and_types(self):
        req = {"inputs": [
            {"name": "A", "shape": [3], "datatype": "INT32", "data": [1, -2, 2147483647]},
            {"name": "B", "shape": [2], "datatype": "BYTES", "data": ["hello", "w\u00f6rld"]},
            {"name": "C", "shape": [2, 2], "datatype": "BOOL", "data": [[True, False], [False, True]]}]}
        status, _, body = curl(self.gw.url("/v2/models/multi/infer"), data=json.dumps(req).encode())
        self.assertEqual(status, 200, body)
        outs = {o["name"]: o for o in json.loads(body)["outputs"]}
        self.assertEqual(outs["A_OUT"]["data"], [1, -2, 2147483647])
        self.assertEqual(outs["B_OUT"]["data"], ["hello", "w\u00f6rld"])
        self.assertEqual(outs["C_OUT"]["data"], [True, False, False, True])

    def test_infer_binary_extension(self):
        values = [float(i) for i in range(16)]
        raw = struct.pack("<16f", *values)
        header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                         "parameters": {"binary_data_size": len(raw)}}],
                             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
        status, headers, body = curl(
            self.gw.url("/v2/models/identity/infer"), "-H", "Content-Type: application/octet-stream",
            "-H", "Inference-Header-Content-Length: %d" % len(header), data=header + raw)
        self.assertEqual(status, 200, body)
        n = int(headers["inference-header-content-length"])
        meta = json.loads(body[:n])
        self.assertEqual(meta["outputs"][0]["parameters"]["binary_data_size"], 64)
        self.assertEqual(body[n:], raw)

    def test_bad_tensors_400(self):
        cases = [
            ({"inputs": [{"name": "INPUT0", "shape": [1, 15], "datatype": "FP32", "data": [0.0] * 15}]}, "INPUT0"),
            ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 15}]}, "INPUT0"),
            ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}]}, "INPUT0"),
            ({"inputs": [{"name": "WRONG", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]}, "INPUT0"),
            ({"inputs": [{"name": "INPUT0", "shape": [9, 16], "datatype": "FP32", "data": [0.0] * 144}]}, "batch"),
            # A repeated output would be encoded once per repetition (issue 33: 400,000 of them
            # asked for a 97.7 GiB buffer): refused.
            ({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}],
              "outputs": [{"name": "OUTPUT0"}] * 1000}, "requested more than once"),
        ]
        for req, fragment in cases:
            status, _, body = curl(self.gw.url("/v2/models/identity/infer"), data=json.dumps(req).encode())
            self.assertEqual(status, 400, (req, body))
            self.assertIn(fragment, json.loads(body)["error"])
        status, _, body = curl(self.gw.url("/v2/models/identity/infer"), data=b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("error", json.loads(body))
        # Truncated binary part.
        header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                         "parameters": {"binary_data_size": 64}}]}).encode()
        status, _, body = curl(self.gw.url("/v2/models/identity/infer"), "-H",
                               "Inference-Header-Content-Length: %d" % len(header), data=header + b"\0" * 10)
        self.assertEqual(status, 400)
        self.assertIn("INPUT0", json.loads(body)["error"])

    def test_wrong_method_405(self):
        status, headers, body = curl(self.gw.url("/v2/models/identity/infer"))
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("allow"), "POST")

    def test_slow_model_answers_from_worker(self):
        req = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
        status, _, body = curl(self.gw.url("/v2/models/slow/infer"), data=json.dumps(req).encode())
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["outputs"][0]["data"], [1, 2, 3, 4])

    def test_metrics_move(self):
        before = self.gw.metric("infergate_requests_total", model="identity", code="200")
        req = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]}
        for _ in range(3):
            self.assertEqual(curl(self.gw.url("/v2/models/identity/infer"), data=json.dumps(req).encode())[0], 200)
        after = self.gw.metric("infergate_requests_total", model="identity", code="200")
        self.assertEqual(after - before, 3)
        self.assertGreaterEqual(self.gw.metric("infergate_request_duration_seconds_count", model="identity"), 3)
        text = self.gw.metrics()
        self.assertIn("# TYPE infergate_request_duration_seconds histogram", text)
        self.assertIn("infergate_connections_total", text)


if __name__ == "__main__":
    harness.main()
