#!/usr/bin/python3
"""A KServe v2 gRPC test server (the Triton protocol subset infergate uses), over real gRPC
(python3-grpcio) with messages generated from infergate's own protos at start-up.

Identity semantics: output i is input i (same datatype, shape and bytes), renamed. Also:
ServerLive/Ready, ModelReady, ModelMetadata (from --input/--output), system shared memory
Register/Unregister/Status done for real (shm_open'ed key under /dev/shm, mmap'ed), configurable
latency and failure injection, and a control service (JSON over raw bytes):
  /infergate.test.Control/Set    {"latency_ms": 5, "fail_next": 3, "fail_code": "UNAVAILABLE",
                                  "ready": false, "hang_ms": 0}
  /infergate.test.Control/Stats  -> {"infer_requests", "infer_request_bytes" (serialized
                                  ModelInferRequest sizes), "raw_input_bytes", "shm_input_bytes",
                                  "regions", "ids", "priorities", "timeouts",
                                  "cancelled_calls", "ready_calls" (ServerReady calls: the
                                  gateway's health probes), ...}
"cancelled_calls": ModelInfer calls whose client cancelled them (RST_STREAM: the gRPC context
went inactive) while the handler waited out latency_ms / hang_ms; such a call answers nothing.

Usage: kserve_server.py --port 0 --model identity --input INPUT0:FP32:-1,16 --output OUTPUT0:FP32:-1,16
Prints "PORT <n>" on stdout once serving.

--cuda-stub PATH: loads that libcuda.so.1 (the GPU probe tests' stub, tests/gpu) with ctypes,
as a GPU server would: each ModelInfer launches a kernel and synchronises its stream, and
Control/Set drives more GPU work: {"gpu_period_ms": 5} launches + synchronises every 5 ms on a
thread (0: stop), {"gpu_sync_delay_ns": N} makes every synchronisation take N ns (the stub's
igStubSetSyncDelayNs), {"gpu_alloc_bytes": N} allocates N bytes of device memory (kept).

--metrics-port N: also serves Triton-style GET /metrics (http.server, a thread) with
nv_inference_pending_request_count{model="<model>",version="1"} = ModelInfer calls in progress
+ "pending_bias" (Control/Set {"pending_bias": 1000}); prints "METRICS_PORT <n>" after PORT.
"""
import argparse
import json
import mmap
import os
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stubs  # noqa: E402

stubs.generate()
import grpc  # noqa: E402
import grpc_service_pb2 as pb  # noqa: E402
import kserve_shm_pb2 as shm_pb  # noqa: E402
import cuda_shm  # noqa: E402


# --- Triton-style /metrics (--metrics-port), for infergate's queue-depth aware picking ---------
class QueueDepth:
    """nv_inference_pending_request_count as this server reports it: ModelInfer calls in progress
    (waiting or executing in a handler) plus `pending_bias` (Control/Set {"pending_bias": n})."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.done = 0
        self.pending_bias = 0
        self.scrapes = 0

    def counted(self, fn):
        def wrapper(req, ctx):
            with self.lock:
                self.active += 1
            try:
                return fn(req, ctx)
            finally:
                with self.lock:
                    self.active -= 1
                    self.done += 1
        return wrapper

    def page(self, model):
        with self.lock:
            self.scrapes += 1
            pending, done = self.active + self.pending_bias, self.done
        esc = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return (
            "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n"
            "# TYPE nv_inference_request_success counter\n"
            'nv_inference_request_success{model="%s",version="1"} %d\n'
            "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.\n"
            "# TYPE nv_inference_pending_request_count gauge\n"
            'nv_inference_pending_request_count{model="%s",version="1"} %d\n'
            'nv_inference_pending_request_count{model="%s_other",version="1"} 1000000\n'
            "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n"
            "# TYPE nv_gpu_utilization gauge\n"
            'nv_gpu_utilization{gpu_uuid="GPU-00000000-0000-0000-0000-000000000000"} 0\n'
            % (esc, done, esc, pending, esc))


QUEUE = QueueDepth()


def serve_metrics(port, model):
    """Serves GET /metrics on 127.0.0.1:port (0: any) from a thread; returns the port."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.path != "/metrics":
                body, code = b"not found\n", 404
            else:
                body, code = QUEUE.page(model).encode(), 200
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd.server_address[1]


