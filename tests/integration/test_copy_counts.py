"""Copies per tensor byte, counted by the gateway itself, through the real binary (issue 16,
docs/BATCHING.md "One copy"): KServe v2 binary-extension requests (Content-Length and chunked,
the raw binary body) and gRPC ModelInfer with raw_input_contents, tensors from 64 B to 64 MiB,
the tensor's first byte moved across TCP segment boundaries by padding the JSON header / the
request id, from the kernel's TCP in a client namespace to infergate in socket mode and in
afxdp mode (infergate's own TCP over AF_XDP), on a clean link and on an impaired one
(infergate-impair: loss, duplication and reordering on the client's egress).

For every request the client reads the gateway's /metrics before and after and checks:
  - the answer is the tensor, byte-exact;
  - request_bytes grew by the tensor's size;
  - bytes_copied == request_bytes + received_copy_bytes (every copy is counted somewhere);
  - on a clean link, streamed paths: received_copy_bytes == 0, staged == compacted == 0, so
    bytes_copied == request_bytes: exactly one userspace copy per tensor byte;
  - the assembled fallback (a chunked raw binary body, whose size is unknown until its end)
    reports its extra copy: received_copy_bytes == the tensor's size;
  - impaired link: every answer still exact, the extra copies bounded (received_copy_bytes <=
    request_bytes: at most one more copy per byte) and printed.

    /usr/bin/python3 test_copy_counts.py --binary build/app/infergate --source . \
        [--impair build/tools/impair/infergate-impair]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

BIG = 64 << 20
CONFIG = """
mode: {mode}
reactors: 1
listeners:
  - {{name: http, address: 0.0.0.0, port: 8000, protocol: http}}
  - {{name: grpc, address: 0.0.0.0, port: 8001, protocol: grpc}}
admin: {{address: 0.0.0.0, port: 8002}}
limits: {{max_body_bytes: {max_body}, max_connections: 256, body_timeout_ms: 120000}}
{xdp}
models:
  - name: big
    max_batch_size: 0
    inputs: [{{name: INPUT0, datatype: UINT8, shape: [-1]}}]
    outputs: [{{name: OUTPUT0, datatype: UINT8, shape: [-1]}}]
    dynamic_batching: {{max_inflight_batches: 1, variable_input_buffer_bytes: {slab}}}
