"""afxdp mode in fresh network namespaces joined by a veth pair: the XDP program redirects
service-port TCP to an AF_XDP socket (copy mode: veth has no zero-copy) and infergate's own
TCP stack serves it. Real clients in the client namespace (curl, wrk, the kernel's TCP through
Python sockets) talk to infergate in the gateway namespace; ARP and ping still reach the
gateway namespace's kernel."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

CONFIG = """
mode: afxdp
reactors: {reactors}
listeners:
  - {{name: http, address: 0.0.0.0, port: 8000, protocol: http}}
  - {{name: grpc, address: 0.0.0.0, port: 8001, protocol: grpc}}
admin: {{address: 127.0.0.1, port: 8002}}
limits: {{max_body_bytes: 67108864, max_connections: 4096}}
xdp:
  interface: {ifname}
  attach: native
{xdp_extra}models:
""" + harness.braces(harness.IDENTITY_MODEL + harness.model_yaml("big", [-1], 0, "UINT8"))

BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                               "data": list(range(16))}]})

# Runs in the client namespace over the kernel's TCP: keep-alive requests on one connection,
# then a large binary-tensor request whose echo must come back byte-exact. Prints JSON.
CLIENT = netns.SCRIPT_PATH + r'''
import json, os, random, socket, sys, time
host, size = sys.argv[1], int(sys.argv[2])
from harness import read_response
out = {}
s = socket.create_connection((host, 8000), timeout=20)
body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                               "data": [float(i) * 1.5 for i in range(16)]}]}).encode()
req = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
ok = 0
for _ in range(50):
    s.sendall(req)
    st, h, b, _ = read_response(s)
    if st == 200 and json.loads(b)["outputs"][0]["data"] == [float(i) * 1.5 for i in range(16)]:
        ok += 1
out["keepalive_ok"] = ok
s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
out["ready"] = read_response(s)[0]
# Large binary tensor, up and down.
rnd = random.Random(7)
raw = bytes(rnd.getrandbits(8) for _ in range(4096)) * (size // 4096)
header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [len(raw)], "datatype": "UINT8",
                                 "parameters": {"binary_data_size": len(raw)}}],
                     "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
t0 = time.time()
s.sendall(b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
          b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(header), len(header) + len(raw))
          + header + raw)
st, h, b, _ = read_response(s)
n = int(h.get("inference-header-content-length", "0"))
out["big_status"] = st
out["big_bytes"] = len(b) - n
out["big_exact"] = b[n:] == raw
out["big_s"] = round(time.time() - t0, 3)
s.close()
print(json.dumps(out))
'''

PING = netns.PING_SCRIPT



# Runs in the client namespace: N requests on one keep-alive connection; prints the statuses.
BURST_CLIENT = r'''
import json, socket, sys
host, n, body = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
s = socket.create_connection((host, 8000), timeout=10)
req = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
out, buf = [], b""
for _ in range(n):
    s.sendall(req)
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise RuntimeError("eof")
        buf += d
    head, _, buf = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    clen = [int(l.split(":", 1)[1]) for l in lines[1:] if l.lower().startswith("content-length")][0]
    while len(buf) < clen:
        buf += s.recv(65536)
    body_out, buf = buf[:clen], buf[clen:]
    out.append([int(lines[0].split()[1]), body_out.decode(errors="replace")[:200]])
print(json.dumps(out))
'''

# Runs in the client namespace: python grpcio (stubs generated from frontend/proto) against the
# grpc listener: ServerReady, 20 ModelInfer calls with raw contents, a 1 MiB UINT8 tensor.
GRPC_CLIENT = r'''
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import grpc
import grpc_service_pb2 as pb, grpc_service_pb2_grpc as svc
ch = grpc.insecure_channel("%s:8001" % sys.argv[2], options=[("grpc.enable_http_proxy", 0)])
stub = svc.GRPCInferenceServiceStub(ch)
out = {"ready": stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready}
ok = 0
for i in range(20):
    vals = [float(i * 16 + k) * 0.5 for k in range(16)]
    req = pb.ModelInferRequest(model_name="identity", id="r%d" % i)
    inp = req.inputs.add()
    inp.name, inp.datatype = "INPUT0", "FP32"
    inp.shape.extend([1, 16])
    req.raw_input_contents.append(struct.pack("<16f", *vals))
    r = stub.ModelInfer(req, timeout=10)
    if (r.id == "r%d" % i and r.model_name == "identity" and r.outputs[0].name == "OUTPUT0"
            and list(r.outputs[0].shape) == [1, 16]
            and list(struct.unpack("<16f", r.raw_output_contents[0])) == vals):
        ok += 1
out["infer_ok"] = ok
raw = bytes(range(256)) * 4096
req = pb.ModelInferRequest(model_name="big")
inp = req.inputs.add()
inp.name, inp.datatype = "INPUT0", "UINT8"
inp.shape.extend([len(raw)])
req.raw_input_contents.append(raw)
r = stub.ModelInfer(req, timeout=30)
out["big_exact"] = len(r.raw_output_contents) == 1 and r.raw_output_contents[0] == raw
ch.close()
print(json.dumps(out))
'''

# Runs in the client namespace: one-copy probes (docs/BATCHING.md "One copy"). argv: mode
# ("binary" | "grpc"), host, stubs dir. binary: binary-extension requests on one keep-alive
# connection, one at a time (a small one, one whose 4 KiB id spreads the request over several
# TCP segments, and the raw binary body); grpc: ModelInfer with raw_input_contents (a small one
# and one with a 4 KiB id). Prints JSON: how many were answered with the exact tensor, and the
# tensor bytes sent.
ONE_COPY_CLIENT = r'''
import json, socket, struct, sys
mode, host = sys.argv[1], sys.argv[2]
raw = struct.pack("<16f", *[float(i) + 0.5 for i in range(16)])
ok, sent = 0, 0
if mode == "binary":
    s = socket.create_connection((host, 8000), timeout=20)
    def roundtrip(header, body):
        s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                  % (len(header), len(body)) + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, body_out = buf.split(b"\r\n\r\n", 1)
        hdrs = {l.split(b":", 1)[0].strip().lower(): l.split(b":", 1)[1].strip()
                for l in head.split(b"\r\n")[1:]}
        n = int(hdrs[b"content-length"])
        while len(body_out) < n:
            body_out += s.recv(65536)
        k = int(hdrs.get(b"inference-header-content-length", b"0"))
        return head.split(b" ")[1] == b"200" and body_out[k:] == raw
    for rid in ("small", "x" * 4096):
        header = json.dumps({"id": rid, "inputs": [{"name": "INPUT0", "datatype": "FP32",
                             "shape": [1, 16], "parameters": {"binary_data_size": len(raw)}}],
                             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
        ok += roundtrip(header, header + raw)
        sent += len(raw)
    ok += roundtrip(b"", raw)  # the raw binary body (Inference-Header-Content-Length: 0)
    sent += len(raw)
    s.close()
else:
    sys.path.insert(0, sys.argv[3])
    import grpc
    import grpc_service_pb2 as pb, grpc_service_pb2_grpc as svc
    ch = grpc.insecure_channel("%s:8001" % host, options=[("grpc.enable_http_proxy", 0)])
    stub = svc.GRPCInferenceServiceStub(ch)
    for rid in ("small", "x" * 4096):
        req = pb.ModelInferRequest(model_name="identity", id=rid)
        inp = req.inputs.add()
        inp.name, inp.datatype = "INPUT0", "FP32"
        inp.shape.extend([1, 16])
        req.raw_input_contents.append(raw)
        r = stub.ModelInfer(req, timeout=10)
        ok += r.id == rid and r.raw_output_contents[0] == raw
        sent += len(raw)
    ch.close()
print(json.dumps({"ok": ok, "sent": sent}))
'''

ONE_COPY_COUNTERS = ("request_bytes", "slot_bytes", "bytes_copied", "staged_bytes", "compacted_bytes")


# Runs in the client namespace: a NEW connection whose first segment is a malformed request
# start (a method the program does not admit). Prints "reset", "eof" or the bytes answered.
REJECT_CLIENT = r'''
import socket, sys
s = socket.create_connection((sys.argv[1], 8000), timeout=10)
s.sendall(b"BREW /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
try:
    d = s.recv(4096)
    print("eof" if not d else repr(d))
except ConnectionResetError:
    print("reset")
'''


def config(net, reactors=1, xdp_extra=""):
    return CONFIG.format(ifname=net.gw_if, reactors=reactors, xdp_extra=xdp_extra)


def start_gateway(net, name="gw", reactors=1, env=None, expect_start=True, xdp_extra=""):
    return netns.start_gateway(net, config(net, reactors, xdp_extra), name=name, env=env,
                               expect_start=expect_start)


stop = netns.stop_gateway
metric = netns.gateway_metric


def grpc_stubs(folder):
    """Generates the python grpcio stubs of frontend/proto/grpc_service.proto into folder."""
    proto_dir = os.path.join(harness.ARGS.source, "frontend", "proto")
    return subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I" + proto_dir,
                           "-I/usr/include", "--python_out=" + folder, "--grpc_python_out=" + folder,
                           os.path.join(proto_dir, "grpc_service.proto")],
                          capture_output=True, text=True)


class AfXdpTest(netns.VethTestCase):
    tmp_prefix = "ig-afxdp-"

    def curl_infer(self):
        r = self.net.run_client(["curl", "-sS", "--max-time", "10", "-d", BODY,
                                 "http://%s:8000/v2/models/identity/infer" % self.net.gw_ip], check=False)
        return r

    def test_serves_end_to_end_and_restarts(self):
        net = self.net
        p, log = start_gateway(net)
        try:
            text = open(log).read()
            self.assertIn("bound in copy mode", text)
            # The tag placement the start-up probe picked (docs/HOSTS.md): the prefix where
            # the probe is told the kernel refuses metadata (this test's `.prefix` run).
            if "xdp_adjust_meta" in os.environ.get("INFERGATE_PROBE_REFUSE", "").split(","):
                self.assertIn("tags reach the stack as a 16-byte prefix", text)
            else:
                self.assertRegex(text, r"tags reach the stack (in XDP metadata|as a 16-byte prefix)")
            self.assertRegex(text, r"afxdp: %s \(%s " % (net.gw_if, re.escape(net.gw_ip)))
            self.assertIn("xdp", net.run_gw(["ip", "link", "show", net.gw_if]).stdout)
            # The kernel has no socket on the service port: whatever answers is infergate.
            self.assertNotIn(":8000", net.run_gw(["ss", "-ltnH"]).stdout)

            # curl
            r = self.curl_infer()
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])
            self.assertEqual(json.loads(r.stdout)["outputs"][0]["data"], list(range(16)))

            # Python client over the kernel's TCP: keep-alive + a 4 MiB tensor up and down.
            r = net.run_client(["/usr/bin/python3", "-c", CLIENT, net.gw_ip, str(4 << 20)],
                               timeout=120, check=False)
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])
            res = json.loads(r.stdout)
            self.assertEqual(res["keepalive_ok"], 50, res)
            self.assertEqual(res["ready"], 200, res)
            self.assertEqual(res["big_status"], 200, res)
            self.assertEqual(res["big_bytes"], 4 << 20, res)
            self.assertTrue(res["big_exact"], res)

            # wrk: keep-alive load, no errors.
            script = os.path.join(harness.ARGS.source, "bench", "wrk", "infer.lua")
            out = net.run_client(["wrk", "-t1", "-c16", "-d3s", "-s", script,
                                  "http://%s:8000/" % net.gw_ip], timeout=60).stdout
            w = json.loads(re.search(r"WRK_JSON (\{.*\})", out).group(1))
            self.assertGreater(w["requests"], 100, out)
            self.assertEqual(w["errors"], 0, out)

            # ARP and ping still answered by the kernel: forget the neighbour, then ping (the
            # echo needs ARP first), then the neighbour entry holds the gateway's MAC.
            net.run_client(["ip", "neigh", "flush", "dev", net.client_if])
            r = net.run_client(["/usr/bin/python3", "-c", PING, net.gw_ip], timeout=30)
            self.assertEqual(r.stdout.strip(), "reply", r.stdout + r.stderr)
            gw_mac = re.search(r"link/ether (\S+)", net.run_gw(["ip", "link", "show", net.gw_if]).stdout).group(1)
            neigh = net.run_client(["ip", "neigh", "show", net.gw_ip, "dev", net.client_if]).stdout
            self.assertIn(gw_mac, neigh)

            # Counters: our TCP accepted the connections, the program redirected, copy mode.
            self.assertGreaterEqual(metric(net, "infergate_tcp_accepted_total"), 18)
            self.assertGreater(metric(net, "infergate_tcp_segments_in_total"), 1000)
            self.assertEqual(metric(net, "infergate_tcp_drops_total", reason="bad_tcp_checksum"), 0)
            self.assertGreater(metric(net, "infergate_xdp_packets_total", verdict="redirect"), 1000)
            self.assertGreater(metric(net, "infergate_xdp_packets_total", verdict="pass", reason="not_ip"), 0)
            self.assertEqual(metric(net, "infergate_afxdp_zero_copy"), 0)
            self.assertEqual(metric(net, "infergate_afxdp_kernel_rx_invalid_descs_total"), 0)
            # Every redirected frame carried its tag, wherever it was placed.
            self.assertEqual(metric(net, "infergate_afxdp_meta_missing_total"), 0)
            self.assertEqual(metric(net, "infergate_xdp_packets_total", reason="no_tag_room"), 0)
        finally:
            rc = stop(p)
        text = open(log).read()
        self.assertEqual(rc, 0, text[-3000:])
        self.assertIn("XDP program detached", text)
        self.assertNotIn("xdp", net.run_gw(["ip", "link", "show", net.gw_if]).stdout.split("\n")[0])

        # Restart: a second process binds the queue again and serves.
        with self.gateway(config(net), name="gw2") as (p2, log2):
            r = self.curl_infer()
            self.assertEqual(r.returncode, 0, r.stderr + open(log2).read()[-2000:])
            self.assertEqual(json.loads(r.stdout)["outputs"][0]["data"], list(range(16)))

    def test_tag_placement_from_the_config(self):
        # xdp.tags forces a placement (docs/HOSTS.md): prefix works on every kernel with
        # bpf_xdp_adjust_head; metadata serves where the kernel writes it and otherwise refuses
        # to start, naming the fix.
        net = self.net
        refused = "xdp_adjust_meta" in os.environ.get("INFERGATE_PROBE_REFUSE", "").split(",")
        with self.gateway(config(net, xdp_extra="  tags: prefix\n"), name="tags-prefix") as (p, log):
            self.assertIn("tags reach the stack as a 16-byte prefix", open(log).read())
            r = self.curl_infer()
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])
            self.assertIn('"outputs"', r.stdout)
            self.assertEqual(metric(net, "infergate_afxdp_meta_missing_total"), 0)
        if refused:
            p, log = start_gateway(net, name="tags-meta", xdp_extra="  tags: metadata\n",
                                   expect_start=False)
            self.assertNotEqual(stop(p), 0)
            text = open(log).read()
            self.assertIn("xdp.tags: metadata: this kernel cannot write XDP metadata", text)
            self.assertIn("use xdp.tags: prefix", text)
        else:
            with self.gateway(config(net, xdp_extra="  tags: metadata\n"), name="tags-meta") as (p, log):
                self.assertIn("tags reach the stack in XDP metadata", open(log).read())
                r = self.curl_infer()
                self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])
                self.assertEqual(metric(net, "infergate_afxdp_meta_missing_total"), 0)

    def test_request_rate_limit_answers_429(self):
        # The program tags each request start (rate over the source's budget: verdict
        # rate-limited) in the frame's metadata; our TCP carries the request start's tag to
        # Transport::ingressTag() and the KServe handler answers 429 without doing the work.
        # The limit arrives by a configuration reload (the program's rule maps rewritten in
        # place: the same program id, after the privilege drop).
        net = self.net
        limit = "  request_rate_limit: {rate_per_sec: 5, burst: 5}\n"
        with self.gateway(config(net), name="rl") as (p, log):
            prog = re.search(r"prog/xdp id (\d+)",
                             net.run_gw(["ip", "link", "show", "dev", net.gw_if]).stdout)
            self.assertIsNotNone(prog)
            for _ in range(3):
                self.assertEqual(self.curl_infer().returncode, 0)
            with open(os.path.join(net.tmp, "rl.yaml"), "w") as f:
                f.write(config(net, xdp_extra=limit))
            answer = json.loads(net.run_gw(["curl", "-s", "-d", "",
                                            "http://127.0.0.1:8002/admin/reload"]).stdout)
            self.assertEqual(answer.get("result"), "ok", answer)
            self.assertEqual(answer["applied"], ["xdp.request_rate_limit"])
            self.assertIn("prog/xdp id %s " % prog.group(1),
                          net.run_gw(["ip", "link", "show", "dev", net.gw_if]).stdout)
            r = net.run_client(["/usr/bin/python3", "-c", BURST_CLIENT, net.gw_ip, "30", BODY],
                               timeout=60, check=False)
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])
            res = json.loads(r.stdout)
            codes = [c for c, _ in res]
            ok, limited = codes.count(200), codes.count(429)
            print("\n[afxdp request_rate_limit 5/s burst 5] 30 requests: %d x 200, %d x 429" % (ok, limited),
                  file=sys.stderr)
            self.assertEqual(ok + limited, 30, codes)
            self.assertGreaterEqual(ok, 5, codes)          # the burst
            self.assertLessEqual(ok, 5 + 5 * 3, codes)     # + what refills during the run
            self.assertGreater(limited, 0, codes)
            for c, b in res:
                if c == 200:
                    self.assertEqual(json.loads(b)["outputs"][0]["data"], list(range(16)))
            self.assertEqual(metric(net, "infergate_requests_total", model="identity", code="429"), limited)
            self.assertEqual(metric(net, "infergate_requests_total", model="identity", code="200"),
                             ok + 3)
            # All on one keep-alive connection (after the 3 before the reload): the 429s did
            # not cost the connection.
            self.assertEqual(metric(net, "infergate_tcp_accepted_total"), 1 + 3)

    def test_rejected_request_start_is_reset_by_our_stack(self):
        # The program rejects a malformed request start on a new connection: in afxdp mode it
        # redirects the original frame flagged IG_TF_REJECTED (instead of answering with a RST
        # itself), and our TCP stack sends the RST and frees the connection at once.
        net = self.net
        with self.gateway(config(net), name="rej") as (p, log):
            r = self.curl_infer()  # a normal connection first: the stack is up, ARP resolved
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])

            def conns():
                return metric(net, "infergate_tcp_connections")

            deadline = time.time() + 5
            while conns() != 0 and time.time() < deadline:  # curl's connection winds down
                time.sleep(0.1)
            conns_before = conns()
            rejected_before = metric(net, "infergate_tcp_xdp_rejected_total")
            rst_before = metric(net, "infergate_tcp_rst_out_total")
            r = net.run_client(["/usr/bin/python3", "-c", REJECT_CLIENT, net.gw_ip], timeout=30,
                               check=False)
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])
            self.assertEqual(r.stdout.strip(), "reset", r.stdout + r.stderr)
            self.assertEqual(metric(net, "infergate_tcp_xdp_rejected_total") - rejected_before, 1)
            self.assertGreaterEqual(metric(net, "infergate_tcp_rst_out_total") - rst_before, 1)
            self.assertEqual(metric(net, "infergate_xdp_packets_total", verdict="redirect",
                                    reason="bad_method"), 1)
            self.assertEqual(metric(net, "infergate_xdp_packets_total", verdict="tx",
                                    reason="bad_method"), 0)
            # Freed at once: no connection of ours is left (the gauge is back where it was).
            self.assertEqual(conns(), conns_before)
            # The gateway still serves.
            r = self.curl_infer()
            self.assertEqual(r.returncode, 0, r.stderr + open(log).read()[-2000:])

    def test_grpc_model_infer(self):
        # python grpcio over the kernel's TCP -> XDP -> AF_XDP -> our TCP -> Http2Session/gRPC.
        stubs = tempfile.mkdtemp(prefix="ig-afxdp-grpc-")
        try:
            gen = grpc_stubs(stubs)
            if gen.returncode != 0:
                raise unittest.SkipTest("grpc_tools.protoc failed: " + gen.stderr[-500:])
            net = self.net
            with self.gateway(config(net), name="grpc") as (p, log):
                self.assertIn("grpc", open(log).read())
                r = net.run_client(["/usr/bin/python3", "-c", GRPC_CLIENT, stubs, net.gw_ip],
                                   timeout=120, check=False)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:] + open(log).read()[-2000:])
                res = json.loads(r.stdout)
                self.assertEqual(res, {"ready": True, "infer_ok": 20, "big_exact": True})
                self.assertGreaterEqual(metric(net, "infergate_tcp_accepted_total"), 1)
                self.assertEqual(metric(net, "infergate_tcp_drops_total", reason="bad_tcp_checksum"), 0)
        finally:
            shutil.rmtree(stubs, ignore_errors=True)

    def test_binary_and_grpc_raw_are_one_copy(self):
        # docs/BATCHING.md "One copy", in afxdp mode: the request body our TCP stack delivered
        # (from AF_XDP frames) is decoded once into the batched `identity` model's slots, the
        # batch runs from there: request_bytes == slot_bytes == bytes_copied, nothing staged or
        # compacted (the same counters tests/integration/test_one_copy.py checks in socket mode).
        net = self.net

        def counters():
            return {c: metric(net, "infergate_batcher_%s_total" % c, model="identity")
                    for c in ONE_COPY_COUNTERS}

        def run_and_check(args, what, want_ok):
            before = counters()
            r = net.run_client(["/usr/bin/python3", "-c", ONE_COPY_CLIENT] + args,
                               timeout=60, check=False)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:] + open(log).read()[-2000:])
            res = json.loads(r.stdout)
            self.assertEqual(res["ok"], want_ok, (what, res))
            after = counters()
            d = {c: after[c] - before[c] for c in ONE_COPY_COUNTERS}
            print("\n[afxdp one copy %s] %s" % (what, d), file=sys.stderr)
            self.assertEqual(d["request_bytes"], res["sent"], (what, d))
            self.assertEqual(d["slot_bytes"], d["request_bytes"], (what, d))
            self.assertEqual(d["bytes_copied"], d["request_bytes"], (what, d))  # ratio exactly 1
            self.assertEqual(d["staged_bytes"], 0, (what, d))
            self.assertEqual(d["compacted_bytes"], 0, (what, d))

        stubs = tempfile.mkdtemp(prefix="ig-afxdp-onecopy-")
        try:
            with self.gateway(config(net), name="onecopy") as (p, log):
                run_and_check(["binary", net.gw_ip], "binary extension", 3)
                gen = grpc_stubs(stubs)
                if gen.returncode != 0:
                    raise unittest.SkipTest("grpc_tools.protoc failed (binary path checked): "
                                            + gen.stderr[-500:])
                run_and_check(["grpc", net.gw_ip, stubs], "grpc raw_input_contents", 2)
        finally:
            shutil.rmtree(stubs, ignore_errors=True)

    def test_queue_count_must_match_reactors(self):
        p, log = start_gateway(self.net, reactors=2, expect_start=False)
        p.wait(timeout=20)
        text = open(log).read()
        self.assertNotEqual(p.returncode, 0, text)
        self.assertIn("has 1 rx queue(s) but reactors is 2", text)
        self.assertNotIn("xdp", self.net.run_gw(["ip", "link", "show", self.net.gw_if]).stdout.split("\n")[0])

    def test_zero_copy(self):
        # veth has no zero-copy AF_XDP: requiring it must fail with a clear message; the
        # zero-copy data path itself needs a NIC driver with AF_XDP zero-copy.
        p, log = start_gateway(self.net, env={"INFERGATE_AFXDP_ZERO_COPY": "require"}, expect_start=False)
        p.wait(timeout=20)
        text = open(log).read()
        self.assertNotEqual(p.returncode, 0, text)
        self.assertIn("zero-copy", text)
        raise unittest.SkipTest("zero-copy AF_XDP needs a NIC whose driver supports it; veth has "
                                "copy mode only (the copy-mode path is tested above)")


if __name__ == "__main__":
    harness.main()
