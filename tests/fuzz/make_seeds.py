#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ (committed; rerun after changing an
input format). Frames mirror xdp/testing/fixtures.cc: client 10.0.0.2 / fd00::2, gateway
10.0.0.1 / fd00::1, service ports 8000 and 8001 (classifier) and 8080 (TCP stack).

The frontend and config seeds come from the unit tests' own tables: the string literals of
tests/unit/frontend/*_test.cc and tests/unit/config/config_test.cc (requests, JSON bodies, YAML)
are read out of the sources, plus the example configs and hand-built gRPC messages that mirror
grpc_kserve_codec_test.cc and tf_predict_sizes_test.cc (the models are tests/fuzz/fuzz_common.h's).
"""
import glob
import hashlib
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from hostile import FIN, SYN, RST, PSH, ACK, csum  # noqa: E402 (the Internet checksum, RFC 1071)


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


# ---- dpdk mode's ingress filter records (see ingress_filter_fuzz.cc) ----

def if_frame(frame):
    return b"\x00" + struct.pack("<H", len(frame)) + frame


def if_burst(sel=12):  # max = 1 + 5 * sel
    return bytes([1 | (sel << 2)])


def if_clock(mult, shift):  # mult << shift ns
    return bytes([2 | (mult << 2), shift])


def if_overload(level):
    return bytes([3 | (level << 4)])


def if_rules(k0, k1):
    return bytes([3 | (1 << 2), k0, k1])


def if_cookies(gen=0, clear=False):
    return bytes([3 | (2 << 2) | (gen << 4) | (0x20 if clear else 0)])


def if_hold():
    return bytes([3 | (3 << 2)])


ETH_US = bytes([2, 0, 0, 0, 0, 1])
ETH_PEER = bytes([2, 0, 0, 0, 0, 2])


def eth(dst, ethertype, vlan=None):
    h = dst + ETH_PEER
    if vlan is not None:
        h += struct.pack("!HH", 0x8100, vlan)
    return h + struct.pack("!H", ethertype)


def arp_request(target="10.0.0.1", vlan=None):
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + ETH_PEER + ip4("10.0.0.2") + b"\0" * 6 + ip4(target)
    return eth(b"\xff" * 6, 0x0806, vlan) + body


def icmp_echo(data=b"ping", dst="10.0.0.1"):
    icmp = struct.pack("!BBHHH", 8, 0, 0, 7, 1) + data
    icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
    hdr = struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(icmp), 0, 0x4000, 64, 1, 0) + ip4("10.0.0.2") + ip4(dst)
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return eth(ETH_US, 0x0800) + hdr + icmp


def icmp6(dst, body, hop=64):
    src = ip6(2)
    pseudo = src + dst + struct.pack("!IxxxB", len(body), 58)
    body = body[:2] + struct.pack("!H", csum(pseudo + body)) + body[4:]
    return eth(ETH_US, 0x86DD) + struct.pack("!IHBB", 0x60000000, len(body), 58, hop) + src + dst + body


def icmp6_echo(data=b"ping6"):
    return icmp6(ip6(1), struct.pack("!BBHHH", 128, 0, 0, 7, 1) + data)


def neighbour_solicitation():
    solicited = bytes.fromhex("ff0200000000000000000001ff000001")
    body = struct.pack("!BBHI", 135, 0, 0, 0) + ip6(1) + bytes([1, 1]) + ETH_PEER
    return icmp6(solicited, body, hop=255)


def ingress_filter_seeds():
    h1 = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nx-infergate-priority: 0\r\nContent-Length: 2\r\n\r\n{}"
    conn = (if_frame(tcp_frame(SYN, seq=1000, opts=SYN_OPTS)) +
            if_frame(tcp_frame(ACK, seq=1001, ack=0x12345679)) +
            if_frame(tcp_frame(ACK | PSH, h1, seq=1001, ack=0x12345679)))
    l2 = (if_frame(arp_request()) + if_frame(arp_request(vlan=7)) + if_frame(arp_request("10.0.0.9")) +
          if_frame(icmp_echo()) + if_frame(icmp_echo(b"x" * 1400)) + if_frame(icmp6_echo()) +
          if_frame(neighbour_solicitation()))
    return {
        "connection": bytes([0x07, 0, 0]) + conn + if_burst(),
        "connection_limits_cidrs": bytes([0x07, 0, 0x07]) + conn + conn + if_burst(1) + if_burst() +
        if_clock(63, 24) + conn + if_burst(),
        "l2_answers": bytes([0, 0, 0x08]) + l2 + if_burst(),
        "l2_one_per_burst": bytes([0, 0, 0x18]) + l2 + if_burst(2) + if_burst(),
        "l2_no_tx_frame": bytes([0, 0, 0x38]) + l2 + if_burst(),
        "l2_three_tx_frames": bytes([0, 0, 0x68]) + l2 + if_burst(),
        "rejected_flow": bytes([0x21, 0, 0]) + if_frame(tcp_frame(SYN, seq=1000)) +
        if_frame(tcp_frame(ACK | PSH, b"BREW /v2/ HTTP/1.1\r\n\r\n", seq=1001)) +
        if_frame(tcp_frame(ACK | PSH, b"again", seq=1024)) + if_burst(),
        "overload_reload_hold": bytes([0x03, 0, 0x06]) + if_overload(3) + conn + if_hold() +
        if_rules(0xa1, 0x20) + if_overload(0) + conn + if_cookies(1) + if_burst() + if_cookies(clear=True),
        "fragments_v6_not_service": bytes([0x08, 0, 0x88]) +
        if_frame(tcp_frame(ACK, b"abc", ip_opts=b"\x94\x04\0\0", frag=0x2000)) +
        if_frame(tcp_frame(ACK, b"", v6=True, proto=0)) +
        if_frame(tcp_frame(ACK | PSH, b"GET / HTTP/1.1\r\n\r\n", dport=22)) +
        if_frame(tcp_frame(SYN, v6=True, vlan=5, opts=SYN_OPTS[:4])) + if_burst(63),
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


# ---- string literals of the unit tests ----

ROOT = os.path.dirname(os.path.dirname(HERE))
_ESC = {"n": b"\n", "r": b"\r", "t": b"\t", "0": b"\0", "\\": b"\\", '"': b'"', "'": b"'",
        "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v", "?": b"?"}


def literals(path):
    """The C++ string literals of a source file, adjacent ones joined ("a" "b" is one)."""
    src = open(path, encoding="utf-8").read()
    out, i, cur, last_end = [], 0, None, -1
    n = len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
            continue
        if src.startswith("/*", i):
            i = src.find("*/", i) + 2
            continue
        if c == "'":
            j = i + 1
            while j < n and src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        raw = src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))
        if raw or c == '"':
            if raw:
                d_end = src.index("(", i + 2)
                delim = src[i + 2:d_end]
                end = src.index(")" + delim + '"', d_end)
                val = src[d_end + 1:end].encode()
                j = end + len(delim) + 2
            else:
                j, val = i + 1, b""
                while src[j] != '"':
                    if src[j] == "\\":
                        e = src[j + 1]
                        if e == "x":
                            m = re.match(r"[0-9a-fA-F]+", src[j + 2:])
                            val += bytes([int(m.group(0), 16) & 0xFF])
                            j += 2 + len(m.group(0))
                            continue
                        val += _ESC.get(e, e.encode())
                        j += 2
                        continue
                    val += src[j].encode()
                    j += 1
                j += 1
            if cur is not None and src[last_end:i].strip() == "":
                cur += val
            else:
                if cur is not None:
                    out.append(cur)
                cur = val
            last_end = i = j
            continue
        i += 1
    if cur is not None:
        out.append(cur)
    return out


