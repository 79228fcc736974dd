"""Tools for the adversarial namespace tests (test_hostile_*.py) and bench/syn_flood.sh: raw
Ethernet/IPv4/TCP frames sent and sniffed with AF_PACKET from the client namespace (spoofed
source addresses and MACs), the calling thread moved into a network namespace, the gateway
started in afxdp / xdp-filter / socket mode, its /metrics and RSS read, and a client of fresh
legitimate connections that prints JSON.

As a program (used by bench/syn_flood.sh), run inside the client namespace:
    python3 hostile.py probe   HOST PORT COUNT RATE TIMEOUT_S   # COUNT fresh connections, RATE/s
    python3 hostile.py recover HOST PORT MAX_S TIMEOUT_S        # until the first one succeeds
Each fresh connection is connect + `GET /v2/health/ready` (Connection: close) + a 200 within
TIMEOUT_S seconds in all.
"""
import contextlib
import ctypes
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time

import harness  # the sibling module (standard library only, like this one)

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(name):
    """Runs the body with the calling thread in network namespace `name` (from `ip netns
    add`); sockets created inside stay in that namespace after it returns."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open("/run/netns/" + name, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns(%s): %s" % (name, os.strerror(e)))
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the test's own namespace")
    finally:
        os.close(own)
        os.close(target)


# --- frames ------------------------------------------------------------------------------

def mac_bytes(mac):
    return bytes(int(x, 16) for x in mac.split(":"))


def mac_str(b):
    return ":".join("%02x" % x for x in b)


def csum(data):
    if len(data) % 2:
        data += b"\0"
    t = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF


def tcp_segment(src_ip, dst_ip, sport, dport, seq, ack, flags, payload=b"", window=65535,
                options=b""):
    """A TCP header + payload with its checksum (over the IPv4 pseudo-header)."""
    while len(options) % 4:
        options += b"\x01"  # NOP padding
    off = (20 + len(options)) // 4
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, off << 4,
                      flags, window, 0, 0) + options + payload
    pseudo = socket.inet_aton(src_ip) + socket.inet_aton(dst_ip) + struct.pack("!BBH", 0, 6, len(tcp))
    return tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]


def ipv4_frame(src_mac, dst_mac, src_ip, dst_ip, l4, ident=None, frag=0x4000, ttl=64):
    """Ethernet + IPv4 (protocol TCP) around `l4`; `frag` is the flags/fragment-offset word
    (default: DF)."""
    ident = random.getrandbits(16) if ident is None else ident
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident, frag, ttl, 6, 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", ETH_P_IP) + ip + l4


def tcp_frame(src_mac, dst_mac, src_ip, dst_ip, sport, dport, seq, ack, flags, payload=b"",
              window=65535, options=b"", ip_id=None, ttl=64):
    """One Ethernet + IPv4 + TCP frame with correct IP and TCP checksums (the client veth has tx
    offload off, so nothing fixes them later)."""
    return ipv4_frame(src_mac, dst_mac, src_ip, dst_ip,
                      tcp_segment(src_ip, dst_ip, sport, dport, seq, ack, flags, payload, window,
                                  options), ident=ip_id, ttl=ttl)


def tcp_fragments(src_mac, dst_mac, src_ip, dst_ip, sport, dport, seq, ack, flags, payload,
                  first=24):
    """The same segment as tcp_frame, as two IPv4 fragments: the first `first` bytes (a
    multiple of 8: the TCP header and the payload's first bytes) with MF, then the rest."""
    tcp = tcp_segment(src_ip, dst_ip, sport, dport, seq, ack, flags, payload)
    ident = random.getrandbits(16)
    return [ipv4_frame(src_mac, dst_mac, src_ip, dst_ip, tcp[:first], ident, 0x2000),
            ipv4_frame(src_mac, dst_mac, src_ip, dst_ip, tcp[first:], ident, first // 8)]


MSS_OPTION = struct.pack("!BBH", 2, 4, 1460)


class Seg:
    """A parsed IPv4/TCP frame."""
    __slots__ = ("t", "outgoing", "dst_mac", "src_mac", "src", "dst", "sport", "dport", "seq",
                 "ack", "flags", "window", "payload")

    def seq_end(self):
        return (self.seq + len(self.payload) + (1 if self.flags & (SYN | FIN) else 0)) & 0xFFFFFFFF

    def __repr__(self):
        names = "".join(n for b, n in ((SYN, "S"), (ACK, "A"), (PSH, "P"), (FIN, "F"), (RST, "R"))
                        if self.flags & b)
        return "%s %s:%d->%s:%d [%s] seq=%#x ack=%#x len=%d to %s" % (
            "out" if self.outgoing else "in", self.src, self.sport, self.dst, self.dport, names,
            self.seq, self.ack, len(self.payload), self.dst_mac)


def parse(frame, t=0.0, outgoing=False):
    if len(frame) < 54 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 15) * 4
    if frame[23] != 6:
        return None
    total = struct.unpack("!H", frame[16:18])[0]
    tcp = frame[14 + ihl:14 + total]
    if len(tcp) < 20:
        return None
    s = Seg()
    s.t, s.outgoing = t, outgoing
    s.dst_mac, s.src_mac = mac_str(frame[0:6]), mac_str(frame[6:12])
    s.src, s.dst = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])
    s.sport, s.dport, s.seq, s.ack, off, s.flags, s.window = struct.unpack("!HHIIBBH", tcp[:16])
    s.payload = bytes(tcp[(off >> 4) * 4:])
    return s


