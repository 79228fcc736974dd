"""A DNS server for tests (UDP on loopback, a thread): answers A and AAAA queries for the names
it was given, with answers the test changes at run time (set()); NXDOMAIN for other names.
Used by test_dns_discovery.py; infergate reaches it through a model's `dns_server` key.

    dns = DnsStub({"backends.test": ["127.0.0.2", "127.0.0.3"]}, ttl=1)
    dns.server  # "127.0.0.1:<port>"
    dns.set("backends.test", ["127.0.0.2", "::1"])
    dns.stop()

Not a test itself (ctest runs test_*.py only).
"""
import ipaddress
import select
import socket
import struct
import threading


class DnsStub:
    def __init__(self, records=None, ttl=1, host="127.0.0.1"):
        self.ttl = ttl
        self.lock = threading.Lock()
        self.records = {k.lower().rstrip("."): list(v) for k, v in (records or {}).items()}
        self.queries = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.server = "%s:%d" % (host, self.sock.getsockname()[1])
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def set(self, name, addresses):
        """The A/AAAA answers for `name` from now on (IPv4 and IPv6 text); None: NXDOMAIN."""
        with self.lock:
            if addresses is None:
                self.records.pop(name.lower().rstrip("."), None)
            else:
                self.records[name.lower().rstrip(".")] = list(addresses)

    def stop(self):
        self.running = False
        self.thread.join()
        self.sock.close()

    def _answer(self, q):
        """The response to query `q` (bytes), or None for something that is not a query."""
        if len(q) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", q[:6])
        if flags & 0x8000 or qdcount != 1:
            return None
        off, labels = 12, []
        while True:
            if off >= len(q):
                return None
            n = q[off]
            if n == 0:
                off += 1
                break
            if n & 0xC0 or off + 1 + n > len(q):
                return None
            labels.append(q[off + 1:off + 1 + n].decode("ascii", "replace"))
            off += 1 + n
        if off + 4 > len(q):
            return None
        qtype, qclass = struct.unpack("!HH", q[off:off + 4])
        question = q[12:off + 4]
        name = ".".join(labels).lower()
        with self.lock:
            self.queries += 1
            addrs = self.records.get(name)
        rd = flags & 0x0100
        if addrs is None:
            return struct.pack("!HHHHHH", qid, 0x8080 | rd | 3, 1, 0, 0, 0) + question
        answers = []
        for a in addrs:
            ip = ipaddress.ip_address(a)
            if (qtype == 1 and ip.version == 4) or (qtype == 28 and ip.version == 6):
                answers.append(struct.pack("!HHHIH", 0xC00C, qtype, 1, self.ttl, len(ip.packed)) + ip.packed)
        header = struct.pack("!HHHHHH", qid, 0x8080 | rd, 1, len(answers), 0, 0)
        return header + question + b"".join(answers)

    def _loop(self):
        while self.running:
            r, _, _ = select.select([self.sock], [], [], 0.05)
            if not r:
                continue
            try:
                q, peer = self.sock.recvfrom(512)
            except OSError:
                continue
            resp = self._answer(q)
            if resp is not None:
                self.sock.sendto(resp, peer)
