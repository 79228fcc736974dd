#!/usr/bin/python3
"""Gateway overhead: the same closed-loop KServe v2 gRPC load (ModelInfer, FP32 [1,16]) sent
directly to a test server and through infergate (socket mode, gRPC listener, triton backend)
with shared_memory none and system, in one run. Prints p50/p99 latency per path, the added
p50/p99 over direct, and throughput ratios.

Usage: bench_overhead.py --binary build/app/infergate [--clients 8] [--seconds 5]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import stubs  # noqa: E402

os.environ["INFERGATE_STUBS_DIR"] = stubs.generate()  # the servers reuse it
import grpc  # noqa: E402
import grpc_service_pb2 as pb  # noqa: E402


def start_server():
    p = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "kserve_server.py"), "--port", "0",
                          "--model", "m"], stdout=subprocess.PIPE, text=True)
    port = int(re.match(r"PORT (\d+)", p.stdout.readline()).group(1))
    return p, port


def start_gateway(binary, backend_port, shm, tmp):
    cfg = """
mode: socket
reactors: 1
listeners:
  - {name: grpc, address: 127.0.0.1, port: 0, protocol: grpc}
admin: {address: 127.0.0.1, port: 0}
logging: {level: info}
models:
  - name: m
    backend: triton
    max_batch_size: 8
    inputs: [{name: INPUT0, datatype: FP32, shape: [16]}]
    outputs: [{name: OUTPUT0, datatype: FP32, shape: [16]}]
    triton: {endpoints: ["127.0.0.1:%d"], shared_memory: %s}
""" % (backend_port, shm)
    path = os.path.join(tmp, "gw-%s.yaml" % shm)
    with open(path, "w") as f:
        f.write(cfg)
    log = open(path + ".log", "w+")
    p = subprocess.Popen([binary, "run", "-c", path], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 15
    while time.time() < deadline:
        text = open(path + ".log").read()
        m = re.search(r"listener 'grpc' on [^ ]+:(\d+)", text)
        if m and "serving" in text:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(open(path + ".log").read())


def run_load(port, clients, seconds):
    lat = []
    lock = threading.Lock()
    stop = time.time() + seconds
    req = pb.ModelInferRequest(model_name="m")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    req.raw_input_contents.append(bytes(64))

    def client():
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=pb.ModelInferResponse.FromString)
        infer(req, timeout=10)  # warm-up
        mine = []
        while time.time() < stop:
            t0 = time.perf_counter()
            infer(req, timeout=10)
            mine.append(time.perf_counter() - t0)
        ch.close()
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6  # noqa: E731
    return {"n": len(lat), "rps": len(lat) / (time.time() - t0), "p50": q(0.5), "p99": q(0.99)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ig-bench-")
    srv, sport = start_server()
    procs = [srv]
    try:
        res = {"direct": run_load(sport, a.clients, a.seconds)}
        for shm in ("none", "system"):
            gw, gport = start_gateway(a.binary, sport, shm, tmp)
            procs.append(gw)
            res["infergate grpc" if shm == "none" else "infergate shm"] = run_load(gport, a.clients, a.seconds)
            gw.terminate()
            gw.wait()
        d = res["direct"]
        print("%-16s %8s %10s %10s %10s %10s %10s %8s" % ("path", "requests", "req/s", "p50 us", "p99 us",
                                                         "+p50 us", "+p99 us", "ratio"))
        for k, r in res.items():
            print("%-16s %8d %10.0f %10.0f %10.0f %10.0f %10.0f %8.2f" % (
                k, r["n"], r["rps"], r["p50"], r["p99"], r["p50"] - d["p50"], r["p99"] - d["p99"],
                r["rps"] / d["rps"]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


if __name__ == "__main__":
    main()
