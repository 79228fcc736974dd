"""xdp-filter mode in fresh network namespaces joined by a veth pair: the XDP program in front
of kernel TCP. Real clients (curl, wrk, the kernel's TCP through Python sockets) in the client
namespace talk to infergate in the gateway namespace."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

CONFIG = """
mode: xdp-filter
reactors: 1
listeners: [{{name: http, address: 0.0.0.0, port: 8000, protocol: http}}]
admin: {{address: 127.0.0.1, port: 8002}}
limits: {{idle_timeout_ms: 2000}}
xdp:
  interface: {ifname}
  attach: native
  methods: [GET, POST]
  path_prefixes: ["/v2/"]
  request_rate_limit: {{rate_per_sec: {rate}, burst: {burst}}}
  path_classes: [{{prefix: "/v2/models/identity", class: 0}}]
  pin_path: /sys/fs/bpf/infergate
models:
""" + harness.braces(harness.IDENTITY_MODEL)

BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                               "data": list(range(16))}]})

# Runs in the client namespace: sends raw requests over the kernel's TCP, prints JSON results.
CLIENT = r'''
import json, socket, sys, time
host, mode = sys.argv[1], sys.argv[2]
def one(raw):
    t0 = time.time()
    s = socket.create_connection((host, 8000), timeout=3)
    s.sendall(raw)
    try:
        data = s.recv(4096)
        return ("eof after %.1fs" % (time.time() - t0)) if not data else data.split(b"\r\n")[0].decode()
    except ConnectionResetError:
        return "reset"
    except socket.timeout:
        return "timeout"
    finally:
        s.close()
if mode == "bad":
    print(json.dumps([one(b"BREW /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"),
                      one(b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"),
                      one(b"GET /v2/health/live HTTP/7.1\r\nHost: x\r\n\r\n"),
                      one(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")]))
elif mode == "burst":
    body = sys.argv[3].encode()
    req = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    codes = []
    for _ in range(int(sys.argv[4])):   # one connection per request: each is a request start
        codes.append(one(req))
    print(json.dumps(codes))
'''

PING = netns.PING_SCRIPT



def gateway(net, rate=0, burst=0):
    text = CONFIG.format(ifname=net.gw_if, rate=rate, burst=burst)
    return netns.start_gateway(net, text, name="gw", timeout=15)


def stop(p):
    return netns.stop_gateway(p, timeout=15)


metric = netns.gateway_metric


class XdpFilterTest(netns.VethTestCase):
    tmp_prefix = "ig-xf-"

    def client_script(self, *args):
        r = self.net.run_client(["/usr/bin/python3", "-c", CLIENT, self.net.gw_ip] + list(args), timeout=120)
        return json.loads(r.stdout)

    def test_serves_filters_and_detaches(self):
        net = self.net
        p, log = gateway(net)
        try:
            self.assertIn("XDP program attached to " + net.gw_if, open(log).read())
            link = net.run_gw(["ip", "link", "show", net.gw_if]).stdout
            self.assertIn("xdp", link)
            # curl: a real client through the program.
            r = net.run_client(["curl", "-sS", "--max-time", "5", "-d", BODY,
                                "http://%s:8000/v2/models/identity/infer" % net.gw_ip])
            self.assertEqual(json.loads(r.stdout)["outputs"][0]["data"], list(range(16)))
            # wrk: a short keep-alive load, no errors.
            script = os.path.join(harness.ARGS.source, "bench", "wrk", "infer.lua")
            out = net.run_client(["wrk", "-t1", "-c8", "-d2s", "-s", script,
                                  "http://%s:8000/" % net.gw_ip], timeout=60).stdout
            w = json.loads(re.search(r"WRK_JSON (\{.*\})", out).group(1))
            self.assertGreater(w["requests"], 100)
            self.assertEqual(w["errors"], 0, out)
            # Malformed request starts: reset by the program (XDP_TX RST), never reach userspace.
            before_rej = metric(net, "infergate_http_rejections_total")
            before_tx = metric(net, "infergate_xdp_packets_total", verdict="tx")
            res = self.client_script("bad")
            xdp_lines = "\n".join(l for l in net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout.splitlines()
                                  if l.startswith("infergate_xdp_packets") and not l.endswith(" 0"))
            self.assertEqual(res[:3], ["reset", "reset", "reset"], (res, xdp_lines, open(log).read()[-1500:]))
            self.assertEqual(res[3], "HTTP/1.1 200 OK")
            self.assertEqual(metric(net, "infergate_xdp_packets_total", verdict="tx", reason="bad_method"), 1)
            self.assertEqual(metric(net, "infergate_xdp_packets_total", verdict="tx", reason="bad_path"), 1)
            self.assertEqual(metric(net, "infergate_xdp_packets_total", verdict="tx", reason="bad_version"), 1)
            self.assertEqual(metric(net, "infergate_xdp_packets_total", verdict="tx") - before_tx, 3)
            self.assertEqual(metric(net, "infergate_http_rejections_total") - before_rej, 0)
            self.assertGreater(metric(net, "infergate_xdp_requests_total", **{"class": "high"}), 100)
            # ARP and ICMP still reach the kernel: an echo request over a raw socket (ping(8)
            # may not be installed) gets its reply.
            before_icmp = metric(net, "infergate_xdp_packets_total", verdict="pass", reason="not_tcp")
            r = net.run_client(["/usr/bin/python3", "-c", PING, net.gw_ip], timeout=30)
            self.assertEqual(r.stdout.strip(), "reply", r.stdout + r.stderr)
            self.assertGreater(metric(net, "infergate_xdp_packets_total", verdict="pass", reason="not_tcp"),
                               before_icmp)
            # infergate stats reads the pinned maps from another process.
            st = net.run_gw([harness.ARGS.binary, "stats", "--pin-path", "/sys/fs/bpf/infergate"])
            self.assertIn("bad_method", st.stdout)
        finally:
            rc = stop(p)
        self.assertEqual(rc, 0, open(log).read())
        self.assertIn("XDP program detached", open(log).read())
        self.assertNotIn("xdp", net.run_gw(["ip", "link", "show", net.gw_if]).stdout)

    def test_request_rate_limit_answers_429(self):
        net = self.net
        p, log = gateway(net, rate=5, burst=5)
        try:
            codes = self.client_script("burst", BODY, "30")
            ok = codes.count("HTTP/1.1 200 OK")
            limited = codes.count("HTTP/1.1 429 Too Many Requests")
            self.assertEqual(ok + limited, 30, codes)
            # A burst of 5 plus what refills (5/s) during the run.
            self.assertGreaterEqual(ok, 5, codes)
            self.assertLessEqual(ok, 5 + 5 * 3, codes)
            self.assertGreater(limited, 0, codes)
            self.assertEqual(metric(net, "infergate_requests_total", model="identity", code="429"), limited)
        finally:
            rc = stop(p)
        self.assertEqual(rc, 0, open(log).read())


if __name__ == "__main__":
    harness.main()
