"""dpdk mode in fresh network namespaces joined by a veth pair: infergate drives the gateway's
veth end through DPDK's net_af_packet poll-mode driver (`--no-huge`, no hugepages needed) and
serves it with its own TCP stack; the XDP program's rules run in userspace on each burst and
ARP / ICMP are answered by infergate (there is no kernel behind a DPDK port: the gateway end
has no address in the kernel). Real clients in the client namespace (curl, the kernel's TCP
through Python sockets, grpcio) talk to it.

Skips with a reason when the binary was built without DPDK (the build says so at start-up),
without root or without namespaces. Run it with --binary pointing at a build configured with
-DINFERGATE_WITH_DPDK=ON (build-dpdk/app/infergate); the default build skips it."""
import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402
from test_afxdp import (BODY, CLIENT, GRPC_CLIENT, ONE_COPY_CLIENT, ONE_COPY_COUNTERS,  # noqa: E402
                        PING, REJECT_CLIENT, grpc_stubs)

# Runs in the client namespace: `conns` keep-alive connections, `n` requests each, every answer
# checked; then 1 MiB up and down on one more connection. Prints JSON.
LOSSY_CLIENT = netns.SCRIPT_PATH + r'''
import json, socket, sys, threading
from harness import read_response
host, conns, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ok = [0] * conns
def worker(c):
    s = socket.create_connection((host, 8000), timeout=60)
    for i in range(n):
        vals = [float(c * 1000 + i + k) for k in range(16)]
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                       "data": vals}]}).encode()
        s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        st, h, b, _ = read_response(s)
        if st == 200 and json.loads(b)["outputs"][0]["data"] == vals:
            ok[c] += 1
    s.close()
ts = [threading.Thread(target=worker, args=(c,)) for c in range(conns)]
for t in ts: t.start()
for t in ts: t.join()
raw = bytes(range(256)) * 4096
header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [len(raw)], "datatype": "UINT8",
                                 "parameters": {"binary_data_size": len(raw)}}],
                     "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
s = socket.create_connection((host, 8000), timeout=60)
s.sendall(b"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: %d\r\n"
          b"Content-Length: %d\r\n\r\n" % (len(header), len(header) + len(raw)) + header + raw)
st, h, b, _ = read_response(s)
k = int(h.get("inference-header-content-length", "0"))
print(json.dumps({"ok": sum(ok), "big_exact": st == 200 and b[k:] == raw}))
'''

CONFIG = """
mode: dpdk
reactors: {reactors}
listeners:
  - {{name: http, address: 0.0.0.0, port: 8000, protocol: http}}
  - {{name: grpc, address: 0.0.0.0, port: 8001, protocol: grpc}}
admin: {{address: 127.0.0.1, port: 8002}}
limits: {{max_body_bytes: 67108864, max_connections: 4096}}
dpdk:
  no_huge: true
  in_memory: true
  file_prefix: {prefix}
  vdevs: [{vdevs}]
  ipv4: {ip}
models:
""" + harness.braces(harness.IDENTITY_MODEL + harness.model_yaml("big", [-1], 0, "UINT8"))

NEEDS_DPDK = "-DINFERGATE_WITH_DPDK=ON"


