"""xdp-filter mode facing a hostile network (issue 12). Raw frames are sent with AF_PACKET from
the client namespace of a veth pair (tests/integration/hostile.py):
- item 2: the XDP program in front of the kernel's TCP must not let two spoofed frames (a SYN
  with a live connection's 4-tuple, then an ACK whose data is a bad request line at that SYN's
  ISN + 1) mark the live flow rejected, after which the program dropped the victim's later data;
- item 7: a malformed request start sent as two IPv4 fragments must not get past the program
  to infergate's HTTP layer (the program cannot judge a fragment; it must drop it).

    /usr/bin/python3 test_hostile_xdp_filter.py --binary build/app/infergate --source .
"""
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hostile  # noqa: E402
import netns  # noqa: E402


class HostileXdpFilterTest(netns.VethTestCase):
    tmp_prefix = "ig-hostile-xf-"

    def test_spoofed_syn_and_bad_request_line_do_not_kill_a_live_connection(self):
        hostile.check_spoofed_reset(self, harness.ARGS.binary, "xdp-filter")

    def test_fragmented_bad_request_start_does_not_bypass_the_program(self):
        net = self.net
        p, log = hostile.start_gateway(net, harness.ARGS.binary, "xdp-filter", name="frag")
        raw = hostile.RawPort(net.client_ns, net.client_if)
        try:
            gw_mac = hostile.link_mac(net.gw_ns, net.gw_if)
            # A source the client namespace does not own; the gateway's kernel needs its
            # neighbour entry to answer it.
            spoof_ip, spoof_mac = net.gw_ip.rsplit(".", 1)[0] + ".78", "02:78:78:78:78:78"
            net.run_gw(["ip", "neigh", "replace", spoof_ip, "lladdr", spoof_mac, "dev", net.gw_if,
                        "nud", "permanent"])
            before = hostile.metrics_text(net)
            sport, isn = random.randint(20000, 60000), random.getrandbits(32)
            synack = hostile.raw_handshake(raw, spoof_mac, gw_mac, spoof_ip, net.gw_ip, sport, 8000, isn)
            self.assertIsNotNone(synack, "harness: no SYN-ACK from the gateway's kernel to %s" % spoof_ip)
            time.sleep(0.05)
            bad = b"BREW /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            t0 = time.monotonic()
            for f in hostile.tcp_fragments(spoof_mac, gw_mac, spoof_ip, net.gw_ip, sport, 8000,
                                           isn + 1, synack.seq + 1, hostile.ACK | hostile.PSH, bad):
                raw.send(f)
            time.sleep(1.0)
            after = hostile.metrics_text(net)
            answers = raw.seen(lambda s: not s.outgoing and s.dst == spoof_ip and s.dport == sport
                               and s.payload, since=t0)
            frag_lines = [l for l in after.splitlines() if l.startswith("infergate_xdp_packets_total")
                          and re.search(r'reason="[^"]*frag', l)]
            frags = sum(float(l.rsplit(" ", 1)[1]) for l in frag_lines)
            self.assertFalse(
                answers, "a malformed request start (%r) sent as two IPv4 fragments after a raw "
                "handshake from %s got past the XDP program: infergate answered %r; expected the "
                "fragments dropped in the program (counted). Counters: %s"
                % (bad, spoof_ip, [a.payload[:60] for a in answers], hostile.delta(before, after)))
            self.assertGreaterEqual(frags, 2, "the program did not count the 2 fragments (reason "
                                    "*frag*): %s" % (frag_lines or "no such counter"))
        finally:
            raw.close()
            rc = hostile.stop_gateway(p)
        self.assertEqual(rc, 0, hostile.read_log(log)[-3000:])


if __name__ == "__main__":
    harness.main()
