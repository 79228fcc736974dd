"""Remote backends end to end: infergate (socket mode) in front of 2-3 KServe v2 gRPC test
servers (tests/servers/kserve_server.py) and a TF Serving test server.

Asserts: requests come back correct through batching and the pool; with shared_memory: system
no tensor byte crosses gRPC (the server's received ModelInfer sizes); an endpoint killed mid-load
-> every request answered (200 or 503 naming the endpoint), traffic moves to the others, the
endpoint is re-admitted after restart (and its shm region registered again); deadlines expire
with 503 "Request timeout expired"; a metadata mismatch stops start-up with a message naming the
difference; backend down -> fast 503.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import infer, model_yaml  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401 (unittest's module fixtures)


class BackendTest(bf.BackendTestCase):
    # --- correctness through batching and the pool ---
    def test_identity_through_pool(self):
        a, b = self.server(), self.server()
        self.start_gateway(model_yaml(endpoints=[a.address, b.address]))
        self.load(8, 20)
        sa, sb = a.control("Stats"), b.control("Stats")
        self.assertGreater(sa["infer_requests"], 0)
        self.assertGreater(sb["infer_requests"], 0)
        # Batching happened (some batch > 1 row) and raw bytes arrived over gRPC.
        self.assertGreater(max(sa["batch_sizes"] + sb["batch_sizes"]), 1)
        self.assertEqual(sa["raw_input_bytes"] + sb["raw_input_bytes"], 8 * 20 * 64)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", model="remote"), 2)

    def test_priority_and_timeout_forwarded(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        st, body = infer(self.gw.port, "remote", [1.0] * 16, timeout_us=5_000_000, priority=1)
        self.assertEqual(st, 200, body)
        s = a.control("Stats")
        self.assertEqual(s["priorities"], [1])
        self.assertEqual(len(s["timeouts"]), 1)
        self.assertTrue(0 < s["timeouts"][0] <= 5_000_000, s["timeouts"])

    # --- system shared memory ---
    def test_system_shm_moves_no_tensor_bytes_over_grpc(self):
        a, b = self.server(), self.server()
        self.start_gateway(model_yaml(endpoints=[a.address, b.address],
                                      extra="      shared_memory: system"))
        self.load(4, 20)
        total = 0
        for s in (a, b):
            st = s.control("Stats")
            self.assertEqual(st["raw_input_bytes"], 0)
            # Two regions: the slots (outputs) and the batcher's input buffers themselves.
            self.assertEqual(len(st["regions"]), 2, st["regions"])
            self.assertEqual(len([r for r in st["regions"] if r.endswith("_in0")]), 1, st["regions"])
            total += st["shm_input_bytes"]
            # No ModelInfer message could carry a 64-byte row: all are header-sized.
            if st["infer_request_bytes"]:
                self.assertLess(max(st["infer_request_bytes"]), 400, st["infer_request_bytes"])
        self.assertEqual(total, 4 * 20 * 64)
        self.assertEqual(self.gw.metric("infergate_backend_tensor_bytes_total", path="grpc"), 0)
        self.assertEqual(self.gw.metric("infergate_backend_tensor_bytes_total", path="shm"), 4 * 20 * 64)
        # The inputs were read where they were decoded: nothing copied into a slot.
        self.assertIn("infergate_backend_shm_copied_bytes_total{", self.gw.metrics())
        self.assertEqual(self.gw.metric("infergate_backend_shm_copied_bytes_total"), 0)
        # Restart one server: its regions are registered again and traffic uses them.
        self.restart_reregisters(a, "regions", 2)
        # Shutdown (at its end) unregisters.
        self.assertEqual(b.control("Stats")["regions"], [])
        self.assertEqual(a.control("Stats")["regions"], [])

    # --- failures ---
    def test_endpoint_killed_mid_load_then_readmitted(self):
        servers = [self.server("--latency-ms", "5") for _ in range(3)]
        self.start_gateway(model_yaml(endpoints=[s.address for s in servers]))
        victim = servers[0]
        results = []

        def run():
            results.extend(self.load(6, 40, check=False))

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.5)
        victim.kill()
        t.join(timeout=120)
        self.assertFalse(t.is_alive(), "load did not finish: a request hung")
        self.assertEqual(len(results), 6 * 40)  # every request answered
        bad = [(st, b) for st, b, _ in results if st != 200]
        for st, b in bad:
            self.assertEqual(st, 503, b)
            self.assertIn(victim.address, b.get("error", ""), b)
        for st, b, vals in results:
            if st == 200:
                self.assertEqual(b["outputs"][0]["data"], vals)
        self.assertLess(len(bad), 6 * 40 // 4, bad[:3])
        # Traffic moved: the survivors serve everything now.
        self.load(4, 10)
        self.assertNotEqual(self.gw.metric("infergate_backend_healthy", endpoint=victim.address), 1)
        # Restart: re-admitted and used again.
        victim.start()
        bf.wait_for(lambda: self.gw.metric("infergate_backend_healthy", endpoint=victim.address) == 1)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", endpoint=victim.address), 1)
        self.load(6, 20)
        self.assertGreater(victim.control("Stats")["infer_requests"], 0)

    def test_sent_and_failed_is_503_naming_backend_not_retried(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        a.control("Set", {"fail_next": 1, "fail_code": "INTERNAL"})
        st, body = infer(self.gw.port, "remote", [2.0] * 16)
        self.assertEqual(st, 503, body)
        self.assertIn(a.address, body["error"])
        self.assertIn("INTERNAL", body["error"])
        self.assertEqual(a.control("Stats")["infer_requests"], 1)  # not retried
        st, body = infer(self.gw.port, "remote", [2.0] * 16)
        self.assertEqual(st, 200, body)

    def test_ejection_after_consecutive_failures(self):
        a, b = self.server(), self.server()
        self.start_gateway(model_yaml(endpoints=[a.address, b.address],
                                      extra="      eject_after_failures: 2", ejection_ms=60000))
        a.control("Set", {"fail_next": 1000})
        results = self.load(2, 30, check=False)
        failed = [r for r in results if r[0] != 200]
        # Two failed batches eject the endpoint (a third may already be in flight); a batch holds
        # at most two requests (two closed-loop clients).
        self.assertLessEqual(a.control("Stats")["infer_requests"], 3)
        self.assertLessEqual(len(failed), 6, failed[:3])
        self.assertGreater(len(failed), 0)
        self.assertEqual(self.gw.metric("infergate_backend_ejections_total", endpoint=a.address), 1)
        self.assertEqual(self.gw.metric("infergate_backend_healthy", endpoint=a.address), -1)

    def test_all_down_fails_fast_then_recovers(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        a.kill()
        time.sleep(0.5)
        t0 = time.time()
        st, body = infer(self.gw.port, "remote", [3.0] * 16)
        self.assertEqual(st, 503, body)
        self.assertLess(time.time() - t0, 2.0)
        self.assertIn(a.address, body["error"])
        a.start()
        deadline = time.time() + 10
        st = 0
        while time.time() < deadline:
            st, body = infer(self.gw.port, "remote", [3.0] * 16)
            if st == 200:
                break
            time.sleep(0.1)
        self.assertEqual(st, 200, body)

    def test_deadline_expires_with_503(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address]))
        a.control("Set", {"latency_ms": 1000})
        t0 = time.time()
        st, body = infer(self.gw.port, "remote", [4.0] * 16, timeout_us=200_000)
        self.assertEqual(st, 503, body)
        self.assertIn("Request timeout expired", body["error"])
        self.assertLess(time.time() - t0, 0.9)

    def test_backend_request_timeout_is_503_naming_endpoint(self):
        a = self.server()
        self.start_gateway(model_yaml(endpoints=[a.address],
                                      extra="      request_timeout_ms: 200\n      eject_after_failures: 0"))
        a.control("Set", {"latency_ms": 1000})
        st, body = infer(self.gw.port, "remote", [4.0] * 16)
        self.assertEqual(st, 503, body)
        self.assertIn("DEADLINE_EXCEEDED", body["error"])
        self.assertIn(a.address, body["error"])

    def test_dev_shm_too_small_is_a_clear_startup_error(self):
        # The batch buffers and slots live in /dev/shm: when they do not fit (Docker's 64 MiB
        # default, here a 1 MiB tmpfs in a private mount namespace) start-up must fail with a
        # message, not crash later with SIGBUS on a page tmpfs cannot back.
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            self.skipTest("needs root and unshare(1) for a private /dev/shm")
        a = self.server("--input", "INPUT0:FP32:-1,65536", "--output", "OUTPUT0:FP32:-1,65536")
        tmp = tempfile.TemporaryDirectory(prefix="infergate-shm-")
        self.addCleanup(tmp.cleanup)
        cfg = os.path.join(tmp.name, "gw.yaml")
        with open(cfg, "w") as f:
            f.write(bf.gateway_config(model_yaml(endpoints=[a.address], shape="[65536]",
                                                 extra="      shared_memory: system")))
        p = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" run -c "$1"',
             harness.ARGS.binary, cfg],
            capture_output=True, text=True, timeout=60)
        out = p.stdout + p.stderr
        self.assertNotEqual(p.returncode, 0, out)
        self.assertGreater(p.returncode, 0, "killed by a signal: %s\n%s" % (p.returncode, out))
        self.assertIn("is /dev/shm large enough?", out)
        self.assertIn("No space left on device", out)

    def test_metadata_mismatch_refused_at_startup(self):
        a = self.server("--input", "INPUT0:FP16:-1,16", "--output", "OUTPUT0:FP16:-1,16")
        with self.assertRaises(RuntimeError) as cm:
            self.start_gateway(model_yaml(endpoints=[a.address]))
        msg = str(cm.exception)
        self.assertIn("does not match the configuration", msg)
        self.assertIn("inputs[0] 'INPUT0': datatype FP32 configured, the backend has FP16", msg)
        self.assertIn(a.address, msg)

    # --- TF Serving ---
    def test_tfserving_predict(self):
        a = self.server("--model", "remote", kind="tfserving")
        self.start_gateway(model_yaml(backend="tfserving", endpoints=[a.address]))
        self.load(4, 10)
        self.assertGreater(a.control("Stats")["predict_requests"], 0)


if __name__ == "__main__":
    harness.main()