class RawPort:
    """An AF_PACKET socket on one interface of a namespace: send() raw frames, and a
    background sniffer that keeps every IPv4/TCP frame seen on the interface (both
    directions; frames to other MACs included, as veth hands them to packet taps)."""

    def __init__(self, ns, ifname, sniff=True):
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self.sock.bind((ifname, ETH_P_ALL))
        self.sock.settimeout(0.05)
        self.segs = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = None
        if sniff:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _run(self):
        while not self.stopping:
            try:
                data, addr = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            s = parse(data, time.monotonic(), addr[2] == PACKET_OUTGOING)
            if s is not None:
                with self.lock:
                    self.segs.append(s)

    def send(self, frame):
        self.sock.send(frame)

    def seen(self, pred=lambda s: True, since=0.0):
        with self.lock:
            return [s for s in self.segs if s.t >= since and pred(s)]

    def wait_for(self, pred, timeout, since=0.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.seen(pred, since)
            if got:
                return got[0]
            time.sleep(0.01)
        return None

    def close(self):
        self.stopping = True
        if self.thread:
            self.thread.join(2)
        self.sock.close()


def raw_handshake(raw, src_mac, dst_mac, src_ip, dst_ip, sport, dport, isn, timeout=3):
    """SYN from (src_ip, sport) with ISN `isn`, the SYN-ACK sniffed, the ACK: returns the
    SYN-ACK (a Seg), or None when none came within `timeout`."""
    t0 = time.monotonic()
    raw.send(tcp_frame(src_mac, dst_mac, src_ip, dst_ip, sport, dport, isn, 0, SYN, options=MSS_OPTION))
    synack = raw.wait_for(lambda s: not s.outgoing and s.dst == src_ip and s.dport == sport
                          and s.flags & SYN and s.flags & ACK, timeout, since=t0)
    if synack is not None:
        raw.send(tcp_frame(src_mac, dst_mac, src_ip, dst_ip, sport, dport, isn + 1,
                           synack.seq + 1, ACK))
    return synack


def link_mac(ns, ifname):
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", ifname], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)[0]["address"]


# --- the gateway ---------------------------------------------------------------------------

CONFIG = """
mode: {mode}
reactors: 1
{cpus}listeners: [{{name: http, address: 0.0.0.0, port: {port}, protocol: http}}]
admin: {{address: 127.0.0.1, port: {admin_port}}}
limits: {{max_connections: {max_connections}, idle_timeout_ms: 60000}}
{xdp}models:
""" + harness.braces(harness.IDENTITY_MODEL + harness.model_yaml("slow", [4], 0)) \
    + "    identity: {{fixed_us: {slow_us}, per_item_us: 0}}\n"

XDP_SECTION = """xdp:
  interface: {ifname}
  attach: native
  methods: [GET, POST]
  path_prefixes: ["/v2/"]
"""

SLOW_BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                                    "data": [1.0, 2.0, 3.0, 4.0]}]}).encode()


def config_text(mode, ifname, port=8000, admin_port=8002, cpu=None, max_connections=4096,
                slow_us=500000):
    return CONFIG.format(mode=mode, port=port, admin_port=admin_port,
                         cpus="cpus: [%d]\n" % cpu if cpu is not None else "",
                         max_connections=max_connections, slow_us=slow_us,
                         xdp=XDP_SECTION.format(ifname=ifname) if mode != "socket" else "")


