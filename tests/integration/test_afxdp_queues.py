"""afxdp mode on a veth pair with two rx/tx queues and one reactor per queue (each its own AF_XDP
socket, UMEM and TCP stack): connections spread over both queues by the client's flow hash,
every answer is right on both, and the per-queue counters show both reactors served. Also the
xdp: busy-poll keys (busy_poll, prefer_busy_poll, busy_poll_usecs, busy_poll_budget): the
sockets are bound with them (logged) and the busy-polling reactor serves."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

CONFIG = """
mode: afxdp
reactors: {reactors}
listeners:
  - {{name: http, address: 0.0.0.0, port: 8000, protocol: http}}
admin: {{address: 127.0.0.1, port: 8002}}
limits: {{max_connections: 4096}}
xdp:
  interface: {ifname}
  attach: native
{xdp_extra}models:
""" + harness.braces(harness.IDENTITY_MODEL)

# Runs in the client namespace over the kernel's TCP: N connections (each from its own source
# port, so the client's veth hashes them onto its tx queues, which are the gateway's rx queues),
# R keep-alive requests on each with distinct values; prints how many answers were right.
CLIENT = netns.SCRIPT_PATH + r'''
import json, socket, sys
from harness import read_response
host, conns, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = [socket.create_connection((host, 8000), timeout=20) for _ in range(conns)]
ok = 0
for r in range(rounds):
    for i, s in enumerate(socks):
        data = [float(i * 1000 + r * 16 + k) for k in range(16)]
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                       "data": data}]}).encode()
        s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
    for i, s in enumerate(socks):
        st, h, b, _ = read_response(s)
        data = [float(i * 1000 + r * 16 + k) for k in range(16)]
        if st == 200 and json.loads(b)["outputs"][0]["data"] == data:
            ok += 1
print(json.dumps({"ok": ok}))
'''


def read(path):
    with open(path) as f:
        return f.read()


class TwoQueueVethTestCase(netns.VethTestCase):
    tmp_prefix = "ig-afxdp-q-"
    queues = 2

    def setUp(self):
        # VethTestCase.setUp with a pair of `queues` rx/tx queues at each end.
        self.tmpdir = tempfile.TemporaryDirectory(prefix=self.tmp_prefix)
        self.net = netns.VethPair(queues=self.queues).__enter__()
        self.net.tmp = self.tmpdir.name

    def config(self, reactors, xdp_extra=""):
        return CONFIG.format(ifname=self.net.gw_if, reactors=reactors, xdp_extra=xdp_extra)

    def run_clients(self, conns, rounds):
        r = self.net.run_client(["/usr/bin/python3", "-c", CLIENT, self.net.gw_ip, str(conns),
                                 str(rounds)], check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["ok"]

    def per_queue(self, name):
        return [netns.gateway_metric(self.net, name, queue=str(q)) for q in range(self.queues)]


class AfXdpQueuesTest(TwoQueueVethTestCase):
    def test_two_queues_two_reactors_serve_correctly(self):
        with self.gateway(self.config(2)) as (p, log):
            text = read(log)
            self.assertIn("queue 0 bound in copy mode", text)
            self.assertIn("queue 1 bound in copy mode", text)
            conns, rounds = 32, 20
            self.assertEqual(self.run_clients(conns, rounds), conns * rounds, read(log)[-3000:])
            accepted = self.per_queue("infergate_tcp_accepted_total")
            frames = self.per_queue("infergate_afxdp_rx_frames_total")
            self.assertEqual(sum(accepted), conns, accepted)
            # Both reactors took connections and frames (32 flows on 2 queues: all on one queue
            # has probability 2^-31 with a fair hash).
            self.assertTrue(all(a > 0 for a in accepted), accepted)
            self.assertTrue(all(f > 0 for f in frames), frames)
            # Nothing was dropped for want of a connection: each flow's frames stayed on the
            # queue whose stack holds it.
            drops = self.per_queue("infergate_tcp_drops_total")
            self.assertEqual(drops, [0.0] * self.queues, drops)
            r = self.net.run_client(["wrk", "-t", "2", "-c", "32", "-d", "2s", "-s",
                                     os.path.join(harness.ARGS.source, "bench", "wrk", "infer.lua"),
                                     "http://%s:8000/" % self.net.gw_ip], check=False, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            m = re.search(r"WRK_JSON (\{.*\})", r.stdout)
            self.assertIsNotNone(m, r.stdout)
            res = json.loads(m.group(1))
            self.assertGreater(res["requests"], 0)
            self.assertEqual(res["errors"], 0, res)
            self.assertEqual(res["non2xx"], 0, res)

    def test_queue_count_must_match_reactors(self):
        p, log = netns.start_gateway(self.net, self.config(1), expect_start=False)
        self.assertNotEqual(p.wait(timeout=20), 0)
        self.assertIn("has 2 rx queue(s) but reactors is 1", read(log))


class AfXdpBusyPollTest(TwoQueueVethTestCase):
    queues = 1

    def test_busy_poll_keys_reach_the_sockets(self):
        extra = ("  busy_poll: true\n  prefer_busy_poll: true\n  busy_poll_usecs: 50\n"
                 "  busy_poll_budget: 16\n")
        with self.gateway(self.config(1, extra)) as (p, log):
            text = read(log)
            if "busy polling not enabled" in text:
                self.skipTest("the kernel refused the busy-poll socket options: " +
                              [l for l in text.splitlines() if "busy polling not enabled" in l][0])
            self.assertIn("busy polling 50 us, budget 16, preferred", text)
            self.assertEqual(self.run_clients(8, 10), 80, read(log)[-3000:])

    def test_busy_poll_off_by_default(self):
        with self.gateway(self.config(1)) as (p, log):
            self.assertNotIn("busy polling", read(log))
            self.assertEqual(self.run_clients(4, 5), 20)


if __name__ == "__main__":
    harness.main()
