"""Remote backends behind afxdp mode: infergate in afxdp mode (XDP redirect to an AF_XDP socket
on a veth, infergate's own TCP stack) with a triton backend of 2-3 KServe v2 gRPC test servers
(tests/servers/kserve_server.py).

Where things run: clients in the client namespace reach infergate over the veth (the afxdp
path). The test servers run in the gateway namespace on its loopback: the triton backend's gRPC
client uses the kernel's sockets (only the service ports on the XDP interface go to infergate's
own stack), so its endpoints are 127.0.0.1:<port> in infergate's namespace. The servers' control
service and infergate's admin listener are reached from helpers run in that namespace.

Asserts: KServe REST (JSON and binary tensors) and gRPC requests come back byte-exact through
batching and the pool; with shared_memory: system no tensor byte crosses gRPC (the servers'
received ModelInfer sizes, shm_input_bytes); an endpoint killed mid-load -> every in-flight
request answered (200, or 503 / UNAVAILABLE naming the endpoint; none lost or hung), traffic
moves to the others, the endpoint is re-admitted after restart.
Skips (exit 77) as test_afxdp.py does: without root or network namespaces.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
import netns  # noqa: E402


def config(ifname, endpoints, shm):
    """afxdp mode on `ifname` (listeners 8000 http, 8001 grpc; admin 8002), the triton model
    `remote` with `endpoints` (addresses) and shared_memory `shm`."""
    return bf.gateway_config(
        bf.model_yaml(endpoints=['"%s"' % e for e in endpoints], startup_timeout_ms=5000,
                      extra="      shared_memory: %s" % shm),
        mode="afxdp", reactors=1, address="0.0.0.0", http_port=8000, grpc_port=8001, admin_port=8002,
        xdp="xdp:\n  interface: %s\n  attach: native\n" % ifname)


# Runs in the gateway namespace: Control/<method> on each test server; prints {port: reply}.
CONTROL = r'''
import json, sys
import grpc
method, body, ports = sys.argv[1], sys.argv[2].encode(), sys.argv[3:]
out = {}
for p in ports:
    ch = grpc.insecure_channel("127.0.0.1:%s" % p, options=[("grpc.enable_http_proxy", 0)])
    out[p] = json.loads(ch.unary_unary("/infergate.test.Control/" + method)(body, timeout=5))
    ch.close()
print(json.dumps(out))
'''

# Runs in the client namespace: closed-loop clients against infergate over the veth.
# argv: JSON {host, stubs, here, rest, grpc, per, seed}. `rest` clients alternate JSON and binary-tensor
# requests on one keep-alive connection each (reconnecting after an error); `grpc` clients send
# ModelInfer with raw contents on a channel each. Every request's tensor is distinct bit
# patterns. Prints "STARTED" once the clients run, then one JSON line:
# [[kind, status, exact, error, unix time answered], ...] with status 200 / 503 (gRPC UNAVAILABLE) / the gRPC code
# name / -1 (no answer: exception or hang).
LOAD = r'''
import json, socket, struct, sys, threading, time
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["stubs"])
sys.path.insert(0, cfg["here"])
import grpc
import grpc_service_pb2 as pb
from harness import read_response
host = cfg["host"]
results, lock = [], threading.Lock()
started = threading.Barrier(cfg["rest"] + cfg["grpc"] + 1)

def tensor(c, i):
    words = [(cfg["seed"] * 7 + c * 7919 + i * 104729 + k * 2654435761) & 0x7f7fffff for k in range(16)]
    return struct.pack("<16I", *words)  # finite floats, exact in JSON via repr

def rest_client(c):
    s, buf = None, b""
    started.wait()
    for i in range(cfg["per"]):
        raw = tensor(c, i)
        vals = list(struct.unpack("<16f", raw))
        binary = i % 2 == 1
        if binary:
            hdr = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                          "parameters": {"binary_data_size": 64}}],
                              "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
            req = (b"POST /v2/models/remote/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: %d\r\n"
                   b"Content-Length: %d\r\n\r\n" % (len(hdr), len(hdr) + 64)) + hdr + raw
        else:
            body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                           "data": vals}]}).encode()
            req = (b"POST /v2/models/remote/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        st, exact, err = -1, False, ""
        try:
            if s is None:
                s = socket.create_connection((host, 8000), timeout=30)
                buf = b""
            s.sendall(req)
            st, h, body, buf = read_response(s, buf)
            if st == 200 and binary:
                k = int(h.get("inference-header-content-length", "0"))
                exact = body[k:] == raw and json.loads(body[:k])["outputs"][0]["name"] == "OUTPUT0"
            elif st == 200:
                out = json.loads(body)["outputs"][0]
                exact = out["name"] == "OUTPUT0" and struct.pack("<16f", *out["data"]) == raw
            else:
                err = json.loads(body or b"{}").get("error", body.decode(errors="replace"))
        except Exception as e:
            err = repr(e)
            if s is not None:
                s.close()
            s = None
        with lock:
            results.append(["rest-bin" if binary else "rest-json", st, exact, err, time.time()])
    if s is not None:
        s.close()

def grpc_client(c):
    # A connection per client (grpcio would otherwise share one between equal channels).
    ch = grpc.insecure_channel("%s:8001" % host, options=[("grpc.enable_http_proxy", 0),
                                                          ("grpc.use_local_subchannel_pool", 1)])
    infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                           request_serializer=lambda m: m.SerializeToString(),
                           response_deserializer=pb.ModelInferResponse.FromString)
    started.wait()
    for i in range(cfg["per"]):
        raw = tensor(1000 + c, i)
        req = pb.ModelInferRequest(model_name="remote", id="g%d-%d" % (c, i))
        req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(raw)
        st, exact, err = -1, False, ""
        try:
            r = infer(req, timeout=30)
            st = 200
            exact = (r.id == req.id and len(r.outputs) == 1 and r.outputs[0].name == "OUTPUT0"
                     and list(r.outputs[0].shape) == [1, 16] and list(r.raw_output_contents) == [raw])
        except grpc.RpcError as e:
            code = e.code()
            st = 503 if code == grpc.StatusCode.UNAVAILABLE else code.name
            err = e.details() or ""
        except Exception as e:
            err = repr(e)
        with lock:
            results.append(["grpc", st, exact, err, time.time()])
    ch.close()

ts = [threading.Thread(target=rest_client, args=(c,)) for c in range(cfg["rest"])]
ts += [threading.Thread(target=grpc_client, args=(c,)) for c in range(cfg["grpc"])]
for t in ts:
    t.start()
started.wait()
print("STARTED", flush=True)
for t in ts:
    t.join(timeout=90)
if any(t.is_alive() for t in ts):
    with lock:
        n = len(results)
    print(json.dumps({"hung": sum(t.is_alive() for t in ts), "answered": n}), flush=True)
    import os
    os._exit(3)
print(json.dumps(results), flush=True)
'''


def setUpModule():
    # Skips are per test, not per module or class: harness.main() reports "skipped" (77) only
    # when tests ran and all skipped, and a module/class-level skip runs none (exit 0).
    bf.set_up_stubs(skip_per_test=True, precheck=netns.have_root_and_netns)


def tearDownModule():
    bf.tear_down_stubs()


class BackendsAfXdpTest(netns.VethTestCase):
    tmp_prefix = "ig-afxdp-be-"

    @classmethod
    def setUpClass(cls):
        pass  # see setUpModule: the skip is per test

    def setUp(self):
        if bf.MISSING:
            self.skipTest(bf.MISSING)
        super().setUp()
        self.gw = None
        self.log = None

    def tearDown(self):
        try:
            if self.gw is not None and self.gw.poll() is None:
                self.gw.terminate()
                try:
                    self.gw.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            super().tearDown()

    # --- helpers ---
    def servers(self, n, *args):
        """n kserve_server.py in the gateway namespace (their endpoints: 127.0.0.1:<port> there)."""
        return [bf.TestServer(args=args, net=self.net) for _ in range(n)]

    def start_gateway(self, servers, shm="none"):
        net = self.net
        self.gw, self.log = netns.start_gateway(net, config(net.gw_if, [s.address for s in servers], shm))
        self.assertIn("bound in copy mode", open(self.log).read())

    def stop_gateway(self):
        self.gw.terminate()
        rc = self.gw.wait(timeout=20)
        self.gw = None
        return rc

    def log_tail(self):
        return open(self.log).read()[-3000:] if self.log else ""

    def metric(self, name, **labels):
        return netns.gateway_metric(self.net, name, **labels)

    def control(self, servers, method="Stats", body=None):
        r = self.net.run_gw(["/usr/bin/python3", "-c", CONTROL, method, json.dumps(body or {})]
                            + [str(s.port) for s in servers], timeout=60, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        return [out[str(s.port)] for s in servers]

    def load_cmd(self, rest, grpc_clients, per, seed=0):
        cfg = {"host": self.net.gw_ip, "stubs": bf.STUBS.name, "here": HERE, "rest": rest, "grpc": grpc_clients,
               "per": per, "seed": seed}
        return ["ip", "netns", "exec", self.net.client_ns, "/usr/bin/python3", "-c", LOAD, json.dumps(cfg)]

    def load(self, rest, grpc_clients, per, seed=0, check=True):
        r = subprocess.run(self.load_cmd(rest, grpc_clients, per, seed), capture_output=True, text=True,
                           timeout=150)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:] + self.log_tail())
        results = json.loads(r.stdout.splitlines()[-1])
        self.assertEqual(len(results), (rest + grpc_clients) * per)
        if check:
            bad = [x for x in results if x[1] != 200 or not x[2]]
            self.assertEqual(bad, [], "%d of %d not exact: %r\n%s" % (len(bad), len(results), bad[:3],
                                                                      self.log_tail()))
        return results

    # --- tests ---
    def test_rest_and_grpc_exact_through_batching(self):
        servers = self.servers(3)
        self.start_gateway(servers)
        self.assertEqual(self.metric("infergate_backend_healthy", model="remote"), 3)
        rest, grpc_clients, per = 4, 4, 30
        results = self.load(rest, grpc_clients, per)
        kinds = {k: sum(1 for x in results if x[0] == k) for k in ("rest-json", "rest-bin", "grpc")}
        self.assertEqual(kinds, {"rest-json": rest * per // 2, "rest-bin": rest * per // 2,
                                 "grpc": grpc_clients * per})
        stats = self.control(servers)
        total = (rest + grpc_clients) * per
        # Every tensor byte reached a server once, raw in ModelInfer; batches of several rows.
        self.assertEqual(sum(s["raw_input_bytes"] for s in stats), total * 64)
        self.assertEqual(sum(s["shm_input_bytes"] for s in stats), 0)
        sizes = [b for s in stats for b in s["batch_sizes"]]
        self.assertEqual(sum(sizes), total)
        self.assertGreater(max(sizes), 1, sizes)
        for s in stats:
            self.assertGreater(s["infer_requests"], 0, "an endpoint got no batch: %r" % [x["infer_requests"] for x in stats])
        self.assertEqual(self.metric("infergate_backend_tensor_bytes_total", path="grpc"), total * 64)
        self.assertEqual(self.metric("infergate_backend_batches_total", model="remote"), len(sizes))
        # The client side really was the afxdp path: our TCP stack accepted the connections.
        self.assertGreaterEqual(self.metric("infergate_tcp_accepted_total"), rest + grpc_clients)
        self.assertEqual(self.metric("infergate_tcp_drops_total", reason="bad_tcp_checksum"), 0)
        self.assertEqual(self.stop_gateway(), 0, self.log_tail())

    def test_system_shm_moves_no_tensor_bytes_over_grpc(self):
        servers = self.servers(2)
        self.start_gateway(servers, shm="system")
        rest, grpc_clients, per = 3, 3, 20
        self.load(rest, grpc_clients, per)
        total = (rest + grpc_clients) * per
        stats = self.control(servers)
        for s in stats:
            self.assertEqual(s["raw_input_bytes"], 0)
            # The slots (outputs) and the batcher's input buffers themselves.
            self.assertEqual(len(s["regions"]), 2, s["regions"])
            # No ModelInfer message could carry a 64-byte row: all are header-sized.
            if s["infer_request_bytes"]:
                self.assertLess(max(s["infer_request_bytes"]), 400, s["infer_request_bytes"])
        self.assertEqual(sum(s["shm_input_bytes"] for s in stats), total * 64)
        self.assertGreater(sum(len(s["infer_request_bytes"]) for s in stats), 0)
        self.assertEqual(self.metric("infergate_backend_tensor_bytes_total", path="grpc"), 0)
        self.assertEqual(self.metric("infergate_backend_tensor_bytes_total", path="shm"), total * 64)
        self.assertEqual(self.metric("infergate_backend_shm_copied_bytes_total"), 0)
        # Shutdown unregisters the region at every endpoint.
        self.assertEqual(self.stop_gateway(), 0, self.log_tail())
        self.assertEqual([s["regions"] for s in self.control(servers)], [[], []])

    def test_endpoint_killed_mid_load_then_readmitted(self):
        servers = self.servers(3, "--latency-ms", "5")
        self.start_gateway(servers)
        victim = servers[0]
        rest, grpc_clients, per = 3, 3, 150
        p = subprocess.Popen(self.load_cmd(rest, grpc_clients, per, seed=1), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "STARTED", p.stderr.read() if p.poll() else "")
            # Slow the victim down first so that batches are certainly in flight there when it
            # dies (those must come back 503 naming it; the rest must not notice).
            self.control([victim], "Set", {"latency_ms": 1000})
            time.sleep(0.3)
            victim.kill()
            killed_at = time.time()
            out, err = p.communicate(timeout=150)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, "a request hung or the client failed: %s %s" % (out[-500:], err[-2000:]))
        results = json.loads(out.splitlines()[-1])
        self.assertEqual(len(results), (rest + grpc_clients) * per)  # every request answered
        bad = [x for x in results if x[1] != 200]
        for kind, st, exact, msg, _ in bad:
            self.assertEqual(st, 503, (kind, st, msg))
            self.assertIn(victim.address, msg, (kind, st, msg))
        for kind, st, exact, msg, _ in results:
            if st == 200:
                self.assertTrue(exact, (kind, msg))
        self.assertLess(len(bad), len(results) // 4, bad[:3])
        self.assertGreater(len(bad), 0, "no batch was in flight at the victim")
        self.assertGreaterEqual(self.metric("infergate_backend_errors_total", endpoint=victim.address), 1)
        # The kill really was mid-load (answers on both sides of it), and the victim carried
        # traffic before it died.
        after = sum(1 for x in results if x[4] > killed_at)
        self.assertGreater(after, len(results) // 5, "the load ended before the kill")
        self.assertGreater(len(results) - after, 0)
        self.assertGreater(self.metric("infergate_backend_batches_total", endpoint=victim.address), 0)
        print("\n[afxdp endpoint kill] %d requests (%d answered after the kill): %d x 200, %d x 503 "
              "naming %s; victim's failed batches %d, batches moved (never left) %d"
              % (len(results), after, len(results) - len(bad), len(bad), victim.address,
                 self.metric("infergate_backend_errors_total", endpoint=victim.address),
                 self.metric("infergate_backend_retries_total", model="remote")), file=sys.stderr)

        # Traffic moved: the survivors serve everything now.
        self.assertNotEqual(self.metric("infergate_backend_healthy", endpoint=victim.address), 1)
        victim_batches = self.metric("infergate_backend_batches_total", endpoint=victim.address)
        self.load(2, 2, 10, seed=2)
        self.assertEqual(self.metric("infergate_backend_batches_total", endpoint=victim.address), victim_batches)

        # Restart on the same port: re-admitted and used again.
        victim.start()
        bf.wait_for(lambda: self.metric("infergate_backend_healthy", endpoint=victim.address) == 1,
                    interval=0.2)
        self.assertEqual(self.metric("infergate_backend_healthy", endpoint=victim.address), 1, self.log_tail())
        self.load(3, 3, 20, seed=3)
        self.assertGreater(self.control([victim])[0]["infer_requests"], 0)
        self.assertIn("healthy again", open(self.log).read())
        self.assertEqual(self.stop_gateway(), 0, self.log_tail())


if __name__ == "__main__":
    harness.main()
