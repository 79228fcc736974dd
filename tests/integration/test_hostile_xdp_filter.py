"""xdp-filter mode facing a hostile network (issue 12, item 2): the XDP program in front of the
kernel's TCP must not let two spoofed frames (a SYN with a live connection's 4-tuple, then an
ACK whose data is a bad request line at that SYN's ISN + 1) mark the live flow rejected, after
which the program dropped the victim's later data. Raw frames are sent with AF_PACKET from the
client namespace of a veth pair (tests/integration/hostile.py).

    /usr/bin/python3 test_hostile_xdp_filter.py --binary build/app/infergate --source .
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hostile  # noqa: E402
import netns  # noqa: E402


class HostileXdpFilterTest(netns.VethTestCase):
    tmp_prefix = "ig-hostile-xf-"

    def test_spoofed_syn_and_bad_request_line_do_not_kill_a_live_connection(self):
        hostile.check_spoofed_reset(self, harness.ARGS.binary, "xdp-filter")


if __name__ == "__main__":
    harness.main()