def parse_tensor(spec):
    name, dtype, dims = spec.split(":")
    return {"name": name, "datatype": dtype, "shape": [int(d) for d in dims.split(",") if d]}


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.latency_ms = args.latency_ms
        self.fail_next = 0
        self.fail_code = "UNAVAILABLE"
        self.ready = True
        self.hang_ms = 0
        self.regions = {}  # name -> (key, offset, size, mmap)
        self.cuda_regions = {}  # name -> (device_id, size, cuda_shm region)
        self.stats = {"infer_requests": 0, "infer_request_bytes": [], "raw_input_bytes": 0,
                      "shm_input_bytes": 0, "shm_output_bytes": 0, "ids": [], "priorities": [],
                      "timeouts": [], "batch_sizes": [], "registers": 0, "unregisters": 0,
                      "cuda_registers": 0, "cuda_unregisters": 0, "cuda_input_bytes": 0,
                      "cuda_output_bytes": 0, "cancelled_calls": 0, "ready_calls": 0}


class StubGpu:
    """The stub CUDA driver (tests/gpu/stub_cuda.c) used the way a GPU server uses a driver."""

    def __init__(self, path):
        import ctypes
        self.c = ctypes
        self.lib = ctypes.CDLL(path)
        self.lock = threading.Lock()
        self.period_ms = 0
        self.kept = []
        self.lib.cuInit(0)
        dev = ctypes.c_int(0)
        self.lib.cuDeviceGet(ctypes.byref(dev), 0)
        ctx = ctypes.c_void_p()
        self.lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
        self.lib.igStubSetSyncDelayNs.argtypes = [ctypes.c_ulonglong]
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        threading.Thread(target=self.loop, daemon=True).start()

    def work(self):
        self.lib.cuLaunchKernel(1, 1, 1, 1, 32, 1, 1, 0, None, None, None)
        self.lib.cuStreamSynchronize(None)

    def alloc(self, n):
        p = self.c.c_ulonglong(0)
        rc = self.lib.cuMemAlloc_v2(self.c.byref(p), n)
        with self.lock:
            self.kept.append(p.value)
        return rc

    def loop(self):
        while True:
            with self.lock:
                period = self.period_ms
            if period <= 0:
                time.sleep(0.01)
                continue
            self.work()
            time.sleep(period / 1000.0)


GPU = None  # StubGpu with --cuda-stub


def param_value(p):
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