"""

# infergate's TCP stack (afxdp mode): segments out of order, those kept in their frames and
# delivered from there, and the payload bytes it copied into its own buffers (reordering when
# no frame could be kept, or a session that paused reading).
TCP_COUNTERS = ("out_of_order_total", "ooo_frames_held_total", "ooo_held_bytes_delivered_total",
                "rx_copied_bytes_total", "ooo_hold_fallbacks_total")
COUNTERS = ("request_bytes", "bytes_copied", "received_copy_bytes", "slot_bytes", "staged_bytes",
            "compacted_bytes")

# Runs in the client namespace. argv: host, stubs dir ("" = no gRPC), plan (JSON list of
# [kind, size, pad]). Prints one JSON line per request: kind, size, pad, ok, counter deltas.
CLIENT = netns.SCRIPT_PATH + r'''
import hashlib, json, random, re, socket, sys, urllib.request
host, stubs, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
NAMES = ("request_bytes", "bytes_copied", "received_copy_bytes", "slot_bytes", "staged_bytes",
         "compacted_bytes")

def counters():
    text = urllib.request.urlopen("http://%s:8002/metrics" % host, timeout=30).read().decode()
    out = {}
    for n in NAMES:
        m = re.search(r'^infergate_batcher_%s_total\{model="big"\} (\S+)$' % n, text, re.M)
        out[n] = int(float(m.group(1))) if m else 0
    return out

stub = None
if stubs:
    sys.path.insert(0, stubs)
    import grpc
    import grpc_service_pb2 as pb, grpc_service_pb2_grpc as svc
    ch = grpc.insecure_channel("%s:8001" % host, options=[
        ("grpc.enable_http_proxy", 0), ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1)])
    stub = svc.GRPCInferenceServiceStub(ch)

sock = None
def http(head, body_parts):
    global sock
    if sock is None:
        sock = socket.create_connection((host, 8000), timeout=120)
    sock.sendall(head)
    for p in body_parts:
        sock.sendall(p)
    return read_response(sock)

def read_response(s):
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        c = s.recv(1 << 20)
        if not c:
            raise EOFError("closed before a response")
        buf += c
    i = buf.index(b"\r\n\r\n")
    lines = bytes(buf[:i]).decode("latin-1").split("\r\n")
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    n = int(hdrs.get("content-length", "0"))
    body = bytearray(buf[i + 4:])
    while len(body) < n:
        c = s.recv(1 << 20)
        if not c:
            raise EOFError("closed mid-body")
        body += c
    return int(lines[0].split(" ")[1]), hdrs, bytes(body[:n])

def chunked(data, rnd):
    parts, i = [], 0
    while i < len(data):
        n = min(len(data) - i, rnd.choice((1, 7, 100, 1460, 4096, 65536, 70001)))
        parts.append(b"%x\r\n" % n + data[i:i + n] + b"\r\n")
        i += n
    parts.append(b"0\r\n\r\n")
    return parts

rnd = random.Random(16)
for kind, size, pad in plan:
    seed = bytes(rnd.getrandbits(8) for _ in range(4096))
    raw = (seed * (size // 4096 + 1))[:size]
    before = counters()
    ok = False
    if kind in ("binary", "binary_chunked"):
        header = json.dumps({"id": "p" * pad, "inputs": [{"name": "INPUT0", "datatype": "UINT8",
                             "shape": [size], "parameters": {"binary_data_size": size}}],
                             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
        body = header + raw
        head = (b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: %d\r\n"
                % len(header))
        if kind == "binary":
            st, h, out = http(head + b"Content-Length: %d\r\n\r\n" % len(body), [body])
        else:
            st, h, out = http(head + b"Transfer-Encoding: chunked\r\n\r\n", chunked(body, rnd))
        k = int(h.get("inference-header-content-length", "0"))
        ok = st == 200 and out[k:] == raw
    elif kind in ("raw", "raw_chunked"):
        head = b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 0\r\n"
        if kind == "raw":
            st, h, out = http(head + b"Content-Length: %d\r\n\r\n" % size, [raw])
        else:
            st, h, out = http(head + b"Transfer-Encoding: chunked\r\n\r\n", chunked(raw, rnd))
        k = int(h.get("inference-header-content-length", "0"))
        ok = st == 200 and out[k:] == raw
    elif kind == "grpc":
        req = pb.ModelInferRequest(model_name="big", id="p" * pad)
        inp = req.inputs.add()
        inp.name, inp.datatype = "INPUT0", "UINT8"
        inp.shape.extend([size])
        req.raw_input_contents.append(raw)
        r = stub.ModelInfer(req, timeout=120)
        ok = r.id == "p" * pad and r.raw_output_contents[0] == raw
    after = counters()
    print(json.dumps({"kind": kind, "size": size, "pad": pad, "ok": bool(ok),
                      "d": {n: after[n] - before[n] for n in NAMES}}), flush=True)
'''


def plan(big=True):
    p = []
    for size in (64, 4096):
        for pad in (0, 1, 2, 3, 5, 8, 13, 700, 1447):
            p += [["binary", size, pad], ["grpc", size, pad]]
    for size in (256 << 10, 4 << 20) + ((BIG,) if big else ()):
        for pad in (0, 1):
            p += [["binary", size, pad], ["grpc", size, pad]]
        p += [["binary_chunked", size, 3], ["raw", size, 0]]
    p += [["binary_chunked", 4096, 0], ["raw", 4096, 0], ["raw_chunked", 4096, 0],
          ["raw_chunked", 256 << 10, 0]]
    return p


def grpc_stubs(folder):
    proto_dir = os.path.join(harness.ARGS.source, "frontend", "proto")
    return subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I" + proto_dir,
                           "-I/usr/include", "--python_out=" + folder, "--grpc_python_out=" + folder,
                           os.path.join(proto_dir, "grpc_service.proto")],
                          capture_output=True, text=True)


def impair_binary():
    build = os.path.dirname(os.path.dirname(os.path.abspath(harness.ARGS.binary)))
    return os.environ.get("IG_IMPAIR_BINARY") or os.path.join(build, "tools", "impair",
                                                             "infergate-impair")


class CopyCountTest(netns.VethTestCase):
    tmp_prefix = "ig-copies-"

    def config(self, mode):
        xdp = "xdp: {interface: %s, attach: native}" % self.net.gw_if if mode == "afxdp" else ""
        return CONFIG.format(mode=mode, xdp=xdp, max_body=BIG + (1 << 20),
                             slab=BIG + (1 << 20))

    def run_plan(self, mode, the_plan, impaired=False):
        net = self.net
        stubs = tempfile.mkdtemp(prefix="ig-copies-stubs-")
        try:
            have_grpc = grpc_stubs(stubs).returncode == 0
            if not have_grpc:
                the_plan = [x for x in the_plan if x[0] != "grpc"]
            with self.gateway(self.config(mode), name="copies-" + mode) as (p, log):
                if impaired:
                    pin = os.path.join(net.bpffs, "impair")
                    net.run_client(["ethtool", "-K", net.client_if, "gso", "off", "tso", "off"],
                                   check=False)
                    r = net.run_client([impair_binary(), "attach", "--dev", net.client_if,
                                        "--hook", "egress", "--drop", "0.01", "--duplicate", "0.01",
                                        "--reorder", "0.05", "--seed", "16", "--proto", "tcp",
                                        "--pin-dir", pin], check=False, timeout=30)
                    self.assertEqual(r.returncode, 0, r.stderr)
                r = net.run_client(["/usr/bin/python3", "-c", CLIENT, net.gw_ip,
                                    stubs if have_grpc else "", json.dumps(the_plan)],
                                   timeout=900, check=False)
                with open(log) as f:
                    self.assertEqual(r.returncode, 0, r.stderr[-3000:] + f.read()[-2000:])
                rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
                tcp = {}
                if mode == "afxdp":
                    text = net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout
                    for n in TCP_COUNTERS:
                        tcp[n] = harness.parse_metric(text, "infergate_tcp_" + n)
            return rows, tcp
        finally:
            shutil.rmtree(stubs, ignore_errors=True)

    def check_clean(self, mode):
        rows, tcp = self.run_plan(mode, plan())
        self.assertEqual(len(rows), len(plan()) - (0 if any(r["kind"] == "grpc" for r in rows)
                                                   else sum(1 for x in plan() if x[0] == "grpc")))
        for r in rows:
            d, what = r["d"], (mode, r["kind"], r["size"], r["pad"], r["d"])
            self.assertTrue(r["ok"], what)
            self.assertEqual(d["request_bytes"], r["size"], what)
            self.assertEqual(d["bytes_copied"], d["request_bytes"] + d["received_copy_bytes"], what)
            self.assertEqual(d["staged_bytes"], 0, what)
            self.assertEqual(d["compacted_bytes"], 0, what)
            if r["kind"] == "raw_chunked":
                # Assembled (the size is known only at its end): the extra copy is reported.
                self.assertEqual(d["received_copy_bytes"], r["size"], what)
            else:
                self.assertEqual(d["received_copy_bytes"], 0, what)  # exactly one copy
                self.assertEqual(d["slot_bytes"], r["size"], what)
        print("\n[%s clean] %d requests, one copy each (raw_chunked: two, counted)\n  tcp %s"
              % (mode, len(rows), json.dumps(tcp)), file=sys.stderr)

    def check_impaired(self, mode):
        if not os.access(impair_binary(), os.X_OK):
            self.skipTest("infergate-impair not built: " + impair_binary())
        the_plan = [[k, 256 << 10, pad] for pad in range(8) for k in ("binary", "grpc")]
        the_plan += [["binary", 4 << 20, 0], ["grpc", 4 << 20, 1]]
        rows, tcp = self.run_plan(mode, the_plan, impaired=True)
        total = {n: 0 for n in COUNTERS}
        for r in rows:
            d, what = r["d"], (mode, r["kind"], r["size"], r["pad"], r["d"])
            self.assertTrue(r["ok"], what)
            self.assertEqual(d["request_bytes"], r["size"], what)
            self.assertEqual(d["bytes_copied"], d["request_bytes"] + d["received_copy_bytes"], what)
            self.assertLessEqual(d["received_copy_bytes"], d["request_bytes"], what)
            if mode == "socket":  # the kernel reassembles: nothing for us to copy twice
                self.assertEqual(d["received_copy_bytes"], 0, what)
            for n in COUNTERS:
                total[n] += d[n]
        print("\n[%s impaired] %d requests: request_bytes %d, extra copies %d (%.4f per byte)\n  tcp %s"
              % (mode, len(rows), total["request_bytes"], total["received_copy_bytes"],
                 total["received_copy_bytes"] / max(1, total["request_bytes"]), json.dumps(tcp)),
              file=sys.stderr)
        if mode == "afxdp":
            # The tensor bytes a session counts as copied are among the bytes the stack copied.
            self.assertLessEqual(total["received_copy_bytes"], tcp["rx_copied_bytes_total"], tcp)
            # Reordering happened, and the stack kept the out-of-order segments in their frames
            # (the default hold budget is far from exhausted by one connection at a time).
            self.assertGreater(tcp["out_of_order_total"], 0, tcp)
            self.assertGreater(tcp["ooo_held_bytes_delivered_total"], 0, tcp)
            self.assertEqual(tcp["ooo_hold_fallbacks_total"], 0, tcp)

    def test_socket_clean_link_is_one_copy(self):
        self.check_clean("socket")

    def test_afxdp_clean_link_is_one_copy(self):
        self.check_clean("afxdp")

    def test_socket_impaired_link(self):
        self.check_impaired("socket")

    def test_afxdp_impaired_link_extra_copies_are_bounded_and_counted(self):
        self.check_impaired("afxdp")


if __name__ == "__main__":
    harness.main()
