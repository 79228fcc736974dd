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

    def test_xdp_rules_reload_in_place(self):
        """POST /admin/reload with new xdp.cidr_rules: the running program's CIDR map is
        rewritten (same program id, no detach) and requests from the client are tagged with
        the new class; a compiled-in rule (request_rate_limit) is refused after the privilege
        drop, naming the key."""
        net = self.net
        text = CONFIG.format(mode="xdp-filter", xdp=XDP.format(ifname=net.gw_if) +
                             "  cidr_rules: [{cidr: 192.0.2.0/24, class: 0}]\n")
        with self.gateway(text, name="gw") as (p, log):
            prog = program_id(net)

            def infer(n):
                for _ in range(n):
                    r = net.run_client(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                        "-X", "POST", "--data-binary", "@" + body,
                                        "http://%s:8000/v2/models/identity/infer" % net.gw_ip])
                    self.assertEqual(r.stdout, "200")

            body = os.path.join(net.tmp, "body.json")
            with open(body, "w") as f:
                f.write(json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16],
                                                "datatype": "FP32", "data": [0.0] * 16}]}))
            def background():
                return netns.gateway_metric(net, "infergate_xdp_requests_total",
                                            **{"class": "background"})
            infer(3)
            self.assertEqual(background(), 0)
            cfg = os.path.join(net.tmp, "gw.yaml")
            new_text = text.replace("class: 0}]", "class: 0}, {cidr: %s/32, class: 3}]"
                                    % net.client_ip)
            with open(cfg, "w") as f:
                f.write(new_text)
            r = net.run_gw(["curl", "-s", "-d", "", "http://127.0.0.1:8002/admin/reload"])
            answer = json.loads(r.stdout)
            self.assertEqual(answer.get("result"), "ok", r.stdout)
            self.assertEqual(answer["applied"], ["xdp.cidr_rules"])
            self.assertEqual(program_id(net), prog)
            infer(3)
            self.assertEqual(background(), 3)
            # A rule compiled into the program: refused (privileges dropped), nothing applied.
            with open(cfg, "w") as f:
                f.write(new_text.replace("  keep_attached: true\n", "  keep_attached: true\n"
                                         "  request_rate_limit: {rate_per_sec: 1}\n"))
            r = net.run_gw(["curl", "-s", "-d", "", "http://127.0.0.1:8002/admin/reload"])
            answer = json.loads(r.stdout)
            self.assertEqual(answer["result"], "refused", answer)
            self.assertEqual([x["key"] for x in answer["refused"]], ["xdp.request_rate_limit"])
            infer(3)  # no rate limit in effect
            self.assertEqual(program_id(net), prog)
        with open(log) as f:
            self.assertIn("CIDR rules reloaded in place", f.read())

    def test_xdp_compiled_rules_reload_replaces_program(self):
        """Without the privilege drop, a rule compiled into the program (request_rate_limit)
        reloads by an atomic replace over the same maps: a new program id, never a detach,
        the counters carry on, and the new limit answers 429."""
        net = self.net
        text = ("security: {drop_privileges: false, seccomp: false}\n" +
                CONFIG.format(mode="xdp-filter", xdp=XDP.format(ifname=net.gw_if)))
        body = os.path.join(net.tmp, "body.json")
        with open(body, "w") as f:
            f.write(json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16],
                                            "datatype": "FP32", "data": [0.0] * 16}]}))

        def infer(n):
            codes = []
            for _ in range(n):
                codes.append(net.run_client(
                    ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                     "--data-binary", "@" + body,
                     "http://%s:8000/v2/models/identity/infer" % net.gw_ip]).stdout)
            return codes

        with self.gateway(text, name="gw") as (p, log):
            prog = program_id(net)
            self.assertEqual(infer(5), ["200"] * 5)
            passed = netns.gateway_metric(net, "infergate_xdp_packets_total", verdict="pass")
            with open(os.path.join(net.tmp, "gw.yaml"), "w") as f:
                f.write(text.replace("  keep_attached: true\n", "  keep_attached: true\n"
                                     "  request_rate_limit: {rate_per_sec: 1, burst: 2}\n"))
            r = net.run_gw(["curl", "-s", "-d", "", "http://127.0.0.1:8002/admin/reload"])
            answer = json.loads(r.stdout)
            self.assertEqual(answer.get("result"), "ok", r.stdout)
            self.assertEqual(answer["applied"], ["xdp.request_rate_limit"])
            new_prog = program_id(net)
            self.assertNotEqual(new_prog, prog)
            self.assertIsNotNone(new_prog)
            codes = infer(6)
            self.assertEqual(codes[:2], ["200", "200"], codes)  # the burst
            self.assertIn("429", codes[2:])
            # The counters map is shared: the new program adds to the old program's counts.
            self.assertGreater(netns.gateway_metric(net, "infergate_xdp_packets_total",
                                                    verdict="pass"), passed)
        with open(log) as f:
            self.assertIn("replaced by id %d atomically" % new_prog, f.read())

    def test_socket_mode(self):
        self.restart_under_load("socket")

    def test_xdp_filter_mode(self):
        self.restart_under_load("xdp-filter")


if __name__ == "__main__":
    harness.main()
