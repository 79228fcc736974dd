#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ (committed; rerun after changing an
input format). Frames mirror xdp/testing/fixtures.cc: client 10.0.0.2 / fd00::2, gateway
10.0.0.1 / fd00::1, service ports 8000 and 8001 (classifier) and 8080 (TCP stack)."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip4(a):
    return bytes(int(x) for x in a.split("."))


def ip6(last):
    return b"\xfd" + b"\0" * 14 + bytes([last])


def tcp_frame(flags, payload=b"", sport=40000, dport=8000, seq=1000, ack=5000, opts=b"",
              v6=False, vlan=None, ip_opts=b"", frag=0x4000, proto=6):
    while len(opts) % 4:
        opts += b"\x01"
    doff = (20 + len(opts)) // 4
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, doff << 4, flags, 65535, 0, 0) + opts
    seg = tcp + payload
    if v6:
        src, dst = ip6(2), ip6(1)
        pseudo = src + dst + struct.pack("!IxxxB", len(seg), 6)
        c = csum(pseudo + seg)
        seg = seg[:16] + struct.pack("!H", c) + seg[18:]
        l3 = struct.pack("!IHBB", 0x60000000, len(seg), proto, 64) + src + dst
        ethertype = 0x86DD
    else:
        src, dst = ip4("10.0.0.2"), ip4("10.0.0.1")
        while len(ip_opts) % 4:
            ip_opts += b"\x01"
        ihl = 5 + len(ip_opts) // 4
        pseudo = src + dst + struct.pack("!BBH", 0, 6, len(seg))
        c = csum(pseudo + seg)
        seg = seg[:16] + struct.pack("!H", c) + seg[18:]
        hdr = struct.pack("!BBHHHBBH", 0x40 | ihl, 0, ihl * 4 + len(seg), 0, frag, 64, proto, 0)
        hdr += src + dst + ip_opts
        hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
        l3 = hdr
        ethertype = 0x0800
    eth = bytes([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2])
    if vlan is not None:
        eth += struct.pack("!HH", 0x8100, vlan)
    return eth + struct.pack("!H", ethertype) + l3 + seg


SYN_OPTS = bytes([2, 4, 0x05, 0xB4, 4, 2, 8, 10, 0, 0, 0, 7, 0, 0, 0, 0, 1, 3, 3, 7])


def classifier_seeds():
    k_all = 0x07  # send_rst, priority_header, reject_mid_stream
    h1 = b"GET /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nx-infergate-priority: 0\r\n\r\n"
    return {
        "syn_v4_opts": bytes([k_all, 0x07]) + tcp_frame(SYN, opts=SYN_OPTS),
        "syn_v6_vlan": bytes([k_all, 0x4e]) + tcp_frame(SYN, opts=SYN_OPTS[:4], v6=True, vlan=5),
        "get_v4": bytes([k_all | 0x20, 0]) + tcp_frame(ACK | PSH, h1),
        "post_v6_urgent": bytes([0x21, 0]) + tcp_frame(
            ACK | PSH, b"POST /v2/models/urgent/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", v6=True),
        "bad_method_rst": bytes([0x21, 0]) + tcp_frame(ACK | PSH, b"BREW /v2/ HTTP/1.1\r\n\r\n"),
        "bad_path": bytes([0xa1, 0x20]) + tcp_frame(ACK | PSH, b"PROPFIND /etc/passwd HTTP/1.0\r\n\r\n"),
        "h2_preface_settings": bytes([0x61, 0]) + tcp_frame(
            ACK | PSH, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 6, 4, 0, 0, 0, 0, 0]) +
            bytes([0, 3, 0, 0, 0, 100]) + bytes([0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])),
        "byte_by_byte": bytes([0x21, 0]) + tcp_frame(ACK | PSH, b"PO", dport=8001),
        "ip_options_fragment": bytes([0x08, 0]) + tcp_frame(ACK, b"abc", ip_opts=b"\x94\x04\0\0",
                                                          frag=0x2000),
        "ipv6_ext_hop": bytes([0, 0]) + tcp_frame(ACK, b"", v6=True, proto=0),
        "ack_cookie": bytes([0, 0x10]) + tcp_frame(ACK, seq=0x80000001, ack=0x12345679),
        "not_service": bytes([0, 0]) + tcp_frame(ACK | PSH, b"GET / HTTP/1.1\r\n\r\n", dport=22),
    }