def make_server(args):
    st = State(args)
    inputs = [parse_tensor(s) for s in args.input]
    outputs = [parse_tensor(s) for s in args.output]

    def abort(ctx, code, msg):
        ctx.abort(getattr(grpc.StatusCode, code), msg)

    def server_live(req, ctx):
        return pb.ServerLiveResponse(live=True)

    def server_ready(req, ctx):
        with st.lock:
            st.stats["ready_calls"] += 1  # health probes (Stats "ready_calls")
        return pb.ServerReadyResponse(ready=st.ready)

    def model_ready(req, ctx):
        return pb.ModelReadyResponse(ready=st.ready and req.name == args.model)

    def server_metadata(req, ctx):
        return pb.ServerMetadataResponse(name="kserve_test_server", version="1",
                                         extensions=["system_shared_memory", "cuda_shared_memory", "binary_tensor_data"])

    def model_metadata(req, ctx):
        if req.name != args.model:
            abort(ctx, "NOT_FOUND", "Request for unknown model: '%s' is not found" % req.name)
        r = pb.ModelMetadataResponse(name=args.model, versions=["1"], platform="test_identity")
        for t in inputs:
            r.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        for t in outputs:
            r.outputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        return r

    def region_bytes(name, offset, size, ctx):
        reg = st.regions.get(name)
        if reg is None and name in st.cuda_regions:
            dev, rsize, region = st.cuda_regions[name]
            if offset + size > rsize:
                abort(ctx, "INVALID_ARGUMENT", "shared memory region '%s' too small" % name)
            return region, offset
        if reg is None:
            abort(ctx, "INVALID_ARGUMENT",
                  "Unable to find system shared memory region: '%s'" % name)
        key, roff, rsize, mm = reg
        if offset + size > rsize:
            abort(ctx, "INVALID_ARGUMENT", "shared memory region '%s' too small" % name)
        return mm, roff + offset

    def wait_active(ms, ctx):
        """Sleeps `ms` unless the client cancels first: then counts it and returns False."""
        end = time.monotonic() + ms / 1000.0
        while True:
            if not ctx.is_active():
                with st.lock:
                    st.stats["cancelled_calls"] += 1
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.005))

    def model_infer(req, ctx):
        if GPU is not None:
            GPU.work()
        with st.lock:
            latency = st.latency_ms
            hang = st.hang_ms
            fail = st.fail_next > 0
            if fail:
                st.fail_next -= 1
            code = st.fail_code
            st.stats["infer_requests"] += 1
            st.stats["ids"].append(req.id)
            if "priority" in req.parameters:
                st.stats["priorities"].append(param_value(req.parameters["priority"]))
            if "timeout" in req.parameters:
                st.stats["timeouts"].append(param_value(req.parameters["timeout"]))
            if "sequence_id" in req.parameters:  # Stats "sequences": [[id, start, end], ...]
                flag = lambda k: bool(param_value(req.parameters[k])) if k in req.parameters else False
                st.stats.setdefault("sequences", []).append(
                    [param_value(req.parameters["sequence_id"]), flag("sequence_start"),
                     flag("sequence_end")])
        if hang and not wait_active(hang, ctx):
            return pb.ModelInferResponse()  # cancelled: nobody reads it
        if fail:
            abort(ctx, code, "injected failure")
        if req.model_name != args.model:
            abort(ctx, "NOT_FOUND", "Request for unknown model: '%s' is not found" % req.model_name)
        if latency and not wait_active(latency, ctx):
            return pb.ModelInferResponse()
        resp = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
        datas = []
        raw_i = 0
        for t in req.inputs:
            if "shared_memory_region" in t.parameters:
                name = param_value(t.parameters["shared_memory_region"])
                size = param_value(t.parameters["shared_memory_byte_size"])
                off = param_value(t.parameters["shared_memory_offset"]) if "shared_memory_offset" in t.parameters else 0
                mm, pos = region_bytes(name, off, size, ctx)
                datas.append(bytes(mm[pos:pos + size]))
                with st.lock:
                    st.stats["cuda_input_bytes" if name in st.cuda_regions else "shm_input_bytes"] += size
            else:
                if raw_i >= len(req.raw_input_contents):
                    abort(ctx, "INVALID_ARGUMENT", "input '%s' has no data" % t.name)
                datas.append(req.raw_input_contents[raw_i])
                raw_i += 1
                with st.lock:
                    st.stats["raw_input_bytes"] += len(datas[-1])
        if req.inputs and req.inputs[0].shape:
            with st.lock:
                st.stats["batch_sizes"].append(req.inputs[0].shape[0])
        requested = {o.name: o for o in req.outputs}
        for i, t in enumerate(req.inputs):
            if i >= len(outputs):
                break
            oname = outputs[i]["name"]
            if requested and oname not in requested:
                continue
            out = resp.outputs.add(name=oname, datatype=t.datatype, shape=list(t.shape))
            ro = requested.get(oname)
            if ro is not None and "shared_memory_region" in ro.parameters:
                name = param_value(ro.parameters["shared_memory_region"])
                size = param_value(ro.parameters["shared_memory_byte_size"])
                off = param_value(ro.parameters["shared_memory_offset"]) if "shared_memory_offset" in ro.parameters else 0
                if len(datas[i]) > size:
                    abort(ctx, "INVALID_ARGUMENT", "output '%s' larger than its region" % oname)
                mm, pos = region_bytes(name, off, size, ctx)
                mm[pos:pos + len(datas[i])] = datas[i]
                out.parameters["shared_memory_region"].string_param = name
                out.parameters["shared_memory_byte_size"].int64_param = len(datas[i])
                with st.lock:
                    st.stats["cuda_output_bytes" if name in st.cuda_regions else "shm_output_bytes"] += len(datas[i])
            else:
                resp.raw_output_contents.append(datas[i])
        # raw_output_contents must pair with outputs: only allowed when no output used shm
        if resp.raw_output_contents and len(resp.raw_output_contents) != len(resp.outputs):
            abort(ctx, "INTERNAL", "test server: mixed shm/raw outputs not supported")
        return resp

    def shm_register(req, ctx):
        path = "/dev/shm/" + req.key.lstrip("/")
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            abort(ctx, "INVALID_ARGUMENT", "Unable to open shared memory region: '%s': %s" % (req.key, e))
        try:
            mm = mmap.mmap(fd, req.byte_size + req.offset)
        finally:
            os.close(fd)
        with st.lock:
            if req.name in st.regions:
                abort(ctx, "ALREADY_EXISTS", "shared memory region '%s' already in manager" % req.name)
            st.regions[req.name] = (req.key, req.offset, req.byte_size, mm)
            st.stats["registers"] += 1
        return shm_pb.SystemSharedMemoryRegisterResponse()

    def unregister(regions, name, counter, close=lambda reg: None):
        """Removes region `name` (every region when it is empty) from `regions`: close(reg)
        and st.stats[counter] += 1 for each one removed."""
        with st.lock:
            for n in [name] if name else list(regions):
                reg = regions.pop(n, None)
                if reg is not None:
                    close(reg)
                    st.stats[counter] += 1

    def listed(regions, name, ctx, kind):
        """The (name, region) items a status request for `name` (all when empty) lists;
        INVALID_ARGUMENT for a name that is not registered."""
        with st.lock:
            if name and name not in regions:
                abort(ctx, "INVALID_ARGUMENT",
                      "Unable to find %s shared memory region: '%s'" % (kind, name))
            return [(n, reg) for n, reg in regions.items() if not name or n == name]

    def shm_unregister(req, ctx):
        unregister(st.regions, req.name, "unregisters")
        return shm_pb.SystemSharedMemoryUnregisterResponse()

    def shm_status(req, ctx):
        r = shm_pb.SystemSharedMemoryStatusResponse()
        for n, (key, off, size, _) in listed(st.regions, req.name, ctx, "system"):
            s = r.regions[n]
            s.name, s.key, s.offset, s.byte_size = n, key, off, size
        return r

    def cuda_register(req, ctx):
        with st.lock:
            if req.name in st.cuda_regions:
                abort(ctx, "ALREADY_EXISTS", "shared memory region '%s' already in manager" % req.name)
        try:
            region = cuda_shm.open_region(req.raw_handle, req.device_id, req.byte_size,
                                          args.cuda_emulation)
        except cuda_shm.CudaError as e:
            abort(ctx, "INVALID_ARGUMENT", "failed to register CUDA shared memory region '%s': %s"
                  % (req.name, e))
        with st.lock:
            st.cuda_regions[req.name] = (req.device_id, req.byte_size, region)
            st.stats["cuda_registers"] += 1
        return shm_pb.CudaSharedMemoryRegisterResponse()

    def cuda_unregister(req, ctx):
        unregister(st.cuda_regions, req.name, "cuda_unregisters", close=lambda reg: reg[2].close())
        return shm_pb.CudaSharedMemoryUnregisterResponse()

    def cuda_status(req, ctx):
        r = shm_pb.CudaSharedMemoryStatusResponse()
        for n, (dev, size, _) in listed(st.cuda_regions, req.name, ctx, "cuda"):
            s = r.regions[n]
            s.name, s.device_id, s.byte_size = n, dev, size
        return r

    def infer_deserializer(b):
        with st.lock:
            st.stats["infer_request_bytes"].append(len(b))
        return pb.ModelInferRequest.FromString(b)

    def unary(fn, req_cls, deser=None):
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=deser or req_cls.FromString,
            response_serializer=lambda m: m.SerializeToString())

    handlers = {
        "ServerLive": unary(server_live, pb.ServerLiveRequest),
        "ServerReady": unary(server_ready, pb.ServerReadyRequest),
        "ModelReady": unary(model_ready, pb.ModelReadyRequest),
        "ServerMetadata": unary(server_metadata, pb.ServerMetadataRequest),
        "ModelMetadata": unary(model_metadata, pb.ModelMetadataRequest),
        "ModelInfer": unary(model_infer, pb.ModelInferRequest, infer_deserializer),
        "SystemSharedMemoryRegister": unary(shm_register, shm_pb.SystemSharedMemoryRegisterRequest),
        "SystemSharedMemoryUnregister": unary(shm_unregister, shm_pb.SystemSharedMemoryUnregisterRequest),
        "SystemSharedMemoryStatus": unary(shm_status, shm_pb.SystemSharedMemoryStatusRequest),
        "CudaSharedMemoryRegister": unary(cuda_register, shm_pb.CudaSharedMemoryRegisterRequest),
        "CudaSharedMemoryUnregister": unary(cuda_unregister, shm_pb.CudaSharedMemoryUnregisterRequest),
        "CudaSharedMemoryStatus": unary(cuda_status, shm_pb.CudaSharedMemoryStatusRequest),
    }

    handlers["ModelInfer"] = unary(QUEUE.counted(model_infer), pb.ModelInferRequest,
                                   infer_deserializer)  # counted for /metrics

    def ctl_set(req, ctx):
        cfg = json.loads(req or b"{}")
        if "pending_bias" in cfg:
            with QUEUE.lock:
                QUEUE.pending_bias = int(cfg["pending_bias"])
        if GPU is not None:
            if "gpu_sync_delay_ns" in cfg:
                GPU.lib.igStubSetSyncDelayNs(int(cfg["gpu_sync_delay_ns"]))
            if "gpu_alloc_bytes" in cfg:
                GPU.alloc(int(cfg["gpu_alloc_bytes"]))
            if "gpu_period_ms" in cfg:
                with GPU.lock:
                    GPU.period_ms = float(cfg["gpu_period_ms"])
        with st.lock:
            for k in ("latency_ms", "fail_next", "fail_code", "ready", "hang_ms"):
                if k in cfg:
                    setattr(st, k, cfg[k])
        return b"{}"

    def ctl_stats(req, ctx):
        with st.lock:
            s = dict(st.stats)
            s["regions"] = sorted(st.regions)
            s["cuda_regions"] = sorted(st.cuda_regions)
            return json.dumps(s).encode()

    ctl = {
        "Set": grpc.unary_unary_rpc_method_handler(ctl_set),
        "Stats": grpc.unary_unary_rpc_method_handler(ctl_stats),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads),
                         options=[("grpc.max_receive_message_length", 256 << 20),
                                  ("grpc.max_send_message_length", 256 << 20),
                                  ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers),
        grpc.method_handlers_generic_handler("infergate.test.Control", ctl)))
    port = server.add_insecure_port("%s:%d" % (args.host, args.port))
    return server, port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1", help="gRPC listen address")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="identity")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--output", action="append", default=[])
    ap.add_argument("--latency-ms", type=float, default=0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--metrics-port", type=int, default=None,
                    help="also serve Triton-style GET /metrics on 127.0.0.1:PORT (0: any); "
                         "prints METRICS_PORT <n> after PORT <n>")
    ap.add_argument("--cuda-emulation", action="store_true",
                    help="accept infergate's emulated CUDA handles (tests without a GPU)")
    ap.add_argument("--cuda-stub", default=None,
                    help="load this libcuda.so.1 (the tests' stub) and use it per request")
    args = ap.parse_args()
    if args.cuda_stub:
        global GPU
        GPU = StubGpu(args.cuda_stub)
    if not args.input:
        args.input = ["INPUT0:FP32:-1,16"]
    if not args.output:
        args.output = ["OUTPUT0:FP32:-1,16"]
    server, port = make_server(args)
    server.start()
    print("PORT %d" % port, flush=True)
    if args.metrics_port is not None:
        print("METRICS_PORT %d" % serve_metrics(args.metrics_port, args.model), flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
