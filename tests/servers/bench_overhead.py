#!/usr/bin/python3
"""Gateway overhead to backends: ONE run sends the same closed-loop KServe v2 gRPC load
(N clients, ModelInfer, FP32 [1,E] as raw_input_contents) to the same test server
(tests/servers/kserve_server.py, identity) along five paths, rounds interleaved:

  direct        clients -> the test server
  socket grpc   clients -> infergate socket mode (gRPC listener)  -> triton backend over gRPC
  socket shm    clients -> infergate socket mode                  -> triton backend, system shm
  afxdp grpc    clients -> infergate afxdp mode (XDP + AF_XDP + its own TCP) -> gRPC
  afxdp shm     clients -> infergate afxdp mode                   -> system shm

Layout (root; default): two fresh network namespaces joined by a veth pair (tests/integration/
netns.py). The clients run in the client namespace, so every path starts with the same kernel
TCP over the veth. The test server, infergate socket mode (listener 0.0.0.0:9001) and infergate
afxdp mode (XDP on the veth, listener 8001) run in the gateway namespace, all at once; each
gateway has two models, `m` (shared_memory: none) and `m_shm` (system), both backed by the
server's model `m` over 127.0.0.1. The test server listens on 0.0.0.0 (--host), so that the
direct path also crosses the veth.

`--loopback` (no root needed): everything on 127.0.0.1 in the current namespace; the afxdp
paths are left out.

Prints, per path, the medians over rounds of p50/p99 latency and throughput, the added p50/p99
over direct (per round, then the median) and the throughput ratio to direct (likewise), and
every round's figures.

Usage: bench_overhead.py --binary build/app/infergate [--clients 8] [--seconds 5] [--rounds 3]
                         [--elements 16] [--batch-delay-us 0] [--loopback]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PATHS = ("direct", "socket grpc", "socket shm", "afxdp grpc", "afxdp shm")

GATEWAY = """
mode: {mode}
reactors: 1
listeners:
  - {{name: grpc, address: {address}, port: {port}, protocol: grpc}}