# ---- TCP stack records (see tcp_stack_fuzz.cc) ----

def segment(client, flags, payload=b"", kind=0, modes=0, seq=0, ack=0, window=65535, opts=0,
            optval=0, meta=0, clock=0, unit=0):
    head = kind | (client << 2) | (unit << 6)
    return struct.pack("<BBBIIHBBBBH", head, flags, modes, seq, ack, window, opts, optval, meta,
                       clock, len(payload)) + payload


def raw(frame, meta=0):
    return struct.pack("<BBH", 1, meta, len(frame)) + frame


def action(which, act, n=0):
    return struct.pack("<BBBH", 2, which, act, n)


def config(c0, c1=0x01, c2=0xff, c3=0):
    return bytes([c0, c1, c2, c3])


ABS = 3  # seq and ack absolute
OPTS_ALL = 0x0F  # MSS, wscale, SACK-permitted, timestamps


def handshake(client, opts=OPTS_ALL):
    # SYN, then the ACK that completes it (kind 3: against the SYN-ACK the stack sent)
    return (segment(client, SYN, modes=ABS, seq=1000 + client, opts=opts) +
            segment(client, ACK, kind=3, opts=opts & 8))


def tcp_seeds():
    req = b"GET /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n\r\n"
    rs = 2 << 2  # meta: request start
    s = {}
    s["echo_close"] = (config(0x1D) + handshake(0) +
                       segment(0, ACK | PSH, req, opts=8, modes=rs, meta=1) +
                       segment(0, ACK | FIN, opts=8, clock=50, unit=1) +
                       segment(0, ACK, opts=8, clock=5, unit=3))
    s["cookies_always"] = (config(0x1E) + handshake(1) + handshake(2, opts=0x03) +
                           segment(1, ACK | PSH, req, opts=8))
    s["backlog_flood"] = (config(0x1D) + b"".join(
        segment(c, SYN, modes=ABS, seq=77, opts=OPTS_ALL) for c in range(16)) +
        segment(3, ACK, kind=3, opts=8) + segment(7, ACK, kind=3, opts=8))
    s["rejected_first_segment"] = (config(0x0D) + handshake(0, opts=0x07) +
                                   segment(0, ACK | PSH, b"BREW / HTTP/1.1\r\n", modes=1 << 2, meta=5))
    s["paused_window"] = (config(0x1D, c1=0x02, c3=2) + handshake(4) +
                          b"".join(segment(4, ACK | PSH, b"x" * 1400, opts=8, seq=i * 1400)
                                   for i in range(4)) +
                          action(0, 2) + segment(4, ACK, opts=8))
    s["out_of_order_sack"] = (config(0x1D, c1=0x09) + handshake(6) +
                              segment(6, ACK | PSH, b"b" * 500, seq=1000, opts=0x18, optval=3) +
                              segment(6, ACK | PSH, b"a" * 1000, opts=8) +
                              action(0, 6, 200) + segment(6, ACK, opts=0x38, optval=1, clock=3,
                                                          unit=2))
    s["raw_frames"] = (config(0x3D) + raw(tcp_frame(SYN, dport=8080, opts=SYN_OPTS)) +
                       raw(tcp_frame(ACK, dport=8080, seq=1001)) +
                       raw(b"\xff" * 14 + b"\x08\x06" + b"\0" * 28))
    s["isn_wrap_retransmit"] = (config(0x9D, c1=0x08, c3=1) + handshake(7) +
                                segment(7, ACK | PSH, req, opts=8) +
                                segment(7, ACK, opts=8, clock=3, unit=3) +
                                segment(7, ACK | RST, opts=0))
    s["dup_acks"] = (config(0x1D, c1=0x08) + handshake(3) +
                     segment(3, ACK | PSH, req, opts=8) +
                     b"".join(segment(3, ACK, opts=8, modes=0x80) for _ in range(4)))
    s["table_full"] = (config(0x1D) + b"".join(handshake(c, opts=0) for c in range(16) if c != 5))
    return s


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("fuzz_xdp_classifier", classifier_seeds())
    write("fuzz_tcp_stack", tcp_seeds())
    sys.exit(0)