def start_gateway(net, binary, mode, name="gw", cpu=None, **kw):
    """Starts infergate in `mode` in net's gateway namespace; returns (Popen, log path) once it
    serves. The Popen's pid is infergate's own (ip netns exec and sh exec it)."""
    import netns  # the sibling module; late so that `hostile.py probe` needs only harness
    return netns.start_gateway(net, config_text(mode, net.gw_if, cpu=cpu, **kw), name=name,
                               binary=binary, what="infergate (%s)" % mode)


def read_log(path):
    with open(path) as f:
        return f.read()


def stop_gateway(p):
    import netns
    return netns.stop_gateway(p)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def metrics_text(net, admin_port=8002):
    with in_netns(net.gw_ns):
        s = socket.create_connection(("127.0.0.1", admin_port), timeout=5)
    with s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        buf = b""
        while True:
            d = s.recv(1 << 16)
            if not d:
                break
            buf += d
    return buf.partition(b"\r\n\r\n")[2].decode()


def metric(text, name, **labels):
    return harness.parse_metric(text, name, **labels)


def nonzero(text, *prefixes):
    """The metric lines of `text` starting with one of `prefixes` whose value is not 0, as one
    string for failure messages."""
    return "; ".join(l for l in text.splitlines()
                     if not l.startswith("#") and l.startswith(prefixes) and not l.endswith(" 0"))


TCP_PREFIXES = ("infergate_tcp_", "infergate_afxdp_", "infergate_xdp_packets_total",
                "infergate_xdp_requests_total", "infergate_xdp_syn", "infergate_xdp_cookie")


def delta(before, after, prefixes=TCP_PREFIXES):
    """The samples of `prefixes` that changed between two /metrics texts, as
    "name{labels} +d (now v)" joined for failure messages."""
    def samples(text):
        out = {}
        for l in text.splitlines():
            if l.startswith(prefixes):
                k, _, v = l.rpartition(" ")
                out[k] = float(v)
        return out
    b, a = samples(before), samples(after)
    return "; ".join("%s %+d (now %d)" % (k, a[k] - b.get(k, 0.0), a[k])
                     for k in sorted(a) if a[k] != b.get(k, 0.0)) or "(no counter changed)"


# --- real clients --------------------------------------------------------------------------

def read_response(s):
    """One Content-Length framed HTTP/1.1 response from socket s: (status, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError("connection closed before a response (got %r)" % buf[:80])
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    m = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.I)
    n = int(m.group(1)) if m else 0
    while len(body) < n:
        d = s.recv(65536)
        if not d:
            raise EOFError("connection closed mid-body")
        body += d
    return int(head.split(b" ")[1]), body[:n]


def request(s, method="GET", path="/v2/health/ready", body=b"", close=False):
    hdrs = "Host: x\r\n" + ("Content-Length: %d\r\n" % len(body) if body or method == "POST" else "")
    if close:
        hdrs += "Connection: close\r\n"
    s.sendall(("%s %s HTTP/1.1\r\n%s\r\n" % (method, path, hdrs)).encode() + body)


def fresh_request(host, port, timeout):
    """connect + GET /v2/health/ready + its response on a new connection, all within timeout
    seconds: (ok, ms, what)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        return False, (time.monotonic() - t0) * 1e3, "connect timeout"
    except OSError as e:
        return False, (time.monotonic() - t0) * 1e3, "connect: " + (e.strerror or str(e))
    try:
        s.settimeout(max(0.001, timeout - (time.monotonic() - t0)))
        request(s, close=True)
        st, _ = read_response(s)
        ms = (time.monotonic() - t0) * 1e3
        return st == 200, ms, "status %d" % st
    except socket.timeout:
        return False, (time.monotonic() - t0) * 1e3, "response timeout"
    except (OSError, EOFError) as e:
        return False, (time.monotonic() - t0) * 1e3, type(e).__name__
    finally:
        s.close()


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def probe(host, port, count, rate, timeout):
    """`count` fresh connections started `rate` per second (each in its own thread, so a slow
    one does not delay the next). Returns a dict: ok, total, p50_ms/p99_ms over the answered
    ones, failures by reason, seconds."""
    results, lock = [], threading.Lock()

    def one():
        r = fresh_request(host, port, timeout)
        with lock:
            results.append(r)

    t0 = time.monotonic()
    threads = []
    for i in range(count):
        delay = t0 + i / float(rate) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one, daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout + 5)
    oks = [ms for ok, ms, _ in results if ok]
    fails = {}
    for ok, _, what in results:
        if not ok:
            fails[what] = fails.get(what, 0) + 1
    return {"ok": len(oks), "total": count, "p50_ms": round(percentile(oks, 50), 2),
            "p99_ms": round(percentile(oks, 99), 2), "max_ms": round(max(oks), 2) if oks else None,
            "failures": fails, "seconds": round(time.monotonic() - t0, 3)}