def test_literals(pattern):
    vals = []
    for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
        vals += literals(path)
    seen, out = set(), []
    for v in vals:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def named(prefix, values):
    return {"%s_%s" % (prefix, hashlib.sha1(v).hexdigest()[:10]): v for v in values}


# ---- protobuf wire format (just enough for the gRPC seeds) ----

def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_len(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def pb_int(field, v):
    return varint(field << 3) + varint(v)


def pb_str(field, s):
    return pb_len(field, s.encode() if isinstance(s, str) else s)


def packed(field, values, fmt=None):
    body = b"".join(struct.pack("<" + fmt, v) for v in values) if fmt else b"".join(
        varint(v) for v in values)
    return pb_len(field, body)


def infer_input(name, dtype, shape, contents=None, params=b""):
    m = pb_str(1, name) + pb_str(2, dtype) + packed(3, shape) + params
    if contents is not None:
        m += pb_len(5, contents)
    return pb_len(5, m)


def infer_param(key, value_field, value):
    v = pb_int(value_field, value) if value_field in (1, 2, 5) else pb_str(value_field, value)
    return pb_len(1, pb_str(1, key) + pb_len(2, v))


def model_infer_seeds():
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    s = {}
    s["m_raw_fp32"] = (pb_str(1, "m") + pb_str(2, "1") + pb_str(3, "req-1") +
                       infer_input("x", "FP32", [1, 3]) + pb_len(7, f32(1, 2, 3)))
    s["m_fp32_contents"] = (pb_str(1, "m") + infer_input("x", "FP32", [2, 3],
                            packed(6, [1, 2, 3, 4, 5, 6], "f")) + pb_len(6, pb_str(1, "x_out")))
    s["two_int_bytes"] = (pb_str(1, "two") + infer_input("a", "INT32", [1, 2], packed(2, [7, -1])) +
                          infer_input("s", "BYTES", [1, 1], pb_str(8, "hello")))
    s["two_raw_bytes"] = (pb_str(1, "two") + infer_input("a", "INT32", [1, 2]) +
                          infer_input("s", "BYTES", [1, 1]) + pb_len(7, struct.pack("<ii", 1, 2)) +
                          pb_len(7, struct.pack("<I", 3) + b"abc"))
    s["identity_raw"] = (pb_str(1, "identity") + infer_input("INPUT0", "FP32", [1, 16]) +
                         pb_len(7, f32(*range(16))))
    s["all_typed"] = (pb_str(1, "all") +
                      infer_input("h", "FP16", [2, 2]) + infer_input("b", "BF16", [2]) +
                      infer_input("t", "BOOL", [1], packed(1, [1])) +
                      infer_input("u", "UINT64", [2], packed(5, [1, 2**64 - 1])) +
                      infer_input("i", "INT8", [3], packed(2, [-128, 0, 127])) +
                      infer_input("d", "FP64", [1], packed(7, [0.5], "d")) +
                      infer_input("c", "UINT8", [1, 2], packed(4, [0, 255])) +
                      pb_len(7, b"\0\x3c" * 4) + pb_len(7, b"\x80\x3f\0\x40"))
    s["s_bytes_contents"] = (pb_str(1, "s") + infer_input("s", "BYTES", [3], pb_str(8, "a") +
                             pb_str(8, "") + pb_str(8, "\xff")))
    s["params_priority_timeout"] = (pb_str(1, "m") + infer_param("priority", 5, 1) +
                                    infer_param("timeout", 2, 1000) +
                                    infer_param("binary_data_output", 1, 1) +
                                    infer_input("x", "FP32", [1, 3], packed(6, [1, 2, 3], "f")))
    s["params_sequence"] = (pb_str(1, "m") + infer_param("sequence_id", 3, "seq-1") +
                            infer_param("sequence_start", 1, 1) + infer_param("sequence_end", 1, 0) +
                            infer_input("x", "FP32", [1, 3], packed(6, [1, 2, 3], "f")))
    s["huge_shape"] = pb_str(1, "m") + infer_input("x", "FP32", [2**62 + 1, 3]) + pb_len(7, f32(1))
    s["negative_shape"] = pb_str(1, "m") + infer_input("x", "FP32", [-1, 3])
    s["unknown_model"] = pb_str(1, "nope") + infer_input("x", "FP32", [1])
    s["mixed_raw_contents"] = (pb_str(1, "m") + infer_input("x", "FP32", [1, 3], packed(6, [1], "f")) +
                               pb_len(7, f32(1, 2, 3)))
    return s


def tensor_proto(dtype, dims, **vals):
    m = pb_int(1, dtype) + pb_len(2, b"".join(pb_len(2, pb_int(1, d)) for d in dims))
    fields = {"tensor_content": (4, None), "float_val": (5, "f"), "double_val": (6, "d"),
              "int_val": (7, None), "int64_val": (10, None), "bool_val": (11, None),
              "half_val": (13, None), "uint32_val": (16, None), "uint64_val": (17, None)}
    for k, v in vals.items():
        if k == "string_val":
            m += b"".join(pb_str(8, x) for x in v)
        elif k == "tensor_content":
            m += pb_len(4, v)
        else:
            num, fmt = fields[k]
            m += packed(num, v, fmt)
    return m


def predict_request(name, inputs, version=None, output_filter=()):
    spec = pb_str(1, name) + (pb_len(2, pb_int(1, version)) if version is not None else b"")
    m = pb_len(1, spec)
    for alias, tp in inputs:
        m += pb_len(2, pb_str(1, alias) + pb_len(2, tp))
    for f in output_filter:
        m += pb_str(3, f)
    return m


DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT8, DT_STRING = 1, 2, 3, 4, 6, 7
DT_INT64, DT_BOOL, DT_BFLOAT16, DT_HALF, DT_UINT64 = 9, 10, 14, 19, 23


def tf_predict_seeds():
    s = {}
    s["m_float_val"] = predict_request("m", [("x", tensor_proto(DT_FLOAT, [2, 3],
                                                                 float_val=[1, 2, 3, 4, 5, 6]))])
    s["m_broadcast_one"] = predict_request("m", [("x", tensor_proto(DT_FLOAT, [8, 3], float_val=[7]))],
                                           version=1)
    s["m_tensor_content"] = predict_request("m", [("x", tensor_proto(
        DT_FLOAT, [1, 3], tensor_content=struct.pack("<3f", 1, 2, 3)))], output_filter=["x_out"])
    # The request of issue 13: one dimension of 4611686018427387905 and one value to broadcast.
    s["issue13_huge_dim"] = predict_request("m", [("x", tensor_proto(DT_FLOAT, [4611686018427387905],
                                                                      float_val=[1]))])
    s["two_int_string"] = predict_request("two", [("a", tensor_proto(DT_INT32, [1, 2], int_val=[1, -2])),
                                                  ("s", tensor_proto(DT_STRING, [1, 1],
                                                                     string_val=["abc"]))], version=2)
    s["all_typed"] = predict_request("all", [
        ("h", tensor_proto(DT_HALF, [2, 2], half_val=[0x3c00, 0, 0x7c00, 0xfc00])),
        ("b", tensor_proto(DT_BFLOAT16, [2], half_val=[0x3f80, 0x4000])),
        ("t", tensor_proto(DT_BOOL, [1], bool_val=[1])),
        ("u", tensor_proto(DT_UINT64, [1], uint64_val=[2**64 - 1])),
        ("i", tensor_proto(DT_INT8, [2], int_val=[-128, 127])),
        ("d", tensor_proto(DT_DOUBLE, [1], double_val=[0.25])),
        ("c", tensor_proto(DT_UINT8, [1, 2], int_val=[0, 255]))])
    s["s_strings"] = predict_request("s", [("s", tensor_proto(DT_STRING, [2], string_val=["", "\xff"]))])
    s["unknown_input"] = predict_request("m", [("y", tensor_proto(DT_FLOAT, [1, 3], float_val=[1]))])
    s["identity_int64_mismatch"] = predict_request("identity", [("INPUT0", tensor_proto(
        DT_INT64, [1, 16], int64_val=list(range(16))))])
    # Issue 16, the wire decoder's cases (tests/unit/frontend/tf_predict_codec_test.cc): a map
    # entry with the value before the key, unpacked values after a packed run, a value split in
    # two messages of one entry (merged), a key given twice (the last entry wins), unknown
    # fields and a group, a known field of another wire type, version_label after version.
    unpacked = pb_int(1, DT_INT32) + pb_len(2, pb_len(2, pb_int(1, 1)) + pb_len(2, pb_int(1, 2))) + \
        pb_len(7, varint(5)) + pb_int(7, 2**64 - 6)
    s["two_value_first_unpacked"] = pb_len(1, pb_str(1, "two")) + \
        pb_len(2, pb_len(2, unpacked) + pb_str(1, "a")) + \
        pb_len(2, pb_str(1, "s") + pb_len(2, pb_int(1, DT_STRING)) +
               pb_len(2, pb_len(2, pb_len(2, pb_int(1, 1)) + pb_len(2, pb_int(1, 1))) +
                      pb_str(8, b"\x00\xff")))
    s["m_duplicate_key_unknown_fields"] = pb_len(1, pb_str(4, "stable") + pb_str(1, "m") +
                                                 pb_len(2, pb_int(1, 1)) + pb_int(99, 7)) + \
        pb_len(2, pb_str(1, "x") + pb_len(2, tensor_proto(DT_FLOAT, [9], float_val=[1]))) + \
        varint(77 << 3 | 3) + pb_int(1, 5) + varint(77 << 3 | 4) + \
        pb_len(2, pb_str(1, "x") + pb_len(2, tensor_proto(DT_FLOAT, [1, 3], float_val=[1, 2, 3]) +
                                          pb_int(4, 7))) + pb_str(3, "x_out")
    return {k: b"\x00" + v for k, v in s.items()}  # timeout byte 0: no deadline


def model_infer_target_seeds():
    out = {}
    for name, m in model_infer_seeds().items():
        out["service_" + name] = b"\x00" + m
        out["stream_" + name] = b"\x02" + m
        out["decode_" + name] = b"\x01" + m
        out["decode_placed_" + name] = b"\x03" + m
    return out


def grpc_framing_seeds():
    msg = lambda b, flag=0: bytes([flag]) + struct.pack(">I", len(b)) + b
    s = {
        "two_messages": b"\x03\x01" + msg(b"hello") + msg(b""),
        "split_message": b"\x03\x07" + msg(b"x" * 200),
        "compressed": b"\x03\x00" + msg(b"abc", 1),
        "bad_flag": b"\x03\x00" + msg(b"abc", 2),
        "over_limit": b"\x02\x05" + msg(b"y" * 17),
        "partial_tail": b"\x03\x09" + msg(b"abc") + b"\x00\x00\x00",
        "timeout_text": b"\x03\x00" + b"100m" + msg(b"%41"),
    }
    for name, m in model_infer_seeds().items():
        s["modelinfer_" + name] = b"\x04\x02" + msg(m)
    return s


def models_json():
    """KServe v2 JSON bodies for the fuzz models (mode byte = model index, fuzz_common.h)."""
    return {
        "m": b'{"id":"1","inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2.5,-3e3]}],'
             b'"outputs":[{"name":"x_out","parameters":{"binary_data":true}}]}',
        "two": b'{"inputs":[{"name":"a","shape":[1,2],"datatype":"INT32","data":[[1,-2]]},'
               b'{"name":"s","shape":[1,1],"datatype":"BYTES","data":["abc"]}],'
               b'"parameters":{"binary_data_output":true}}',
        "identity": b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":'
                    b'[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]}',
        "all": b'{"inputs":[{"name":"h","shape":[2,2],"datatype":"FP16","data":[1,0.5,65504,-0]},'
               b'{"name":"b","shape":[2],"datatype":"BF16","data":[1,2]},'
               b'{"name":"t","shape":[1],"datatype":"BOOL","data":[true]},'
               b'{"name":"u","shape":[1],"datatype":"UINT64","data":[18446744073709551615]},'
               b'{"name":"i","shape":[2],"datatype":"INT8","data":[-128,127]},'
               b'{"name":"d","shape":[1],"datatype":"FP64","data":[1e308]},'
               b'{"name":"c","shape":[1,2],"datatype":"UINT8","data":[[0,255]]}]}',
        "s": b'{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["","\\u00ff"]}],'
             b'"priority":1,"timeout":1000}',
    }


MODEL_INDEX = {"m": 0, "two": 1, "identity": 2, "all": 3, "s": 4}


def binary_ext(model, inputs_json, parts):
    """A KServe binary-extension body: JSON header + parts; returns (header length, body)."""
    head = inputs_json.encode()
    return len(head), head + b"".join(parts)


def kserve_json_seeds():
    s = {}
    jsons = [v for v in test_literals("tests/unit/frontend/kserve_*_test.cc") if v.startswith(b"{")]
    for name, body in named("test", jsons).items():
        s[name] = bytes([0x05, 0, 0]) + body           # no model config, as the tests decode
        s[name + "_m"] = bytes([0x00, 0, 0]) + body
    for model, body in models_json().items():
        s["model_" + model] = bytes([MODEL_INDEX[model], 0, 0]) + body
        s["model_placed_" + model] = bytes([MODEL_INDEX[model] | 0x20, 0, 0]) + body
    hl, body = binary_ext("m", '{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32",'
                          '"parameters":{"binary_data_size":12}}],"parameters":{"binary_data_output":true}}',
                          [struct.pack("<3f", 1, 2, 3)])
    s["binary_ext_m"] = bytes([0x08, hl & 0xFF, hl >> 8]) + body
    s["binary_ext_m_placed"] = bytes([0x28, hl & 0xFF, hl >> 8]) + body
    hl, body = binary_ext("two", '{"inputs":[{"name":"a","shape":[1,2],"datatype":"INT32",'
                          '"parameters":{"binary_data_size":8}},{"name":"s","shape":[1,1],'
                          '"datatype":"BYTES","parameters":{"binary_data_size":7}}]}',
                          [struct.pack("<ii", 5, 6), struct.pack("<I", 3) + b"xyz"])
    s["binary_ext_two"] = bytes([0x09 | 0x40, hl & 0xFF, hl >> 8]) + body
    s["sequence_m"] = bytes([0x00, 0, 0]) + (b'{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32",'
                                              b'"data":[1,2,3]}],"parameters":{"sequence_id":42,'
                                              b'"sequence_start":true,"sequence_end":false}}')
    s["raw_binary_identity"] = bytes([0x12, 0, 0]) + struct.pack("<16f", *range(16))
    s["raw_binary_s"] = bytes([0x14 | 0x20, 0, 0]) + struct.pack("<I", 2) + b"hi"
    return s


def tfserving_rest_seeds():
    s = {}
    jsons = [v for v in test_literals("tests/unit/frontend/tfserving_rest_test.cc")
             if v.lstrip().startswith(b"{")]
    for name, body in named("test", jsons).items():
        s[name] = b"\x00" + body
        s[name + "_two"] = b"\x01" + body
    s["all_columnar"] = b"\x03" + (b'{"inputs":{"h":[[1,2],[3,4]],"b":[1,NaN],"t":[true],"u":[1],'
                                   b'"i":[-1],"d":[-Infinity],"c":[[1,2]]}}')
    s["s_b64"] = b"\x04" + b'{"instances":[{"b64":"aGk="},"plain"]}'
    s["identity_rows"] = b"\x02" + b'{"signature_name":"serving_default","instances":[' + \
        b"[" + b",".join(b"%d" % i for i in range(16)) + b"]]}"
    return s


# ---- HTTP/1.1 (fuzz_http1 records: see http1_fuzz.cc) ----

def h1_read(b):
    return struct.pack("<BH", 0, len(b)) + b


def h1_tick(quarters):
    return bytes([1 | (quarters << 2)])


def h1_small(b):
    return bytes([3 | (len(b) << 2)]) + b


def post(path, body, headers=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
            headers + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def http1_seeds():
    s = {}
    reqs = [v for v in test_literals("tests/unit/frontend/http1_*_test.cc") if b"HTTP/1." in v]
    for name, r in named("test", reqs).items():
        s[name] = b"\x00" + h1_read(r)
    s["kserve_infer_pipelined"] = b"\x00" + h1_read(
        post(b"/v2/models/m/infer", models_json()["m"]) +
        post(b"/v2/models/two/versions/2/infer", models_json()["two"]))
    s["kserve_get_paths"] = b"\x00" + h1_read(b"".join(
        b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p for p in
        [b"/v2/health/live", b"/v2/health/ready", b"/v2", b"/v2/models/m", b"/v2/models/m/ready",
         b"/v2/models/all/versions/1", b"/v1/models/m", b"/v1/models/m/versions/1"]))
    hl, body = binary_ext("m", '{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32",'
                          '"parameters":{"binary_data_size":12}}]}', [struct.pack("<3f", 1, 2, 3)])
    s["kserve_binary_ext"] = b"\x00" + h1_read(post(
        b"/v2/models/m/infer", body, b"Inference-Header-Content-Length: %d\r\n" % hl))
    s["kserve_raw_binary"] = b"\x00" + h1_read(post(
        b"/v2/models/identity/infer", struct.pack("<16f", *range(16)),
        b"Inference-Header-Content-Length: 0\r\n"))
    s["tf_predict_rows"] = b"\x00" + h1_read(post(b"/v1/models/m:predict",
                                                 b'{"instances":[[1,2,NaN]]}'))
    s["tf_predict_columnar_v"] = b"\x00" + h1_read(post(b"/v1/models/m/versions/1:predict",
                                                       b'{"inputs":[[1,2,3],[4,5,6]]}'))
    s["expect_continue_split"] = b"\x00" + h1_read(
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n" % len(models_json()["m"])) + h1_read(models_json()["m"])
    body = models_json()["m"]
    s["chunked_byte_by_byte"] = b"\x00" + b"".join(h1_small(bytes([c])) for c in (
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
        b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"))
    s["header_timeout"] = b"\x00" + h1_read(b"GET /v2/health/live HTTP/1.1\r\nHo") + h1_tick(8)
    s["body_timeout_small_limits"] = b"\x01" + h1_read(
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{") + h1_tick(12)
    s["peer_close_cancel"] = b"\x02" + h1_read(post(b"/v2/models/m/infer", body)) + b"\x02"
    s["tagged_rate_limited"] = bytes([0x04 | 0x20]) + h1_read(post(b"/v2/models/m/infer", body))
    s["max_in_flight_small"] = b"\x01" + h1_read(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" * 6)
    return s


# ---- HTTP/2 (fuzz_http2 records: see http2_fuzz.cc) ----

def h2_frame(ftype, flags, stream, payload, split=False):
    return bytes([1 | (0x80 if split else 0), ftype, flags, stream]) + struct.pack("<H", len(payload)) + payload


def h2_headers(stream, flags, path, extra=b""):
    return bytes([2, stream, flags, path, len(extra)]) + extra


def h2_message(stream, flags, message):
    return bytes([3, stream, flags]) + struct.pack("<H", len(message)) + message


def h2_tick(quarters):
    return bytes([4 | (quarters << 3)])


END_STREAM, END_HEADERS, ACK_FLAG = 0x1, 0x4, 0x1
PATH_INFER, PATH_STREAM, PATH_PREDICT, PATH_LIVE, PATH_READY, PATH_MREADY, PATH_SMETA, PATH_MMETA = range(8)


def http2_seeds():
    settings = h2_frame(4, 0, 0, b"")
    infer = model_infer_seeds()
    predict = {k: v[1:] for k, v in tf_predict_seeds().items()}
    s = {}
    s["infer_unary"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_INFER) +
                        h2_message(1, END_STREAM, infer["m_raw_fp32"]))
    s["infer_two_streams"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_INFER) +
                              h2_headers(3, END_HEADERS, PATH_INFER | 0x20) +
                              h2_message(3, END_STREAM, infer["two_int_bytes"]) +
                              h2_message(1, END_STREAM, infer["all_typed"]))
    s["stream_infer"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_STREAM) +
                         h2_message(1, 0, infer["m_fp32_contents"]) +
                         h2_message(1, 0, infer["unknown_model"]) + h2_frame(0, END_STREAM, 1, b""))
    s["predict"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_PREDICT | 0x10) +
                    h2_message(1, END_STREAM, predict["m_broadcast_one"]))
    s["predict_issue13"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_PREDICT) +
                            h2_message(1, END_STREAM, predict["issue13_huge_dim"]))
    s["metadata_calls"] = (b"\x00" + settings + b"".join(
        h2_headers(2 * i + 1, END_HEADERS, p) + h2_message(2 * i + 1, END_STREAM, pb_str(1, "m"))
        for i, p in enumerate([PATH_LIVE, PATH_READY, PATH_MREADY, PATH_SMETA, PATH_MMETA, 8])))
    s["deadline_tick"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_INFER | 0x10) +
                          h2_tick(1) + h2_message(1, END_STREAM, infer["m_raw_fp32"]))
    s["rst_and_goaway"] = (b"\x00" + settings + h2_headers(1, END_HEADERS, PATH_INFER) +
                           h2_frame(3, 0, 1, struct.pack(">I", 8)) + h2_frame(7, 0, 0, struct.pack(">II", 1, 0)))
    s["ping_window_priority"] = (b"\x00" + settings + h2_frame(6, 0, 0, b"12345678") +
                                 h2_frame(8, 0, 0, struct.pack(">I", 1 << 20)) +
                                 h2_frame(2, 0, 1, struct.pack(">IB", 0, 15)) +
                                 h2_frame(4, ACK_FLAG, 0, b""))
    s["settings_values"] = (b"\x00" + h2_frame(4, 0, 0, struct.pack(">HIHIHIHI", 1, 0, 3, 1, 4, 1, 5, 1 << 20)) +
                            h2_headers(1, END_HEADERS, PATH_INFER) + h2_message(1, END_STREAM, infer["identity_raw"]))
    s["continuation"] = (b"\x00" + settings + h2_headers(1, 0, PATH_INFER) +
                         h2_frame(9, END_HEADERS, 1, b"\x00\x01a\x01b") +
                         h2_message(1, END_STREAM, infer["m_raw_fp32"]))
    s["split_frames_small_limits"] = (b"\x01" + settings + h2_headers(1, END_HEADERS, PATH_INFER) +
                                      h2_frame(0, END_STREAM, 1, b"\x00" + struct.pack(">I", 2000) + b"z" * 300,
                                               split=True))
    s["stream_ids_down"] = (b"\x00" + settings + h2_headers(5, END_HEADERS, PATH_LIVE) +
                            h2_headers(3, END_HEADERS, PATH_LIVE))
    s["drain_and_close"] = (b"\x02" + settings + h2_headers(1, END_HEADERS, PATH_INFER) + b"\x06" +
                            h2_message(1, END_STREAM, infer["m_raw_fp32"]) + b"\x05")
    s["gzip_and_text_plain"] = (b"\x00" + settings + h2_headers(1, END_HEADERS | END_STREAM, PATH_LIVE | 0x40) +
                                h2_headers(3, END_HEADERS | END_STREAM, PATH_LIVE | 0x80))
    s["idle_timeout"] = b"\x00" + settings + h2_tick(31)
    return s


# ---- gRPC client (fuzz_grpc_client: a backend's answer; see grpc_client_fuzz.cc) ----

def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_int(v, prefix_bits=7, first=0):
    limit = (1 << prefix_bits) - 1
    if v < limit:
        return bytes([first | v])
    out = bytes([first | limit])
    v -= limit
    while v >= 128:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def hpack(headers):
    # literal header fields without indexing, no Huffman: what any HPACK decoder takes
    out = b""
    for n, v in headers:
        n, v = n.encode(), v.encode() if isinstance(v, str) else v
        out += b"\x00" + hpack_int(len(n)) + n + hpack_int(len(v)) + v
    return out


def grpc_message(body, flag=0, length=None):
    return bytes([flag]) + struct.pack(">I", len(body) if length is None else length) + body


def model_infer_response():
    f32 = struct.pack("<16f", *range(16))
    out = pb_str(1, "OUTPUT0") + pb_str(2, "FP32") + packed(3, [1, 16])
    return (pb_str(1, "identity") + pb_str(2, "1") + pb_str(3, "req-1") + pb_len(5, out) +
            pb_len(6, f32))


def grpc_client_seeds():
    ES, EH = 0x1, 0x4
    settings = frame(4, 0, 0, struct.pack(">HI", 3, 100))
    ack = frame(4, 1, 0)
    ok_headers = frame(1, EH, 1, hpack([(":status", "200"), ("content-type", "application/grpc")]))

    def trailers(status, message=None, flags=EH | ES):
        h = [("grpc-status", status)] + ([("grpc-message", message)] if message is not None else [])
        return frame(1, flags, 1, hpack(h))

    def answer(msg, status="0"):
        return settings + ack + ok_headers + frame(0, 0, 1, msg) + trailers(status)

    resp = grpc_message(model_infer_response())
    ping, alive = 0x08, 0x08  # bit 3: the PING liveness check
    s = {}
    s["ok_model_infer"] = bytes([alive, 0]) + answer(resp)
    s["ok_model_infer_chunks_of_7"] = bytes([alive | 0x02, 7]) + answer(resp)
    s["ok_pieces_request_byte_by_byte"] = bytes([0x20, 1]) + answer(grpc_message(b"ok"))
    s["ok_empty_message_empty_request"] = bytes([alive | 0x10, 0]) + answer(grpc_message(b""))
    s["ok_message_split_over_data_frames"] = bytes([alive, 0]) + (
        settings + ack + ok_headers + frame(0, 0, 1, resp[:3]) + frame(0, 0, 1, resp[3:40]) +
        frame(0, 0, 1, resp[40:]) + frame(0, 0, 1, b"") + trailers("0"))
    s["ok_data_end_stream_no_trailers"] = bytes([alive, 0]) + (
        settings + ack + ok_headers + frame(0, ES, 1, resp))
    s["small_limit_too_large"] = bytes([alive | 0x01, 0]) + answer(resp)
    s["small_limit_prefix_announces_more"] = bytes([0x01, 0]) + answer(grpc_message(b"ab", length=65))
    s["error_trailers_only"] = bytes([alive, 0]) + settings + frame(1, EH | ES, 1, hpack(
        [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "5"),
         ("grpc-message", "model%20'x'%20not%20found")]))
    s["grpc_message_percent_escapes"] = bytes([alive, 0]) + (
        settings + ok_headers + trailers("3", "bad: 100%25 %C3%BC %zz %4 %%41 %"))
    s["grpc_message_raw_bytes"] = bytes([0, 0]) + settings + ok_headers + trailers(
        "13", b"\xff\x00\r\n%00")
    s["grpc_status_not_canonical"] = bytes([alive, 0]) + settings + ok_headers + trailers("17")
    s["grpc_status_not_a_number"] = bytes([alive, 0]) + answer(resp, status="OK")
    s["http_503_no_grpc_status"] = bytes([alive, 0]) + settings + frame(1, EH | ES, 1, hpack(
        [(":status", "503"), ("content-type", "text/plain")]))
    s["http_404_then_body"] = bytes([alive, 0]) + settings + frame(1, EH, 1, hpack(
        [(":status", "404")])) + frame(0, ES, 1, b"not found")
    s["length_prefix_4g"] = bytes([alive, 0]) + answer(grpc_message(b"abc", length=0xFFFFFFFF))
    s["length_prefix_over_limit"] = bytes([alive, 0]) + answer(grpc_message(b"abc", length=(1 << 20) + 1))
    s["length_prefix_short"] = bytes([alive, 0]) + answer(grpc_message(b"abcdef", length=2))
    s["two_messages"] = bytes([alive, 0]) + answer(grpc_message(b"a") + grpc_message(b"b"))
    s["prefix_cut"] = bytes([alive, 0]) + answer(b"\x00\x00\x00")
    s["compressed_flag"] = bytes([alive, 0]) + answer(grpc_message(b"\x1f\x8b", flag=1))
    s["goaway_refused"] = bytes([alive, 0]) + settings + frame(7, 0, 0, struct.pack(">II", 0, 0))
    s["goaway_after_answer"] = bytes([alive, 0]) + settings + frame(7, 0, 0, struct.pack(
        ">II", 1, 0)) + ok_headers + frame(0, 0, 1, resp) + trailers("0")
    s["goaway_error_debug"] = bytes([alive, 0]) + settings + frame(7, 0, 0, struct.pack(
        ">II", 1, 11) + b"calm down")
    s["rst_refused"] = bytes([alive, 0]) + settings + frame(3, 0, 1, struct.pack(">I", 7))
    s["rst_internal_after_headers"] = bytes([alive, 0]) + settings + ok_headers + frame(
        3, 0, 1, struct.pack(">I", 2))
    s["continuation_trailers"] = bytes([alive, 0]) + settings + ok_headers + frame(0, 0, 1, resp) + (
        frame(1, ES, 1, hpack([("grpc-status", "0")])) + frame(9, EH, 1, hpack([("x-a", "b")])))
    s["ping_window_priority"] = bytes([alive, 0]) + settings + frame(6, 0, 0, b"12345678") + (
        frame(8, 0, 0, struct.pack(">I", 1 << 20)) + frame(8, 0, 1, struct.pack(">I", 1)) +
        frame(2, 0, 1, struct.pack(">IB", 0, 15)) + answer(resp)[len(settings):])
    s["data_on_stream_0"] = bytes([alive, 0]) + settings + frame(0, 0, 0, b"boom")
    s["no_settings_first"] = bytes([alive, 0]) + ok_headers + frame(0, 0, 1, resp) + trailers("0")
    s["unknown_stream_and_push"] = bytes([alive, 0]) + settings + frame(1, EH | ES, 3, hpack(
        [(":status", "200")])) + frame(5, EH, 1, struct.pack(">I", 2) + hpack(
        [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")])) + answer(resp)[len(settings):]
    predict = (pb_len(1, pb_str(1, "y") + pb_len(2, tensor_proto(DT_FLOAT, [1, 2], tensor_content=struct.pack("<2f", 1, 2)))) +
               pb_len(1, pb_str(1, "s") + pb_len(2, tensor_proto(DT_STRING, [2], string_val=[b"ab", b""]))) +
               pb_len(2, pb_str(1, "m") + pb_len(2, pb_int(1, 1))))
    s["ok_predict_response"] = bytes([alive, 0]) + answer(grpc_message(predict))
    s["ok_model_status_available"] = bytes([alive, 0]) + answer(grpc_message(
        pb_len(1, pb_int(1, 1) + pb_int(2, 30) + pb_len(3, b""))))
    s["ok_model_infer_two_outputs_short_raw"] = bytes([alive, 0]) + answer(grpc_message(
        pb_str(1, "m") + pb_len(5, pb_str(1, "a") + pb_str(2, "FP32") + packed(3, [2])) +
        pb_len(5, pb_str(1, "b") + pb_str(2, "BYTES") + packed(3, [1])) +
        pb_len(6, b"\0" * 7) + pb_len(6, struct.pack("<I", 9) + b"x")))
    s["server_preface_by_harness"] = bytes([alive | 0x04, 3]) + ack + ok_headers + frame(
        0, 0, 1, resp) + trailers("0")
    return s


# ---- YAML ----

def config_seeds():
    s = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "config/examples/*.yaml"))):
        s["example_" + os.path.basename(path)[:-5]] = open(path, "rb").read()
    yamls = [v for v in test_literals("tests/unit/config/*_test.cc") + literals(
        os.path.join(ROOT, "config/config.cc")) if b":" in v and (b"\n" in v or v.startswith(b"{"))]
    s.update(named("test", yamls))
    return s


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("fuzz_xdp_classifier", classifier_seeds())
    write("fuzz_ingress_filter", ingress_filter_seeds())
    write("fuzz_tcp_stack", tcp_seeds())
    write("fuzz_http1", http1_seeds())
    write("fuzz_http2", http2_seeds())
    write("fuzz_grpc_framing", grpc_framing_seeds())
    write("fuzz_modelinfer", model_infer_target_seeds())
    write("fuzz_tf_predict", tf_predict_seeds())
    write("fuzz_kserve_json", kserve_json_seeds())
    # fuzz_kserve_stream reads the same format (mode bits 6-7: chunked, copied deliveries).
    write("fuzz_kserve_stream", kserve_json_seeds())
    write("fuzz_tfserving_rest", tfserving_rest_seeds())
    write("fuzz_config", config_seeds())
    write("fuzz_grpc_client", grpc_client_seeds())
    sys.exit(0)
