"""Network-namespace fixtures for packet tests: two namespaces joined by a veth pair, with
unique names, always removed (also when a test fails).

    with VethPair() as net:
        net.run_gw(["ip", "addr"])          # inside the gateway namespace
        net.popen_gw([...])                 # a long-running process in the gateway namespace
        net.run_client(["curl", ...])       # inside the client namespace

    p, log = start_gateway(net, config_text)  # infergate in the gateway namespace, serving
    ...
    rc = stop_gateway(p)
"""
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import uuid


def have_root_and_netns():
    if os.geteuid() != 0:
        return "needs root (network namespaces, XDP)"
    r = subprocess.run(["ip", "netns", "add", "ig-probe-%d" % os.getpid()], capture_output=True)
    if r.returncode != 0:
        return "cannot create network namespaces: " + r.stderr.decode().strip()
    subprocess.run(["ip", "netns", "del", "ig-probe-%d" % os.getpid()], capture_output=True)
    return None


def sh(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


class VethPair:
    """Gateway namespace (gw_if, gw_ip) <-> client namespace (client_if, client_ip)."""

    def __init__(self, subnet="10.231.%d" % (os.getpid() % 250), queues=1):
        self.queues = queues  # rx and tx queues of each end (one afxdp reactor per queue)
        tag = uuid.uuid4().hex[:6]
        self.gw_ns, self.client_ns = "ig-gw-" + tag, "ig-cl-" + tag
        self.gw_if, self.client_if = "igg" + tag, "igc" + tag
        self.gw_ip, self.client_ip = subnet + ".1", subnet + ".2"
        self.procs = []
        self.bpffs = None

    def __enter__(self):
        try:
            # One bpffs for every command run in the gateway namespace: each `ip netns exec`
            # gets a mount namespace of its own, so a bpffs mounted there is private to it and
            # maps pinned by the gateway would be invisible to `infergate stats`.
            self.bpffs = tempfile.mkdtemp(prefix="ig-bpffs-")
            if sh(["mount", "-t", "bpf", "bpf", self.bpffs], check=False).returncode != 0:
                os.rmdir(self.bpffs)
                self.bpffs = None
            sh(["ip", "netns", "add", self.gw_ns])
            sh(["ip", "netns", "add", self.client_ns])
            q = ["numrxqueues", str(self.queues), "numtxqueues", str(self.queues)]
            sh(["ip", "link", "add", self.gw_if, "netns", self.gw_ns] + q + ["type", "veth",
                "peer", "name", self.client_if, "netns", self.client_ns] + q)
            for ns, ifname, ip in ((self.gw_ns, self.gw_if, self.gw_ip),
                                   (self.client_ns, self.client_if, self.client_ip)):
                sh(["ip", "-n", ns, "addr", "add", ip + "/24", "dev", ifname])
                sh(["ip", "-n", ns, "link", "set", ifname, "up"])
                sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            # Frames sent back with XDP_TX reach the client's veth only with GRO on (or an XDP
            # program there); userspace-visible checksums need tx offload off on the sender.
            sh(["ip", "netns", "exec", self.client_ns, "ethtool", "-K", self.client_if, "gro", "on",
                "tx", "off"], check=False)
            sh(["ip", "netns", "exec", self.gw_ns, "ethtool", "-K", self.gw_if, "tx", "off"], check=False)
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sh(["ip", "netns", "del", self.gw_ns], check=False)
        sh(["ip", "netns", "del", self.client_ns], check=False)
        if self.bpffs:
            sh(["umount", "-l", self.bpffs], check=False)
            shutil.rmtree(self.bpffs, ignore_errors=True)
            self.bpffs = None

    def gw_cmd(self, cmd):
        # `ip netns exec` remounts /sys, hiding the host's bpffs: put the pair's shared bpffs
        # there (or, without one, a bpffs private to this command).
        inner = "mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf; exec \"$@\""
        if self.bpffs:
            inner = "mount --bind '%s' /sys/fs/bpf && exec \"$@\"" % self.bpffs
        return ["ip", "netns", "exec", self.gw_ns, "sh", "-c", inner, "sh"] + list(cmd)

    def run_gw(self, cmd, check=True, **kw):
        return sh(self.gw_cmd(cmd), check=check, **kw)

    def popen_gw(self, cmd, **kw):
        p = subprocess.Popen(self.gw_cmd(cmd), **kw)
        self.procs.append(p)
        return p

    def run_client(self, cmd, check=True, **kw):
        return sh(["ip", "netns", "exec", self.client_ns] + list(cmd), check=check, **kw)


# Put first in a script run with `python3 -c` in a namespace: the scripts can then import this
# folder's modules (from harness import read_response).
SCRIPT_PATH = "import sys\nsys.path.insert(0, %r)\n" % os.path.dirname(os.path.abspath(__file__))


# One ICMP echo request over a raw socket (ping(8) may not be installed); run in a namespace as
# `/usr/bin/python3 -c PING_SCRIPT <address>`: prints "reply" or "no reply".
PING_SCRIPT = r'''
import socket, struct, sys, time
def csum(b):
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.settimeout(1)
body = struct.pack("!BBHHH", 8, 0, 0, 0x1234, 1) + b"infergate-ping!!"
pkt = body[:2] + struct.pack("!H", csum(body)) + body[4:]
for _ in range(3):
    s.sendto(pkt, (sys.argv[1], 0))
    deadline = time.time() + 1
    while time.time() < deadline:
        try:
            data, addr = s.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 15) * 4:]
        if addr[0] == sys.argv[1] and icmp[0] == 0 and icmp[4:6] == b"\x12\x34":
            print("reply")
            sys.exit(0)
print("no reply")
'''


class VethTestCase(unittest.TestCase):
    """A test case whose every test gets a fresh VethPair (self.net, with self.net.tmp a
    temporary folder); the class skips with a message without root or namespaces."""

    tmp_prefix = "ig-netns-"

    @classmethod
    def setUpClass(cls):
        why = have_root_and_netns()
        if why:
            raise unittest.SkipTest(why)

    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix=self.tmp_prefix)
        self.net = VethPair().__enter__()
        self.net.tmp = self.tmpdir.name

    def tearDown(self):
        self.net.__exit__(None, None, None)
        self.tmpdir.cleanup()

    @contextlib.contextmanager
    def gateway(self, config_text, **kw):
        """start_gateway(self.net, config_text, **kw) for the body of a `with`, which gets
        (Popen, log path); stopped at the end, and then (if the body passed) its exit code
        must be 0."""
        p, log = start_gateway(self.net, config_text, **kw)
        try:
            yield p, log
        finally:
            rc = stop_gateway(p)
        with open(log) as f:
            self.assertEqual(rc, 0, f.read()[-3000:])