def recover(host, port, max_s, timeout):
    """Fresh connections back to back until one is answered: {"recover_s": seconds from the
    call to that success, or null after max_s; "attempts": n}."""
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < max_s:
        n += 1
        ok, _, _ = fresh_request(host, port, min(timeout, max_s - (time.monotonic() - t0) + 0.001))
        if ok:
            return {"recover_s": round(time.monotonic() - t0, 3), "attempts": n}
    return {"recover_s": None, "attempts": n}


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "probe":
        h, port, count, rate, tmo = sys.argv[2:7]
        print(json.dumps(probe(h, int(port), int(count), float(rate), float(tmo))))
    elif cmd == "recover":
        h, port, max_s, tmo = sys.argv[2:6]
        print(json.dumps(recover(h, int(port), float(max_s), float(tmo))))
    else:
        sys.exit(__doc__)


# --- test bodies shared by test_hostile_afxdp.py and test_hostile_xdp_filter.py -------------

ATTACK_LINE = b"XXXXXXXXX /nope HTTP/1.1\r\n\r\n"


def victim_connection(net, port=8000):
    """A real keep-alive connection from the client namespace (the kernel's TCP), one request
    already answered 200."""
    with in_netns(net.client_ns):
        v = socket.create_connection((net.gw_ip, port), timeout=5)
    v.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request(v)
    st, _ = read_response(v)
    if st != 200:
        raise AssertionError("the victim's first request was answered %d, not 200" % st)
    return v


def next_outcome(v, timeout=3.0, method="GET", path="/v2/health/ready", body=b""):
    """Sends one more request on v; returns what came back: "status N", "reset", "closed" or
    "no answer within Ns"."""
    v.settimeout(timeout)
    try:
        request(v, method, path, body)
        st, _ = read_response(v)
        return "status %d" % st
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    except EOFError:
        return "closed"
    except socket.timeout:
        return "no answer within %gs" % timeout


def check_spoofed_reset(tc, binary, mode):
    """Issue 12, item 2: two spoofed frames (a SYN with a live connection's 4-tuple, then an
    ACK whose data is a bad request line at that SYN's ISN + 1) must not cost the victim its
    connection: its next request is still answered 200."""
    net = tc.net
    p, log = start_gateway(net, binary, mode, name="reset-" + mode)
    raw = None
    try:
        gw_mac, cl_mac = link_mac(net.gw_ns, net.gw_if), link_mac(net.client_ns, net.client_if)
        v = victim_connection(net)
        cip, cport = v.getsockname()
        raw = RawPort(net.client_ns, net.client_if)
        before = metrics_text(net)
        isn = random.getrandbits(32)
        t_spoof = time.monotonic()
        raw.send(tcp_frame(cl_mac, gw_mac, cip, net.gw_ip, cport, 8000, isn, 0, SYN,
                           options=MSS_OPTION))
        time.sleep(0.05)
        raw.send(tcp_frame(cl_mac, gw_mac, cip, net.gw_ip, cport, 8000, isn + 1,
                           random.getrandbits(32), ACK | PSH, payload=ATTACK_LINE))
        time.sleep(0.3)
        after = metrics_text(net)
        outcome = next_outcome(v)
        v.close()
        final = metrics_text(net)
        rsts = raw.seen(lambda s: not s.outgoing and s.sport == 8000 and s.dport == cport
                        and s.flags & RST, since=t_spoof)
        tc.assertEqual(
            outcome, "status 200",
            "[%s] spoofed reset: the victim's keep-alive connection %s:%d -> %s:8000 got %r for "
            "its next request after two spoofed frames (SYN seq=%#x with its 4-tuple, then "
            "ACK+PSH seq=%#x carrying %r); expected it answered 200 as before. RSTs the gateway "
            "sent to the victim's port: %s. Counters changed by the spoofed frames: %s. Then by the "
            "victim's request: %s"
            % (mode, cip, cport, net.gw_ip, outcome, isn, (isn + 1) & 0xFFFFFFFF, ATTACK_LINE,
               [repr(s) for s in rsts] or "none", delta(before, after), delta(after, final)))
        # The gateway still serves fresh connections.
        with in_netns(net.client_ns):
            ok, ms, what = fresh_request(net.gw_ip, 8000, 3)
        tc.assertTrue(ok, "[%s] a fresh connection after the attack: %s" % (mode, what))
    finally:
        if raw:
            raw.close()
        rc = stop_gateway(p)
    tc.assertEqual(rc, 0, read_log(log)[-3000:])
