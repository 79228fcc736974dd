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
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402


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
        load = netns.ClientLoad(net)
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
            result = load.stop()
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

    def infer_codes(self, n, body):
        net = self.net
        return [net.run_client(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                "-X", "POST", "--data-binary", "@" + body,
                                "http://%s:8000/v2/models/identity/infer" % net.gw_ip]).stdout
                for _ in range(n)]

    def body_file(self):
        body = os.path.join(self.net.tmp, "body.json")
        with open(body, "w") as f:
            f.write(json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16],
                                            "datatype": "FP32", "data": [0.0] * 16}]}))
        return body

    def reload(self):
        r = self.net.run_gw(["curl", "-s", "-d", "", "http://127.0.0.1:8002/admin/reload"])
        return json.loads(r.stdout)

    def test_xdp_rules_reload_in_place(self):
        """POST /admin/reload after the privilege drop (the default): CIDR rules, a request
        rate limit, path prefixes and the priority rules are written into the running
        program's rule maps: the same program id, no detach, and each new rule in effect."""
        net = self.net
        text = CONFIG.format(mode="xdp-filter", xdp=XDP.format(ifname=net.gw_if) +
                             "  cidr_rules: [{cidr: 192.0.2.0/24, class: 0}]\n")
        body = self.body_file()
        cfg = os.path.join(net.tmp, "gw.yaml")

        def metric(name, **labels):
            return netns.gateway_metric(net, name, **labels)

        with self.gateway(text, name="gw") as (p, log):
            prog = program_id(net)
            self.assertEqual(self.infer_codes(3, body), ["200"] * 3)
            self.assertEqual(metric("infergate_xdp_requests_total", **{"class": "background"}), 0)
            # 1. A CIDR class for the client.
            text = text.replace("class: 0}]", "class: 0}, {cidr: %s/32, class: 3}]"
                                % net.client_ip)
            with open(cfg, "w") as f:
                f.write(text)
            answer = self.reload()
            self.assertEqual(answer.get("result"), "ok", answer)
            self.assertEqual(answer["applied"], ["xdp.cidr_rules"])
            self.assertEqual(program_id(net), prog)
            self.assertEqual(self.infer_codes(3, body), ["200"] * 3)
            self.assertEqual(metric("infergate_xdp_requests_total", **{"class": "background"}), 3)
            # 2. A request rate limit and a path list without /v2/health: once compiled into
            #    the program (refused after the privilege drop), now map entries.
            text = text.replace("  keep_attached: true\n", "  keep_attached: true\n"
                                "  request_rate_limit: {rate_per_sec: 1, burst: 2}\n"
                                "  path_prefixes: [/v2/models/]\n")
            with open(cfg, "w") as f:
                f.write(text)
            answer = self.reload()
            self.assertEqual(answer.get("result"), "ok", answer)
            self.assertEqual(sorted(answer["applied"]),
                             ["xdp.path_prefixes", "xdp.request_rate_limit"])
            self.assertEqual(program_id(net), prog)
            codes = self.infer_codes(5, body)
            self.assertEqual(codes[:2], ["200", "200"], codes)  # the burst
            self.assertIn("429", codes[2:])
            rejected = metric("infergate_xdp_packets_total", verdict="tx", reason="bad_path")
            r = net.run_client(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                "http://%s:8000/v2/health/ready" % net.gw_ip], check=False)
            self.assertEqual(r.stdout, "000", "reset by the program: not under a prefix")
            self.assertGreater(metric("infergate_xdp_packets_total", verdict="tx",
                                      reason="bad_path"), rejected)
            # 3. Priority rules (the program's header rule and trusted entries, and the
            #    sessions' policy).
            with open(cfg, "w") as f:
                f.write(text + "priority: {from_client: all}\n")
            answer = self.reload()
            self.assertEqual(answer.get("result"), "ok", answer)
            self.assertEqual(answer["applied"], ["priority"])
            self.assertEqual(program_id(net), prog)
        with open(log) as f:
            self.assertEqual(f.read().count("rules reloaded in place"), 3)

    def test_xdp_rules_reload_under_load(self):
        """Six reloads of the XDP rules (CIDR classes, path classes, a generous request rate
        limit, the priority rule) under the closed-loop load: zero failed requests, the same
        program id, and the class the last rules give the client is the one its requests get."""
        net = self.net
        base = CONFIG.format(mode="xdp-filter", xdp=XDP.format(ifname=net.gw_if))
        variants = [
            "  cidr_rules: [{cidr: %s/32, class: 3}]\n" % net.client_ip,
            "  path_classes: [{prefix: /v2/models/identity, class: 0}]\n",
            "  request_rate_limit: {rate_per_sec: 100000}\n"
            "  cidr_rules: [{cidr: %s/32, class: 2}]\n" % net.client_ip,
            "  methods: [POST, GET, PUT]\n",
            "  cidr_rules: [{cidr: 10.0.0.0/8, class: 2}, {cidr: %s/32, class: 3}]\n"
            % net.client_ip,
        ]
        cfg = os.path.join(net.tmp, "gw.yaml")
        with self.gateway(base, name="gw") as (p, log):
            prog = program_id(net)
            load = netns.ClientLoad(net)
            answers = []
            try:
                time.sleep(0.5)
                for extra in variants + [""]:
                    text = base.replace("  keep_attached: true\n",
                                        "  keep_attached: true\n" + extra)
                    if not extra:
                        text += "priority: {from_client: all}\n"
                    with open(cfg, "w") as f:
                        f.write(text)
                    answers.append(self.reload())
                    time.sleep(0.4)
                # The last rules: no CIDR class; before them, the client's was background.
                before = netns.gateway_metric(net, "infergate_xdp_requests_total",
                                              **{"class": "background"})
                time.sleep(0.3)
                after = netns.gateway_metric(net, "infergate_xdp_requests_total",
                                             **{"class": "background"})
            finally:
                result = load.stop()
            print("xdp rules reloaded 6 times under load: %s, program id %s -> %s"
                  % (json.dumps(result), prog, program_id(net)))
            for a in answers:
                self.assertEqual(a.get("result"), "ok", a)
            self.assertEqual(program_id(net), prog)
            self.assertEqual(result["failed"], 0, result)
            self.assertGreater(result["ok"], 300, result)
            self.assertGreater(before, 0, "the client was background under the 5th rules")
            self.assertEqual(after, before, "and is not any more")

    def test_restart_with_other_rules_keeps_the_program(self):
        """xdp.keep_attached: a new process whose xdp rules differ (a request rate limit) keeps
        the program the previous one left attached (the same id: its rules are map entries)
        and writes its own rules there; the limit answers 429."""
        net = self.net
        text = CONFIG.format(mode="xdp-filter", xdp=XDP.format(ifname=net.gw_if))
        body = self.body_file()
        a, a_log = netns.start_gateway(net, text, name="a")
        prog = program_id(net)
        self.assertIsNotNone(prog)
        self.assertEqual(self.infer_codes(3, body), ["200"] * 3)
        self.assertEqual(netns.stop_gateway(a), 0)
        self.assertEqual(program_id(net), prog, "left attached")
        limited = text.replace("  keep_attached: true\n", "  keep_attached: true\n"
                               "  request_rate_limit: {rate_per_sec: 1, burst: 2}\n")
        with self.gateway(limited, name="b") as (p, b_log):
            self.assertEqual(program_id(net), prog)
            codes = self.infer_codes(5, body)
            self.assertEqual(codes[:2], ["200", "200"], codes)
            self.assertIn("429", codes[2:])
        with open(b_log) as f:
            b_text = f.read()
        self.assertIn("kept program id %d" % prog, b_text)
        self.assertIn("XDP program kept on " + net.gw_if, b_text)

    def test_socket_mode(self):
        self.restart_under_load("socket")

    def test_xdp_filter_mode(self):
        self.restart_under_load("xdp-filter")


if __name__ == "__main__":
    harness.main()