def built_with_dpdk(binary):
    """None when `binary` links DPDK's EAL, else the reason to skip."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if "librte_eal" not in r.stdout:
        return ("%s was built without DPDK (configure with %s, libdpdk-dev installed, and pass "
                "that build's binary with --binary)" % (binary, NEEDS_DPDK))
    return None


def read(path):
    with open(path) as f:
        return f.read()


def prepare(net):
    """The gateway end belongs to DPDK: no address in the kernel (the kernel would answer ARP
    and reset the service ports' segments), and no offloads (af_packet must see whole frames
    with full checksums: no GRO super-frames, no partial checksums from the client)."""
    net.run_gw(["ip", "addr", "flush", "dev", net.gw_if])
    net.run_gw(["sysctl", "-qw", "net.ipv6.conf.%s.disable_ipv6=1" % net.gw_if], check=False)
    net.run_gw(["ethtool", "-K", net.gw_if, "tx", "off", "rx", "off", "gso", "off", "gro", "off",
                "tso", "off"], check=False)
    net.run_client(["ethtool", "-K", net.client_if, "tx", "off", "gso", "off", "tso", "off"],
                   check=False)


class DpdkTest(netns.VethTestCase):
    tmp_prefix = "ig-dpdk-"

    @classmethod
    def setUpClass(cls):
        why = built_with_dpdk(harness.ARGS.binary)
        if why:
            raise unittest.SkipTest(why)
        super().setUpClass()

    def config(self, reactors=1, vdevs=None):
        if vdevs is None:
            vdevs = '"net_af_packet0,iface=%s"' % self.net.gw_if
        return CONFIG.format(vdevs=vdevs, ip=self.net.gw_ip, reactors=reactors,
                             prefix="ig-dpdk-%d" % os.getpid())

    def start(self, name="gw"):
        prepare(self.net)
        return netns.start_gateway(self.net, self.config(), name=name, timeout=60)

    def refused(self, config_text, name):
        """Starts infergate on config_text, which must refuse to start; returns its log."""
        p, log = netns.start_gateway(self.net, config_text, name=name, timeout=60,
                                     expect_start=False)
        rc = netns.stop_gateway(p)
        with open(log) as f:
            text = f.read()
        self.assertNotEqual(rc, 0, text[-2000:])
        self.assertNotIn("serving", text)
        return text

    def test_startup_errors_name_what_is_missing(self):
        prepare(self.net)
        # No port: EAL found none (no vdev, no PCI device allowed).
        text = self.refused(self.config(vdevs=""), "noport")
        self.assertIn("dpdk: no port 0 (EAL found: none); check dpdk.vdevs / dpdk.allow_pci", text)
        # Two reactors, but net_af_packet was given one queue pair (its qpairs= default).
        text = self.refused(self.config(reactors=2), "queues")
        self.assertIn("cannot start: dpdk: port 0 (net_af_packet0, net_af_packet) has at most 1 rx "
                      "and 1 tx queue(s) but 2 were asked (one per reactor): set reactors to at "
                      "most 1", text)

    def metric(self, name, **labels):
        return netns.gateway_metric(self.net, name, **labels)

    def test_serves_end_to_end(self):
        net = self.net
        p, log = self.start()
        try:
            text = read(log)
            self.assertRegex(text, r"dpdk: port 0 net_af_packet0 \(driver net_af_packet")
            self.assertIn("ARP/ICMP answered for %s" % net.gw_ip, text)
            # The kernel has no socket on the service port and no address: whatever answers is
            # infergate.
            self.assertNotIn(":8000", net.run_gw(["ss", "-ltnH"]).stdout)
            self.assertNotIn(net.gw_ip, net.run_gw(["ip", "addr", "show", net.gw_if]).stdout)

            # ARP and ping: answered by the L2Responder. Forget the neighbour, ping (ARP first),
            # then the neighbour entry holds the port's MAC (the veth's own).
            net.run_client(["ip", "neigh", "flush", "dev", net.client_if])
            r = net.run_client(["/usr/bin/python3", "-c", PING, net.gw_ip], timeout=30)
            self.assertEqual(r.stdout.strip(), "reply", r.stdout + r.stderr + read(log)[-2000:])
            gw_mac = re.search(r"link/ether (\S+)",
                               net.run_gw(["ip", "link", "show", net.gw_if]).stdout).group(1)
            neigh = net.run_client(["ip", "neigh", "show", net.gw_ip, "dev", net.client_if]).stdout
            self.assertIn(gw_mac, neigh)
            self.assertGreaterEqual(self.metric("infergate_dpdk_l2_arp_replies_total"), 1)
            self.assertGreaterEqual(self.metric("infergate_dpdk_l2_icmp_echo_replies_total"), 1)

            # curl
            r = net.run_client(["curl", "-sS", "--max-time", "10", "-d", BODY,
                                "http://%s:8000/v2/models/identity/infer" % net.gw_ip], check=False)
            self.assertEqual(r.returncode, 0, r.stderr + read(log)[-2000:])
            self.assertEqual(json.loads(r.stdout)["outputs"][0]["data"], list(range(16)))

            # Python client over the kernel's TCP: 50 keep-alive requests on one connection,
            # then a 4 MiB tensor up and down, byte-exact.
            r = net.run_client(["/usr/bin/python3", "-c", CLIENT, net.gw_ip, str(4 << 20)],
                               timeout=120, check=False)
            self.assertEqual(r.returncode, 0, r.stderr + read(log)[-2000:])
            res = json.loads(r.stdout)
            print("\n[dpdk net_af_packet veth] 4 MiB up and down: %.3f s" % res["big_s"],
                  file=sys.stderr)
            self.assertEqual(res["keepalive_ok"], 50, res)
            self.assertEqual(res["ready"], 200, res)
            self.assertEqual(res["big_status"], 200, res)
            self.assertEqual(res["big_bytes"], 4 << 20, res)
            self.assertTrue(res["big_exact"], res)

            # A malformed request start on a new connection: the filter rejects it (the stack
            # resets the connection) and counts it.
            rejected_before = self.metric("infergate_tcp_xdp_rejected_total")
            r = net.run_client(["/usr/bin/python3", "-c", REJECT_CLIENT, net.gw_ip], timeout=30)
            self.assertIn(r.stdout.strip(), ("reset", "eof"), r.stdout + r.stderr)
            self.assertEqual(self.metric("infergate_tcp_xdp_rejected_total"), rejected_before + 1)
            self.assertGreaterEqual(
                self.metric("infergate_xdp_packets_total", verdict="redirect", reason="bad_method"), 1)

            # Counters: the stack took the connections; checksums verified in software held;
            # the filter passed the service traffic; nothing was dropped for want of a frame.
            self.assertGreaterEqual(self.metric("infergate_tcp_accepted_total"), 3)
            self.assertGreater(self.metric("infergate_tcp_segments_in_total"), 1000)
            self.assertEqual(self.metric("infergate_tcp_drops_total", reason="bad_tcp_checksum"), 0)
            self.assertGreater(self.metric("infergate_xdp_packets_total", verdict="redirect"), 1000)
            self.assertGreater(self.metric("infergate_dpdk_rx_packets_total"), 1000)
            self.assertGreater(self.metric("infergate_dpdk_tx_packets_total"), 1000)
            self.assertEqual(self.metric("infergate_dpdk_tx_dropped_total"), 0)
            self.assertEqual(self.metric("infergate_dpdk_rx_dropped_chained_total"), 0)

            # gRPC: ServerReady, 20 ModelInfer calls, a 1 MiB tensor.
            stubs = os.path.join(net.tmp, "stubs")
            os.makedirs(stubs)
            g = grpc_stubs(stubs)
            if g.returncode != 0:
                print("\n[dpdk] gRPC part skipped: grpc_tools: " + g.stderr[-300:], file=sys.stderr)
            else:
                r = net.run_client(["/usr/bin/python3", "-c", GRPC_CLIENT, stubs, net.gw_ip],
                                   timeout=120, check=False)
                self.assertEqual(r.returncode, 0, r.stderr[-2000:] + read(log)[-2000:])
                res = json.loads(r.stdout)
                self.assertTrue(res["ready"], res)
                self.assertEqual(res["infer_ok"], 20, res)
                self.assertTrue(res["big_exact"], res)
        finally:
            rc = netns.stop_gateway(p)
        text = read(log)
        self.assertEqual(rc, 0, text[-3000:])
        self.assertIn("dpdk: stopped", text)
        # The seccomp allowlist (security.seccomp: true, the default) held for all of the above,
        # sched_getaffinity (rte_thread_register(), a reactor's first touch of its queue) included.
        refused = set(re.findall(r"seccomp refused system call (\w+)", text))
        self.assertEqual(refused, set(), text[-3000:])

    def test_one_copy(self):
        # The batcher's one-copy counters (docs/BATCHING.md "One copy"): tensor bytes are copied
        # once, from the TCP stack's receive path (mbufs) into the batch slot.
        net = self.net
        p, log = self.start(name="onecopy")
        stubs = os.path.join(net.tmp, "stubs")
        os.makedirs(stubs)
        try:
            def counters():
                return {c: self.metric("infergate_batcher_%s_total" % c, model="identity")
                        for c in ONE_COPY_COUNTERS}

            def run_and_check(args, what, want_ok):
                before = counters()
                r = net.run_client(["/usr/bin/python3", "-c", ONE_COPY_CLIENT] + args,
                                   timeout=60, check=False)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:] + read(log)[-2000:])
                res = json.loads(r.stdout)
                self.assertEqual(res["ok"], want_ok, (what, res))
                after = counters()
                d = {c: after[c] - before[c] for c in ONE_COPY_COUNTERS}
                print("\n[dpdk one copy %s] %s" % (what, d), file=sys.stderr)
                self.assertEqual(d["request_bytes"], res["sent"], (what, d))
                self.assertEqual(d["slot_bytes"], d["request_bytes"], (what, d))
                self.assertEqual(d["bytes_copied"], d["request_bytes"], (what, d))
                self.assertEqual(d["staged_bytes"], 0, (what, d))
                self.assertEqual(d["compacted_bytes"], 0, (what, d))

            run_and_check(["binary", net.gw_ip], "binary extension", 3)
            if grpc_stubs(stubs).returncode == 0:
                run_and_check(["grpc", net.gw_ip, stubs], "grpc raw_input_contents", 2)
            else:
                print("\n[dpdk one copy] gRPC part skipped: grpc_tools.protoc failed", file=sys.stderr)
        finally:
            rc = netns.stop_gateway(p)
        self.assertEqual(rc, 0, read(log)[-3000:])

    def test_impaired_link(self):
        # 5% loss, 1% duplication and 1% reordering of TCP both ways, by infergate's fault
        # injector (tools/impair) on the client's veth end (its egress and ingress hooks, as in
        # test_impaired_socket.py): 1000 requests over 20 keep-alive connections and 1 MiB both
        # ways, every answer exact; both stacks recovered.
        net = self.net
        build = os.path.dirname(os.path.dirname(os.path.abspath(harness.ARGS.binary)))
        impair = os.path.join(build, "tools", "impair", "infergate-impair")
        if not os.access(impair, os.X_OK):
            self.skipTest("infergate-impair not built (%s): build its target" % impair)
        if not net.bpffs:
            self.skipTest("cannot mount a bpffs for the injector's pinned maps")
        pin_dir = os.path.join(net.bpffs, "impair")
        prepare(net)
        p, log = netns.start_gateway(net, self.config(), name="impaired", timeout=60)
        try:
            for hook, seed in (("egress", "11"), ("ingress", "22")):
                out = net.run_client([impair, "attach", "--dev", net.client_if, "--hook", hook,
                                      "--drop", "0.05", "--duplicate", "0.01", "--reorder", "0.01",
                                      "--seed", seed, "--proto", "tcp", "--pin-dir", pin_dir],
                                     timeout=30)
                self.assertIn("attached to %s %s" % (net.client_if, hook), out.stdout)
            r = net.run_client(["/usr/bin/python3", "-c", LOSSY_CLIENT, net.gw_ip, "20", "50"],
                               timeout=240, check=False)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:] + read(log)[-2000:])
            res = json.loads(r.stdout)
            self.assertEqual(res["ok"], 1000, res)
            self.assertTrue(res["big_exact"], res)
            retrans = self.metric("infergate_tcp_retransmits_total")
            dups = self.metric("infergate_tcp_duplicate_segments_total")
            print("\n[dpdk impaired 5%% loss 1%% dup 1%% reorder] gateway retransmits %d, duplicate "
                  "segments %d" % (retrans, dups), file=sys.stderr)
            self.assertGreater(retrans, 0)
            self.assertGreater(dups, 0)
            self.assertEqual(self.metric("infergate_tcp_drops_total", reason="bad_tcp_checksum"), 0)
        finally:
            rc = netns.stop_gateway(p)
        self.assertEqual(rc, 0, read(log)[-3000:])

    def test_xdp_rules_reload_under_load(self):
        # The xdp: rules reload live in dpdk mode too (docs/OPERATIONS.md "Reload"): each
        # reactor puts the new rules into its queue's filter between two bursts. Under the
        # closed-loop load (load_loop.py, 4 threads): a CIDR class for the client, a path list
        # without /v2/health (that request start is rejected: the stack resets it), and back.
        # Zero failed requests; each rule in effect once reloaded.
        net = self.net
        prepare(net)
        base = self.config()
        p, log = netns.start_gateway(net, base, name="reload", timeout=60)
        cfg = os.path.join(net.tmp, "reload.yaml")

        def reload(extra):
            with open(cfg, "w") as f:
                f.write(base + extra)
            r = net.run_gw(["curl", "-s", "-d", "", "http://127.0.0.1:8002/admin/reload"])
            return json.loads(r.stdout)

        def health():
            return net.run_client(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                   "--max-time", "5", "http://%s:8000/v2/health/ready" % net.gw_ip],
                                  check=False).stdout

        load = netns.ClientLoad(net)
        try:
            time.sleep(0.5)
            self.assertEqual(health(), "200")
            bg = lambda: self.metric("infergate_xdp_requests_total", **{"class": "background"})
            self.assertEqual(bg(), 0)
            # 1. The client's source gets class 3 (background).
            a = reload("xdp:\n  cidr_rules: [{cidr: %s/32, class: 3}]\n" % net.client_ip)
            self.assertEqual((a.get("result"), a.get("applied")), ("ok", ["xdp.cidr_rules"]), a)
            time.sleep(0.4)
            self.assertGreater(bg(), 0, "the new CIDR class is in effect")
            # 2. No /v2/health under the path prefixes: rejected by the filter, reset.
            bad_path = self.metric("infergate_xdp_packets_total", verdict="redirect",
                                   reason="bad_path")
            a = reload("xdp:\n  path_prefixes: [/v2/models/]\n")
            self.assertEqual(a.get("result"), "ok", a)
            self.assertEqual(sorted(a["applied"]), ["xdp.cidr_rules", "xdp.path_prefixes"], a)
            self.assertEqual(health(), "000", "reset: not under a prefix any more")
            self.assertGreater(self.metric("infergate_xdp_packets_total", verdict="redirect",
                                           reason="bad_path"), bad_path)
            before = bg()
            time.sleep(0.3)
            self.assertEqual(bg(), before, "the CIDR class went with the rule")
            # 3. Back to the start-up rules.
            a = reload("")
            self.assertEqual(a.get("result"), "ok", a)
            self.assertEqual(health(), "200")
        finally:
            result = load.stop(timeout=30)
            rc = netns.stop_gateway(p)
        text = read(log)
        self.assertEqual(rc, 0, text[-3000:])
        print("\n[dpdk] xdp rules reloaded 3 times under load: %s" % json.dumps(result),
              file=sys.stderr)
        self.assertEqual(result["failed"], 0, result)
        self.assertGreater(result["ok"], 100, result)
        self.assertEqual(text.count("dpdk: ingress filter rules reloaded"), 3, text[-3000:])
        self.assertNotIn("rules not reloaded", text)


if __name__ == "__main__":
    harness.main()
