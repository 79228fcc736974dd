"""Shared helpers for infergate's integration tests: start the real binary with a config on
free ports, wait until it serves, talk HTTP over raw sockets, read /metrics, stop it cleanly.

Each test script is run by ctest as:
    /usr/bin/python3 test_x.py --binary build/app/infergate --source <repo>
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None


def parse_args():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--source", required=True)
    ARGS, rest = p.parse_known_args()
    return [sys.argv[0]] + rest


def main():
    """Runs the tests; exits 77 (ctest's "skipped") when every test was skipped, so a test
    that needs what the machine lacks never shows as passed."""
    argv = parse_args()
    prog = unittest.main(argv=argv, verbosity=2, exit=False)
    r = prog.result
    if not r.wasSuccessful():
        sys.exit(1)
    # A skip in setUpModule/setUpClass runs none of its tests but records one skip (not a
    # TestCase): "skipped" means something was skipped and no test ran to the end.
    test_skips = sum(1 for t, _ in r.skipped if isinstance(t, unittest.TestCase))
    if r.skipped and r.testsRun == test_skips:
        sys.exit(77)
    sys.exit(0)


def model_yaml(name, dims, max_batch_size=8, datatype="FP32", version=None, backend=False,
               extra=""):
    """One entry of a config's `models:` list: a model named `name` (identity backend, the
    default) with one input INPUT0 and one output OUTPUT0 of `datatype` and shape `dims`, its
    `version` and `backend: identity` written out when given, then the YAML lines `extra`
    (indented by four)."""
    shape = "[%s]" % ", ".join(str(d) for d in dims)
    lines = ["  - name: " + name]
    if version is not None:
        lines.append('    version: "%s"' % version)
    if backend:
        lines.append("    backend: identity")
    lines += ["    max_batch_size: %d" % max_batch_size,
              "    inputs: [{name: INPUT0, datatype: %s, shape: %s}]" % (datatype, shape),
              "    outputs: [{name: OUTPUT0, datatype: %s, shape: %s}]" % (datatype, shape)]
    return "\n".join(lines) + "\n" + extra


# The identity model most configs serve (FP32 [16], batches of 8), as a `models:` entry.
IDENTITY_MODEL = model_yaml("identity", [16])


def loopback_head(reactors=1):
    """The start of a socket-mode config: `reactors`, an HTTP listener and the admin listener
    on 127.0.0.1, on free ports."""
    return ("mode: socket\nreactors: %d\n"
            "listeners: [{name: http, address: 127.0.0.1, port: 0, protocol: http}]\n"
            "admin: {address: 127.0.0.1, port: 0}\n" % reactors)


def braces(text):
    """`text` for a str.format template: its braces doubled."""
    return text.replace("{", "{{").replace("}", "}}")


# A socket-mode config on 127.0.0.1, free ports, with the models identity, multi and slow;
# a str.format template (see Gateway for the fields).
BASE_CONFIG = """
mode: socket
reactors: {reactors}
listeners:
  - name: http
    address: 127.0.0.1
    port: 0
    protocol: http
admin:
  address: 127.0.0.1
  port: 0
limits:
  max_header_bytes: {max_header_bytes}
  max_body_bytes: {max_body_bytes}
  max_connections: {max_connections}
  idle_timeout_ms: {idle_timeout_ms}
  header_timeout_ms: {header_timeout_ms}
  body_timeout_ms: {body_timeout_ms}
logging:
  level: info
  access_log: false
models:
""" + braces(model_yaml("identity", [16], version="1", backend=True)) + """  - name: multi
    version: "2"
    backend: identity
    max_batch_size: 0
    inputs:
      - {{name: A, datatype: INT32, shape: [-1]}}
      - {{name: B, datatype: BYTES, shape: [2]}}
      - {{name: C, datatype: BOOL, shape: [2, 2]}}
    outputs:
      - {{name: A_OUT, datatype: INT32, shape: [-1]}}
      - {{name: B_OUT, datatype: BYTES, shape: [2]}}
      - {{name: C_OUT, datatype: BOOL, shape: [2, 2]}}
""" + braces(model_yaml("slow", [4], 4, version="1", backend=True)) \
    + "    identity: {{fixed_us: {slow_us}, per_item_us: 0}}\n"

# BASE_CONFIG with a gRPC listener (127.0.0.1, a free port) after the HTTP one.
GRPC_CONFIG = BASE_CONFIG.replace(
    """    protocol: http
admin:""",
    """    protocol: http
  - name: grpc
    address: 127.0.0.1
    port: 0
    protocol: grpc
admin:""")


class Gateway:
    """A running infergate process (`binary`, default ARGS.binary): on `config_text`, or on
    `template` (default BASE_CONFIG) filled in with the other arguments."""

    def __init__(self, reactors=1, max_header_bytes=16384, max_body_bytes=1 << 20,
                 max_connections=1000, idle_timeout_ms=60000, header_timeout_ms=10000,
                 body_timeout_ms=60000, slow_us=50000, config_text=None, template=None,
                 binary=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="infergate-it-")
        self.config_path = os.path.join(self.tmp.name, "infergate.yaml")
        text = config_text or (template or BASE_CONFIG).format(
            reactors=reactors, max_header_bytes=max_header_bytes, max_body_bytes=max_body_bytes,
            max_connections=max_connections, idle_timeout_ms=idle_timeout_ms,
            header_timeout_ms=header_timeout_ms, body_timeout_ms=body_timeout_ms,
            slow_us=slow_us)
        with open(self.config_path, "w") as f:
            f.write(text)
        self.log_path = os.path.join(self.tmp.name, "infergate.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([binary or ARGS.binary, "run", "-c", self.config_path],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        self.admin_port = None
        deadline = time.time() + 15
        while time.time() < deadline:
            text = self.read_log()
            m = re.search(r"listener 'http' on [^ ]+:(\d+)", text)
            a = re.search(r"admin listener on [^ ]+:(\d+)", text)
            if m and a and "serving" in text:
                self.port, self.admin_port = int(m.group(1)), int(a.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError("infergate exited early:\n" + text)
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("infergate did not start in time:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stop(self, timeout=10):
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("infergate did not stop within %ds of SIGTERM" % timeout)
        self.log.close()
        rc = self.proc.returncode
        return rc

    def metrics(self):
        status, _, body = http_request(self.admin_port, "GET", "/metrics")
        assert status == 200, status
        return body.decode()

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        return parse_metric(self.metrics(), name, **labels)


def parse_metric(text, name, **labels):
    """Sum of the samples of `name` in Prometheus text `text` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock, buf=b""):
    """Reads one HTTP/1.1 response (Content-Length framed). Returns (status, headers, body, rest)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed before a response: %r" % buf)
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed mid-body")
        rest += chunk
    return status, headers, rest[:n], rest[n:]


def http_request(port, method, path, body=b"", headers=None):
    hdrs = {"Host": "localhost", "Connection": "close"}
    if body or method == "POST":
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    req = "%s %s HTTP/1.1\r\n" % (method, path) + "".join(
        "%s: %s\r\n" % kv for kv in hdrs.items()) + "\r\n"
    with connect(port) as s:
        s.sendall(req.encode() + body)
        status, headers, body, _ = read_response(s)
        return status, headers, body


def is_closed(sock, timeout=3):
    """True when the peer closed the connection (EOF or reset) within `timeout`."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