admin: {{address: 127.0.0.1, port: {admin}}}
logging: {{level: info, access_log: false}}
{xdp}models:
{models}"""

MODEL = """  - name: {name}
    backend: triton
    max_batch_size: 8
    inputs: [{{name: INPUT0, datatype: FP32, shape: [{e}]}}]
    outputs: [{{name: OUTPUT0, datatype: FP32, shape: [{e}]}}]
    triton: {{endpoints: ["127.0.0.1:{sport}"], model_name: m, shared_memory: {shm}}}
{batching}"""


# --- the load (runs as a separate process, in the client namespace when there is one) ---
def run_load(target, model, clients, seconds, elements):
    import stubs
    stubs.generate()
    import grpc
    import grpc_service_pb2 as pb
    raw = struct.pack("<%df" % elements, *[i * 0.5 for i in range(elements)])
    req = pb.ModelInferRequest(model_name=model)
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, elements])
    req.raw_input_contents.append(raw)
    lat, errors, lock = [], [], threading.Lock()
    ready = threading.Barrier(clients + 1)  # every client warmed up: the clock starts

    def client():
        # One HTTP/2 connection per client (grpcio would otherwise share one between channels).
        ch = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0),
                                                    ("grpc.use_local_subchannel_pool", 1)])
        infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=pb.ModelInferResponse.FromString)
        mine, bad = [], []
        try:
            r = infer(req, timeout=10)  # warm-up, and the answer is checked once
            if list(r.raw_output_contents) != [raw]:
                bad.append("wrong output")
        except grpc.RpcError as e:
            bad.append("%s: %s" % (e.code().name, e.details()))
        ready.wait()
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                infer(req, timeout=10)
                mine.append(time.perf_counter() - t0)
            except grpc.RpcError as e:
                bad.append("%s: %s" % (e.code().name, e.details()))
        ch.close()
        with lock:
            lat.extend(mine)
            errors.extend(bad)

    ts = [threading.Thread(target=client) for _ in range(clients)]
    for t in ts:
        t.start()
    ready.wait()
    t_start = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t_start
    lat.sort()

    def q(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6 if lat else float("nan")

    return {"n": len(lat), "rps": len(lat) / elapsed, "p50": q(0.5), "p99": q(0.99),
            "errors": len(errors), "first_error": errors[0] if errors else ""}


# --- the harness ---
class Bench:
    def __init__(self, a):
        self.a = a
        self.tmp = tempfile.mkdtemp(prefix="ig-bench-")
        self.procs = []
        self.net = None
        self.sent = {}  # path -> requests sent (warm-ups included)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.net is not None:
            self.net.__exit__(None, None, None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def gw_prefix(self):
        return ["ip", "netns", "exec", self.net.gw_ns] if self.net else []

    def client_prefix(self):
        return ["ip", "netns", "exec", self.net.client_ns] if self.net else []

    def setup(self):
        import stubs
        os.makedirs(os.path.join(self.tmp, "stubs"))
        os.environ["INFERGATE_STUBS_DIR"] = stubs.generate(os.path.join(self.tmp, "stubs"))
        if not self.a.loopback:
            sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
            import netns
            why = netns.have_root_and_netns()
            if why:
                sys.exit("bench_overhead: %s (or run with --loopback: no afxdp paths)" % why)
            self.net = netns.VethPair().__enter__()
            self.server_host = self.net.gw_ip
            self.socket_host = self.net.gw_ip
        else:
            self.server_host = self.socket_host = "127.0.0.1"
        e = self.a.elements
        spec = "INPUT0:FP32:-1,%d" % e
        cmd = ["/usr/bin/python3", os.path.join(HERE, "kserve_server.py"), "--host", "0.0.0.0", "--port", "0",
               "--model", "m", "--input", spec, "--output", spec.replace("INPUT0", "OUTPUT0")]
        p = subprocess.Popen(self.gw_prefix() + cmd, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        self.sport = int(re.match(r"PORT (\d+)", p.stdout.readline()).group(1))
        self.targets = {"direct": ("%s:%d" % (self.server_host, self.sport), "m")}
        self.start_gateway("socket", self.socket_host, 9001, 9002)
        self.targets["socket grpc"] = ("%s:9001" % self.socket_host, "m")
        self.targets["socket shm"] = ("%s:9001" % self.socket_host, "m_shm")
        if self.net:
            self.start_gateway("afxdp", self.net.gw_ip, 8001, 8002)
            self.targets["afxdp grpc"] = ("%s:8001" % self.net.gw_ip, "m")
            self.targets["afxdp shm"] = ("%s:8001" % self.net.gw_ip, "m_shm")

    def start_gateway(self, mode, host, port, admin):
        batching = ("    dynamic_batching: {max_queue_delay_us: %d}\n" % self.a.batch_delay_us
                    if self.a.batch_delay_us > 0 else "")
        models = "".join(MODEL.format(name=n, e=self.a.elements, sport=self.sport, shm=shm, batching=batching)
                         for n, shm in (("m", "none"), ("m_shm", "system")))
        xdp = "xdp: {interface: %s, attach: native}\n" % self.net.gw_if if mode == "afxdp" else ""
        address = "0.0.0.0" if self.net else "127.0.0.1"
        cfg = os.path.join(self.tmp, "gw-%s.yaml" % mode)
        with open(cfg, "w") as f:
            f.write(GATEWAY.format(mode=mode, address=address, port=port, admin=admin, xdp=xdp, models=models))
        log = cfg + ".log"
        cmd = [self.a.binary, "run", "-c", cfg]
        with open(log, "w") as lf:
            p = (self.net.popen_gw(cmd, stdout=lf, stderr=subprocess.STDOUT) if self.net
                 else subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT))
        self.procs.append(p)
        deadline = time.time() + 20
        while time.time() < deadline:
            text = open(log).read()
            if "serving" in text:
                return
            if p.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("infergate (%s) did not start:\n%s" % (mode, open(log).read()))

    def gateway_counters(self):
        """Per gateway and model: batches sent, tensor bytes over gRPC and through shm."""
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
        import harness
        out = {}
        for mode, admin in (("socket", 9002), ("afxdp", 8002)):
            if mode == "afxdp" and not self.net:
                continue
            r = subprocess.run(self.gw_prefix() + ["curl", "-sS", "http://127.0.0.1:%d/metrics" % admin],
                               capture_output=True, text=True, timeout=30)
            for model in ("m", "m_shm"):
                out["%s %s" % (mode, model)] = {
                    k: harness.parse_metric(r.stdout, name, model=model, **lab)
                    for k, name, lab in (("batches", "infergate_backend_batches_total", {}),
                                         ("grpc_bytes", "infergate_backend_tensor_bytes_total", {"path": "grpc"}),
                                         ("shm_bytes", "infergate_backend_tensor_bytes_total", {"path": "shm"}))}
        return out

    def load(self, path, seconds):
        target, model = self.targets[path]
        cmd = self.client_prefix() + ["/usr/bin/python3", os.path.abspath(__file__), "--worker", target,
                                      model, str(self.a.clients), str(seconds), str(self.a.elements)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        if r.returncode != 0:
            raise RuntimeError("load on %s failed: %s" % (path, r.stderr[-2000:]))
        res = json.loads(r.stdout.splitlines()[-1])
        self.sent[path] = self.sent.get(path, 0) + res["n"] + self.a.clients  # + each client's warm-up
        return res


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        target, model, clients, seconds, elements = sys.argv[2:7]
        print(json.dumps(run_load(target, model, int(clients), float(seconds), int(elements))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--elements", type=int, default=16, help="FP32 elements per request")
    ap.add_argument("--batch-delay-us", type=int, default=0,
                    help="infergate dynamic batching max_queue_delay_us (0: no dynamic batching, "
                         "each request is its own ModelInfer)")
    ap.add_argument("--loopback", action="store_true",
                    help="no namespaces (no root needed): 127.0.0.1 only, no afxdp paths")
    a = ap.parse_args()
    a.binary = os.path.abspath(a.binary)
    b = Bench(a)
    try:
        b.setup()
        paths = [p for p in PATHS if p in b.targets]
        print("clients %d, %gs per path per round, %d rounds, FP32 [1,%d] (%d bytes), layout %s, "
              "dynamic batching %s" % (a.clients, a.seconds, a.rounds, a.elements, 4 * a.elements,
                                       "loopback" if a.loopback else "veth (clients in their own namespace)",
                                       "%d us" % a.batch_delay_us if a.batch_delay_us else "off"), flush=True)
        for p in paths:  # warm-up: connections, regions, caches
            b.load(p, 1)
        rounds = []
        for i in range(a.rounds):
            order = paths if i % 2 == 0 else paths[::-1]  # interleaved, alternating direction
            res = {}
            for p in order:
                res[p] = b.load(p, a.seconds)
            rounds.append(res)
            print("round %d: " % (i + 1) + "; ".join(
                "%s %.0f req/s p50 %.0f p99 %.0f%s" % (p, res[p]["rps"], res[p]["p50"], res[p]["p99"],
                                                       " ERRORS %d (%s)" % (res[p]["errors"], res[p]["first_error"])
                                                       if res[p]["errors"] else "")
                for p in paths), flush=True)
        med = statistics.median
        print()
        print("%-12s %8s %9s %9s %9s %9s %9s %9s %7s" % ("path", "requests", "req/s", "p50 us", "p99 us",
                                                         "+p50 us", "+p99 us", "ratio", "errors"))
        for p in paths:
            rs = [r[p] for r in rounds]
            add50 = med([r[p]["p50"] - r["direct"]["p50"] for r in rounds])
            add99 = med([r[p]["p99"] - r["direct"]["p99"] for r in rounds])
            ratio = med([r[p]["rps"] / r["direct"]["rps"] for r in rounds])
            print("%-12s %8d %9.0f %9.0f %9.0f %+9.0f %+9.0f %9.2f %7d" % (
                p, sum(x["n"] for x in rs), med([x["rps"] for x in rs]), med([x["p50"] for x in rs]),
                med([x["p99"] for x in rs]), add50, add99, ratio, sum(x["errors"] for x in rs)))
        print("(medians over %d rounds; +p50/+p99 and ratio: per round against direct, then the median)"
              % a.rounds)
        # Which path the tensors took, and how many ModelInfer calls the requests became.
        counters = b.gateway_counters()
        for p in paths[1:]:
            c = counters[p.replace(" grpc", " m").replace(" shm", " m_shm")]
            print("check %-11s %d requests (warm-ups included) -> %d backend batches; tensor bytes over "
                  "gRPC %d, through shm %d" % (p, b.sent[p], c["batches"], c["grpc_bytes"], c["shm_bytes"]))
    finally:
        b.close()


if __name__ == "__main__":
    main()