def gateway_metric(net, name, admin_port=8002, **labels):
    """Sum of a metric's samples from the gateway's admin listener inside net's namespace."""
    import harness  # the sibling module; imported late so netns.py stays usable on its own
    text = net.run_gw(["curl", "-s", "http://127.0.0.1:%d/metrics" % admin_port]).stdout
    return harness.parse_metric(text, name, **labels)


def start_gateway(net, config_text, name="gw", env=None, expect_start=True, timeout=20,
                  folder=None, binary=None, what="infergate"):
    """Writes config_text to NAME.yaml in `folder` (default net.tmp) and starts `binary run -c`
    (default harness.ARGS.binary) in net's gateway namespace, output to NAME.log there, with
    `env` added to the environment. Returns (Popen, log path) once the log says "serving"; the
    Popen's pid is infergate's own (ip netns exec and sh exec it). Raises AssertionError if it
    exits first (with expect_start=False it returns then, for tests of start-up refusals) or
    does not serve within `timeout` seconds."""
    import harness  # the sibling module; imported late so netns.py stays usable on its own
    folder = folder or net.tmp
    cfg = os.path.join(folder, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(config_text)
    logpath = os.path.join(folder, name + ".log")
    kw = {}
    if env:
        kw["env"] = dict(os.environ, **env)
    with open(logpath, "w+") as log:  # the child has its own copy
        p = net.popen_gw([binary or harness.ARGS.binary, "run", "-c", cfg], stdout=log,
                         stderr=subprocess.STDOUT, **kw)
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(logpath) as f:
            text = f.read()
        if "serving" in text:
            return p, logpath
        if p.poll() is not None:
            if expect_start:
                raise AssertionError("%s exited at start-up:\n%s" % (what, text))
            return p, logpath
        time.sleep(0.1)
    with open(logpath) as f:
        raise AssertionError("%s did not start:\n%s" % (what, f.read()))


class ClientLoad:
    """tests/integration/load_loop.py (closed-loop KServe requests, half keep-alive, half a new
    connection each) run in net's client namespace against the gateway's address until stop(),
    which returns its JSON results (ok, failed, retried, reasons, seconds)."""

    def __init__(self, net, model="identity", threads=4, port=8000):
        self.stop_file = os.path.join(net.tmp, "stop-load-%s" % uuid.uuid4().hex[:8])
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", net.client_ns, "/usr/bin/python3",
             os.path.join(os.path.dirname(os.path.abspath(__file__)), "load_loop.py"),
             net.gw_ip, str(port), self.stop_file, model, str(threads)],
            stdout=subprocess.PIPE, text=True)
        net.procs.append(self.proc)

    def stop(self, timeout=20):
        import json
        open(self.stop_file, "w").close()
        out, _ = self.proc.communicate(timeout=timeout)
        return json.loads(out)


def stop_gateway(p, timeout=20):
    """SIGTERM and wait; returns the exit code. Kills it and raises AssertionError if it does
    not stop within `timeout` seconds."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise AssertionError("infergate did not stop within %ds of SIGTERM" % timeout)
    return p.returncode
