"""Triton CUDA shared memory end to end: infergate (socket mode, triton backend with
shared_memory: cuda) in front of KServe v2 test servers (tests/servers/kserve_server.py).

Two ways to run the same protocol:
  - GPU: where a GPU, libcudart and a CUDA build of infergate exist, infergate cudaMallocs the
    region, sends its cudaIpcMemHandle, and the test server opens it with cudaIpcOpenMemHandle
    (ctypes) and really reads inputs from / writes outputs to the GPU. Skipped otherwise.
  - Emulation (runs everywhere): INFERGATE_CUDA_SHM_EMULATION=1 makes infergate's device region
    POSIX shared memory behind an "infergate-emulated-cuda:<key>" handle, which the test server
    accepts only with --cuda-emulation. This is a stand-in for the GPU (no CUDA call runs), but
    every protocol step is real: CudaSharedMemoryRegister/Status/Unregister, ModelInfer with
    region parameters for inputs and outputs, re-registration after a server restart, and no
    tensor byte in any gRPC message.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401 (unittest's module fixtures)

ROWS = 64  # bytes of one [16] FP32 row


class CudaShmTestBase(bf.BackendTestCase):
    """The fixture's helpers, with INFERGATE_CUDA_SHM_EMULATION set (emulated) or unset."""
    emulated = True

    def setUp(self):
        super().setUp()
        self.saved_env = os.environ.get("INFERGATE_CUDA_SHM_EMULATION")
        if self.emulated:
            os.environ["INFERGATE_CUDA_SHM_EMULATION"] = "1"
        else:
            os.environ.pop("INFERGATE_CUDA_SHM_EMULATION", None)

    def tearDown(self):
        super().tearDown()
        if self.saved_env is None:
            os.environ.pop("INFERGATE_CUDA_SHM_EMULATION", None)
        else:
            os.environ["INFERGATE_CUDA_SHM_EMULATION"] = self.saved_env

    def cuda_server(self):
        return self.server("--cuda-emulation") if self.emulated else self.server()

    def cuda_yaml(self, endpoints):
        return bf.model_yaml(endpoints=endpoints, extra="      shared_memory: cuda")

    def check_no_tensor_bytes_over_grpc(self, servers, rows):
        total_in = total_out = 0
        for s in servers:
            st = s.control("Stats")
            summary = {k: st[k] for k in ("infer_requests", "raw_input_bytes", "cuda_input_bytes",
                                          "cuda_registers", "cuda_regions")}
            self.assertEqual(st["raw_input_bytes"], 0, summary)
            self.assertEqual(st["shm_input_bytes"], 0, "system shm used instead of CUDA shm")
            self.assertEqual(len(st["cuda_regions"]), 1, st["cuda_regions"])
            total_in += st["cuda_input_bytes"]
            total_out += st["cuda_output_bytes"]
            if st["infer_request_bytes"]:
                self.assertLess(max(st["infer_request_bytes"]), 400, st["infer_request_bytes"])
        self.assertEqual(total_in, rows * ROWS)
        self.assertEqual(total_out, rows * ROWS)
        self.assertEqual(self.gw.metric("infergate_backend_tensor_bytes_total", path="grpc"), 0)
        self.assertEqual(self.gw.metric("infergate_backend_tensor_bytes_total", path="shm"), rows * ROWS)

    def round_trip_and_restart(self):
        a, b = self.cuda_server(), self.cuda_server()
        self.start_gateway(self.cuda_yaml([a.address, b.address]))
        self.load(4, 20)  # asserts every output equals its input, byte for byte
        self.check_no_tensor_bytes_over_grpc((a, b), 4 * 20)
        # A restarted server has forgotten the region: it is registered again, traffic resumes.
        self.restart_reregisters(a, "cuda_regions")
        # Shutdown (at its end) unregisters the region at every server.
        for s in (a, b):
            st = s.control("Stats")
            self.assertEqual(st["cuda_regions"], [], st)
            self.assertGreaterEqual(st["cuda_unregisters"], 1)


class EmulatedCudaShmTest(CudaShmTestBase):
    emulated = True

    def test_round_trip_no_bytes_over_grpc_reregister_unregister(self):
        self.round_trip_and_restart()

    def test_loaded_pool_never_falls_back_to_grpc(self):
        # More clients than batches in flight, no batching delay: completions and new sends
        # overlap all the time (the batcher sends the next batch as soon as one completes).
        # Every batch must still find a free slot (no raw_input_contents fallback).
        a = self.cuda_server()
        self.start_gateway(bf.model_yaml(endpoints=[a.address], batching="",
                                         extra="      shared_memory: cuda"))
        self.load(12, 40)
        self.check_no_tensor_bytes_over_grpc((a,), 12 * 40)

    def test_logs_that_it_is_emulated(self):
        a = self.cuda_server()
        self.start_gateway(self.cuda_yaml([a.address]))
        log = self.gw.read_log()
        self.assertIn("CUDA shared memory is EMULATED", log)
        self.assertIn("CUDA shared memory region 'infergate_cuda_remote_", log)

    def test_server_refusing_the_handle_stops_startup(self):
        a = self.server()  # no --cuda-emulation: refuses the emulated handle, as Triton would
        with self.assertRaises(RuntimeError) as cm:
            self.start_gateway(self.cuda_yaml([a.address]))
        msg = str(cm.exception)
        self.assertIn("CudaSharedMemoryRegister of 'infergate_cuda_remote_", msg)
        self.assertIn("emulated", msg)
        self.assertIn("--allow-client-shm=true", msg)


class NoCudaTest(CudaShmTestBase):
    emulated = False

    def test_cuda_without_gpu_or_cuda_build_is_refused_clearly(self):
        import cuda_shm
        if cuda_shm.gpu_count() > 0:
            self.skipTest("a GPU is present: GpuCudaShmTest covers it")
        a = self.server()
        with self.assertRaises(RuntimeError) as cm:
            self.start_gateway(self.cuda_yaml([a.address]))
        msg = str(cm.exception)
        self.assertIn("model 'remote': triton.shared_memory: cuda:", msg)
        # Either a build without CUDA, or CUDA saying there is no device.
        self.assertTrue("INFERGATE_WITH_CUDA" in msg or "cuda" in msg.lower(), msg)
        self.assertEqual(a.control("Stats")["cuda_registers"], 0)


class GpuCudaShmTest(CudaShmTestBase):
    emulated = False

    def setUp(self):
        super().setUp()
        import cuda_shm
        if cuda_shm.gpu_count() == 0:
            self.skipTest("no GPU (or no libcudart) on this machine")

    def test_round_trip_on_the_gpu(self):
        a = self.cuda_server()
        try:
            self.start_gateway(self.cuda_yaml([a.address]))
        except RuntimeError as e:
            if "INFERGATE_WITH_CUDA" in str(e):
                self.skipTest("infergate was built without CUDA")
            raise
        self.gw.stop()
        self.gw = None
        self.servers.remove(a)
        a.kill()
        self.round_trip_and_restart()


if __name__ == "__main__":
    harness.main()
