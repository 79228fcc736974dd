"""Restart without drops (docs/OPERATIONS.md "Restart without drops"), socket and xdp-filter
modes, in network namespaces (root).

Gateway A serves while load_loop.py (in the client namespace) posts in a loop, half on
keep-alive connections and half on a new connection per request. Gateway B starts with the
same configuration (SO_REUSEPORT: both accept), then A gets SIGTERM: it closes its listeners
(net.ipv4.tcp_migrate_req=1 moves connections still in its accept queue to B), finishes what is
in flight and exits; the load goes on against B. Asserted: zero failed requests; B served some;
in xdp-filter mode (xdp.keep_attached) the XDP program id is the same before and after, B
logs that it kept it, and A did not detach it. Requests sent on a keep-alive connection that A
closed while draining are sent again on a new connection, as any HTTP client does (counted as
`retried`, printed)."""
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

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG = """mode: {mode}
reactors: 2
listeners: [{{name: http, address: 0.0.0.0, port: 8000, protocol: http}}]
admin: {{address: 127.0.0.1, port: 8002}}
{xdp}models:
""" + harness.braces(harness.IDENTITY_MODEL)

XDP = """xdp:
  interface: {ifname}
  attach: native
  pin_path: /sys/fs/bpf/ig-restart
  keep_attached: true
"""


def program_id(net):
    out = net.run_gw(["ip", "link", "show", "dev", net.gw_if]).stdout
    m = re.search(r"prog/xdp id (\d+)", out)
    return int(m.group(1)) if m else None


class RestartTest(netns.VethTestCase):
    tmp_prefix = "ig-restart-"

    def restart_under_load(self, mode):
        net = self.net
        xdp = XDP.format(ifname=net.gw_if) if mode == "xdp-filter" else ""
        text = CONFIG.format(mode=mode, xdp=xdp)
        net.run_gw(["sysctl", "-qw", "net.ipv4.tcp_migrate_req=1"])
        a, a_log = netns.start_gateway(net, text, name="a")
        prog_before = program_id(net)
        if mode == "xdp-filter":
            self.assertIsNotNone(prog_before)
        stop_file = os.path.join(net.tmp, "stop")
        load = subprocess.Popen(
            ["ip", "netns", "exec", net.client_ns, "/usr/bin/python3",
             os.path.join(HERE, "load_loop.py"), net.gw_ip, "8000", stop_file, "identity", "4"],
            stdout=subprocess.PIPE, text=True)
        net.procs.append(load)
        b = None
        try:
            time.sleep(1.0)
            b, b_log = netns.start_gateway(net, text, name="b")
            time.sleep(0.5)  # both accept
            self.assertEqual(netns.stop_gateway(a), 0)
            time.sleep(1.0)  # B alone
            b_served = netns.gateway_metric(net, "infergate_requests_total", code="200")
            prog_after = program_id(net)
        finally:
            open(stop_file, "w").close()
            out, _ = load.communicate(timeout=20)
        result = json.loads(out)
        print("%s restart under load: %s, B served %d, program id %s -> %s"
              % (mode, json.dumps(result), b_served, prog_before, prog_after))
        with open(a_log) as f:
            a_text = f.read()
        with open(b_log) as f:
            b_text = f.read()
        self.assertEqual(netns.stop_gateway(b), 0, b_text[-2000:])
        self.assertEqual(result["failed"], 0, result)
        self.assertGreater(result["ok"], 500, result)
        self.assertGreater(b_served, 100)
        self.assertIn("received SIGTERM: draining", a_text)
        if mode == "xdp-filter":
            self.assertEqual(prog_after, prog_before)
            self.assertIn("XDP program kept on " + net.gw_if, b_text)
            self.assertIn("stays attached to " + net.gw_if, a_text)
            self.assertNotIn("XDP program detached", a_text)
            self.assertEqual(program_id(net), prog_before)  # B left it too

    def test_socket_mode(self):
        self.restart_under_load("socket")

    def test_xdp_filter_mode(self):
        self.restart_under_load("xdp-filter")


if __name__ == "__main__":
    harness.main()
